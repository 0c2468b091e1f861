package throttle

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
)

// Transport is an [http.RoundTripper] that holds each outbound request to
// the limits of its [Policy] before passing it to Base.
//
// For every request it finds the first matching rule, asks the [quota.Store] to
// decide all of the rule's limits in one atomic step, and then, as the
// rule's [Waiter] allows, sends the request now, waits for a reserved slot
// and sends it then, or returns a [*LimitError] without sending. Responses,
// including a vendor's 429, are returned unchanged with a nil error.
//
// Transport never modifies the caller's request, and closes the request
// body on every path on which it does not send it. It is safe for
// concurrent use.
type Transport struct {
	base    http.RoundTripper
	policy  *compiledPolicy
	store   quota.Store
	now     func() time.Time
	hooks   Hooks
	learned learner

	profileList []quotaheader.Profile // as given to WithProfiles
	profiles    []profile
	failure     failover
	logger      *slog.Logger // store state changes; nil: none
}

// An Option configures a [Transport].
type Option func(*Transport)

// WithStore makes the transport keep its counters in s, e.g. a
// redisstore.Store shared by every instance of a service. The default is a
// [memstore.Store] private to the transport.
func WithStore(s quota.Store) Option {
	return func(t *Transport) { t.store = s }
}

// WithClock makes the transport read the time from now instead of
// [time.Now], for tests. It is used to cap waits by context deadlines;
// stores keep their own clock.
func WithClock(now func() time.Time) Option {
	return func(t *Transport) {
		if now != nil {
			t.now = now
		}
	}
}

// NewTransport returns a Transport that applies policy p to requests
// before sending them with base. A nil base means [http.DefaultTransport].
// It validates p and returns the [Policy.Validate] error if p is invalid.
func NewTransport(base http.RoundTripper, p Policy, opts ...Option) (*Transport, error) {
	cp, err := p.compile()
	if err != nil {
		return nil, err
	}
	t := &Transport{base: base, policy: cp, now: time.Now, profileList: quotaheader.DefaultProfiles}
	for _, o := range opts {
		o(t)
	}
	if t.profiles, err = compileProfiles(t.profileList); err != nil {
		return nil, err
	}
	if t.store == nil {
		t.store = memstore.New()
	}
	if err := t.checkLeases(); err != nil {
		return nil, err
	}
	if c, ok := t.store.(quota.LimitChecker); ok {
		for _, r := range cp.rules {
			if err := c.CheckLimits(r.limits, r.wait.MaxWait(context.Background()) > 0); err != nil {
				return nil, policyError(r.id, "", err)
			}
		}
	}
	if _, ok := t.store.(quota.Syncer); !ok {
		for _, r := range cp.rules {
			if r.syncIdx >= 0 {
				return nil, &PolicyError{Rule: r.id, Field: "Learn.Sync", Err: fmt.Errorf("the store (%T) cannot sync: it does not implement quota.Syncer", t.store)}
			}
		}
	}
	return t, nil
}

// WrapClient returns a copy of c whose transport is a [Transport] applying
// p on top of c's own transport (an oauth2 transport, say); the copy keeps
// c's Timeout, Jar and CheckRedirect. A nil c means [http.DefaultClient].
// This is how to limit a vendor SDK that takes an *http.Client.
func WrapClient(c *http.Client, p Policy, opts ...Option) (*http.Client, error) {
	if c == nil {
		c = http.DefaultClient
	}
	t, err := NewTransport(c.Transport, p, opts...)
	if err != nil {
		return nil, err
	}
	wrapped := *c
	wrapped.Transport = t
	return &wrapped, nil
}

// RoundTrip implements [http.RoundTripper]: it applies the policy to req,
// then sends it with the base transport, or returns an error without
// sending. The error is a [*LimitError] when a limit or pause refused the
// request or the request's context ended while it waited for its slot.
//
// After a response it learns what the vendor said (see [Learning]) and,
// when the rule asks for it, resends a request that was answered "slow
// down" (see [Retry]). The response returned is the last one received,
// unchanged.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r, out := t.policy.match(req)
	if r == nil {
		if t.policy.refuse {
			closeBody(req)
			return nil, ErrNoRule
		}
		return t.baseRT().RoundTrip(req)
	}
	ev, d := t.admit(r, out, -1)
	if ev.Err != nil {
		closeBody(out) // out.Body is req.Body, or wraps and closes it
		return nil, ev.Err
	}
	h := t.hold(r, d) // lease.go: renews the request's Concurrency slots
	resp, err := t.baseRT().RoundTrip(out)
	resp, err = h.bind(resp, err) // releases them on error, else when the body ends
	if err != nil {
		return nil, err
	}
	limited := t.learn(out.Context(), r, d, out, resp)
	if r.Retry.Max > 0 && limited && !r.Shadow {
		return t.retry(r, out, resp)
	}
	return resp, nil
}

