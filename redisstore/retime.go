package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Retimer = (*Store)(nil)

// Retime implements [quota.Retimer] in one round trip (retime.lua), on
// Redis's clock. The call is marked ([ReplayDetect]), as Cancel's is: a
// call sent again is refused, so no charge moves twice, and the error
// ([ErrResent]) means the charges may or may not have moved.
func (s *Store) Retime(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return quota.Decision{}, errors.New("redisstore: retime: malformed reservation")
	}
	d := r.Demand
	if err := d.Validate(); err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: retime: %w", err)
	}
	keys := s.takeKeys(d, "")
	args, mark := s.scriptArgs(1+6*len(d.Limits), r.ID, true)
	args = append(args, len(d.Pauses))
	for i := range d.Limits {
		b, cost := &d.Limits[i], int64(d.CostOf(i))
		l := &b.Limit
		switch l.Algorithm {
		case quota.GCRA:
			ql := quotamath.Of(*l)
			_, room := gcraArgs(b, cost)
			us := quotamath.FloorDiv(r.Marks[i], 1000)
			args = append(args, algoCode(l.Algorithm), timeArg(ql.Emissions(cost), ql.Rate), room,
				formatInt(us)+":"+formatInt(r.Marks[i]-us*1000), cost, 0)
		case quota.Concurrency:
			args = append(args, algoCode(l.Algorithm), 0, 0, 0, 1, 0)
		default:
			args = append(args, algoCode(l.Algorithm), windowPer(l), int64(l.Rate)-int64(b.Headroom)-cost, r.Marks[i], cost, bucketPhaseArg(b))
		}
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	res, err := s.run(ctx, retimeScript, mark, keys, args...).Slice()
	if err != nil {
		s.reload.note(err)
		return quota.Decision{}, fmt.Errorf("redisstore: retime: %w", s.configErr(resent(err)))
	}
	return parseRetime(res, r)
}

// parseRetime makes the Decision of retime.lua's reply res to the
// retiming of r.
func parseRetime(res []any, r *quota.Reservation) (quota.Decision, error) {
	d := r.Demand
	bad := func() (quota.Decision, error) {
		return quota.Decision{}, fmt.Errorf("redisstore: retime: malformed reply %v", res)
	}
	if len(res) < 3 {
		return bad()
	}
	ok, okInt := res[0].(int64)
	if !okInt {
		return bad()
	}
	if ok == 0 {
		limit, ok1 := res[1].(int64)
		pause, ok2 := res[2].(int64)
		if !ok1 || !ok2 || limit < -1 || limit >= int64(len(d.Limits)) || pause < -1 || pause >= int64(len(d.Pauses)) {
			return bad()
		}
		dec := quota.Decision{Limit: int(limit)}
		if pause >= 0 {
			dec.Pause = d.Pauses[pause]
		}
		return dec, nil
	}
	now, okNow := res[1].(int64)
	if !okNow || len(res) != 2+len(d.Limits) {
		return bad()
	}
	nr := newReservation(d, r.ID)
	nr.Unclaimed = r.Unclaimed
	end := now
	for i := range d.Limits {
		b := &d.Limits[i]
		l := quotamath.Of(b.Limit)
		nr.Marks[i] = r.Marks[i]
		switch v := res[2+i].(type) {
		case string:
			if v == "-" {
				break
			}
			x, frac, err := parseField(v) // a GCRA arrival time "us:frac"
			if err != nil || l.Algorithm != quota.GCRA || frac >= l.Rate {
				return bad()
			}
			nr.Marks[i] = l.Mark(quotamath.Time{Micros: x, Frac: frac})
		case int64:
			if l.Algorithm == quota.GCRA {
				nr.Marks[i] = l.Mark(quotamath.At(v))
			} else {
				nr.Marks[i] = v
			}
		default:
			return bad()
		}
		end = max(end, l.ChargeEnd(nr.Marks[i]))
	}
	return quota.Decision{OK: true, Limit: -1, Reservation: nr, ResetAfter: quotamath.Micros(end - now), At: time.UnixMicro(now)}, nil
}
