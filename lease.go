package throttle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// This file ties the slots of Concurrency limits to requests: waiting for a
// free slot, renewing its lease while the request is in flight, and
// releasing it when the response body is closed or read to the end, or the
// round trip fails.

// A LeaseEventKind says what happened to the lease of a request's slot.
type LeaseEventKind int

const (
	// LeaseRenewed: the lease was extended while the request was in flight.
	LeaseRenewed LeaseEventKind = iota

	// LeaseRenewFailed: renewing failed with a store error; the transport
	// tries again a third of the lease time later.
	LeaseRenewFailed

	// LeaseLost: renewing found the lease gone (it expired before it was
	// renewed, a slow store, say), so another request may hold the slot
	// while this one is still in flight. Renewals stop.
	LeaseLost

	// LeaseAbandoned: the caller neither read nor closed the response body
	// for a whole lease time. Renewals stop, and the slot is reclaimed when
	// the lease expires, at most one lease time later. Close the body to
	// avoid this.
	LeaseAbandoned

	// LeaseReleaseFailed: releasing failed with a store error; the slot is
	// reclaimed when its lease expires.
	LeaseReleaseFailed
)

// String returns the kind's name in lower case.
func (k LeaseEventKind) String() string {
	switch k {
	case LeaseRenewed:
		return "renewed"
	case LeaseRenewFailed:
		return "renew-failed"
	case LeaseLost:
		return "lost"
	case LeaseAbandoned:
		return "abandoned"
	case LeaseReleaseFailed:
		return "release-failed"
	}
	return "unknown"
}

