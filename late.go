package throttle

import (
	"context"
	"sync"
	"time"

	"github.com/quotakit/throttle/quota"
)

// A grant is late when the request it admits would reach the vendor
// later after the instant the store charged it than other requests reach
// it after theirs, by more than the vendor's counter forgives. A uniform
// lag harms no limit: every charge moves by the same amount. A lag that
// varies does: a sliding log (or window, or GCRA) that is full frees the
// unit of its oldest charge Per after that charge, and if that charge's
// request was sent late, the vendor sees the next grant's request within
// Per of it, one over. So what counts is the spread of the lags, each from
// the charge instant on the store's clock to the send.
//
// Only the part of a call after the store decided is lag. A call slow
// before it (a goroutine scheduled late, a wait for a pooled connection, a
// Redis busy with other scripts or starved of CPU itself) is charged when
// it is decided: its charge moves with the delay, and the request is no
// later after it. A loaded machine adds much of its delay there. A reply
// held on the wire, or by a Redis stopped between its script and its
// write, or a process that runs late between the answer and the send, is
// lag. The store says when it decided ([quota.Decision].At, Redis's TIME
// that the scripts read anyway); an answer read locally at answered shows
// answered-At, the lag so far plus the offset between the two clocks. The
// offset is unknown, but it is the same for every answer, so it cancels
// in the spread: a grant's lag exceeds the least lag of any answer by at
// most (send - At) - min(answered - At) over recent answers ([storeClock]),
// the least being one that was sent at once. Of that excess, the reply's
// part, (answered - At) - min(answered - At), is the store's and the
// wire's; the rest is what this process added after the answer (a late
// timer, a busy scheduler), which a prompt store's grants get too, as do
// the requests it sends after the check. A grant is late when the reply's
// part is more than lateTolerance of one of its limits, or the whole more
// than twice it (measured on the shared 2-core VM at load average 8-10:
// 100-370 ms from a call's start to its script, a few milliseconds from
// the script to the answer for most calls). A fixed window is different: its charge counts wherever in the window the request
// arrives, so a grant is late only if its window may also have ended
// before the send.
//
// Until the store has answered usualMin calls of this instance, the least
// lag counts as zero, which the calls' starts bound: the excess is then
// judged against max(asked - At), at most the offset, so a cold start's
// grants are judged on their whole latency, as a store that does not say
// its clock ([quota.Decision].At zero) has every grant judged: its call's
// start stands for At.
//
// A late grant is retimed where the store can ([quota.Retimer]): its
// charge moves to the instant of the retime, just before the send, and
// keeps its place if the limits have room there ([Limiter.lateHold]); a
// GCRA retime that moved nothing ([bucketsKept]) ends the judgment, and a
// GCRA grant whose retime is refused is kept ([buried]): Cancel could not
// give its unit back. Otherwise it is given back and its demand decided again at once, by the
// loop that gives back a grant held out of an anchored window's end
// ([Limiter.obtain]): the second decision is charged at an instant close
// to the send, or refused if the quota went meanwhile. Nothing is held
// and nothing is admitted that a prompt store would not have admitted.

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
		prev := d.granted
		dec, ok := lim.retime(ctx, d, prev)
		if !ok {
			if buried(d, dec) {
				// Giving it back would return nothing, and deciding
				// again would charge the request twice.
				return decided, false
			}
			return decided, true
		}
		ev.Retimed++
		if d.held == d.granted {
			d.held = dec.Reservation // the same slots: a retime moves no lease
		}
		d.granted, decided, now = dec.Reservation, d.due, lim.now()
		if bucketsKept(d, prev, dec.Reservation) {
			// Each bucket had not drained by the retime: the vendor
			// counts the send where the store charged it.
			return decided, false
		}
	}
	if lim.lateGrant(d, now) {
		ev.Late++
		return decided, true
	}
	return decided, false
}

// bucketsKept reports whether a retime of d's grant from r to nr moved
// nothing, the demand's limits being GCRA (or Concurrency) alone: every
// bucket's arrival time before the charge was still at or after the
// store's clock at the retime ([quota.Retimer]), so a request sent then
// is counted where the store counted it, however late its grant was. A
// uniformly slow store's grants in a bucket that has not drained are
// such: retiming them again, or giving them back, would gain nothing.
func bucketsKept(d *demand, r, nr *quota.Reservation) bool {
	if r == nil || nr == nil || len(r.Marks) != len(d.Limits) || len(nr.Marks) != len(d.Limits) {
		return false
	}
	gcra := false
	for i, b := range d.Limits {
		switch b.Limit.Algorithm {
		case Concurrency:
		case GCRA:
			if r.Marks[i] != nr.Marks[i] {
				return false
			}
			gcra = true
		default:
			return false
		}
	}
	return gcra
}

