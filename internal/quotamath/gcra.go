package quotamath

import "github.com/quotakit/throttle/quota"

// Emission returns GCRA's emission interval T = ceil(P/R), in
// microseconds per unit of cost.
func (l Limit) Emission() int64 { return CeilDiv(l.Per, l.Rate) }

// gcraAdmits reports whether a bucket whose arrival time is tat admits
// cost at t: max(tat, t) + cost*T - t <= B*T.
func (l Limit) gcraAdmits(tat, t, cost int64) bool {
	T := l.Emission()
	return max(tat, t)+cost*T-t <= l.Burst*T
}

// gcraEarliest returns the earliest instant, not before t, at which a
// bucket whose arrival time is tat admits cost: max(t, tat + cost*T -
// B*T).
func (l Limit) gcraEarliest(tat, t, cost int64) int64 {
	T := l.Emission()
	return max(t, tat+cost*T-l.Burst*T)
}

// GCRACharge returns the arrival time after cost is charged at t, an
// instant gcraEarliest allowed: max(tat, t) + cost*T.
func (l Limit) GCRACharge(tat, t, cost int64) int64 {
	return max(tat, t) + cost*l.Emission()
}

// GCRARefund returns the arrival time after a charge of cost is given
// back: tat - cost*T. It is only right while tat is still the arrival
// time that charge set (no later grant sits on the time it took); the
// caller checks that.
func (l Limit) GCRARefund(tat, cost int64) int64 {
	return tat - cost*l.Emission()
}

// GCRASync returns the arrival time at which a bucket admits at most left
// more units (0 <= left < B) from now until within microseconds have
// passed, then resumes at its own pace: now + within + (B-left)*T. A
// store keeps the later of it and the bucket's own.
func (l Limit) GCRASync(now, within, left int64) int64 {
	return now + within + (l.Burst-left)*l.Emission()
}

// gcraState returns Used, Remaining and Reset of a bucket whose arrival
// time is tat, at now: Used is the burst taken, ceil((tat-now)/T) at most
// B, and Reset the time until tat. Other fields are left zero.
func (l Limit) gcraState(tat, now int64) quota.LimitState {
	var st quota.LimitState
	if tat > now {
		st.Used = min(CeilDiv(tat-now, l.Emission()), l.Burst)
		st.Reset = Micros(tat - now)
	}
	st.Remaining = l.Burst - st.Used
	return st
}
