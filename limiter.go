package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
)

// A Limiter makes the decisions of a [Policy] for calls of any kind: a
// gRPC call, a message a queue consumer handles, an email sent by a loop.
// It is the core of [Transport], which adds HTTP to it: both decide every
// limit of a rule at once in the store, wait as the rule's [Waiter]
// allows, hold in-flight slots, apply failure modes, call the hooks, and
// honour the pauses learned from the vendor's answers, shared by every
// instance through the store.
//
// Outside HTTP a call names its rule ([Rule.Name]); a rule's Host, Method,
// Path, Match and Cost are not used. Keys come from the call's context:
// [WithKey] for limits keyed by [KeyFromContext], and [ConstantKey];
// the request-reading key functions find no request and fail with
// [ErrMissingKey].
//
// A Limiter is safe for concurrent use.
type Limiter struct {
	policy   *compiledPolicy
	byName   map[string]*rule
	store    quota.Store
	now      func() time.Time
	hooks    Hooks
	learned  learner
	failure  failover
	lanes    lanes        // lane.go
	shortens shortenQueue // shorten.go
	logger   *slog.Logger // store state changes; nil: none

	profileList []quotaheader.Profile // as given to WithProfiles
	profiles    []profile

	given  Policy               // as given to NewLimiter ([Limiter.Policy])
	gauges map[*rule]*ruleGauge // what each rule's requests hold now (introspect.go)
}

// NewLimiter returns a Limiter that applies policy p. It validates p and
// returns the [Policy.Validate] error if p is invalid, and an error
// naming the rule and field if the store cannot decide a rule as written
// (a [Concurrency] limit on a store that is not a [quota.LeaseStore], a
// store that is a [quota.LimitChecker] and refuses the rule, Learn.Sync on
// a store that cannot sync, Learn.Anchor on one that cannot anchor,
// Settle on one that cannot settle). It logs a warning when
// [Policy].Instances is not set while a rule falls back to [FailLocal] on
// a shared store.
func NewLimiter(p Policy, opts ...Option) (*Limiter, error) {
	cp, err := p.compile()
	if err != nil {
		return nil, err
	}
	lim := &Limiter{policy: cp, byName: map[string]*rule{}, now: time.Now, profileList: quotaheader.DefaultProfiles}
	lim.given, lim.gauges = p, make(map[*rule]*ruleGauge, len(cp.rules))
	for i := range cp.rules {
		lim.byName[cp.rules[i].id] = &cp.rules[i]
		lim.gauges[&cp.rules[i]] = &ruleGauge{}
	}
	for _, o := range opts {
		o(lim)
	}
	if lim.profiles, err = compileProfiles(lim.profileList); err != nil {
		return nil, err
	}
	if lim.store == nil {
		lim.store = memstore.New()
	}
	if err := lim.checkLeases(); err != nil {
		return nil, err
	}
	if c, ok := lim.store.(quota.LimitChecker); ok {
		for _, r := range cp.rules {
			if err := c.CheckLimits(r.limits, r.wait.MaxWait(context.Background()) > 0); err != nil {
				return nil, policyError(r.id, "", err)
			}
		}
	}
	if _, ok := lim.store.(quota.Syncer); !ok {
		for _, r := range cp.rules {
			if r.syncIdx >= 0 {
				return nil, &PolicyError{Rule: r.id, Field: "Learn.Sync", Err: fmt.Errorf("the store (%T) cannot sync: it does not implement quota.Syncer", lim.store)}
			}
		}
	}
	if _, ok := lim.store.(quota.Anchorer); !ok {
		for _, r := range cp.rules {
			if r.anchorIdx >= 0 {
				return nil, &PolicyError{Rule: r.id, Field: "Learn.Anchor", Err: fmt.Errorf("the store (%T) cannot move windows: it does not implement quota.Anchorer", lim.store)}
			}
		}
	}
	if _, ok := lim.store.(quota.Settler); !ok {
		for _, r := range cp.rules {
			if r.Settle != nil {
				return nil, &PolicyError{Rule: r.id, Field: "Settle", Err: fmt.Errorf("the store (%T) cannot settle: it does not implement quota.Settler", lim.store)}
			}
		}
	}
	lim.notePlacement() // note.go
	lim.noteInstances(p.Instances)
	return lim, nil
}