// retry resends req, which got the "slow down" answer resp, up to the
// rule's Retry.Max times, each time through the limiter.
func (t *Transport) retry(r *rule, req *http.Request, resp *http.Response) (*http.Response, error) {
	ctx := req.Context()
	budget := r.Retry.MaxWait
	if budget <= 0 {
		budget = DefaultMaxPause
	}
	deadline := t.now().Add(budget)
	for attempt := 0; attempt < r.Retry.Max; attempt++ {
		if r.Retry.Decide != nil && !r.Retry.Decide(t.retryEvent(r, req, resp, attempt+1)) {
			return resp, nil
		}
		next := req.Clone(ctx)
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return resp, nil // the body cannot be replayed
			}
			body, err := req.GetBody()
			if err != nil {
				return resp, nil
			}
			next.Body = body
		}
		// Admit the resend before letting go of the answer in hand: if the
		// limiter refuses it, the caller gets that answer unchanged. Its
		// Concurrency slots go first, or the resend would wait for them.
		releaseResponse(resp)
		ev, d := t.admit(r, next, max(deadline.Sub(t.now()), 0))
		if ev.Err != nil {
			closeBody(next)
			return resp, nil
		}
		drainAndClose(resp.Body)
		h := t.hold(r, d)
		var err error
		resp, err = t.baseRT().RoundTrip(next)
		resp, err = h.bind(resp, err)
		if err != nil {
			return nil, err
		}
		if !t.learn(ctx, r, d, next, resp) {
			break
		}
	}
	return resp, nil
}

// retryEvent describes resend attempt of req, answered resp, for
// Retry.Decide.
func (t *Transport) retryEvent(r *rule, req *http.Request, resp *http.Response, attempt int) RetryEvent {
	now := t.now()
	c := t.learnConfig(r, req.URL.Host)
	ev := RetryEvent{
		Rule: r.id, Request: req, Response: resp, Attempt: attempt,
		Feedback: quotaheader.Parse(resp.Header, now, quotaheader.Options{ResetFormat: c.resetFormat, MaxPause: c.maxPause}),
	}
	if until, ok := t.learned.localPause(r.pauseID(r.pauseKeyOf(req)), now); ok {
		ev.Wait = until.Sub(now)
	}
	return ev
}

// maxDrain bounds how much of a response body is read before it is
// closed, so its connection can be reused.
const maxDrain = 64 << 10

func drainAndClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}

// admit decides req under rule r and waits for its slot, within at most
// budget when budget is not negative. The event's Err is nil when the
// request may be sent. The event goes to the OnDecision hook. The demand
// is what was decided, nil if the decision failed before one was built.
func (t *Transport) admit(r *rule, req *http.Request, budget time.Duration) (DecisionEvent, *demand) {
	ev := DecisionEvent{Rule: r.id, Shadow: r.Shadow}
	if r.Shadow {
		budget = 0 // decided as if it could not wait; never sleeps
	}
	d := &demand{Demand: quota.Demand{Scope: r.scope, Pauses: []string{""}, Limits: make([]quota.Bucket, len(r.Limits)), Cost: 1}}
	if err := t.decide(r, req, budget, d, &ev); err != nil {
		ev.Err = err
		if ev.Outcome == Allowed || ev.Outcome == Waited {
			ev.Outcome = Failed
		}
	}
	if t.hooks.OnDecision != nil {
		ev.Context = req.Context()
		t.hooks.OnDecision(ev)
	}
	t.logDecision(req.Context(), ev)
	if r.Shadow {
		ev.Err = nil // recorded, not enforced
	}
	return ev, d
}

