package throttle

import (
	"context"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
)

// Anchoring (Learning.Anchor) reads where the vendor's windows end from
// its answers, moves the shared windows of the Anchor limit there, and
// holds back the requests the vendor might count in another window than
// the store did.
//
// Each answer is evidence: an interval of instants, on this instance's
// clock, that holds the end of the vendor's window the request was
// counted in. It comes from when the request was sent and its answer
// received, and from the reset's resolution:
//
//   - A reset written as an instant R (GitHub's epoch seconds) ends the
//     window that held the request, sent at s and answered at a: the end
//     is R+c for one constant c (the vendor's clock and rounding, the same
//     for every answer while the windows are a whole number of the
//     reset's resolution), after s and at most a window after a. So c is
//     in (s-R, a-R+Per]; answers before and after a window turns narrow
//     it to the time between them, whatever the resolution. The Date
//     header (whole seconds) bounds it from the first answer: the end is
//     within a second plus the reset's resolution of R-Date after a.
//   - A reset written as a delay t (the IETF t, RateLimit-Reset) puts
//     the end within the resolution of t after the instant, between s
//     and a, at which the vendor wrote it.
//
// The evidence of this instance's answers is intersected (modulo Per).
// Evidence that contradicts what is known (a vendor whose windows start
// at the first request after a quiet spell, as GitHub's, moves them)
// replaces it. While it leaves less than half a window open, the store is
// asked to keep its windows ending within it (from its earliest instant
// to twice the log's margin after its latest), or to move them to end a
// margin after its latest instant: never earlier than the vendor's.
//
// What the vendor counts does not depend on where the store's windows
// end. Every request is also counted in the limit's sliding log (span
// Per plus a margin, anchorLog), and sent sendLag after its charge to it,
// at the earliest (anchorPace: the charge's instant is the decision's,
// read on this instance's clock as the store's grants teach it,
// observeClock), so that it reaches the vendor between sendLag and
// sendLag plus its reach after its charge: the margin at most, and less
// as the instance's recent sends and answers show them prompt
// (phase.reach: twice the longest lateness measured, at least
// reachFloor). A request reserves no further than the span ahead, or a
// quarter of a window where the store can shorten entries
// (anchorHorizon): the queue of bursts is one deep, so the entries of
// the next burst take the reach, the phase or the shortening learned
// meanwhile. How long the log counts an entry:
//
//   - Without Learning.AnchorGrid (the default: the vendor's windows may
//     start at a first request, as GitHub's do, and end later after
//     every gap), or while the phase is not known (the evidence is wider
//     than half a window with the longest send-to-answer time, the
//     store's clock is not known yet, or no answer came for a window),
//     the entry counts from its charge for Per and its reach
//     (reachExpiry; the span with the margin): in every vendor window
//     that may hold the request, whatever its phase and however it
//     moves. A vendor window ending at V holds requests charged in
//     (V-sendLag-Per-reach, V-sendLag), each of whose entries counts in
//     the log's window ending at V-sendLag-1µs, whatever the reach of
//     each. Once the request is answered, its entry counts only until
//     sendLag before the latest end of the vendor window its reset names
//     (shorten.go), which is in that log window too: a saturated fleet's
//     bursts then come a window and the first answer's round trip apart,
//     where the span alone spaced them a Per and the reach apart (one
//     vendor window in Per/reach got none). A learned pause holds their decisions sendLag less than the
//     sends (pauselead.go).
//   - Under AnchorGrid, once the phase is known, the log's demand carries the vendor's windows as
//     a quota.LogExpiry (logExpiry): their ends, less sendLag, in
//     [lo-oHi, hi-oLo]-sendLag of the store's clock (the evidence [lo,
//     hi], less what is known of ours less the store's, [oLo, oHi]), and
//     the margin as the reach (a shorter one would only hold more
//     requests that may cross an end, for none more of the quota). The
//     store puts the entry of a charge at t at E less the span, E the
//     latest end of a window of that grid that may hold t+margin, which
//     is sendLag before the latest end of a vendor window that may hold
//     the request (sent sendLag after its charge, there within the
//     margin); so it counts from the charge to E, and is admitted when
//     every window of the log ending in [t, E) has room. A vendor window
//     ending at V holds requests charged before V-sendLag, each within
//     Per and its reach before it: every one's entry counts
//     in the log's window ending at V-sendLag-1µs, whether scored so or
//     by the log's own rule, so no vendor window holds more than Rate,
//     also while the log holds entries of both rules. With an exact
//     phase that is a fixed window aligned on the vendor's, sendLag
//     earlier (a saturated fleet's bursts come a Per apart and reach the
//     vendor as its windows start); with an uncertain one, a request
//     whose reach may fall on an end counts in both windows. It relies on
//     the evidence, as the store's windows do after a move: answers that
//     contradict it start it again (phase.observe), and evidence with no
//     answer for a window is not used (a vendor whose windows start at a
//     first request after a quiet spell moves them).
//
// Only a request that may arrive later than sendLag plus its reach after
// its charge is held (anchorHold): where it may reach another of the
// vendor's windows than the one that held its charge, given back and
// decided again once the instants at which the vendor's window may end
// are past; where those are not known and its entry counts for less
// than the margin, at once (learner.crossing). A grant on time is never
// held.

// A windowID names the counter of an Anchor limit.
type windowID struct{ scope, limit, key string }

// maxWindows bounds learner.windows: past it, entries whose window has
// ended are dropped, and all of them if that is not enough.
const maxWindows = 4096