// A LeaseEvent describes something that happened to the lease of a
// request's [Concurrency] slot after it was granted; see [Hooks.OnLease].
type LeaseEvent struct {
	// Rule is the name of the rule whose Concurrency limit granted the slot.
	Rule string
	// Kind is what happened.
	Kind LeaseEventKind
	// Err is the store's error, if any.
	Err error
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

// checkLeases fails if a rule has a Concurrency limit but the store is not
// a LeaseStore.
func (t *Transport) checkLeases() error {
	if _, ok := t.store.(quota.LeaseStore); ok {
		return nil
	}
	for _, r := range t.policy.rules {
		for j, l := range r.Limits {
			if l.Algorithm == Concurrency {
				return &PolicyError{Rule: r.id, Field: fmt.Sprintf("Limits[%d].Algorithm", j), Err: fmt.Errorf("the store (%T) has no concurrency limits: it does not implement throttle.LeaseStore", t.store)}
			}
		}
	}
	return nil
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
func (t *Transport) takeSlot(ctx context.Context, r *rule, d *demand, ev *DecisionEvent) (quota.Decision, error) {
	dec, err := t.take(ctx, r, d, ev)
	wait := err == nil && !dec.OK && slotBound(d, dec)
	for err == nil {
		if wait {
			if d.MaxWait <= 0 {
				break
			}
			// A refusal waitSlot returns is final: the budget is spent,
			// or something other than a slot binds.
			dec, err = t.waitSlot(ctx, r, d, dec, ev)
			wait = false
			continue
		}
		if !dec.OK || dec.Reservation == nil || !dec.Reservation.Unclaimed {
			break
		}
		dec, err = t.claimDue(ctx, r, d, dec, ev)
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
func (t *Transport) waitSlot(ctx context.Context, r *rule, d *demand, dec quota.Decision, ev *DecisionEvent) (quota.Decision, error) {
	ls, ok := t.store.(quota.LeaseStore)
	if !ok {
		return dec, nil
	}
	start, budget := t.now(), d.MaxWait
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
			wait := min(dec.Delay, bo.NextBackOff(), budget-t.now().Sub(start))
			timer := time.NewTimer(max(wait, 0))
			select {
			case <-wake:
			case <-timer.C:
			case <-ctx.Done():
				timer.Stop()
				waited := t.now().Sub(start)
				ev.Outcome, ev.Wait, ev.Limit = GaveUp, ev.Wait+waited, d.Limits[dec.Limit].Limit.Name
				return quota.Decision{}, &LimitError{Rule: r.id, Limit: ev.Limit, Err: ctx.Err()}
			}
			timer.Stop()
		}
		left := budget - t.now().Sub(start)
		if left <= 0 {
			ev.Wait += t.now().Sub(start)
			return dec, nil
		}
		d.MaxWait = left
		var err error
		if dec, err = t.take(ctx, r, d, ev); err != nil || dec.OK || !slotBound(d, dec) {
			waited := t.now().Sub(start)
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
// decided again by t.take, which applies the rule's failure mode.
func (t *Transport) claimDue(ctx context.Context, r *rule, d *demand, dec quota.Decision, ev *DecisionEvent) (quota.Decision, error) {
	res := dec.Reservation
	start, waited := t.now(), ev.Wait
	ev.Outcome, ev.Wait = Waited, waited+dec.Delay
	if dec.Delay > 0 {
		if slept, err := t.sleep(ctx, dec.Delay, res); err != nil {
			ev.Outcome, ev.Wait = GaveUp, waited+slept
			return quota.Decision{}, &LimitError{Rule: r.id, Err: err}
		}
	}
	calls, _ := t.leaseCalls(res)
	cdec, err := calls.claim(ctx)
	if err == nil && cdec.OK {
		cdec.Delay = 0
		return cdec, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	_ = t.cancel(cctx, res) // on failure, the charge runs out by itself
	cancel()
	spent := t.now().Sub(start)
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
	return t.take(ctx, r, d, ev)
}

// localReservation returns, for a reservation of the local fallback
// store (see [FailLocal]), a copy carrying the local store's own id.
func localReservation(r *quota.Reservation) (*quota.Reservation, bool) {
	id, ok := strings.CutPrefix(r.ID, localMark)
	if !ok {
		return nil, false
	}
	lr := *r
	lr.ID = id
	return &lr, true
}

// leaseCalls routes the lease calls of r to the store that granted it: the
// local fallback store, or the shared one through the breaker.
type leaseCalls struct {
	t     *Transport
	local *memstore.Store // nil: the shared store
	ls    quota.LeaseStore
	r     *quota.Reservation
}

func (t *Transport) leaseCalls(r *quota.Reservation) (leaseCalls, bool) {
	if lr, ok := localReservation(r); ok {
		return leaseCalls{t: t, local: t.failover().local, r: lr}, true
	}
	ls, ok := t.store.(quota.LeaseStore)
	return leaseCalls{t: t, ls: ls, r: r}, ok
}

// claim takes the slots of c.r, an unclaimed reservation. A claim that
// the breaker abandoned (see [Breaker].CallTimeout) and that succeeds
// after all is released at once: its request has moved on.
func (c leaseCalls) claim(ctx context.Context) (quota.Decision, error) {
	if c.local != nil {
		dec, err := c.local.Claim(ctx, c.r)
		if dec.Reservation != nil {
			lr := *dec.Reservation
			lr.ID = localMark + lr.ID
			dec.Reservation = &lr
		}
		return dec, err
	}
	if c.t.inProcess() {
		return c.ls.Claim(ctx, c.r)
	}
	var dec quota.Decision
	err := c.t.failover().breaker.call(ctx, func(ctx context.Context) error {
		var err error
		dec, err = c.ls.Claim(ctx, c.r)
		return err
	}, func() {
		if dec.OK && dec.Reservation != nil {
			cctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
			defer cancel()
			_ = c.ls.Release(cctx, dec.Reservation)
		}
	})
	if err != nil {
		return quota.Decision{}, err
	}
	return dec, nil
}

// release frees the slots of c.r. It goes to the store directly, not
// through the breaker: a release decides nothing, and a store may answer
// it at once without a round trip (redisstore queues releases to ride on
// later calls), which must not count as the store answering.
func (c leaseCalls) release(ctx context.Context) error {
	if c.local != nil {
		return c.local.Release(ctx, c.r)
	}
	return c.ls.Release(ctx, c.r)
}

func (c leaseCalls) renew(ctx context.Context) error {
	if c.local != nil {
		return c.local.Renew(ctx, c.r)
	}
	return c.t.guard(ctx, func(ctx context.Context) error { return c.ls.Renew(ctx, c.r) })
}

// A hold is the lease of a sent request's slots: it renews them while the
// request is in flight and releases them once.
type hold struct {
	t     *Transport
	calls leaseCalls
	rule  string
	lease time.Duration // the shortest lease of the demand's slots

	busy   sync.Mutex   // held while a renewal runs
	active atomic.Int64 // t.now() in ns at the last sign of life; 0: before the response

	mu       sync.Mutex
	timer    *time.Timer
	stopped  bool // no more renewals
	released bool
}

// hold starts renewing the slots d holds, if any, just before req is sent.
// It returns nil when d holds none.
func (t *Transport) hold(r *rule, d *demand) *hold {
	if d == nil || d.held == nil {
		return nil
	}
	calls, ok := t.leaseCalls(d.held)
	if !ok {
		return nil
	}
	h := &hold{t: t, calls: calls, rule: r.id}
	for _, b := range d.Limits {
		if l := b.Limit; l.Algorithm == Concurrency && (h.lease == 0 || l.Per < h.lease) {
			h.lease = l.Per
		}
	}
	d.held = nil
	h.mu.Lock() // the timer's first run reads h.timer
	h.timer = time.AfterFunc(h.lease/3, h.renew)
	h.mu.Unlock()
	return h
}

// bind ties h to the outcome of the round trip: a failed round trip
// releases the slots at once; a response carries them in its body until
// the body is closed or read to the end. A nil h passes resp and err
// through.
func (h *hold) bind(resp *http.Response, err error) (*http.Response, error) {
	if h == nil {
		return resp, err
	}
	if err != nil || resp == nil || resp.Body == nil || resp.Body == http.NoBody {
		h.release()
		return resp, err
	}
	h.touch()
	lb := &leaseBody{ReadCloser: resp.Body, h: h}
	if rw, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = &leaseRWBody{leaseBody: lb, w: rw} // 101 Switching Protocols
	} else {
		resp.Body = lb
	}
	return resp, nil
}

// releaseResponse releases the slots carried by resp's body, if any: the
// retry path calls it before it asks for the resend's slot.
func releaseResponse(resp *http.Response) {
	if resp == nil {
		return
	}
	var body io.Closer = resp.Body
	if pb, ok := body.(interface{ Underlying() io.Closer }); ok {
		body = pb.Underlying() // peeked at by a Limited function
	}
	switch b := body.(type) {
	case *leaseBody:
		b.h.release()
	case *leaseRWBody:
		b.h.release()
	}
}

func (h *hold) touch() { h.active.Store(h.t.now().UnixNano()) }

func (h *hold) event(k LeaseEventKind, err error) {
	if f := h.t.hooks.OnLease; f != nil {
		f(LeaseEvent{Rule: h.rule, Kind: k, Err: err})
	}
}

// renew runs on h's timer: it renews the leases, or stops renewing when
// the response body has been idle for a whole lease time.
func (h *hold) renew() {
	h.busy.Lock()
	defer h.busy.Unlock()
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	if last := h.active.Load(); last != 0 && h.t.now().UnixNano()-last >= int64(h.lease) {
		h.stopped = true
		h.mu.Unlock()
		h.event(LeaseAbandoned, nil)
		return
	}
	h.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), min(storeCallTimeout, h.lease/3))
	err := h.calls.renew(ctx)
	cancel()

	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	kind := LeaseRenewed
	switch {
	case errors.Is(err, quota.ErrLeaseLost):
		h.stopped, kind = true, LeaseLost
	case err != nil:
		kind = LeaseRenewFailed
	}
	if !h.stopped {
		h.timer.Reset(h.lease / 3)
	}
	h.mu.Unlock()
	h.event(kind, err)
}

// release stops the renewals and frees the slots, once. It returns after
// any renewal in progress has finished, so no goroutine outlives it.
func (h *hold) release() {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return
	}
	h.released, h.stopped = true, true
	h.timer.Stop()
	h.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), storeCallTimeout)
	err := h.calls.release(ctx)
	cancel()
	if err != nil {
		h.event(LeaseReleaseFailed, err)
	}
	h.busy.Lock() // wait out a renewal in progress
	h.busy.Unlock()
}

// leaseBody is a response body that releases its request's slots when it
// is closed or read to the end.
type leaseBody struct {
	io.ReadCloser
	h *hold
}

// Read reads from the body; at the end of it, it releases the slots.
func (b *leaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.h.touch()
	if err == io.EOF {
		b.h.release()
	}
	return n, err
}

// Close closes the body and releases the slots.
func (b *leaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.h.release()
	return err
}

// leaseRWBody keeps a writable body (a protocol switch) writable.
type leaseRWBody struct {
	*leaseBody
	w io.Writer
}

// Write writes to the underlying connection.
func (b *leaseRWBody) Write(p []byte) (int, error) {
	b.h.touch()
	return b.w.Write(p)
}