// decide does the work of admit: it fills in d and decides it, and fills
// in ev as it learns.
func (t *Transport) decide(r *rule, req *http.Request, budget time.Duration, d *demand, ev *DecisionEvent) error {
	ctx := req.Context()
	for i, l := range r.Limits {
		key := ""
		if l.Key != nil {
			k, err := l.Key(req)
			if err != nil {
				return errKeyFunc(r.id, l.Name, err)
			}
			key = escapeKey(k)
		}
		d.Limits[i] = quota.Bucket{Limit: r.limits[i], Key: key}
	}
	pk := r.pauseKey(d)
	if pk != "" {
		d.Pauses = append(d.Pauses, pk)
	}
	if r.Cost != nil {
		d.Cost = r.Cost(req)
		if d.Cost < 1 {
			return fmt.Errorf("throttle: rule %s: cost must be at least 1, got %d", r.id, d.Cost)
		}
		for _, l := range r.limits {
			if c := l.Capacity(); d.Cost > c {
				return fmt.Errorf("throttle: rule %s: %w: limit %s admits at most %d at once, request costs %d", r.id, ErrCostTooHigh, l.Name, c, d.Cost)
			}
		}
	}
	w, _ := ctx.Value(waiterKey{}).(Waiter)
	if w == nil {
		w = r.wait
	}
	d.MaxWait = max(w.MaxWait(ctx), 0)
	if budget >= 0 {
		d.MaxWait = min(d.MaxWait, budget)
	}
	now := t.now()
	if deadline, ok := ctx.Deadline(); ok {
		d.MaxWait = min(d.MaxWait, max(deadline.Sub(now), 0))
	}
	if r.queue != nil && d.MaxWait > 0 {
		return t.queued(ctx, r, d, pk, ev) // queue.go: Rule.MaxQueue
	}
	return t.obtain(ctx, r, d, pk, now, ev)
}

// obtain decides d, the demand of a request under rule r whose pause key
// is pk, as of now, and waits as long as d.MaxWait allows: for a pause
// this instance learned, a slot, or the reservation's instant.
func (t *Transport) obtain(ctx context.Context, r *rule, d *demand, pk string, now time.Time, ev *DecisionEvent) error {
	// A pause this instance learned holds even if the store lost it.
	if until, ok := t.learned.localPause(r.pauseID(pk), now); ok {
		wait := until.Sub(now)
		if wait > d.MaxWait {
			ev.Outcome, ev.Wait = Refused, wait
			return &LimitError{Rule: r.id, Pause: pauseName(pk), RetryAfter: wait}
		}
		ev.Outcome, ev.Wait = Waited, wait
		if slept, err := t.sleep(ctx, wait, nil); err != nil {
			ev.Outcome, ev.Wait = GaveUp, slept
			return &LimitError{Rule: r.id, Err: err}
		}
		d.MaxWait -= wait
	}

	dec, err := t.takeSlot(ctx, r, d, ev) // lease.go: t.take, and waits for a released slot where the waiter allows
	if err != nil {
		return err
	}
	if !dec.OK {
		le := &LimitError{Rule: r.id, Pause: pauseName(dec.Pause), RetryAfter: dec.Delay}
		if dec.Limit >= 0 && dec.Limit < len(r.Limits) {
			le.Limit = r.Limits[dec.Limit].Name
		}
		ev.Outcome, ev.Limit, ev.Wait = Refused, le.Limit, ev.Wait+dec.Delay
		return le
	}
	if dec.Delay <= 0 {
		return nil
	}
	waited := ev.Wait
	ev.Outcome, ev.Wait = Waited, waited+dec.Delay
	if slept, err := t.sleep(ctx, dec.Delay, dec.Reservation); err != nil {
		ev.Outcome, ev.Wait = GaveUp, waited+slept
		return &LimitError{Rule: r.id, Err: err}
	}
	return nil
}

// sleep waits d on a timer. If ctx ends first, it gives r back to the
// store (when r is not nil) and returns how long it slept and the
// context's error.
func (t *Transport) sleep(ctx context.Context, d time.Duration, r *quota.Reservation) (time.Duration, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	start := t.now()
	select {
	case <-timer.C:
		return d, nil
	case <-ctx.Done():
	}
	slept, err := t.now().Sub(start), ctx.Err()
	if r != nil {
		// Give the slot back; the caller's context is over, so use a short
		// one of our own that keeps its values.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
		defer cancel()
		if cerr := t.cancel(cctx, r); cerr != nil {
			err = fmt.Errorf("%w (and returning the reservation failed: %v)", err, cerr)
		}
	}
	return slept, err
}

func (t *Transport) baseRT() http.RoundTripper {
	if t.base != nil {
		return t.base
	}
	return http.DefaultTransport
}

// CloseIdleConnections closes the idle connections of the base transport,
// if it has such a method, so [http.Client.CloseIdleConnections] works
// through a Transport.
func (t *Transport) CloseIdleConnections() {
	if ci, ok := t.baseRT().(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}

// demand is what one request asks of the store, with what the request
// holds while it is in flight.
type demand struct {
	quota.Demand
	held *quota.Reservation // the granted reservation whose slots the request holds
}
