package quotamath

import "github.com/quotakit/throttle/quota"

// Exact reports whether GCRA's emission interval T = P/R is a whole
// number of microseconds (R divides P): then every arrival time is one
// too (Frac is always 0).
func (l *Limit) Exact() bool { return l.Per%l.Rate == 0 }

// gcraEarliest returns the earliest instant, not before t, at which a
// bucket whose arrival time is tat admits cost: max(t, tat - (B-cost)*T),
// rounded up to the microsecond.
func (l *Limit) gcraEarliest(tat Time, t, cost int64) int64 {
	return max(t, l.sub(tat, l.Emissions(l.Burst-cost)).Ceil())
}

// gcraAdmits reports whether a bucket whose arrival time is tat admits
// cost at t: max(tat, t) + cost*T - t <= B*T, that is t >= tat -
// (B-cost)*T.
func (l *Limit) gcraAdmits(tat Time, t, cost int64) bool {
	return l.gcraEarliest(tat, t, cost) == t
}

// GCRACharge returns the arrival time after cost is charged at t, an
// instant gcraEarliest allowed: max(tat, t) + cost*T.
func (l *Limit) GCRACharge(tat Time, t, cost int64) Time {
	if tat.Before(At(t)) {
		tat = At(t)
	}
	return l.add(tat, l.Emissions(cost))
}

// GCRARefund returns the arrival time after a charge of cost is given
// back: tat - cost*T. It is only right while tat is still the arrival
// time that charge set (no later grant sits on the time it took): the
// caller checks that its [Limit.Mark] is the charge's.
func (l *Limit) GCRARefund(tat Time, cost int64) Time {
	return l.sub(tat, l.Emissions(cost))
}

// GCRASync returns the arrival time at which a bucket admits at most left
// more units (0 <= left < B) from now until within microseconds have
// passed, then resumes at its own pace: now + within + (B-left)*T. A
// store keeps the later of it and the bucket's own.
func (l *Limit) GCRASync(now, within, left int64) Time {
	return l.add(At(now+within), l.Emissions(l.Burst-left))
}

// gcraState returns Used, Remaining and Reset of a bucket whose arrival
// time is tat, at now: Used is the burst taken, ceil((tat-now)/T) at most
// B, and Reset the time until tat, rounded up. Other fields are left
// zero.
func (l *Limit) gcraState(tat Time, now int64) quota.LimitState {
	var st quota.LimitState
	if At(now).Before(tat) {
		st.Used = l.intervals(l.sub(tat, At(now)), l.Burst)
		st.Reset = Micros(tat.Ceil() - now)
	}
	st.Remaining = l.Burst - st.Used
	return st
}
