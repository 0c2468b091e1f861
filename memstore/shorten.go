package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Shortener = (*Store)(nil)

// Shorten implements [quota.Shortener]: every entry moves at one instant
// of the store's clock, under one lock.
func (s *Store) Shorten(ctx context.Context, ss ...quota.Shortening) ([]*quota.Reservation, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("throttle: memory store: shorten: %w", err)
	}
	for k, sh := range ss {
		if err := sh.Reservation.CheckShorten(sh.Limit); err != nil {
			return nil, fmt.Errorf("memstore: shorten %d: %w", k, err)
		}
	}
	res := make([]*quota.Reservation, len(ss))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	for k, sh := range ss {
		res[k] = s.shorten(sh.Reservation, sh.Limit, quotamath.CeilMicros(sh.Within), now)
	}
	return res, nil
}

// shorten moves the entry r charged to its limit i to now + within - Per
// when that is earlier (quota.Shortener), and returns the reservation to
// act on: r when nothing moved. The caller holds s.mu.
func (s *Store) shorten(r *quota.Reservation, i int, within, now int64) *quota.Reservation {
	d := r.Demand
	l := d.Limits[i]
	b := s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}]
	if b == nil || b.alg != quota.SlidingLog {
		return r
	}
	to := now + within - l.Limit.Per.Microseconds()
	mark := r.Marks[i]
	if to >= mark {
		return r
	}
	cost := int64(d.CostOf(i))
	if st, ok := s.settled[r.ID]; ok && st.expire > now && len(st.costs) == len(d.Limits) {
		cost = st.costs[i] // what Settle moved the entry to
	}
	k := slices.Index(b.log, quotamath.LogEntry{At: mark, Cost: cost})
	if k < 0 {
		return r // cancelled, or out of the log
	}
	b.log = slices.Delete(b.log, k, k+1)
	b.log = quotamath.Insert(b.log, quotamath.LogEntry{At: to, Cost: cost})
	s.ops++
	nr := *r
	nr.Marks = slices.Clone(r.Marks)
	nr.Marks[i] = to
	return &nr
}