// buried reports whether a retime of d's grant was refused for a GCRA
// limit of d ([quota.Retimer]): later grants sit on the charge in a
// bucket still ahead of the store's clock. Cancel would then give back
// nothing ([quota.Reservation]), and deciding again would charge the
// request a second unit, so the grant is kept and sent: the bucket's
// later grants cover the time it skipped, and the vendor's bucket, which
// has not drained either, counts it no later than the store's chain.
// (A GCRA retime with the charge still on top of its bucket, the only
// one Cancel can undo, is never refused for room: its bucket was
// admitted earlier, so at the retime's later instant too.)
//
// Only a demand of GCRA (and Concurrency) limits: a late grant of one
// with other limits too (a sliding log, a window) would reach the vendor
// late on those, so it is given back, and its buried GCRA unit is lost.
func buried(d *demand, dec quota.Decision) bool {
	if dec.OK || dec.Limit < 0 || dec.Limit >= len(d.Limits) || d.Limits[dec.Limit].Limit.Algorithm != GCRA {
		return false
	}
	for _, b := range d.Limits {
		if a := b.Limit.Algorithm; a != GCRA && a != Concurrency {
			return false
		}
	}
	return true
}

// lateRetimes is how many times in a row a late grant is retimed before
// it is given back: each retime of a store slow for good is late too,
// with a tolerance that doubles after the first lateFirm (lateBackoff).
const lateRetimes = 3

// lateTolerance is the lag beyond the least lag of the store's answers
// that a request of limit l may have at the vendor: a twentieth of its
// window, at most lateToleranceMax. Vendors' counters forgive some jitter
// between a client's clock and theirs, and a policy's window is often a
// margin longer than the vendor's (presets/githubquota's Margin), which
// covers the same. lateToleranceMax keeps a long window's allowance to
// what a network's jitter is.
func lateTolerance(l quota.Limit) time.Duration {
	return min(l.Per/20, lateToleranceMax)
}

// lateToleranceMax caps [lateTolerance].
const lateToleranceMax = 100 * time.Millisecond

