package quotamath

import "github.com/quotakit/throttle/quota"

// A Counter is the state of one counter as a store keeps it; which field
// is read depends on the limit's algorithm. The zero Counter is a fresh
// one.
type Counter struct {
	TAT      Time                // GCRA: the theoretical arrival time
	Count    func(k int64) int64 // FixedWindow, SlidingWindow: window k's count; nil: all zero
	Log      []LogEntry          // SlidingLog: the entries, in order of instant
	Expiries []int64             // Concurrency: the leases' expiries
}

func (c Counter) count(k int64) int64 {
	if c.Count == nil {
		return 0
	}
	return c.Count(k)
}

// Admits reports whether c admits cost at t. A Concurrency limit is
// decided at now by its free slots ([Limit.SlotFreeAt]), apart from t, so
// it admits here.
func (l *Limit) Admits(c Counter, t, cost int64) bool {
	switch l.Algorithm {
	case quota.GCRA:
		return l.gcraAdmits(c.TAT, t, cost)
	case quota.FixedWindow:
		return l.fixedWindowAdmits(t, cost, c.count)
	case quota.SlidingLog:
		return l.slidingLogAdmits(c.Log, t, cost)
	case quota.SlidingWindow:
		return l.slidingWindowAdmits(t, cost, c.count)
	}
	return true
}

// Earliest returns the earliest instant, not before t, at which c admits
// cost, which is at most the limit's [quota.Limit.Capacity]. A
// Concurrency limit returns t (see [Limit.Admits]).
func (l *Limit) Earliest(c Counter, t, cost int64) int64 {
	switch l.Algorithm {
	case quota.GCRA:
		return l.gcraEarliest(c.TAT, t, cost)
	case quota.FixedWindow:
		return l.fixedWindowEarliest(t, cost, c.count)
	case quota.SlidingLog:
		return l.slidingLogEarliest(c.Log, t, cost)
	case quota.SlidingWindow:
		return l.slidingWindowEarliest(t, cost, c.count)
	}
	return t
}

// State returns Used, Remaining and Reset of c at now, as
// [quota.LimitState] defines them; its other fields are left zero.
func (l *Limit) State(c Counter, now int64) quota.LimitState {
	switch l.Algorithm {
	case quota.GCRA:
		return l.gcraState(c.TAT, now)
	case quota.FixedWindow:
		return l.fixedWindowState(now, c.count)
	case quota.SlidingWindow:
		return l.slidingWindowState(now, c.count)
	case quota.SlidingLog:
		return l.slidingLogState(c.Log, now)
	case quota.Concurrency:
		return l.concurrencyState(c.Expiries, now)
	}
	return quota.LimitState{}
}

// ChargeEnd returns the instant at which a charge stops counting against
// l, given its mark (what the store records of it): for GCRA the arrival
// time it set, rounded up to the microsecond, at which the bucket is full
// again (the mark is in nanoseconds, [Limit.Mark]); for FixedWindow the
// end of the window charged (its index, or for an Anchored limit its
// start); for SlidingWindow the end of the window after it, which weighs
// it as its previous; for SlidingLog Per after the entry's instant (the
// charged instant, or by a [quota.LogExpiry], [Limit.LogAt]). A
// Concurrency slot frees when it is released: 0.
func (l *Limit) ChargeEnd(mark int64) int64 {
	start := mark
	if !l.Anchored {
		start = l.Start(mark)
	}
	switch l.Algorithm {
	case quota.GCRA:
		return -FloorDiv(-mark, 1000)
	case quota.FixedWindow:
		return start + l.Per
	case quota.SlidingWindow:
		return start + 2*l.Per
	case quota.SlidingLog:
		return mark + l.Per
	}
	return 0
}
