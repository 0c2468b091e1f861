package quotamath

import "github.com/quotakit/throttle/quota"

// Window returns the index k of the window that holds t: window k covers
// [F + k*P, F + (k+1)*P), F being the phase.
func (l *Limit) Window(t int64) int64 { return FloorDiv(t-l.Phase, l.Per) }

// Start returns the instant at which window k starts: F + k*P.
func (l *Limit) Start(k int64) int64 { return k*l.Per + l.Phase }

// fixedWindowAdmits reports whether a fixed window admits cost at t, given
// the count of each window: count(k) + cost <= R, k the window of t.
func (l *Limit) fixedWindowAdmits(t, cost int64, count func(k int64) int64) bool {
	return count(l.Window(t))+cost <= l.Rate
}

// fixedWindowEarliest returns the earliest instant, not before t, at
// which a fixed window admits cost (at most R): t if its own window has
// room, else the start of the first later window that has.
func (l *Limit) fixedWindowEarliest(t, cost int64, count func(k int64) int64) int64 {
	for k := l.Window(t); ; k++ {
		if count(k)+cost <= l.Rate {
			return max(t, l.Start(k))
		}
	}
}

// fixedWindowState returns Used, Remaining and Reset of a fixed window at
// now: the count of now's window, and the time to its end while it is
// not empty. Other fields are left zero.
func (l *Limit) fixedWindowState(now int64, count func(k int64) int64) quota.LimitState {
	k := l.Window(now)
	st := quota.LimitState{Used: count(k)}
	if st.Used > 0 {
		st.Reset = Micros(l.Start(k+1) - now)
	}
	st.Remaining = max(l.Rate-st.Used, 0)
	return st
}

// maxWeight bounds R*W, W a sliding window's steps per window, so that
// every weighted count, prev*(W-j) and (R-cur-c)*W, and the quotient
// floor(room*W/prev) stay exact in Lua's doubles (see the package doc).
const maxWeight = 1 << 52

// Steps returns a sliding window's weight step s in microseconds and its
// steps per window W = ceil(P/s): s is 1 and W is P while P*R <= 2^52;
// above, s is the least step with W*R <= 2^52, ceil(P/floor(2^52/R)), R
// the limit's own Rate (FullRate, under a headroom).
func (l *Limit) Steps() (s, w int64) {
	rate := l.Rate
	if l.FullRate > 0 {
		rate = l.FullRate // the limit's own, not less a headroom
	}
	most := max(maxWeight/rate, 1)
	if l.Per <= most {
		return 1, l.Per
	}
	s = CeilDiv(l.Per, most)
	return s, CeilDiv(l.Per, s)
}

// slidingWindowAdmits reports whether a sliding window admits cost at t:
// prev*(W-j) <= (R-cur-cost)*W, with j = floor(e/s) the steps elapsed of
// window k (e = t - (F + k*P)) and prev, cur the counts of windows k-1
// and k.
func (l *Limit) slidingWindowAdmits(t, cost int64, count func(k int64) int64) bool {
	k := l.Window(t)
	s, w := l.Steps()
	j := (t - l.Start(k)) / s
	room := l.Rate - count(k) - cost
	return room >= 0 && count(k-1)*(w-j) <= room*w
}

// slidingWindowEarliest returns the earliest instant, not before t, at
// which a sliding window admits cost (at most R). In window k, with
// room = R - cur - cost >= 0, the weighted count fits from step
// j = W - floor(room*W/prev) on (prev*(W-j) <= room*W), that is from
// F + k*P + j*s; a window where that j is W or more, or cur + cost > R,
// admits nothing.
func (l *Limit) slidingWindowEarliest(t, cost int64, count func(k int64) int64) int64 {
	s, w := l.Steps()
	for k := l.Window(t); ; k++ {
		start := l.Start(k)
		room := l.Rate - count(k) - cost
		if room < 0 {
			continue
		}
		at := max(t, start)
		if prev := count(k - 1); prev > 0 {
			j := w - room*w/prev // negative when room > prev: any step
			if j >= w {
				continue
			}
			at = max(at, start+max(j, 0)*s)
		}
		return at
	}
}

// slidingWindowState returns Used, Remaining and Reset of a sliding
// window at now: Used is the weighted estimate rounded up,
// cur + ceil(prev*(W-j)/W); Reset is the time until neither window counts
// (the end of the next window while cur > 0, of this one while only prev
// > 0). Other fields are left zero.
func (l *Limit) slidingWindowState(now int64, count func(k int64) int64) quota.LimitState {
	k := l.Window(now)
	s, w := l.Steps()
	cur, prev, j := count(k), count(k-1), (now-l.Start(k))/s
	st := quota.LimitState{Used: cur + CeilDiv(prev*(w-j), w)}
	switch {
	case cur > 0:
		st.Reset = Micros(l.Start(k+2) - now)
	case prev > 0:
		st.Reset = Micros(l.Start(k+1) - now)
	}
	st.Remaining = max(l.Rate-st.Used, 0)
	return st
}