// phase is what one instance knows of where an Anchor limit's windows
// end, the vendor's and the store's, in microseconds of its clock.
type phase struct {
	per  int64 // the limit's Per
	last int64 // when the latest answer was received
	rtt  int64 // the longest send-to-answer time of the recent evidence (roll)

	// The longest send-to-answer times of the answers received since
	// rttFrom, and in the period before it.
	rttCur, rttPrev, rttFrom int64

	// What the reach of the log's entries must cover (reach): the
	// longest time by which a request was sent later than sendLag after
	// its charge (at the earliest), and the longest send-to-answer time,
	// since the last reachSamples answers began (cur) and in the ones
	// before (prev); samples counts the answers since, answers all of
	// them, up to reachEvidence.
	lateCur, latePrev int64
	slowCur, slowPrev int64
	samples, answers  int

	// Instant resets: every window end the vendor wrote as R (µs) is
	// R+c, for c in (cLo, cHi]; ref is one such R.
	hasC          bool
	cLo, cHi, ref int64

	// Every other bound: one of the vendor's window ends is in [aLo, aHi]
	// (modulo per).
	hasArc   bool
	aLo, aHi int64

	// opened is, by vendor window (its reset, as written, in µs), the
	// earliest answer received for it; uncut: the latest answer's reset
	// could not shorten entries (shorten.go).
	opened map[int64]int64
	uncut  bool

	// The store's clock: ours less the store's is in [oLo, oHi] (µs),
	// as the grants of this limit taught it (observeClock).
	hasClock bool
	oLo, oHi int64

	// The store: one of its window ends is in [sLo, sHi] (modulo per), as
	// of asked, the last time this instance asked it.
	hasStore     bool
	learnedStore bool // the store's windows were moved by an Anchor
	sLo, sHi     int64
	asked        int64
}

// bounds returns where one of the vendor's window ends lies, [lo, hi]
// modulo per, and whether the evidence says less than half a window.
func (p *phase) bounds() (lo, hi int64, ok bool) {
	switch {
	case p.hasC && p.cHi-p.cLo < p.per && p.hasArc:
		lo, hi, ok = intersectArcs(p.ref+p.cLo, p.ref+p.cHi, p.aLo, p.aHi, p.per)
		if !ok {
			return 0, 0, false
		}
	case p.hasC && p.cHi-p.cLo < p.per:
		lo, hi = p.ref+p.cLo, p.ref+p.cHi
	case p.hasArc:
		lo, hi = p.aLo, p.aHi
	default:
		return 0, 0, false
	}
	return lo, hi, 2*(hi-lo) < p.per
}

// observe adds the evidence of an answer sent at sent and received at
// recv (µs), fb, read by Parse at recv.
func (p *phase) observe(sent, recv int64, fb quotaheader.Feedback) {
	p.last = max(p.last, recv)
	p.roll(recv)
	p.rttCur = max(p.rttCur, recv-sent)
	p.rtt = max(p.rttCur, p.rttPrev)
	p.slowCur = max(p.slowCur, recv-sent)
	p.answers = min(p.answers+1, reachEvidence)
	if p.samples++; p.samples >= reachSamples {
		p.latePrev, p.lateCur, p.slowPrev, p.slowCur, p.samples = p.lateCur, 0, p.slowCur, 0, 0
	}
	res := max(fb.ResetResolution.Microseconds(), 1)
	if !fb.ResetInstant.IsZero() {
		r := fb.ResetInstant.UnixMicro()
		if p.per%res == 0 {
			// The window that held the request ends after it was sent, and
			// starts before it was answered.
			lo, hi := sent-r, recv-r+p.per
			switch {
			case !p.hasC:
				p.hasC, p.cLo, p.cHi, p.ref = true, lo, hi, r
			case max(p.cLo, lo) >= min(p.cHi, hi):
				p.cLo, p.cHi, p.ref = lo, hi, r // contradicted: start again
				p.hasArc = false
			default:
				p.cLo, p.cHi = max(p.cLo, lo), min(p.cHi, hi)
			}
		}
		if !fb.Date.IsZero() {
			// The vendor wrote Date (whole seconds) at an instant between
			// sent and recv, and its window ends within res of R.
			d := fb.Date.UnixMicro()
			p.addArc(r-d+sent-time.Second.Microseconds()-res, r-d+recv+res)
		}
		return
	}
	// A delay, from an instant between sent and recv.
	t := fb.Reset.Sub(time.UnixMicro(recv)).Microseconds()
	p.addArc(sent+t-res, recv+t+res)
}

// rttPeriod is how long, in windows, an answer's time counts in the
// longest send-to-answer time: between one and two periods. A stall of
// the machine (a request answered a second late) then holds requests at
// window ends for a few windows, not for good.
const rttPeriod = 2

// roll starts a new period of send-to-answer times when the current one
// is over at now (µs).
func (p *phase) roll(now int64) {
	switch {
	case p.rttFrom == 0:
		p.rttFrom = now
	case now-p.rttFrom >= rttPeriod*p.per:
		p.rttPrev, p.rttCur, p.rttFrom = p.rttCur, 0, now
	}
}

// Each of an instance's Anchor limits has its reach (phase.reach) from
// the longest lateness and send-to-answer time of its last
// reachSamples answers at least (and of twice as many at most), once it
// has had reachEvidence: counted in answers, not in time, so that an
// instance with a small share of a fleet's quota, which sends a few
// requests a window, still remembers the rare slow answer (one way in 40
// taking 40 ms: TestAnchorReachFollowsLatency).
const (
	reachSamples  = 128
	reachEvidence = 8
)