// ErrUnknownRule is wrapped when a [Limiter] is asked about a rule its
// policy does not have.
var ErrUnknownRule = errors.New("throttle: no rule of that name")

// Allow is AllowN(ctx, rule, 1).
func (lim *Limiter) Allow(ctx context.Context, rule string) (*Permit, error) {
	return lim.AllowN(ctx, rule, 1)
}

// AllowN decides a call of cost n under rule now, without waiting: a
// [Permit] if every limit of the rule admits it at once (each charged n;
// an in-flight limit takes one slot), else a [*LimitError] (matching
// [ErrLimited]) whose RetryAfter is the earliest a call can succeed, and
// nothing is charged.
func (lim *Limiter) AllowN(ctx context.Context, rule string, n int) (*Permit, error) {
	return lim.call(ctx, rule, n, 0, false)
}

// Wait is WaitN(ctx, rule, 1).
func (lim *Limiter) Wait(ctx context.Context, rule string) (*Permit, error) {
	return lim.WaitN(ctx, rule, 1)
}

// WaitN decides a call of cost n under rule and waits for its quota as
// long as the rule's [Waiter] (or one set on ctx with [WithWaiter]) and
// ctx allow: it returns a [Permit] when the call may go, or a
// [*LimitError] without waiting when the quota is further away than that,
// or when ctx ends while it waits (nothing is then left charged).
func (lim *Limiter) WaitN(ctx context.Context, rule string, n int) (*Permit, error) {
	return lim.call(ctx, rule, n, -1, false)
}

// Reserve decides a call of cost n under rule without waiting for it:
// the quota is charged for the earliest instant it is there, within what
// the rule's [Waiter] allows, and the Permit's Delay says how long the
// caller must wait before it acts (as golang.org/x/time/rate's
// Reservation). A call that will not happen gives its quota back with
// [Permit.Cancel]. A rule with a [Concurrency] limit cannot be reserved
// (its slot is taken when the call goes): use Wait. Nor can a call of a
// [Class] with a headroom, or over its tenant's share: one that cannot go
// now is refused.
func (lim *Limiter) Reserve(ctx context.Context, rule string, n int) (*Permit, error) {
	return lim.call(ctx, rule, n, -1, true)
}

// call decides a call of cost n under the rule named name, with the
// budget and mode of Allow (0), Wait (-1) or Reserve.
func (lim *Limiter) call(ctx context.Context, name string, n int, budget time.Duration, reserve bool) (*Permit, error) {
	r, ok := lim.byName[name]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknownRule, name)
	}
	if n < 1 {
		return nil, fmt.Errorf("throttle: rule %s: %w: cost must be at least 1, got %d", r.id, ErrInvalidPolicy, n)
	}
	if reserve && r.inFlight() >= 0 {
		return nil, fmt.Errorf("throttle: rule %s: %w: Reserve cannot hold an in-flight (Concurrency) slot for later; use Wait", r.id, ErrInvalidPolicy)
	}
	d := lim.newDemand(r)
	d.cost, d.reserve = n, reserve
	ev, d := lim.admitDemand(r, callRequest(ctx), budget, d)
	if ev.Err != nil {
		return nil, ev.Err
	}
	p := &Permit{Rule: r.id, Delay: d.delay, Waited: ev.Wait, Remaining: ev.Remaining, ResetAfter: ev.ResetAfter, lim: lim, r: r, d: d}
	if ev.Fallback != FailDefault {
		p.Fallback, p.StoreErr = ev.Fallback, ev.StoreErr
	}
	if reserve {
		p.Waited = 0
	}
	p.h = lim.hold(r, d)
	return p, nil
}

// callRequest is the request a call outside HTTP is decided as: it
// carries only ctx, for the key functions that read it.
func callRequest(ctx context.Context) *http.Request {
	return (&http.Request{Method: http.MethodGet, URL: &url.URL{Path: "/"}, Header: http.Header{}, Body: http.NoBody}).WithContext(ctx)
}

