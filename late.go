package throttle

import (
	"context"
	"math/bits"
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
// the send instant less the charge's, is at most now less that bound:
// the call's latency, and whatever the machine added after the answer (a
// late timer, a busy scheduler).

// A uniform lag harms no limit: every charge moves by the same amount. A
// lag that varies does: a sliding log (or window, or GCRA) that is full
// frees the unit of its oldest charge Per after that charge, and if that
// charge's request was sent late, the vendor sees the next grant's
// request within Per of it, one over. What the vendor forgives is the
// spread of the lags, from the least a prompt answer has; so the lag that
// counts is the excess over the store's usual latency ([usualLatency],
// what its fastest answers take), and a grant is late when that excess
// is more than lateTolerance of one of its limits. A fixed window is
// different: its charge counts wherever in the window the request
// arrives, so a grant is late only if its window may also have ended
// before the send.
//
// A late grant is retimed where the store can ([quota.Retimer]): its
// charge moves to the instant of the retime, just before the send, and
// keeps its place if the limits have room there ([Limiter.lateHold]).
// Otherwise it is given back and its demand decided again at once, by the
// loop that gives back a grant held out of an anchored window's end
// ([Limiter.obtain]): the second decision is charged at an instant close
// to the send, or refused if the quota went meanwhile. Nothing is held
// and nothing is admitted that a prompt store would not have admitted.
// Giving back costs the request its place (the units it frees go to the
// reservations ahead), which a loaded machine, whose own lag makes grants
// late, pays often; a retime costs one round trip.

// lateHold judges d's grant, charged at decided, at now ([Limiter.lateGrant])
// and moves a late one to the send ([Limiter.retime]), judging the moved
// grant again, at most lateRetimes times. It returns the instant the
// grant is charged at, and whether it must still be given back and
// decided again: late, and not retimed. Retimed grants count in
// ev.Retimed, late ones in ev.Late.
func (lim *Limiter) lateHold(ctx context.Context, d *demand, ev *DecisionEvent, decided, now time.Time) (time.Time, bool) {
	for range lateRetimes {
		if !lim.lateGrant(d, now) {
			return decided, false
		}
		ev.Late++
		dec, ok := lim.retime(ctx, d, d.granted)
		if !ok {
			return decided, true
		}
		ev.Retimed++
		if d.held == d.granted {
			d.held = dec.Reservation // the same slots: a retime moves no lease
		}
		d.granted, decided, now = dec.Reservation, d.due, lim.now()
	}
	if lim.lateGrant(d, now) {
		ev.Late++
		return decided, true
	}
	return decided, false
}

// lateRetimes is how many times in a row a late grant is retimed before
// it is given back: each retime of a store slow for good is late too,
// with a tolerance that doubles after the first lateFirm (lateBackoff).
const lateRetimes = 3

// lateTolerance is the lag beyond the store's usual latency that a
// request of limit l may have at the vendor: a twentieth of its window,
// at most lateToleranceMax. Vendors' counters forgive some jitter between
// a client's clock and theirs, and a policy's window is often a margin
// longer than the vendor's (presets/githubquota's Margin), which covers
// the same; a loaded machine delays some answers by tens of milliseconds,
// and deciding those again costs quota for nothing. lateToleranceMax
// keeps a long window's allowance to what a network's jitter is.
func lateTolerance(l quota.Limit) time.Duration {
	return min(l.Per/20, lateToleranceMax)
}

// lateToleranceMax caps [lateTolerance].
const lateToleranceMax = 100 * time.Millisecond

// lateGrant reports whether d's grant, with the call's latency and its
// window end recorded by takeStore, is late if its request is sent now.
// Each late grant of the same request doubles the tolerance after the
// first lateFirm (lateBackoff), so that a store whose every answer is
// slow (one slow Cluster node, a Redis moved far away) still lets
// requests go, after a few retimes or decisions each, until its usual
// latency has risen. Until the store has answered usualMin calls, its
// usual latency counts as zero: the whole latency is the lag.
func (lim *Limiter) lateGrant(d *demand, now time.Time) bool {
	if d.due.IsZero() {
		// Off ([Breaker].LateGrants: takeStore records due only then), a
		// failure mode's grant (no store charged it), or none.
		return false
	}
	if d.Restricted() || d.Shared() {
		// A class's headroom or a tenant's share: such a demand is
		// granted at most half an emission interval ahead and, when it
		// waits, asks once per grant in its line (lane.go); deciding it
		// again would take its turn from the others.
		return false
	}
	usual, _ := lim.failover().usual.at(now) // 0 until it has answered usualMin calls
	// The store's part of the lag, and the whole of it: what the machine
	// adds after the answer (a late timer, a busy scheduler) a prompt
	// store's grants get too, so it counts only beyond a second tolerance.
	lag, whole := d.took-usual, now.Sub(d.due)-usual
	if lag <= 0 && whole <= 0 {
		return false
	}
	for i, b := range d.Limits {
		l := b.Limit
		tol := lateBackoff(lateTolerance(l), d.late)
		switch {
		case l.Algorithm == Concurrency:
			// A slot is held from its grant to the response's end.
		case d.anchored(i):
			// An Anchor limit, or its log: anchor.go reads when the log
			// was charged and sends every request sendLag after it, and
			// holds one only when it may reach the vendor later than the
			// log covers (anchorHold). A retime would move its entry past
			// the next burst's in a full log, and be refused.
		case lag <= tol && whole <= 2*tol:
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
// for each after the first lateFirm, up to 2^20 times.
func lateBackoff(tol time.Duration, late int) time.Duration {
	return tol << min(max(late-lateFirm+1, 0), 20)
}

// lateFirm is how many late grants of a request are judged at the
// tolerance itself. A retime's answer may be late too (a tenth of a slow
// link's replies, or a Redis stopped meanwhile), and a tolerance widened
// at the third would send its request with a lag the vendor may not
// forgive (measured: 220-290 ms lags after two retimes, with the vendor
// forgiving 200).
const lateFirm = 4

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

// usualPeriod is how long a latency sample counts towards the store's
// usual latency: between one and two periods.
const usualPeriod = 10 * time.Second

// usualQuantile is the share of the store's recent answers at least as
// fast as its usual latency: the fastest tenth, the lower end of the
// lags that the vendor sees spread. A Redis stopped for a second stalls
// every call in flight, and an instance's calls then all answer a second
// late: a quarter of a period's answers in the slow-store fleet, which
// moved a high quantile (0.8) to 300 ms and let grants that late go; the
// median still let 150-260 ms lags go. A loaded machine, on which most
// calls take longer, makes more of its grants late than a higher quantile
// would; each costs a retime, one round trip that keeps its place.
const usualQuantile = 0.1

// usualMin is how many answers the usual latency needs; with fewer, it
// counts as zero (lateGrant).
const usualMin = 64

// latencyBuckets is the resolution of [usualLatency]: a quarter of an
// octave, from 1 µs to about an hour.
const latencyBuckets = 128

// usualLatency is the latency that usualQuantile of the shared store's
// answers over the last one to two periods (of usualPeriod) in which it
// answered took at most: what a prompt answer takes, however slow the
// slow ones are. A store that is slow for good (a distant Redis) raises
// it within two periods; a stall of a second does not, since its answers
// are all slow, nor does an idle spell. Safe for concurrent
// use; the zero value is ready.
type usualLatency struct {
	mu        sync.Mutex
	start     time.Time // of the current period
	cur, prev latencyHistogram
}

// A latencyHistogram counts answers by latency bucket (bucketOf).
type latencyHistogram struct {
	n      int
	counts [latencyBuckets]int32
}

// bucketOf returns d's bucket: 4*log2(d in µs), within the buckets.
func bucketOf(d time.Duration) int {
	us := d.Microseconds()
	if us < 1 {
		return 0
	}
	b := 4*(bits.Len64(uint64(us))-1) + int(us<<2>>(bits.Len64(uint64(us))-1)&3)
	return min(b, latencyBuckets-1)
}

// upperOf returns the longest latency of bucket b.
func upperOf(b int) time.Duration {
	us := int64(1) << (b / 4) * int64(4+b%4+1) / 4
	return time.Duration(us) * time.Microsecond
}

// observe records an answer that took took, at now.
func (u *usualLatency) observe(took time.Duration, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.roll(now)
	u.cur.n++
	u.cur.counts[bucketOf(took)]++
}

// at returns the usual latency at now, and false when fewer than
// usualMin answers count: a cold start's answers are slow (connections,
// scripts to load), and make no baseline. lateGrant then judges the
// whole latency: a slow cold answer is retimed, which costs a round trip.
func (u *usualLatency) at(now time.Time) (time.Duration, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.roll(now)
	n := u.cur.n + u.prev.n
	if n < usualMin {
		return 0, false
	}
	want := int(usualQuantile * float64(n))
	seen := 0
	for b := range latencyBuckets {
		seen += int(u.cur.counts[b] + u.prev.counts[b])
		if seen >= want {
			return upperOf(b), true
		}
	}
	return upperOf(latencyBuckets - 1), true
}

// roll starts a new period when the current one is over; a period
// without answers leaves the previous one in place. u.mu is held.
func (u *usualLatency) roll(now time.Time) {
	switch {
	case u.start.IsZero():
		u.start = now
	case now.Sub(u.start) >= usualPeriod:
		if u.cur.n > 0 {
			u.prev, u.cur = u.cur, latencyHistogram{}
		}
		u.start = now
	}
}