// reach returns how long after sendLag past its charge a request of this
// limit decided now may reach the vendor, as the recent sends and
// answers tell it (µs): twice the longest time a send came late plus the
// longest send-to-answer time, at least reachFloor, and the log's margin
// (logMargin) if that is less or while fewer than reachEvidence answers
// came.
func (p *phase) reach() int64 {
	per := time.Duration(p.per) * time.Microsecond
	most := logMargin(per).Microseconds()
	if p.answers < reachEvidence {
		return most
	}
	need := 2 * (max(p.lateCur, p.latePrev) + max(p.slowCur, p.slowPrev))
	return min(most, max(need, reachFloor(per).Microseconds()))
}

// addArc narrows the arc evidence with [lo, hi] (modulo per).
func (p *phase) addArc(lo, hi int64) {
	if 2*(hi-lo) >= p.per {
		return // says (almost) nothing
	}
	if !p.hasArc {
		p.hasArc, p.aLo, p.aHi = true, lo, hi
		return
	}
	if l, h, ok := intersectArcs(p.aLo, p.aHi, lo, hi, p.per); ok {
		p.aLo, p.aHi = l, h
		return
	}
	p.aLo, p.aHi = lo, hi // contradicted: start again
	p.hasC = false
}

// intersectArcs intersects [aLo, aHi] and [bLo, bHi] modulo per, both
// shorter than per, and returns the smallest interval (near a) that holds
// the intersection; ok is false when they do not meet.
func intersectArcs(aLo, aHi, bLo, bHi, per int64) (lo, hi int64, ok bool) {
	k := floorDiv((aLo+aHi)/2-(bLo+bHi)/2+per/2, per) // shift b next to a
	for s := k - 1; s <= k+1; s++ {
		l, h := max(aLo, bLo+s*per), min(aHi, bHi+s*per)
		if l > h {
			continue
		}
		if !ok {
			lo, hi, ok = l, h, true
			continue
		}
		lo, hi = min(lo, l), max(hi, h)
	}
	return lo, hi, ok
}

// floorDiv is a/b rounded down, for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// zone returns the instants, [lo, hi] modulo per, at which one of the
// vendor's windows may end: from this instance's evidence, or, when it
// has none narrow enough, from the store's windows once another instance
// moved them there. A move puts their end a log's margin after the
// latest instant of evidence less than half a window wide, and other
// instances' evidence keeps them unless they end before its earliest
// instant or more than twice the margin after its latest (see
// [Limiter.anchor]): so the vendor's end is within half a window before
// the store's, or, with evidence narrower than the margin, up to a margin
// after it. ok is false when neither says, or when the instants and the
// longest time a request took to be answered span more than half a
// window: holding requests out of more would cost more of the quota than
// the lag it guards against, and the log bounds those as it does before
// any move.
func (p *phase) zone() (lo, hi int64, ok bool) {
	lo, hi, ok = p.bounds()
	if !ok {
		if !p.hasStore || !p.learnedStore {
			return 0, 0, false // the store's windows follow no vendor yet
		}
		lo, hi = p.sLo-p.per/2, p.sHi+logMargin(time.Duration(p.per)*time.Microsecond).Microseconds()
	}
	return lo, hi, 2*(hi-lo+p.rtt) <= p.per
}

// crossing reports whether [from, to] meets the zone, and if so when the
// zone it meets is over. A request decided at from and sent at to-rtt
// reaches the vendor by to.
func (p *phase) crossing(from, to int64) (until int64, crosses bool) {
	lo, hi, ok := p.zone()
	if !ok {
		return 0, false
	}
	k := floorDiv(from-hi+p.per-1, p.per) // the first zone that ends at or after from
	if lo+k*p.per > to {
		return 0, false
	}
	return hi + k*p.per + 1, true
}

// anchor reads fb, the answer to a request under rule r whose demand was
// d, as evidence of where the vendor's windows of the rule's Anchor limit
// end, and keeps the store's windows there (see the comment at the top of
// this file). It returns when the store's window of now ends, by the
// local clock (zero if unknown), for [Limiter.sync].
func (lim *Limiter) anchor(ctx context.Context, r *rule, d *demand, fb quotaheader.Feedback, now time.Time) time.Time {
	if fb.Reset.IsZero() || fb.Capped || r.Learn.SyncResource != "" && fb.Resource != r.Learn.SyncResource {
		return time.Time{}
	}
	i := d.limitOf(r.anchorIdx)
	if i < 0 {
		return time.Time{} // the Anchor limit does not apply to this request
	}
	b := d.Limits[i]
	l := b.Limit
	if fb.Window > 0 && fb.Window != l.Per {
		return time.Time{} // another of the vendor's quotas
	}
	if fb.Reset.Sub(now) > l.Per+fb.ResetResolution+time.Second {
		return time.Time{} // no window of this limit ends that far away
	}
	sent := d.sent
	if sent.IsZero() || sent.After(now) {
		sent = now
	}
	id := windowID{r.scope, l.Name, b.Key}
	lim.shortenAnswered(d, i, id, l.Per, now, fb) // shorten.go
	lo, hi, ask := lim.learned.observe(id, l.Per, sent, now, fb, r.Learn.AnchorTolerance, logMargin(l.Per))
	if !ask {
		return lim.learned.storeEnd(id, now)
	}
	s, ok := lim.store.(quota.Anchorer)
	if !ok {
		return time.Time{} // NewTransport checked; a store swapped in since cannot anchor
	}
	// The store moves its windows to end the log's margin after the
	// latest instant the evidence allows (as the first such end after
	// now), unless one ends within the evidence's width, the tolerance and
	// the margin of that: from the earliest instant the evidence allows
	// (less the tolerance) to twice the margin after its latest. A store
	// call's time, which the store adds to the instant it is sent, as it
	// reads it on its own clock, would otherwise move them at every answer
	// by a few milliseconds, and every move counts again the units that
	// straddle a new boundary. Where the store's windows end within that
	// decides what share of the quota a fleet uses, not what the vendor
	// counts: the log and the holds bound that.
	margin := logMargin(l.Per).Microseconds()
	per := l.Per.Microseconds()
	us := now.UnixMicro()
	shift := floorDiv(us-hi, per)*per + per
	lo, hi = lo+shift, hi+shift
	within := time.Duration(hi+margin-us) * time.Microsecond
	tol := time.Duration(hi-lo+margin)*time.Microsecond + r.Learn.AnchorTolerance
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	callSent := lim.now()
	got, err := guardValue(sctx, lim, func(ctx context.Context) (anchorAnswer, error) {
		ends, moved, err := s.Anchor(ctx, r.scope, b, within, tol)
		return anchorAnswer{ends, moved}, err
	})
	ends, moved := got.ends, got.moved
	callRecv := lim.now()
	if lim.hooks.OnAnchor != nil {
		lim.hooks.OnAnchor(AnchorEvent{Rule: r.id, Limit: l.Name, Reset: within, Moved: moved, Err: err})
	}
	if err != nil || ends <= 0 {
		lim.learned.forgetStore(id)
		return time.Time{}
	}
	// The store counted ends from when it got the call, between callSent
	// and callRecv.
	lim.learned.keepStore(id, callSent.Add(ends), callRecv.Add(ends), now)
	lim.learned.storeLearned(id, true)
	return callSent.Add(ends)
}

