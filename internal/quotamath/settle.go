package quotamath

import "github.com/quotakit/throttle/quota"

// SettleEnd returns the instant until which a charge with mark can be
// settled ([quota.Settler]): while it counts ([Limit.ChargeEnd]) for the
// window algorithms and the log, and until Per after the arrival time it
// set (rounded up to the microsecond) for GCRA, whose refunds and extra
// charges move the arrival time of a bucket that later charges may have
// carried on. A Concurrency slot has no cost to settle: 0.
func (l *Limit) SettleEnd(mark int64) int64 {
	if l.Algorithm == quota.GCRA {
		return l.ChargeEnd(mark) + l.Per
	}
	return l.ChargeEnd(mark)
}

// GCRASettle returns the arrival time after a charge is settled at delta
// units more (or, negative, fewer) than it charged: max(tat, now) +
// delta*T, exactly ([Limit.Emissions]). A result at or before now is a
// full bucket.
func (l *Limit) GCRASettle(tat Time, now, delta int64) Time {
	if tat.Before(At(now)) {
		tat = At(now)
	}
	return l.add(tat, l.Emissions(delta))
}
