package quotamath

import "github.com/quotakit/throttle/quota"

// Window returns the index k of the window that holds t: window k covers
// [F + k*P, F + (k+1)*P), F being the phase.
func (l Limit) Window(t int64) int64 { return FloorDiv(t-l.Phase, l.Per) }

// Start returns the instant at which window k starts: F + k*P.
func (l Limit) Start(k int64) int64 { return k*l.Per + l.Phase }

// fixedWindowAdmits reports whether a fixed window admits cost at t, given
// the count of each window: count(k) + cost <= R, k the window of t.
func (l Limit) fixedWindowAdmits(t, cost int64, count func(k int64) int64) bool {
	return count(l.Window(t))+cost <= l.Rate
}

// fixedWindowEarliest returns the earliest instant, not before t, at
// which a fixed window admits cost (at most R): t if its own window has
// room, else the start of the first later window that has.
func (l Limit) fixedWindowEarliest(t, cost int64, count func(k int64) int64) int64 {
	for k := l.Window(t); ; k++ {
		if count(k)+cost <= l.Rate {
			return max(t, l.Start(k))
		}
	}
}

// fixedWindowState returns Used, Remaining and Reset of a fixed window at
// now: the count of now's window, and the time to its end while it is
// not empty. Other fields are left zero.
func (l Limit) fixedWindowState(now int64, count func(k int64) int64) quota.LimitState {
	k := l.Window(now)
	st := quota.LimitState{Used: count(k)}
	if st.Used > 0 {
		st.Reset = Micros(l.Start(k+1) - now)
	}
	st.Remaining = max(l.Rate-st.Used, 0)
	return st
}

// slidingWindowAdmits reports whether a sliding window admits cost at t:
// prev*(P-e) + (cur+cost)*P <= R*P, with e = t - k*P and prev, cur the
// counts of windows k-1 and k.
func (l Limit) slidingWindowAdmits(t, cost int64, count func(k int64) int64) bool {
	k := l.Window(t)
	e := t - l.Start(k)
	return count(k-1)*(l.Per-e)+(count(k)+cost)*l.Per <= l.Rate*l.Per
}

// slidingWindowEarliest returns the earliest instant, not before t, at
// which a sliding window admits cost (at most R). In window k, with
// room = R - cur - cost >= 0, the weighted count fits from
// e = P - floor(room*P/prev) on (prev*(P-e) <= room*P); a window where
// that e is P or more, or cur + cost > R, admits nothing.
func (l Limit) slidingWindowEarliest(t, cost int64, count func(k int64) int64) int64 {
	for k := l.Window(t); ; k++ {
		start := l.Start(k)
		room := l.Rate - count(k) - cost
		if room < 0 {
			continue
		}
		e := max(t-start, 0)
		if prev := count(k - 1); prev > 0 {
			e = max(e, l.Per-room*l.Per/prev)
		}
		if e < l.Per {
			return start + e
		}
	}
}

// slidingWindowState returns Used, Remaining and Reset of a sliding
// window at now: Used is the weighted estimate rounded up,
// cur + ceil(prev*(P-e)/P); Reset is the time until neither window counts
// (the end of the next window while cur > 0, of this one while only prev
// > 0). Other fields are left zero.
func (l Limit) slidingWindowState(now int64, count func(k int64) int64) quota.LimitState {
	k := l.Window(now)
	cur, prev, e := count(k), count(k-1), now-l.Start(k)
	st := quota.LimitState{Used: cur + CeilDiv(prev*(l.Per-e), l.Per)}
	switch {
	case cur > 0:
		st.Reset = Micros(l.Start(k+2) - now)
	case prev > 0:
		st.Reset = Micros(l.Start(k+1) - now)
	}
	st.Remaining = max(l.Rate-st.Used, 0)
	return st
}