// observe adds the evidence of an answer fb, to a request sent at sent
// and received at recv, to what the learner knows of id's windows (of
// per). It returns where one of the vendor's window ends lies, [lo, hi]
// modulo per in µs, and whether to ask the store: when the evidence is
// narrow enough, and the store's end, as last learned, is more than a
// window old or outside [lo-tol, hi+(hi-lo)+tol+2*margin] (see
// [Limiter.anchor]).
func (l *learner) observe(id windowID, per time.Duration, sent, recv time.Time, fb quotaheader.Feedback, tol, margin time.Duration) (lo, hi int64, ask bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.phaseOf(id, per, recv)
	p.observe(sent.UnixMicro(), recv.UnixMicro(), fb)
	lo, hi, ok := p.bounds()
	if !ok {
		return 0, 0, false
	}
	if !p.hasStore || recv.UnixMicro()-p.asked > p.per {
		return lo, hi, true
	}
	k := floorDiv((lo+hi)/2-(p.sLo+p.sHi)/2+p.per/2, p.per)
	sLo, sHi := p.sLo+k*p.per, p.sHi+k*p.per
	return lo, hi, sLo < lo-tol.Microseconds() || sHi > hi+(hi-lo)+tol.Microseconds()+2*margin.Microseconds()
}

// prune drops the entries of l.windows with no answer for a window, and
// all of them if that is not enough. l.mu is held.
func (l *learner) prune(now int64) {
	for k, p := range l.windows {
		if now-max(p.last, p.asked) > p.per {
			delete(l.windows, k)
		}
	}
	if len(l.windows) >= maxWindows {
		clear(l.windows)
	}
}

// keepStore records that one of the store's window ends for id is
// between lo and hi, as of now.
func (l *learner) keepStore(id windowID, lo, hi, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.windows[id]; p != nil {
		p.hasStore, p.sLo, p.sHi, p.asked = true, lo.UnixMicro(), hi.UnixMicro(), now.UnixMicro()
	}
}

// storeLearned records whether the store's windows for id follow a phase
// learned from the vendor.
func (l *learner) storeLearned(id windowID, learned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.windows[id]; p != nil {
		p.learnedStore = learned
	}
}

// forgetStore forgets where the store's windows for id end.
func (l *learner) forgetStore(id windowID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.windows[id]; p != nil {
		p.hasStore = false
	}
}

// storeEnd returns when the store's window of now for id ends, at the
// earliest, as last learned; zero if unknown, or if the store's windows
// do not follow the vendor's (they start at a first charge: a sync on
// them would take the vendor's window for one of ours).
func (l *learner) storeEnd(id windowID, now time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.windows[id]
	if p == nil || !p.hasStore || !p.learnedStore {
		return time.Time{}
	}
	us := now.UnixMicro()
	end := p.sLo + floorDiv(us-p.sLo, p.per)*p.per + p.per
	return time.UnixMicro(end)
}

// vendorEnd returns the latest instant at which the vendor's window that
// counted an answer fb, received at recv, may end, if the evidence for id
// says. A reset written as an instant R ends that window at R+c, and
// every answer bounds c from above (the window that counted it started
// before it was answered: [phase.observe]), so the window ends by R plus
// the least of those bounds, however wide the evidence is from below: a
// fleet that spends a window's quota at its start and pauses sends
// nothing near its end, which is what bounds c from below, but every
// window's first answers bound it from above. Otherwise it is the latest
// end of the first window whose earliest end, as the evidence narrower
// than half a window puts it, is after recv.
func (l *learner) vendorEnd(id windowID, recv time.Time, fb quotaheader.Feedback) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.windows[id]
	if p == nil {
		return time.Time{}, false
	}
	if p.instantC(fb) {
		return time.UnixMicro(fb.ResetInstant.UnixMicro() + p.cHi), true
	}
	lo, hi, ok := p.bounds()
	if !ok {
		return time.Time{}, false
	}
	k := floorDiv(recv.UnixMicro()-lo, p.per) + 1
	return time.UnixMicro(hi + k*p.per), true
}

// vendorEndAfter returns an instant after which the vendor's window that
// an answer fb, whose reset is an instant, names ends: by the evidence of
// instant resets (R+c, c > cLo); ok is false without such evidence.
func (l *learner) vendorEndAfter(id windowID, fb quotaheader.Feedback) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.windows[id]
	if p == nil || !p.instantC(fb) {
		return time.Time{}, false
	}
	return time.UnixMicro(fb.ResetInstant.UnixMicro() + p.cLo), true
}

