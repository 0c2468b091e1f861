package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Settler = (*Store)(nil)

// Settle implements [quota.Settler] in one round trip (settle.lua), on
// Redis's clock. The costs a reservation was settled to are kept under
// its id (key s:ID of its scope) until none of its charges can be
// settled any more, so a retry of a Settle whose reply was lost, or a
// second Settle, never charges twice: the call is not marked
// ([ReplayDetect]), since running it again changes nothing.
func (s *Store) Settle(ctx context.Context, r *quota.Reservation, costs []int) error {
	if err := r.CheckCosts(costs); err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	if r.ID == "" {
		return errors.New("redisstore: settle: the reservation has no id: it is not one of this store's")
	}
	d := r.Demand
	ks := newKeys(s.prefix, d.Scope)
	keys := make([]string, 0, len(d.Limits)+1)
	args, _ := s.scriptArgs(7*len(d.Limits), r.ID, false)
	for i := range d.Limits {
		b := &d.Limits[i]
		if b.Limit.Algorithm == quota.Concurrency {
			continue // a slot has no cost to settle
		}
		l := quotamath.Of(b.Limit)
		keys = append(keys, ks.limit(b))
		if l.Algorithm == quota.GCRA {
			// Rate, and each cost with its span c*T: "c:q:r" (settle.lua).
			charged, cost := int64(d.CostOf(i)), int64(costs[i])
			args = append(args, algoCode(l.Algorithm), l.Rate, r.Marks[i], l.SettleEnd(r.Marks[i]),
				costSpan(l, charged), costSpan(l, cost), 0)
			continue
		}
		var phase int64
		if b.Limit.Windowed() {
			phase = phaseArg(&b.Limit)
		}
		args = append(args, algoCode(l.Algorithm), l.Per, r.Marks[i], l.SettleEnd(r.Marks[i]), d.CostOf(i), costs[i], phase)
	}
	if len(keys) == 0 {
		return nil
	}
	keys = append(keys, ks.settlement(r.ID))
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	if err := s.run(ctx, settleScript, nil, keys, args...).Err(); err != nil {
		s.reload.note(err)
		return fmt.Errorf("redisstore: settle: %w", s.configErr(err))
	}
	return nil
}

// costSpan is a GCRA cost c as settle.lua takes it: "c:q:r", c and its
// span c*T, q µs and r/Rate of one ([quotamath.Limit.Emissions]).
func costSpan(l quotamath.Limit, c int64) string {
	t := l.Emissions(c)
	return formatInt(c) + ":" + formatInt(t.Micros) + ":" + formatInt(t.Frac)
}
