package throttle

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/quotakit/throttle/quota"
)

// admit decides req under rule r and waits for its slot, within at most
// budget when budget is not negative. The event's Err is nil when the
// request may be sent. The event goes to the OnDecision hook. The demand
// is what was decided, nil if the decision failed before one was built.
func (lim *Limiter) admit(r *rule, req *http.Request, budget time.Duration) (DecisionEvent, *demand) {
	return lim.admitDemand(r, req, budget, lim.newDemand(r))
}

// newDemand returns an empty demand of rule r, to be filled in by decide.
func (lim *Limiter) newDemand(r *rule) *demand {
	d := &demand{}
	d.Scope, d.Cost = r.scope, 1
	// The pauses (the scope's "" and the rule's key) and, for most rules, the
	// limits, in d itself: one allocation per request rather than three.
	d.Pauses = d.pauses[:1:2]
	if n := len(r.Limits); n <= len(d.limits) {
		d.Limits = d.limits[:0:n]
	} else {
		d.Limits = make([]quota.Bucket, 0, n)
	}
	return d
}

// admitDemand is admit with d, a demand from newDemand that may carry the
// caller's cost and reserve mode.
func (lim *Limiter) admitDemand(r *rule, req *http.Request, budget time.Duration, d *demand) (DecisionEvent, *demand) {
	ev := DecisionEvent{Rule: r.id, Shadow: r.Shadow}
	g := lim.gauge(r)
	g.add(1, 0)
	defer g.add(-1, 0)
	if r.Shadow {
		budget = 0 // decided as if it could not wait; never sleeps
	}
	if err := lim.decide(r, req, budget, d, &ev); err != nil {
		ev.Err = onePrefix(err)
		if ev.Outcome == Allowed || ev.Outcome == Waited {
			ev.Outcome = Failed
		}
	}
	if lim.hooks.OnDecision != nil {
		ev.Context = req.Context()
		lim.hooks.OnDecision(ev)
	}
	lim.logDecision(req.Context(), ev)
	if r.Shadow {
		ev.Err = nil // recorded, not enforced
	}
	return ev, d
}

// decide does the work of admit: it fills in d and decides it, and fills
// in ev as it learns.
func (lim *Limiter) decide(r *rule, req *http.Request, budget time.Duration, d *demand, ev *DecisionEvent) error {
	ctx := req.Context()
	c, err := lim.policy.classOf(ctx, r) // class.go
	if err != nil {
		return err
	}
	if d.class = c; c != nil {
		ev.Class = c.name
	}
	if err := r.buckets(req, d); err != nil {
		return err
	}
	d.anchorLog() // anchor.go: the sliding log of each Anchor limit
	for _, b := range d.Limits {
		if b.Tenant != "" {
			ev.Tenant = b.Tenant
			break
		}
	}
	pk := r.pauseKey(d)
	if pk != "" {
		d.Pauses = append(d.Pauses, pk)
	}
	w, _ := ctx.Value(waiterKey{}).(Waiter)
	if w == nil {
		w = r.wait
	}
	d.MaxWait = max(w.MaxWait(ctx), 0)
	if budget >= 0 {
		d.MaxWait = min(d.MaxWait, budget)
	}
	now := lim.now()
	if deadline, ok := ctx.Deadline(); ok {
		d.MaxWait = min(d.MaxWait, max(deadline.Sub(now), 0))
	}
	if r.queue != nil && d.MaxWait > 0 && !d.reserve {
		return lim.queued(ctx, r, d, pk, ev) // queue.go: Rule.MaxQueue
	}
	return lim.obtain(ctx, r, d, pk, now, ev)
}