// instantC reports whether fb's window end is R+c for the c that p's
// instant resets bound, (cLo, cHi]: fb's reset is an instant R, p has
// that evidence, and the windows are a whole number of the reset's
// resolution.
func (p *phase) instantC(fb quotaheader.Feedback) bool {
	res := max(fb.ResetResolution.Microseconds(), 1)
	return p.hasC && !fb.ResetInstant.IsZero() && p.per%res == 0
}

// A grantCall is what this instance saw of the store call that granted
// a demand: when it asked and when it had the answer, on its own clock,
// and the decision.
type grantCall struct {
	asked, answered time.Time
	dec             quota.Decision
	local           bool // a failure mode decided it, not the store
}

// An anchorCharge is when a grant was charged to the log of one of its
// demand's Anchor limits: at an instant in [lo, hi] of this instance's
// clock; scored: its entry counts until a vendor window's end (a
// quota.LogExpiry on the vendor's grid), not for a span.
type anchorCharge struct {
	id     windowID
	per    time.Duration
	lo, hi time.Time
	reach  time.Duration // how long after sendLag past the charge the log counts it (logReach)
	scored bool
}

// anchorCharges returns the charges of g to the logs of d's Anchor
// limits (used by [Limiter.learnGrant] and [sendPlan.clear]); none when d has none.
func (lim *Limiter) anchorCharges(d *demand, g grantCall) []anchorCharge {
	var cs []anchorCharge
	for i, b := range d.Limits {
		if !b.Limit.Anchored {
			continue
		}
		id := windowID{d.Scope, b.Limit.Name, b.Key}
		lo, hi := lim.learned.chargedAt(id, b.Limit.Per, d, i, g)
		reach, scored := logMargin(b.Limit.Per), false
		if j := d.anchorLogIndex(i); j >= 0 {
			reach, scored = logReach(b.Limit.Per, d.Limits[j].Expiry)
		}
		cs = append(cs, anchorCharge{id, b.Limit.Per, lo, hi, reach, scored})
	}
	return cs
}

// anchorPace returns how long after now a request charged cs must wait
// so that it is sent no earlier than sendLag after each charge
// ([sendPlan.pace]).
func anchorPace(cs []anchorCharge, now time.Time) time.Duration {
	var wait time.Duration
	for _, c := range cs {
		wait = max(wait, c.hi.Add(sendLag(c.per)).Sub(now))
	}
	return wait
}

// anchorHold reports whether a request of demand d charged cs, to be
// sent now, may reach the vendor later than the log of an Anchor limit
// covers, and in another of the vendor's windows than the one that held
// its charge; if so, until is when the instants at which the vendor's
// window may end are past. uncovered reports a request not held that
// may reach the vendor later than a log covers where the vendor's
// windows' ends are not known ([learner.crossing]). Such a late request, on an instance with no
// evidence of its own of where the vendor's windows end, asks the store
// where its windows end (at most every quarter of a window), and is held
// out of the half window before their end once another instance moved
// them to the vendor's.
func (lim *Limiter) anchorHold(ctx context.Context, d *demand, cs []anchorCharge, now time.Time) (until time.Time, hold, uncovered bool) {
	for _, c := range cs {
		u, ok, ask, unc := lim.learned.crossing(c, now)
		if ask {
			for _, b := range d.Limits {
				if b.Limit.Anchored && b.Limit.Name == c.id.limit && b.Key == c.id.key {
					lim.askStore(ctx, d.Scope, b, c.id, now)
				}
			}
			u, ok, _, unc = lim.learned.crossing(c, now)
		}
		uncovered = uncovered || unc
		if ok {
			if u.After(until) {
				until = u
			}
			hold = true
		}
	}
	return until, hold, uncovered && !hold
}

// anchorAnswer is what [quota.Anchorer.Anchor] returns: when the log's
// windows end, and whether it moved them (or, asked with no reset,
// whether they were learned from one).
type anchorAnswer struct {
	ends  time.Duration
	moved bool
}

