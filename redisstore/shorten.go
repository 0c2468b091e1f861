package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Shortener = (*Store)(nil)

// Shorten implements [quota.Shortener] in one round trip (shorten.lua),
// on Redis's clock: within is rounded up to the microsecond.
//
// The call is marked ([ReplayDetect]), as Cancel's and Retime's are,
// although running it twice changes nothing: what a second run would
// break is the reply. Its first run moves the entry away from the mark;
// a second run, after a lost reply, finds no entry there and answers
// "not moved", and Shorten would return r with its old mark as if nothing
// had moved, so that a later Settle or Cancel of r misses the entry (a
// Settle that raises the cost would then never be charged). Marked, the
// second sending is refused with [ErrResent] instead: an error, which
// quota.Shortener says means the entry may or may not have moved.
// Refusing costs Redis nothing. Under [ReplayIDs] marks are off and a
// resend runs again, as Cancel's does.
func (s *Store) Shorten(ctx context.Context, r *quota.Reservation, i int, within time.Duration) (*quota.Reservation, bool, error) {
	if err := r.CheckShorten(i); err != nil {
		return r, false, fmt.Errorf("redisstore: %w", err)
	}
	d := r.Demand
	if err := d.Validate(); err != nil {
		return r, false, fmt.Errorf("redisstore: shorten: %w", err)
	}
	if r.ID == "" {
		return r, false, errors.New("redisstore: shorten: the reservation has no id: it is not one of this store's")
	}
	// The limit's place among those Settle keeps a cost for (settle.go:
	// all but the concurrency ones), 1-based, and their number.
	place, settled := 0, 0
	for j := range d.Limits {
		if d.Limits[j].Limit.Algorithm == quota.Concurrency {
			continue
		}
		settled++
		if j == i {
			place = settled
		}
	}
	b := &d.Limits[i]
	ks := s.keysOf(d.Scope)
	keys := []string{ks.limit(b), ks.settlement(r.ID)}
	args, mark := s.scriptArgs(6, r.ID, true)
	args = append(args, quotamath.CeilMicros(within), b.Limit.Per.Microseconds(), r.Marks[i], d.CostOf(i), place, settled)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	res, err := s.run(ctx, shortenScript, mark, keys, args...).Slice()
	if err != nil {
		s.reload.note(err)
		return r, false, fmt.Errorf("redisstore: shorten: %w", s.configErr(resent(err)))
	}
	if len(res) != 2 {
		return r, false, fmt.Errorf("redisstore: shorten: malformed reply %v", res)
	}
	moved, ok1 := res[0].(int64)
	at, ok2 := res[1].(int64)
	if !ok1 || !ok2 || moved != 0 && moved != 1 || moved == 1 && at >= r.Marks[i] {
		return r, false, fmt.Errorf("redisstore: shorten: malformed reply %v", res)
	}
	if moved == 0 {
		return r, false, nil
	}
	nr := *r
	nr.Marks = slices.Clone(r.Marks)
	nr.Marks[i] = at
	return &nr, true, nil
}