// obtain decides d, the demand of a request under rule r whose pause key
// is pk, as of now, and waits as long as d.MaxWait allows: for a pause
// this instance learned, a slot, or the reservation's instant. A grant
// that must not be sent as it is ([sendPlan.clear]'s [heldGrant]) is given
// back, and d decided again once the instant the hold names is past: a
// grant that the vendor may count in another window of an Anchor limit
// than the store charged it to (anchor.go), and a grant whose answer came
// so late that the vendor would count it elsewhere than the store did
// (late.go), which is decided again at once.
func (lim *Limiter) obtain(ctx context.Context, r *rule, d *demand, pk string, now time.Time, ev *DecisionEvent) error {
	for {
		err := lim.obtainOnce(ctx, r, d, pk, now, ev)
		h, ok := err.(heldGrant)
		if !ok {
			if err == nil {
				d.sent = lim.now()
			}
			return err
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
		if d.granted != nil {
			_ = lim.cancel(cctx, d.granted) // on failure, the charge runs out by itself
		}
		cancel()
		d.granted, d.held = nil, nil
		now = lim.now()
		if wait := h.until.Sub(now); wait > 0 {
			if wait > d.MaxWait {
				ev.Outcome, ev.Wait = Refused, ev.Wait+wait
				return &LimitError{Rule: r.id, RetryAfter: wait}
			}
			ev.Outcome, ev.Wait = Waited, ev.Wait+wait
			if _, err := lim.sleep(ctx, wait, nil); err != nil {
				ev.Outcome = GaveUp
				return &LimitError{Rule: r.id, Err: err}
			}
			d.MaxWait -= wait
			now = lim.now()
		}
	}
}

// obtainOnce is one decision of obtain.
func (lim *Limiter) obtainOnce(ctx context.Context, r *rule, d *demand, pk string, now time.Time, ev *DecisionEvent) error {
	// Learning, before the decision (learnreq.go): a pause this instance
	// learned holds even if the store lost it.
	var paused time.Duration // for a reservation: the pause it must wait out too
	if wait := lim.pausedFor(r, pk, now); wait > 0 {
		if wait > d.MaxWait {
			ev.Outcome, ev.Wait = Refused, wait
			return &LimitError{Rule: r.id, Pause: pauseName(pk), RetryAfter: wait}
		}
		if d.reserve {
			paused = wait
		} else {
			ev.Outcome, ev.Wait = Waited, wait
			if slept, err := lim.sleep(ctx, wait, nil); err != nil {
				ev.Outcome, ev.Wait = GaveUp, slept
				return &LimitError{Rule: r.id, Err: err}
			}
			d.MaxWait -= wait
		}
	}

	// Each Anchor limit's log counts the request for a window and the
	// reach that the recent sends and answers teach; under
	// Learning.AnchorGrid, in the vendor's windows once their phase is
	// known, and until then it reserves no further ahead than the log's
	// span (anchor.go).
	maxWait := d.MaxWait
	var horizon time.Duration
	var capped bool
	if r.Learn.Anchor != "" {
		lim.anchorExpiry(d, now, r.Learn.AnchorGrid)
		horizon, capped = lim.anchorHorizon(d)
	}
	if capped = capped && horizon < maxWait && !d.reserve && !d.inLine(); capped {
		d.MaxWait = horizon
	}

	var dec quota.Decision
	var err error
	decided := lim.now() // the grant is charged at this instant or later
	if d.inLine() {
		dec, err = lim.takeInLine(ctx, r, d, ev) // lane.go: asks again when the store says, in line
	} else {
		dec, err = lim.takeSlot(ctx, r, d, ev) // lease.go: lim.take, and waits for a released slot where the waiter allows
	}
	d.MaxWait = maxWait
	if err != nil {
		return err
	}
	if capped && !dec.OK && dec.Delay > horizon && dec.Delay <= maxWait {
		// Decided again once its instant is within the horizon.
		return heldGrant{lim.now().Add(dec.Delay - horizon)}
	}
	call := grantCall{asked: decided, answered: lim.now(), dec: dec, local: ev.Fallback != FailDefault}
	if !dec.OK {
		le := &LimitError{Rule: r.id, Pause: pauseName(dec.Pause), RetryAfter: dec.Delay}
		if ev.Fallback != FailDefault {
			le.Fallback, le.StoreErr = ev.Fallback, ev.StoreErr
		}
		if dec.Limit >= 0 && dec.Limit < len(d.Limits) {
			le.Limit = d.Limits[dec.Limit].Limit.Name
		}
		ev.Outcome, ev.Limit, ev.Wait = Refused, le.Limit, ev.Wait+dec.Delay
		return le
	}
	d.granted = dec.Reservation
	ev.Remaining, ev.ResetAfter = dec.Remaining, dec.ResetAfter
	plan := lim.learnGrant(d, call) // learnreq.go: learning, once granted
	if d.reserve {
		// The caller waits: nothing sleeps here.
		d.delay = max(dec.Delay, paused, plan.pace(lim.now()))
		if d.delay > 0 {
			ev.Outcome, ev.Wait = Waited, d.delay
		}
		return nil
	}
	if dec.Delay > 0 {
		waited := ev.Wait
		ev.Outcome, ev.Wait = Waited, waited+dec.Delay
		res, slept, err := lim.sleepOn(ctx, d, dec.Delay, dec.Reservation)
		if err != nil {
			ev.Outcome, ev.Wait = GaveUp, waited+slept
			return &LimitError{Rule: r.id, Err: err}
		}
		if d.granted = res; res == dec.Reservation {
			decided = decided.Add(dec.Delay) // else the queue's, at an instant between
		}
	}
	// A request with a place in the queue is the queue's to move
	// (queue.go); learning clears the others to be sent, or holds them.
	if d.place != nil {
		return nil
	}
	return plan.clear(ctx, r, ev, decided)
}

// sleepOn waits delay for res, the reservation d was granted, as sleep
// does, and returns the reservation to act on. A request with a place in
// its rule's queue (queue.go) waits in its place: the queue may give it
// an earlier reservation meanwhile, and gives back the one it holds if
// ctx ends.
func (lim *Limiter) sleepOn(ctx context.Context, d *demand, delay time.Duration, res *quota.Reservation) (*quota.Reservation, time.Duration, error) {
	if d.place == nil {
		slept, err := lim.sleep(ctx, delay, res)
		return res, slept, err
	}
	return d.place.hold(ctx, lim.now)
}

// sleep waits d on a timer. If ctx ends first, it gives r back to the
// store (when r is not nil) and returns how long it slept and the
// context's error.
func (lim *Limiter) sleep(ctx context.Context, d time.Duration, r *quota.Reservation) (time.Duration, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	start := lim.now()
	select {
	case <-timer.C:
		return d, nil
	case <-ctx.Done():
	}
	slept, err := lim.now().Sub(start), ctx.Err()
	if r != nil {
		// Give the slot back; the caller's context is over, so use a short
		// one of our own that keeps its values.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
		defer cancel()
		if cerr := lim.cancel(cctx, r); cerr != nil {
			err = fmt.Errorf("%w (and returning the reservation failed: %v)", err, cerr)
		}
	}
	return slept, err
}

// demand is what one request asks of the store, with what the request
// holds while it is in flight.
type demand struct {
	quota.Demand
	cost    int    // the caller's cost (Limiter's n); 0: the rule's
	reserve bool   // decide without waiting: the caller waits delay (Limiter.Reserve)
	class   *class // the request's class (class.go), or nil

	rules   []int              // per limit, its index in the rule's Limits; nil: the same index (all apply)
	held    *quota.Reservation // the granted reservation whose slots the request holds
	granted *quota.Reservation // what the decision charged, for a Permit's Cancel
	// shortening: the shortening of granted's anchor log entry sent or
	// to be sent (shorten.go), which settles and cancels wait for
	shortening *shortening
	delay      time.Duration // reserve: how long the caller must wait before it acts
	place      *queued       // its place in the rule's queue while it waits there (queue.go); nil: none
	sent       time.Time     // when the request was sent (or cleared to be), for learning
	due        time.Time     // a store's grant: the earliest instant it may be charged for (late.go); zero: none
	ends       time.Time     // with due, for fixed windows: the earliest their window may end (grantWindowEnd); zero: unknown
	charge     grantClock    // with due: what the store's clock says of it (late.go)
	late       int           // grants given back for coming late (late.go)

	pauses [2]string       // backs Pauses
	limits [2]quota.Bucket // backs Limits when the rule has at most two
}

// hasLeases reports whether d has a Concurrency limit.
func hasLeases(d *demand) bool {
	for i := range d.Limits {
		if d.Limits[i].Limit.Algorithm == Concurrency {
			return true
		}
	}
	return false
}

// Slot waits poll the store at least this often while no release wakes
// them, in case a wake-up was lost; the interval grows, with jitter, up to
// slotPollMax.
const (
	slotPollFirst = 250 * time.Millisecond
	slotPollMax   = 5 * time.Second
)

// takeSlot decides d with [Transport.take] (the store, through the
// breaker and the rule's failure mode). When a Concurrency limit refuses
// it and the waiter allows a wait, it waits for a release of that limit's
// slot (or the refusal's Delay, or a poll interval, whichever is first)
// and asks again, within d.MaxWait. A reservation whose slots are
// unclaimed (a request that must wait for its rate quota holds no slot
// while it waits) it waits out and then claims, just before the request
// is sent (claimDue); if a slot is not free then, the reservation is
// given back and the request waits for a release as above. It records the
// reservation whose slots the request holds in d for [Transport.hold]. A
// granted decision it returns with slots holds them. An error is ready
// for the caller: t.take's, or a *LimitError if ctx ended while waiting;
// ev says how long it waited.
func (lim *Limiter) takeSlot(ctx context.Context, r *rule, d *demand, ev *DecisionEvent) (quota.Decision, error) {
	dec, err := lim.take(ctx, r, d, ev)
	wait := err == nil && !dec.OK && slotBound(d, dec)
	for err == nil {
		if wait {
			if d.MaxWait <= 0 {
				break
			}
			// A refusal waitSlot returns is final: the budget is spent,
			// or something other than a slot binds.
			dec, err = lim.waitSlot(ctx, r, d, dec, ev)
			wait = false
			continue
		}
		if !dec.OK || dec.Reservation == nil || !dec.Reservation.Unclaimed {
			break
		}
		dec, err = lim.claimDue(ctx, r, d, dec, ev)
		wait = err == nil && !dec.OK && slotBound(d, dec)
	}
	if err == nil && dec.OK && dec.Reservation != nil && hasLeases(d) {
		d.held = dec.Reservation
	}
	return dec, err
}

// slotBound reports whether a Concurrency limit bound the refusal dec.
func slotBound(d *demand, dec quota.Decision) bool {
	return dec.Limit >= 0 && dec.Limit < len(d.Limits) && d.Limits[dec.Limit].Limit.Algorithm == Concurrency
}

// waitSlot is the waiting part of take: dec is a refusal bound by a
// Concurrency limit.
func (lim *Limiter) waitSlot(ctx context.Context, r *rule, d *demand, dec quota.Decision, ev *DecisionEvent) (quota.Decision, error) {
	ls, ok := lim.store.(quota.LeaseStore)
	if !ok {
		return dec, nil
	}
	start, budget := lim.now(), d.MaxWait
	bo := &backoff.ExponentialBackOff{
		InitialInterval:     slotPollFirst,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         slotPollMax,
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	bo.Reset()
	var (
		wake    <-chan struct{}
		stop    = func() {}
		watched = -1
	)
	defer func() { stop() }()
	for {
		if dec.Limit != watched {
			// Arm the watch before asking again, so a release between the
			// refusal and the wait is not missed.
			stop()
			var err error
			if wake, stop, err = ls.WatchRelease(ctx, d.Scope, d.Limits[dec.Limit]); err != nil {
				wake, stop = nil, func() {} // poll instead
			}
			watched = dec.Limit
		} else {
			wait := min(dec.Delay, bo.NextBackOff(), budget-lim.now().Sub(start))
			timer := time.NewTimer(max(wait, 0))
			select {
			case <-wake:
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				waited := lim.now().Sub(start)
				ev.Outcome, ev.Wait, ev.Limit = GaveUp, ev.Wait+waited, d.Limits[dec.Limit].Limit.Name
				return quota.Decision{}, &LimitError{Rule: r.id, Limit: ev.Limit, Err: ctx.Err()}
			}
			timer.Stop()
		}
		left := budget - lim.now().Sub(start)
		if left <= 0 {
			ev.Wait += lim.now().Sub(start)
			return dec, nil
		}
		d.MaxWait = left
		var err error
		if dec, err = lim.take(ctx, r, d, ev); err != nil || dec.OK || !slotBound(d, dec) {
			waited := lim.now().Sub(start)
			if err == nil && dec.OK {
				ev.Outcome = Waited
			}
			ev.Wait += waited
			return dec, err
		}
	}
}

// claimDue waits until dec, a granted reservation whose slots are
// unclaimed, comes due, and claims them. It returns the claim's grant
// (Delay 0: send now), or, when a slot is not free then, the claim's
// refusal with the reservation given back and d.MaxWait reduced by the
// time spent, so that the caller waits for a release within what is
// left. A request never sends late on its old rate charge: an instant
// charged in a window need not be covered by the window of a later one.
// When the store cannot claim, the reservation is given back and d is
// decided again by lim.take, which applies the rule's failure mode.
func (lim *Limiter) claimDue(ctx context.Context, r *rule, d *demand, dec quota.Decision, ev *DecisionEvent) (quota.Decision, error) {
	res := dec.Reservation
	start, waited := lim.now(), ev.Wait
	ev.Outcome, ev.Wait = Waited, waited+dec.Delay
	if dec.Delay > 0 {
		var slept time.Duration
		var err error
		if res, slept, err = lim.sleepOn(ctx, d, dec.Delay, res); err != nil {
			ev.Outcome, ev.Wait = GaveUp, waited+slept
			return quota.Decision{}, &LimitError{Rule: r.id, Err: err}
		}
	}
	calls, _ := lim.leaseCalls(res)
	cdec, err := calls.claim(ctx)
	if err == nil && cdec.OK {
		cdec.Delay = 0
		return cdec, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	_ = lim.cancel(cctx, res) // on failure, the charge runs out by itself
	cancel()
	spent := lim.now().Sub(start)
	ev.Wait = waited + spent
	d.MaxWait = max(d.MaxWait-spent, 0)
	switch {
	case err == nil:
		return cdec, nil
	case ctx.Err() != nil:
		ev.Outcome = GaveUp
		return quota.Decision{}, &LimitError{Rule: r.id, Err: ctx.Err()}
	case !storeFault(ctx, err):
		ev.StoreErr = err
		return quota.Decision{}, fmt.Errorf("throttle: rule %s: store: claim: %w", r.id, err)
	}
	ev.StoreErr = err
	return lim.take(ctx, r, d, ev)
}
