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

// slidingLogAdmits reports whether a sliding log admits cost at t: t is
// not before the latest entry (demands never overtake reservations), and
// the cost recorded in (t-P, t] plus cost is at most R.
func (l Limit) slidingLogAdmits(log []LogEntry, t, cost int64) bool {
	if len(log) > 0 && t < log[len(log)-1].At {
		return false
	}
	return LogCost(log, t-l.Per, t)+cost <= l.Rate
}

// slidingLogEarliest returns the earliest instant, not before t, at which
// a sliding log admits cost (at most R): from the latest entry on, each
// of the oldest entries of the last P leaves at its instant plus P, until
// cost fits.
func (l Limit) slidingLogEarliest(log []LogEntry, t, cost int64) int64 {
	if len(log) > 0 {
		t = max(t, log[len(log)-1].At)
	}
	i := after(log, t-l.Per)
	var sum int64
	for _, e := range log[i:] {
		sum += e.Cost
	}
	for ; sum+cost > l.Rate; i++ {
		t = max(t, log[i].At+l.Per)
		sum -= log[i].Cost
	}
	return t
}

// slidingLogState returns Used, Remaining and Reset of a sliding log at
// now: Used is the cost recorded after now-P (reservations for later
// included), Reset the time until the latest entry leaves the window.
// Other fields are left zero.
func (l Limit) slidingLogState(log []LogEntry, now int64) quota.LimitState {
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