// A Permit is a [Limiter]'s grant of one call. Call Done when the call has
// ended, whatever its outcome, so that its in-flight slots are freed (they
// are renewed until then); call Cancel instead if the call will not be
// made. Report tells the Limiter what the vendor answered, and Settle
// what the call really cost.
type Permit struct {
	Rule string // the rule that decided the call

	// Delay is, for a permit from [Limiter.Reserve], how long the caller
	// must wait before it acts; zero from Allow and Wait, which return
	// when the call may go.
	Delay time.Duration

	Waited     time.Duration // how long Wait waited for the quota
	Remaining  int64         // what the rule's limits admit now after the grant ([quota.Decision])
	ResetAfter time.Duration // until the grant's charge stops counting ([quota.Decision])

	// Fallback is the failure mode that granted the call when the shared
	// store could not decide ([FailLocal]: this instance's share;
	// [FailOpen]: no decision); the zero FailDefault when the store did.
	Fallback FailureMode
	StoreErr error // the store's error when Fallback is set

	lim     *Limiter
	r       *rule
	d       *demand
	h       *hold
	settled bool // Settle was called: Cancel gives nothing back
}

// Done ends the call: it frees the call's in-flight slots, if any. It is
// safe to call more than once.
func (p *Permit) Done() {
	if p.h != nil {
		p.h.release()
	}
}

// Cancel gives back what the permit charged, as far as that is safe for
// others (see [quota.Reservation]), and frees its slots: the call will not
// be made. Calling Done after Cancel, or Cancel twice, does nothing more;
// after Settle, Cancel only frees the slots: the call was made.
func (p *Permit) Cancel(ctx context.Context) error {
	p.Done()
	p.lim.awaitShorten(p.d)
	res := p.d.granted
	p.d.granted = nil
	if res == nil || p.settled {
		return nil
	}
	return p.lim.cancel(ctx, res)
}

// Settle corrects what the permit charged to cost, what the call really
// cost (an LLM's tokens, a GraphQL query's points), as [Rule].Settle does
// for the [Transport]: a refund or an extra charge on the limits without
// a Cost of their own. Settling again replaces the earlier settlement; a
// permit that charged nothing (cancelled, or decided by a failure mode)
// has nothing to settle. cost must be at least 1; the store must be a
// [quota.Settler].
func (p *Permit) Settle(ctx context.Context, cost int) error {
	if p.d.granted == nil {
		return nil
	}
	p.settled = true
	return p.lim.settle(ctx, p.r, p.d, cost)
}

// Report tells the Limiter what the vendor answered the call, without
// HTTP: limited says the answer was "slow down" (an HTTP 429, a gRPC
// RESOURCE_EXHAUSTED), and fb what it said of its quota, as
// [quotaheader.Parse] reads headers or built by hand (RetryAfter with
// HasRetryAfter; Remaining and Reset, with -1 and the zero time for
// "not said"). As for the Transport, a "slow down" answer pauses the
// rule's scope (or the key of its Learning.PauseBy limit) for every
// instance: for fb's retry time, until its reset, or with exponential
// backoff from Learning.DefaultPause; with Learning.Anchor set, fb's
// Reset moves that limit's windows to the vendor's; and with
// Learning.Sync set, the vendor's remaining count lowers that limit. Nothing is learned when the
// rule's Learning is Off.
func (p *Permit) Report(ctx context.Context, limited bool, fb quotaheader.Feedback) {
	p.lim.learnFrom(ctx, p.r, p.d, limited, fb) // learn.go
}

// checkLeases fails if a rule has a Concurrency limit but the store is not
// a LeaseStore.
func (lim *Limiter) checkLeases() error {
	if _, ok := lim.store.(quota.LeaseStore); ok {
		return nil
	}
	for _, r := range lim.policy.rules {
		if j := r.inFlight(); j >= 0 {
			return &PolicyError{Rule: r.id, Field: fmt.Sprintf("Limits[%d].Algorithm", j), Err: fmt.Errorf("the store (%T) has no concurrency limits: it does not implement quota.LeaseStore", lim.store)}
		}
	}
	return nil
}

// An Option configures a [Limiter] or a [Transport].
type Option func(*Limiter)

// WithStore makes the limiter keep its counters in s, e.g. a
// redisstore.Store shared by every instance of a service. The default is a
// [memstore.Store] private to the limiter.
func WithStore(s quota.Store) Option {
	return func(lim *Limiter) { lim.store = s }
}

// WithClock makes the limiter read the time from now instead of
// [time.Now], for tests. It is used to cap waits by context deadlines;
// stores keep their own clock.
func WithClock(now func() time.Time) Option {
	return func(lim *Limiter) {
		if now != nil {
			lim.now = now
		}
	}
}
