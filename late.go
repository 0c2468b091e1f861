package throttle

import (
	"sync"
	"time"

	"github.com/quotakit/throttle/quota"
)

// A grant is late when the request it admits would reach the vendor
// further from the instant the store charged it than the vendor's counter
// forgives. The store charges on its own clock at an instant it does not
// say; what this instance knows is that the instant lies between the start
// of the call that granted it and the call's answer. So a grant's due
// instant is bounded below by the call's start (plus the reservation's
// delay, for a grant made for later), and the request's lag at the vendor,
// the send instant less the charge's, is at most now less that bound.
//
// A uniform lag harms no limit: every charge moves by the same amount. A
// lag that varies does: a sliding log (or window, or GCRA) that is full
// frees the unit of its oldest charge Per after that charge, and if that
// charge's request was sent late, the vendor sees the next grant's request
// within Per of it, one over. So the lag that counts is the excess over
// the store's usual latency (the least latency of its recent answers,
// [latencyFloor]), and a grant is late when that excess is more than
// lateTolerance of one of its limits. A fixed window is different: its
// charge counts wherever in the window the request arrives, so a late
// grant is late only if its window may have ended before the send.
//
// A late grant is given back and its demand decided again at once, by the
// loop that gives back a grant held out of an anchored window's end
// ([Limiter.obtain]): the second decision is charged at an instant close
// to the send, or refused if the quota went meanwhile. Nothing is held
// and nothing is admitted that a prompt store would not have admitted.

// lateTolerance is the lag beyond the store's usual latency that a
// request of limit l may have at the vendor: a fortieth of its window, at
// most lateToleranceMax. Vendors' counters forgive some jitter between a
// client's clock and theirs (the examples' webhook, a twentieth of the
// window); half of that is left to what happens after the check, on the
// way to the vendor (the HTTP send, a busy machine's scheduling).
// lateToleranceMax keeps a long window's allowance to a network's jitter.
func lateTolerance(l quota.Limit) time.Duration {
	return min(l.Per/40, lateToleranceMax)
}

// lateToleranceMax caps [lateTolerance].
const lateToleranceMax = 50 * time.Millisecond

// lateGrant reports whether d's grant, with its due instant and window
// end recorded by takeStore, is late if its request is sent now. Each
// late grant of the same request doubles the tolerance after the first
// two (lateBackoff), so that a store whose every answer is slow (one slow
// Cluster node, a Redis moved far away) still lets requests go, after a
// few decisions each, until its latency floor has risen.
func (lim *Limiter) lateGrant(d *demand, now time.Time) bool {
	if d.due.IsZero() {
		return false // not a shared store's grant (fail open, or none)
	}
	lag := now.Sub(d.due) - lim.failover().floor.least(now)
	if lag <= 0 {
		return false
	}
	for _, b := range d.Limits {
		l := b.Limit
		switch {
		case l.Algorithm == Concurrency:
			// A slot is held from its grant to the response's end.
		case lag <= lateBackoff(lateTolerance(l), d.late):
		case l.Algorithm == FixedWindow && now.Before(d.ends):
			// Still in the window charged: the charge's window ends
			// at or after d.ends.
		default:
			d.late++
			return true
		}
	}
	return false
}

// lateBackoff is tol for a request that had late grants before: doubled
// for each after the first, up to 2^20 times.
func lateBackoff(tol time.Duration, late int) time.Duration {
	return tol << min(max(late-1, 0), 20)
}

// grantWindowEnd returns, for a grant dec of demand dm answered by a call
// that started at asked, the earliest instant at which the fixed windows
// it charged may end, or the zero time when it cannot tell: the limits
// other than Concurrency must all be fixed windows of one length and
// phase, not anchored, and the grant for now. ResetAfter is then, for
// every one of them, the time from the charge to its window's end.
func grantWindowEnd(dm *quota.Demand, dec quota.Decision, asked time.Time) time.Time {
	if dec.Delay > 0 || dec.ResetAfter <= 0 {
		return time.Time{}
	}
	var first *quota.Limit
	for i := range dm.Limits {
		l := &dm.Limits[i].Limit
		if l.Algorithm == Concurrency {
			continue
		}
		if l.Algorithm != FixedWindow || l.Anchored {
			return time.Time{}
		}
		if first == nil {
			first = l
		} else if l.Per != first.Per || l.Phase != first.Phase {
			return time.Time{}
		}
	}
	if first == nil {
		return time.Time{}
	}
	return asked.Add(dec.ResetAfter)
}

// latencyFloorPeriod is how long a latency sample counts towards the
// floor: between one and two periods.
const latencyFloorPeriod = 10 * time.Second

// latencyFloor is the least latency of the shared store's answers over
// the last one to two periods (of latencyFloorPeriod) in which it
// answered: what a prompt answer takes, however many answers are slow. A
// store that is slow for good (a distant Redis) raises it within two
// periods; a stall does not, even after an idle spell. Safe for
// concurrent use; the zero value is ready.
type latencyFloor struct {
	mu        sync.Mutex
	start     time.Time     // of the current period
	cur, prev time.Duration // least of each period; -1: no answer
}

// observe records an answer that took took, at now.
func (f *latencyFloor) observe(took time.Duration, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roll(now)
	if f.cur < 0 || took < f.cur {
		f.cur = took
	}
}

// least returns the floor at now: 0 before any answer.
func (f *latencyFloor) least(now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.roll(now)
	switch {
	case f.cur < 0 && f.prev < 0:
		return 0
	case f.cur < 0:
		return f.prev
	case f.prev < 0:
		return f.cur
	}
	return min(f.cur, f.prev)
}

// roll starts a new period when the current one is over; a period
// without answers leaves the previous one's floor in place. f.mu is held.
func (f *latencyFloor) roll(now time.Time) {
	switch {
	case f.start.IsZero():
		f.start, f.cur, f.prev = now, -1, -1
	case now.Sub(f.start) >= latencyFloorPeriod:
		if f.cur >= 0 {
			f.prev, f.cur = f.cur, -1
		}
		f.start = now
	}
}