// askStore learns where the store's windows for id, of bucket b, end.
func (lim *Limiter) askStore(ctx context.Context, scope string, b quota.Bucket, id windowID, now time.Time) {
	s, ok := lim.store.(quota.Anchorer)
	if !ok {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	callSent := lim.now()
	got, err := guardValue(sctx, lim, func(ctx context.Context) (anchorAnswer, error) {
		ends, learned, err := s.Anchor(ctx, scope, b, 0, 0)
		return anchorAnswer{ends, learned}, err
	})
	ends, learned := got.ends, got.moved
	if err != nil || ends <= 0 {
		lim.learned.forgetStore(id)
		return
	}
	lim.learned.keepStore(id, callSent.Add(ends), lim.now().Add(ends), now)
	lim.learned.storeLearned(id, learned)
}

// chargedAt returns when the store charged g to the log of d's Anchor
// limit i, of id, on this instance's clock: at an instant in [lo, hi].
// The call allows its start and end plus the grant's delay; when the
// store decided it, the instant it charged, on the store's clock
// (Decision.At plus the delay, or the log entry's mark when the store does
// not say and the entry is at its charge, without a quota.LogExpiry), read
// on this instance's clock narrows that to the store clock's uncertainty,
// which is about the fastest call's time.
func (l *learner) chargedAt(id windowID, per time.Duration, d *demand, i int, g grantCall) (lo, hi time.Time) {
	lo, hi = g.asked.Add(g.dec.Delay), g.answered.Add(g.dec.Delay)
	j := d.anchorLogIndex(i)
	res := g.dec.Reservation
	if g.local || j < 0 || res == nil || len(res.Marks) != len(d.Limits) ||
		d.Limits[j].Limit.Algorithm != quota.SlidingLog || hasLeases(d) {
		// No mark to read: the log is a window, or a claim's decision
		// (lease.go) carries the charge of a call before.
		return lo, hi
	}
	at := res.Marks[j] // the charge's instant, on the store's clock (µs)
	switch {
	case !g.dec.At.IsZero():
		at = g.dec.At.UnixMicro() + g.dec.Delay.Microseconds()
	case d.Limits[j].Expiry.Every > 0:
		return lo, hi // the mark is the entry's instant (anchorExpiry), not the charge's
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.phaseOf(id, per, g.answered)
	p.observeClock(at-g.dec.Delay.Microseconds(), g.asked.UnixMicro(), g.answered.UnixMicro())
	if c := time.UnixMicro(at + p.oLo); c.After(lo) {
		lo = c
	}
	if c := time.UnixMicro(at + p.oHi); c.Before(hi) {
		hi = c
	}
	return lo, hi
}

// observeClock adds the evidence of a store call asked at asked and
// answered at answered (µs, this instance's clock) that decided at
// instant decided of the store's clock: ours less the store's was then
// in [asked-decided, answered-decided] (a microsecond wider either way,
// for the delay's rounding). Intersected over the calls, it narrows to
// the fastest; evidence that contradicts it (the store's clock stepped,
// another node answers) replaces it.
func (p *phase) observeClock(decided, asked, answered int64) {
	lo, hi := asked-decided-1, answered-decided+1
	if !p.hasClock || max(p.oLo, lo) > min(p.oHi, hi) {
		p.hasClock, p.oLo, p.oHi = true, lo, hi
		return
	}
	p.oLo, p.oHi = max(p.oLo, lo), min(p.oHi, hi)
}

// phaseOf returns what l knows of id's windows of per, new when it knew
// nothing of them (or of windows of another length), pruning the map when
// it is full. l.mu is held.
func (l *learner) phaseOf(id windowID, per time.Duration, now time.Time) *phase {
	if l.windows == nil {
		l.windows = make(map[windowID]*phase)
	}
	p := l.windows[id]
	if p == nil || p.per != per.Microseconds() {
		if len(l.windows) >= maxWindows {
			l.prune(now.UnixMicro())
		}
		p = &phase{per: per.Microseconds()}
		l.windows[id] = p
	}
	return p
}

// crossing reports, for a request charged c (at c.lo at the earliest)
// and sent at sent, whether it may reach the vendor later than its
// charge's log entry covers (sendLag and c.reach after the charge) and in
// another of the vendor's windows than the one that held its charge
// ([phase.crossing]), and if so until when. It notes how late the send
// was, for the reach of the requests decided after it. ask reports
// that this instance has no evidence of its own for such a request, and
// has not asked the store where its windows end for a quarter of a
// window (another instance's move reaches this one within that).
//
// Where the zone of the vendor's window ends is not known, a request
// that may arrive later than its entry covers is held at once (until
// sent: decided again now, with the reach its lateness teaches) when
// its entry counts for less than the log's margin: it is scored by the
// vendor's windows (a quota.LogExpiry on their grid), or its reach, as
// the recent sends and answers set it, is shorter (a stall since its
// decision). One whose entry counts for the whole margin is sent, as
// before the log's reach followed the evidence: holding it would hold
// every request of a vendor slower than the margin, for good. It is sent
// uncovered: the log may not count it in the vendor window that does,
// which the request's DecisionEvent reports (Uncovered). (Holding those
// whose send itself is late, once each, for a store call answered late
// or a charge known less finely than the reach, took the fleets of
// TestAnchoredSearchFleet on a slow store beside two CPU burners from
// 90% of the quota on average (68-100%, 20 fleets) to 76% and 85%
// (60-97%, 20 and 40 fleets), and 2 of the 40 still had a rejection.)
func (l *learner) crossing(c anchorCharge, sent time.Time) (until time.Time, crosses, ask, uncovered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.phaseOf(c.id, c.per, sent)
	lag := sendLag(c.per).Microseconds()
	p.lateCur = max(p.lateCur, sent.UnixMicro()-c.lo.UnixMicro()-lag)
	to := sent.UnixMicro() + p.rtt
	if to-c.lo.UnixMicro() <= lag+c.reach.Microseconds() {
		return time.Time{}, false, false, false // the log counts it wherever it lands
	}
	if !c.scored {
		_, _, known := p.bounds()
		ask = !known && (!p.hasStore || sent.UnixMicro()-p.asked > p.per/4)
	}
	if _, _, ok := p.zone(); !ok {
		if c.scored || c.reach < logMargin(c.per) {
			return sent, true, ask, false
		}
		return time.Time{}, false, ask, true
	}
	u, ok := p.crossing(c.lo.UnixMicro(), to)
	return time.UnixMicro(u), ok, ask, false
}

// Every request of an Anchor limit is also counted in every vendor
// window that may hold it: in a sliding log of the limit's Rate over its
// Per and logMargin, in a counter of its own (the limit's key with "%o",
// which no escaped key holds), its entry scored by the vendor's windows
// once their phase is known (see the comment at the top of this file).
// Learning admits no more than a limit that knows nothing of the
// vendor's phase could where the evidence is right. Before the store's
// windows move, they start at a first charge and the vendor's anywhere,
// so one vendor window may hold the end of one of ours and the start of
// the next, and twice the quota: the log is what holds then. After a
// move, it is kept.

// anchorExpiry sets, on the log that anchorLog added to d for each of
// its Anchor limits, the expiry of the entry it charges (logExpiry): for
// the reach that the recent sends and answers teach, and, under
// Learning.AnchorGrid (grid) once the phase is known, scored by the
// vendor's windows. Without AnchorGrid no entry is scored so: against
// windows that start at a first request, entries so scored let bursts
// in before the vendor's window ended (TestAnchorStickyWindows).
func (lim *Limiter) anchorExpiry(d *demand, now time.Time, grid bool) {
	for i, b := range d.Limits {
		j := d.anchorLogIndex(i)
		if j < 0 || d.Limits[j].Limit.Algorithm != quota.SlidingLog {
			continue
		}
		d.Limits[j].Expiry = lim.learned.logExpiry(windowID{d.Scope, b.Limit.Name, b.Key}, b.Limit.Per, now, grid)
	}
}

// logExpiry returns the expiry of the entry of a request of id's Anchor
// limit (of per) decided now ([quota.LogExpiry]), on the store's clock.
//
// With grid, the entry is scored by the grid of the vendor's windows,
// whose ends lie in [lo, hi] of this instance's clock (phase.bounds),
// widened by what is not known of the store's clock (ours less the
// store's in [oLo, oHi]: [lo-oHi, hi-oLo] on the store's) and moved
// sendLag earlier, with the margin as the reach (see the comment at the
// top of this file; a reach as short as phase.reach holds requests for
// nothing: TestAnchorReachFollowsLatency's fleet against its spiky
// vendor, with AnchorGrid, got 843-892 of 900 with it and 860-900 with
// the margin),
// when the evidence says less than half a window with the longest
// send-to-answer time (a request later than the reach is then held where
// it may cross an end: phase.zone), the store's clock is known, and the
// latest answer is at most a window old (a vendor whose windows start at
// a first request after a quiet spell has moved them since). Otherwise
// the entry counts for the window and its reach, phase.reach, from its
// charge (reachExpiry): the log's own rule when that is the margin.
func (l *learner) logExpiry(id windowID, per time.Duration, now time.Time, grid bool) quota.LogExpiry {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.windows[id]
	if p == nil || p.per != per.Microseconds() {
		return quota.LogExpiry{}
	}
	reach := time.Duration(p.reach()) * time.Microsecond
	if !grid || !p.hasClock || now.UnixMicro()-p.last > p.per {
		return reachExpiry(per, reach)
	}
	lo, hi, ok := p.bounds()
	if !ok || 2*(hi-lo+p.rtt) > p.per {
		return reachExpiry(per, reach)
	}
	lo, hi = lo-p.oHi, hi-p.oLo
	if 2*(hi-lo) >= p.per {
		return reachExpiry(per, reach)
	}
	lag := sendLag(per).Microseconds()
	return quota.LogExpiry{Every: per, Phase: time.Duration(floorMod(lo-lag, p.per)) * time.Microsecond,
		Spread: time.Duration(hi-lo) * time.Microsecond, Reach: logMargin(per)}
}

// reachExpiry returns the expiry that counts the entry of a request
// charged at t, in the log of an Anchor limit of per, from t until
// t+per+reach, reach at most the log's margin: a grid of a microsecond
// (every instant an end, quota.LogExpiry), reached per+reach less a
// microsecond after t. It is the zero LogExpiry, the log's own rule (its
// span is per and the margin), when reach is the margin. The inverse is
// logReach.
func reachExpiry(per, reach time.Duration) quota.LogExpiry {
	if reach >= logMargin(per) {
		return quota.LogExpiry{}
	}
	return quota.LogExpiry{Every: time.Microsecond, Reach: per + reach - time.Microsecond}
}

// logReach returns how long after sendLag past its charge the entry of
// e, in the log of an Anchor limit of per, covers a request (anchorCharge),
// and whether e scores it by the vendor's windows (logExpiry).
func logReach(per time.Duration, e quota.LogExpiry) (reach time.Duration, scored bool) {
	switch {
	case e.Every == 0:
		return logMargin(per), false
	case e.Every == time.Microsecond && e.Reach >= per:
		// reachExpiry's: a reach of a window and more, where the vendor's
		// grid (logExpiry) reaches no further than the margin.
		return e.Reach + time.Microsecond - per, false
	}
	return e.Reach, true
}

// anchorHorizon returns how far ahead d may reserve while the phase of
// one of its Anchor limits is not known (its log's entries are not
// scored by the vendor's windows, logReach): the log's span, so that a
// saturated fleet queues one burst ahead, not several; ok is false when
// every phase is known. The requests decided again take what was learned
// since: under AnchorGrid their entries are scored by the phase once the
// evidence tells it (anchorExpiry) within a window or two, and every
// entry counts for the reach measured since, where a queue of
// reservations granted before would keep the spacing of the first
// answers' (the margin) for as many windows as it is deep. (A request's
// reach, sendLag plus the margin, queues less, but then the requests are
// decided after the pause that the previous burst's "nothing remaining"
// taught, which ends up to the evidence's width after the vendor's
// window while the phase is not known: 75% of the quota in 15 of 20
// TestAnchoredSearchFleet runs at load 4-6 without a move, against none
// of 20 with the span.)
//
// Where the store can shorten entries to the vendor's windows
// (shorten.go), a quarter of the window: the next burst is then decided
// once the answers of the one before have shortened their entries, not
// on the spans they had when it was queued; the pause that their
// "nothing remaining" taught now holds the decisions a send lag less
// than the sends (pauselead.go), which is what the short horizon above
// lacked (TestAnchoredSearchFleet: 100% of the quota in 10 of 10 offset
// runs under -race, 9 of 9 beside two CPU burners). (Only once answers had
// shortened some, not from the first burst on: windows of 10-26 of 30
// in TestAnchorReachFollowsLatency's fleet, where every window is full
// with it from the start.) A vendor whose latest reset cannot shorten
// entries (a delay, or coarser than the window) gets the span: a shorter
// horizon would only decide its queued requests twice.
func (lim *Limiter) anchorHorizon(d *demand) (horizon time.Duration, ok bool) {
	_, shortens := lim.store.(quota.Shortener)
	for i, b := range d.Limits {
		if j := d.anchorLogIndex(i); j >= 0 {
			if _, scored := logReach(b.Limit.Per, d.Limits[j].Expiry); scored {
				continue
			}
			h := d.Limits[j].Limit.Per
			if shortens && !lim.learned.uncut(windowID{d.Scope, b.Limit.Name, b.Key}, b.Limit.Per) {
				h = b.Limit.Per / 4
			}
			if !ok || h < horizon {
				horizon, ok = h, true
			}
		}
	}
	return horizon, ok
}

// floorMod is a modulo b in [0, b), for b > 0.
func floorMod(a, b int64) int64 { return a - floorDiv(a, b)*b }

// anchorLogOf returns the sliding log that anchorLog added to d for its
// Anchor limit b.
func (d *demand) anchorLogOf(b quota.Bucket) (quota.Bucket, bool) {
	if j := d.logIndexOf(b); j >= 0 {
		return d.Limits[j], true
	}
	return quota.Bucket{}, false
}

// anchorLogIndex returns the index in d.Limits of the sliding log that
// anchorLog added for d's Anchor limit i, or -1.
func (d *demand) anchorLogIndex(i int) int { return d.logIndexOf(d.Limits[i]) }

// anchored reports whether d's limit i is an Anchor limit or the log
// that anchorLog added for one.
func (d *demand) anchored(i int) bool {
	b := d.Limits[i]
	if b.Limit.Anchored {
		return true
	}
	for _, ab := range d.Limits {
		if ab.Limit.Anchored && ab.Limit.Name == b.Limit.Name && b.Key == ab.Key+"%o" {
			return true
		}
	}
	return false
}

// logIndexOf returns the index in d.Limits of the sliding log that
// anchorLog added for b, or -1 if b is not an Anchor limit.
func (d *demand) logIndexOf(b quota.Bucket) int {
	if !b.Limit.Anchored {
		return -1
	}
	for j, lb := range d.Limits {
		if lb.Limit.Name == b.Limit.Name && lb.Key == b.Key+"%o" && !lb.Limit.Anchored {
			return j
		}
	}
	return -1
}

// sendLag is how long after its charge to an Anchor limit's log a
// request is sent, at the earliest: a fifth of the window, at most 200
// ms. Every instance waits it, so that every request reaches the vendor
// between sendLag and sendLag plus the log's margin after its charge,
// however fast its grant came back: the log then counts each in every
// vendor window that may hold it. A store that answers some grants at
// once and others after a queue (Redis, a burst of calls, writes every
// reply of a loop at its end) spreads the time from charge to send over
// more than the margin; the wait takes up all of that spread but what is
// over sendLag. It costs the request that time, and the quota nothing.
// A known phase does not shorten it: an entry scored by the vendor's
// windows (quota.LogExpiry) counts in the window that holds the charge
// plus sendLag plus the margin, and covers a request that arrives no
// earlier than the margin before that; a grant answered later than
// sendLag after its charge is sent later than that reach, and held
// where it may cross an end, so a shorter wait would trade the idle
// request's 200 ms for holds of a loaded store's grants (0.1-0.8 s from
// charge to answer under -race, TestAnchorMoveRedis), not measured here.
func sendLag(per time.Duration) time.Duration {
	return min(per/5, 200*time.Millisecond)
}

// logMargin is how much longer than per the sliding log of an Anchor
// limit spans: a tenth of a window, at most a second. It is the longest
// reach of an entry (anchorCharge): how long after sendLag past its
// charge the log covers a request, which reaches the vendor within it;
// one that may reach it later may be counted in a window the log did not
// see. Each entry counts for per and its own reach (reachExpiry), what
// the recent sends and answers of its instance teach (phase.reach), from
// reachFloor to the margin: a fleet whose bursts come a window and the
// reach apart uses that much less of the quota.
func logMargin(per time.Duration) time.Duration {
	return min(per/10, time.Second)
}

// reachFloor is the shortest reach of an entry of an Anchor limit's log
// (phase.reach): a fortieth of a window, 25 ms of a second's. The reach is
// twice the longest lateness measured, and at least this, so that a
// request late by more than was seen (a stall of the machine after a
// quiet spell) is still covered by some of it; one later than its reach
// is held (learner.crossing).
func reachFloor(per time.Duration) time.Duration {
	return per / 40
}

// anchorLog adds to d, for each of its Anchor limits, the sliding log
// that counts its requests in every vendor window that may hold them.
func (d *demand) anchorLog() {
	n := len(d.Limits)
	for i := range n {
		b := d.Limits[i]
		if !b.Limit.Anchored {
			continue
		}
		if d.rules == nil {
			d.rules = make([]int, n, n+1)
			for k := range d.rules {
				d.rules[k] = k
			}
		}
		// The store's fallback decides it on the rule's local copy of the
		// limit, under the log's key: a counter of its own there too.
		d.rules = append(d.rules, d.ruleLimit(i))
		l := b.Limit
		b.Limit = quota.Limit{Name: l.Name, Rate: l.Rate, Per: l.Per + logMargin(l.Per), Algorithm: quota.SlidingLog}
		if l.Rate > quota.MaxSlidingLogRate {
			b.Limit.Algorithm = quota.SlidingWindow // its estimate is never below the log's count
		}
		b.Key += "%o"
		d.Limits = append(d.Limits, b)
	}
}
