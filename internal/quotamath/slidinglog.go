package quotamath

import (
	"slices"

	"github.com/quotakit/throttle/quota"
)

// A LogEntry is one admitted demand of a sliding log: its instant, in
// microseconds, and its cost. A log is a slice of them in ascending order
// of At.
type LogEntry struct {
	At, Cost int64
}

// after returns the index of the first entry of log later than t.
func after(log []LogEntry, t int64) int {
	i, _ := slices.BinarySearchFunc(log, t+1, func(e LogEntry, at int64) int {
		switch {
		case e.At < at:
			return -1
		case e.At > at:
			return 1
		}
		return 0
	})
	return i
}

// Insert adds e to log after every entry at or before e.At, keeping the
// log in order, and returns the log.
func Insert(log []LogEntry, e LogEntry) []LogEntry {
	return slices.Insert(log, after(log, e.At), e)
}

// LogCost returns the cost recorded in the interval (from, to].
func LogCost(log []LogEntry, from, to int64) int64 {
	var sum int64
	for _, e := range log[after(log, from):after(log, to)] {
		sum += e.Cost
	}
	return sum
}

// LogAt returns the instant of the entry of a demand decided at t: t
// itself, or with an Expiry, [Limit.LogEnd] less P.
func (l *Limit) LogAt(t int64) int64 {
	if l.Expiry.Every == 0 {
		return t
	}
	return l.LogEnd(t) - l.Per
}

// LogEnd returns when the entry of a demand decided at t stops counting:
// P after t, or with an Expiry ([quota.LogExpiry]: the grid's windows of
// G = Every end, modulo G, in [F, F+S] with F = Phase, S = Spread), the
// latest end E of a window of the grid that may hold a = t+Reach. With an
// end at F+S, a's window ends d = (a-F-S) mod G before a+G; moving the
// end earlier, up to S, moves it later, up to a+G when an end may fall at
// a itself (d+S >= G): E = a+G-d, or a+G.
func (l *Limit) LogEnd(t int64) int64 {
	e := l.Expiry
	if e.Every == 0 {
		return t + l.Per
	}
	a := t + e.Reach
	d := FloorMod(a-e.Phase-e.Spread, e.Every)
	if d+e.Spread >= e.Every {
		d = 0
	}
	return a + e.Every - d
}

// slidingLogAdmits reports whether a sliding log admits cost at t: every
// window of length P that holds t, (x-P, x] for x in [t, t+P), holds at
// most R with it ([Limit.slidingLogEarliest] returns t).
func (l *Limit) slidingLogAdmits(log []LogEntry, t, cost int64) bool {
	return l.slidingLogEarliest(log, t, cost) == t
}

// slidingLogEarliest returns the earliest instant x, not before t, at
// which a sliding log admits cost (at most R): an entry at x lies in the
// windows (y-P, y] for y in [x, x+P), so each must hold at most R-cost
// before it. Over those windows the cost recorded is largest at y = x or
// at an entry's instant (it rises only there), so x is admitted when
//
//   - the window ending at x holds at most R-cost, and
//   - no entry after x and before x+P (a reservation) ends a window that
//     holds more than R-cost.
//
// With an Expiry the entry of x is at [Limit.LogAt] and counts until
// [Limit.LogEnd] (E, non-decreasing in x), and the windows that must have
// room are those ending in [x, E): the second condition reads "before E"
// (an entry that fails it still rules out every candidate up to it, since
// E only grows).
//
// A demand therefore goes before a reservation it does not crowd out:
// the log is a schedule, and a demand takes the earliest gap in it. The
// first condition can turn true only where an entry leaves a window, at
// its instant plus P, so the candidates are t and those instants; an
// entry that fails the second rules out every candidate up to its own
// instant. One pass over the entries after t-P: O(n).
func (l *Limit) slidingLogEarliest(log []LogEntry, t, cost int64) int64 {
	room := l.Rate - cost
	log = log[after(log, t-l.Per):]
	var at, ahead logWindow // the windows ending at candidates, and at later entries
	next, j := 0, 0         // the entry whose exit is the next candidate; the next entry to check ahead
	x := t
	for {
		fits := true
		for end := l.LogEnd(x); j < len(log) && log[j].At < end; j++ {
			if e := log[j].At; e > x && ahead.cost(log, l.Per, e) > room {
				fits, x = false, e // no candidate up to e fits
				break
			}
		}
		if fits && at.cost(log, l.Per, x) <= room {
			return x
		}
		for next < len(log) && log[next].At+l.Per <= x {
			next++
		}
		if next == len(log) {
			return x // not reached: the log is empty after x, and cost <= R
		}
		x = log[next].At + l.Per
	}
}

// A logWindow sums the cost of a log's entries in a window (y-P, y] that
// only moves forward: entries [lo, hi) are in it.
type logWindow struct {
	lo, hi int
	sum    int64
}

// cost returns the cost recorded in (y-P, y]; y must not decrease
// between calls.
func (w *logWindow) cost(log []LogEntry, per, y int64) int64 {
	for ; w.hi < len(log) && log[w.hi].At <= y; w.hi++ {
		w.sum += log[w.hi].Cost
	}
	for ; w.lo < w.hi && log[w.lo].At <= y-per; w.lo++ {
		w.sum -= log[w.lo].Cost
	}
	return w.sum
}

// slidingLogState returns Used, Remaining and Reset of a sliding log at
// now: Used is the cost recorded after now-P (reservations for later
// included), Reset the time until the latest entry leaves the window.
// Other fields are left zero.
func (l *Limit) slidingLogState(log []LogEntry, now int64) quota.LimitState {
	var st quota.LimitState
	if i := after(log, now-l.Per); i < len(log) {
		for _, e := range log[i:] {
			st.Used += e.Cost
		}
		st.Reset = Micros(log[len(log)-1].At + l.Per - now)
	}
	st.Remaining = max(l.Rate-st.Used, 0)
	return st
}