// lateGrant reports whether d's grant, with the store's clock at its
// charge and its window end recorded by takeStore, is late if its request
// is sent now. Each late grant of the same request doubles the tolerance
// after the first lateFirm (lateBackoff), so that a store whose every
// answer is slow (one slow Cluster node, a Redis moved far away) still
// lets requests go, after a few retimes or decisions each, until its
// least lag has risen.
func (lim *Limiter) lateGrant(d *demand, now time.Time) bool {
	if d.due.IsZero() {
		// A failure mode's grant (no store charged it), or none.
		return false
	}
	if d.Restricted() || d.Shared() {
		// A class's headroom or a tenant's share: such a demand is
		// granted at most half an emission interval ahead and, when it
		// waits, asks once per grant in its line (lane.go); deciding it
		// again would take its turn from the others.
		return false
	}
	// The reply's part of the lag, and the whole of it: what the machine
	// adds after the answer (a late timer, a busy scheduler) a prompt
	// store's grants get too, and the requests sent after this check, so
	// it counts only beyond a second tolerance.
	least := lim.failover().clock.least(now)
	lag, whole := d.charge.reply-least, now.Sub(d.charge.at)-least
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

// A grantClock is what the store's clock says of a grant (noteGrant).
type grantClock struct {
	at    time.Time     // on the store's clock: the charge (At plus the grant's Delay)
	reply time.Duration // the answer's local instant less At: the offset plus the reply's lag
}

// usualSpan is how long an answer counts as evidence of the least lag
// ([storeClock.least]) whatever came after it; past it, only the last
// usualLast answers do. A store slow for good is learned within usualSpan
// or usualLast answers, whichever is longer; a stall shorter than
// usualSpan (its answers all late) is judged against the answers before it.
const usualSpan = 2 * time.Second

// usualLast is how many of the latest answers count as evidence whatever
// their age: an idle spell keeps the least lag, and a store that delays a
// tenth of its replies has all of them late about once in 10^8.
const usualLast = 8

// usualMin is how many answers make the least lag ([storeClock.least])
// evidence; with fewer, it counts as zero.
const usualMin = 4

// clockAnswers is how many answers a [storeClock] keeps.
const clockAnswers = 128

// storeClock is what the shared store's recent answers say about its
// clock against this instance's: for each answer, a call made from asked
// to answered and decided at At on the store's clock, the offset between
// the clocks (local less store's) lies between asked-At and answered-At.
// Over the recent answers (the last usualLast, and any of the last
// clockAnswers answered within usualSpan) it reads the greatest asked-At
// and the least answered-At: the offset lies between them, and the least
// is the offset plus the least lag of an answer. Recent answers, not the
// least since some time: one prompt answer before a store turned slow for
// good would otherwise pin the least, and every grant of the slow store
// would be judged late for as long. An answer that contradicts the kept
// ones (its interval misses theirs: a clock stepped) starts the evidence
// again from it. Safe for concurrent use; the zero value is ready.
type storeClock struct {
	mu  sync.Mutex
	n   int // answers kept, at most clockAnswers
	end int // the index after the latest
	ans [clockAnswers]clockAnswer
	all clockSpan // what every kept answer says together (a step's test)
}

// A clockAnswer is one answer's bounds on the offset.
type clockAnswer struct {
	answered time.Time
	lo, hi   time.Duration // asked-At, answered-At
}

// A clockSpan is the evidence of some answers.
type clockSpan struct {
	n      int
	lo, hi time.Duration // the greatest asked-At, the least answered-At
}

// add records an answer's bounds on the offset.
func (c *clockSpan) add(lo, hi time.Duration) {
	if c.n == 0 {
		c.lo, c.hi = lo, hi
	} else {
		c.lo, c.hi = max(c.lo, lo), min(c.hi, hi)
	}
	c.n++
}

// observe records the answer, at answered, of a call made at asked that
// the store decided at at on its clock (the zero time: asked stands for
// it).
func (c *storeClock) observe(asked, answered, at time.Time) {
	if at.IsZero() {
		at = asked
	}
	lo, hi := asked.Sub(at), answered.Sub(at)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n > 0 && (lo > c.all.hi+clockSlack || hi < c.all.lo-clockSlack) {
		// A clock stepped: what came before no longer holds.
		c.n, c.all = 0, clockSpan{}
	}
	if c.n > 0 {
		// Kept in the order observed, each at least as late as the one
		// before (callers observe concurrently, in any order): the first
		// kept is the oldest (least).
		if prev := c.ans[(c.end-1+clockAnswers)%clockAnswers].answered; prev.After(answered) {
			answered = prev
		}
	}
	left := c.ans[c.end] // the oldest, when all are kept: it leaves
	c.ans[c.end] = clockAnswer{answered: answered, lo: lo, hi: hi}
	c.end = (c.end + 1) % clockAnswers
	if c.n < clockAnswers {
		c.n++
		c.all.add(lo, hi)
		return
	}
	if left.lo < c.all.lo && left.hi > c.all.hi {
		// The answer that left bounded neither end of the span.
		c.all.add(lo, hi)
		c.all.n = c.n
		return
	}
	// It did: the span of those kept, again (about once in clockAnswers
	// answers while the offset holds still).
	c.all = clockSpan{}
	for _, a := range c.ans {
		c.all.add(a.lo, a.hi)
	}
}

// clockSlack is how far an answer's bounds on the offset may miss the
// others' before it means a clock stepped: Redis's TIME is whole
// microseconds, and two clocks drift apart by up to a millisecond over
// the answers kept. A step smaller than this moves a lag by less.
const clockSlack = time.Millisecond

// least returns, at now, what a grant's lag is judged against: the least
// answered-At of the recent answers (the offset plus the least lag), or,
// with fewer than usualMin of them, the greatest asked-At (at most the
// offset: the least lag counts as zero). Zero without answers.
func (c *storeClock) least(now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n <= usualLast || now.Sub(c.ans[(c.end-c.n+clockAnswers)%clockAnswers].answered) <= usualSpan {
		// The oldest kept counts (it is one of the last usualLast, or
		// recent), and so does every later one: all of them.
		return c.all.judge()
	}
	var recent clockSpan
	for k := range c.n {
		a := &c.ans[(c.end-1-k+clockAnswers)%clockAnswers]
		if k >= usualLast && now.Sub(a.answered) > usualSpan {
			break
		}
		recent.add(a.lo, a.hi)
	}
	return recent.judge()
}

// judge returns what the answers of c say a grant's lag is judged
// against ([storeClock.least]).
func (c clockSpan) judge() time.Duration {
	if c.n < usualMin {
		return c.lo
	}
	return c.hi
}
