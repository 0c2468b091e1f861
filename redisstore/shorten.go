package redisstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Shortener = (*Store)(nil)

// shortenMax is the most entries one call of shorten.lua takes: a scope's
// entries go in calls of at most this many, so that no one script holds
// Redis long. The script also stops early when the logs it moves are long
// (its BUDGET), and the entries it left go in the next call.
const shortenMax = 64

// Shorten implements [quota.Shortener] in one round trip (shorten.lua)
// per scope and per [shortenMax] entries of it, on Redis's clock: a
// Within is rounded up to the microsecond. The calls go one after the
// other, scopes in the order of their first entry in ss. Entries of logs
// of thousands of entries take more calls: a call moves entries while
// their logs hold 4096 entries in all (shorten.lua), 4 of a log of 1000.
//
// Every call is marked ([ReplayDetect]), as Cancel's and Retime's are,
// although running it twice changes nothing: what a second run would
// break is the reply. Its first run moves the entries away from their
// marks; a second run, after a lost reply, finds no entry there and
// answers "not moved", and Shorten would return the reservations with
// their old marks as if nothing had moved, so that a later Settle or
// Cancel of them misses the entries (a Settle that raises the cost would
// then never be charged). Marked, the second sending is refused with
// [ErrResent] instead: an error, which quota.Shortener says means the
// entries of that call may or may not have moved. Refusing costs Redis
// nothing. Under [ReplayIDs] marks are off and a resend runs again, as
// Cancel's does.
//
// On an error of a call, Shorten sends no further one and returns the
// results of the calls done and the reservations themselves for the
// others.
func (s *Store) Shorten(ctx context.Context, ss ...quota.Shortening) ([]*quota.Reservation, error) {
	out := make([]*quota.Reservation, len(ss))
	for k := range ss {
		out[k] = ss[k].Reservation
	}
	var valid *quota.Demand // the demand validated last: entries of one share it
	for k := range ss {
		r := ss[k].Reservation
		if err := r.CheckShorten(ss[k].Limit); err != nil {
			return out, fmt.Errorf("redisstore: shorten %d: %w", k, err)
		}
		if r.Demand != valid {
			if err := r.Demand.Validate(); err != nil {
				return out, fmt.Errorf("redisstore: shorten %d: %w", k, err)
			}
			valid = r.Demand
		}
		if r.ID == "" {
			return out, fmt.Errorf("redisstore: shorten %d: the reservation has no id: it is not one of this store's", k)
		}
	}
	for _, group := range byScope(ss) {
		for len(group) > 0 {
			done, err := s.shorten(ctx, ss, group[:min(len(group), shortenMax)], out)
			if err != nil {
				return out, err
			}
			group = group[done:]
		}
	}
	return out, nil
}

// byScope returns the indexes of ss grouped by the scope of their demand
// (a call's keys share one hash tag), each group in the order of ss, the
// groups in the order of their first entry. It allocates one group and
// no map for entries of one scope, as a burst's mostly are.
func byScope(ss []quota.Shortening) [][]int {
	if len(ss) == 0 {
		return nil
	}
	groups := [][]int{make([]int, 0, len(ss))}
	var at map[string]int // a group's index by scope, once there are two
	first := ss[0].Reservation.Demand.Scope
	for k := range ss {
		scope := ss[k].Reservation.Demand.Scope
		g := 0
		if scope != first {
			if at == nil {
				at = map[string]int{}
			}
			var ok bool
			if g, ok = at[scope]; !ok {
				g = len(groups)
				at[scope] = g
				groups = append(groups, nil)
			}
		}
		groups[g] = append(groups[g], k)
	}
	return groups
}

// shorten moves the entries of ss that group names, of one scope, in one
// call of shorten.lua, sets their results in out and returns how many
// the call moved or left: all, or the first ones (at least one) when the
// script's budget ran out.
func (s *Store) shorten(ctx context.Context, ss []quota.Shortening, group []int, out []*quota.Reservation) (int, error) {
	ks := s.keysOf(ss[group[0]].Reservation.Demand.Scope)
	keys := make([]string, 0, 2*len(group))
	args, mark := s.scriptArgs(1+7*len(group), "", true)
	args = append(args, len(group))
	for _, k := range group {
		r, i := ss[k].Reservation, ss[k].Limit
		d := r.Demand
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
		keys = append(keys, ks.limit(b), ks.settlement(r.ID))
		args = append(args, quotamath.CeilMicros(ss[k].Within), b.Limit.Per.Microseconds(), r.Marks[i], d.CostOf(i), place, settled, r.ID)
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	res, err := s.run(ctx, shortenScript, mark, keys, args...).Slice()
	if err != nil {
		s.reload.note(err)
		return 0, fmt.Errorf("redisstore: shorten: %w", s.configErr(resent(err)))
	}
	if len(res) < 2 || len(res) > 2*len(group) || len(res)%2 != 0 {
		return 0, fmt.Errorf("redisstore: shorten: malformed reply: %d values for %d entries", len(res), len(group))
	}
	group = group[:len(res)/2]
	// Check the whole reply before taking any of it.
	for e, k := range group {
		moved, ok1 := res[2*e].(int64)
		at, ok2 := res[2*e+1].(int64)
		if !ok1 || !ok2 || moved != 0 && moved != 1 || moved == 1 && at >= ss[k].Reservation.Marks[ss[k].Limit] {
			return 0, fmt.Errorf("redisstore: shorten: malformed reply for entry %d: %v %v", k, res[2*e], res[2*e+1])
		}
	}
	for e, k := range group {
		if res[2*e].(int64) == 0 {
			continue
		}
		r := ss[k].Reservation
		nr := *r
		nr.Marks = slices.Clone(r.Marks)
		nr.Marks[ss[k].Limit] = res[2*e+1].(int64)
		out[k] = &nr
	}
	return len(group), nil
}
