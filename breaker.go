package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Breaker configures the circuit breaker a [Transport] keeps in front of a
// shared store (not in front of the in-process [MemoryStore], which cannot
// be unavailable).
//
// While the store answers, every call goes through. After Failures calls
// in a row have failed, the breaker opens: for OpenFor, no call is made and
// every request gets its rule's [FailureMode] at once, at no added latency.
// Then one call at a time probes the store on behalf of a request; the
// first that succeeds closes the breaker, and one that fails opens it for
// OpenFor again. So once the store answers again, the transport uses it
// within about OpenFor plus one call.
//
// At most MaxInFlight store calls run at once; a call over the cap is not
// made and its request gets its failure mode at once. This bounds what an
// outage can pile up (goroutines waiting on the store, Redis connections
// and commands) however many requests arrive. It does not count as a
// failure of the store.
//
// A call counts as failed when the store returns an error while the
// request's context is still live; an error because the request's own
// context ended, or because the request costs more than a limit admits,
// counts neither way. The zero value is the default for every field.
type Breaker struct {
	// Failures is how many store calls in a row must fail to open the
	// breaker. Zero or less means 3.
	Failures int

	// OpenFor is how long the breaker stays open before it lets one call
	// probe the store. Zero or less means 500 ms.
	OpenFor time.Duration

	// MaxInFlight caps the store calls in progress at once. Zero or less
	// means 256.
	MaxInFlight int

	// CallTimeout is the budget of one store call, separate from how long
	// the caller may wait for its quota ([Waiter]): a call that has not
	// answered within it counts as failed, and the request gets its
	// rule's failure mode at once. The call itself is not waited for: it
	// runs on with the same deadline on a goroutine of its own, still
	// counted against MaxInFlight, and a decision it makes after the
	// request moved on is given back ([Store.Cancel]). So a slow or
	// silent store costs a request at most CallTimeout, whatever the
	// store's client does with deadlines. Zero or less means 250 ms.
	CallTimeout time.Duration
}

// Defaults of [Breaker].
const (
	DefaultBreakerFailures    = 3
	DefaultBreakerOpenFor     = 500 * time.Millisecond
	DefaultBreakerMaxInFlight = 256
	DefaultBreakerCallTimeout = 250 * time.Millisecond
)

// WithBreaker configures the transport's circuit breaker; see [Breaker].
func WithBreaker(b Breaker) Option {
	return func(t *Transport) { t.failure.settings = b }
}

// A StoreState is the health of the store as a [Transport] sees it.
type StoreState int

const (
	// StoreUp: the store answers. Reported (recovered) when a call
	// succeeds at least [Breaker].OpenFor after the last failed one, so
	// that a store that fails and answers in turn is one outage.
	StoreUp StoreState = iota

	// StoreFailing: a call to the store failed, and the fallback is
	// active: requests whose call fails get their rule's [FailureMode],
	// and calls continue.
	StoreFailing

	// StoreDown: calls failed [Breaker].Failures times in a row, and the
	// breaker is open: every request gets its rule's failure mode without
	// calling the store, except one probe at a time every
	// [Breaker].OpenFor.
	StoreDown
)

// String returns the state's name in lower case.
func (s StoreState) String() string {
	switch s {
	case StoreUp:
		return "up"
	case StoreFailing:
		return "failing"
	case StoreDown:
		return "down"
	}
	return fmt.Sprintf("StoreState(%d)", int(s))
}

// A StoreEvent reports a change of the store's state, once per change and
// not per request: up to failing (the fallback is active), failing to down
// (the breaker opened), up to down (when Failures is 1), failing or down
// to up (recovered). An outage is reported as at most these three events,
// however many requests it affects and however often the store answers in
// between.
type StoreEvent struct {
	// State is the new state; Prev the one before.
	State, Prev StoreState

	// Err is the store error that caused the change to StoreFailing or
	// StoreDown; nil for StoreUp.
	Err error

	// Failures is the number of store calls that had failed since the
	// outage began, at the change.
	Failures int

	// Outage is, for StoreUp, how long since the first failed call of the
	// outage.
	Outage time.Duration
}

// WithLogger makes the transport log to l:
//
//   - every change of the store's state (see [StoreEvent]), once per
//     change, never per request: Warn when the store starts failing or the
//     breaker opens, Info when it answers again, with the count of failed
//     calls, the outage's length and the store's error;
//   - every pause learned from a vendor's answer, at Info (Warn when the
//     store could not record it), with the rule, status and pause;
//   - requests refused, given up or failed, at Debug only, with the rule,
//     limit, outcome and retry time.
//
// Records never hold a key, a header or a URL, since those may carry
// secrets. A nil l (the default) logs nothing; the hooks ([Hooks])
// receive the same events.
func WithLogger(l *slog.Logger) Option {
	return func(t *Transport) { t.logger = l }
}

// reportStore hands a change of the store's state to the hook and the
// logger.
func (t *Transport) reportStore(ev StoreEvent) {
	if t.hooks.OnStoreState != nil {
		t.hooks.OnStoreState(ev)
	}
	if t.logger == nil {
		return
	}
	switch ev.State {
	case StoreUp:
		t.logger.Info("throttle: store answers again; decisions are shared again",
			"state", ev.State.String(), "prev", ev.Prev.String(), "failures", ev.Failures, "outage", ev.Outage)
	case StoreFailing:
		t.logger.Warn("throttle: store call failed; requests get their rules' failure modes",
			"state", ev.State.String(), "prev", ev.Prev.String(), "failures", ev.Failures, "err", ev.Err)
	default:
		t.logger.Warn("throttle: store calls suspended after repeated failures; failure modes apply at once",
			"state", ev.State.String(), "prev", ev.Prev.String(), "failures", ev.Failures, "err", ev.Err)
	}
}

// errCircuitOpen is the cause of a failure mode applied without calling
// the store, because the breaker is open.
var errCircuitOpen = errors.New("throttle: store calls suspended after repeated failures")

// errCallTimeout is the cause of a failure mode applied because the store
// did not answer within [Breaker].CallTimeout. It is reported together with
// [context.DeadlineExceeded].
var errCallTimeout = errors.New("throttle: store call timed out")

// errTooManyCalls is the cause of a failure mode applied without calling
// the store, because MaxInFlight calls are already in progress.
var errTooManyCalls = errors.New("throttle: too many store calls in progress")

// breaker is the circuit breaker of [Breaker], with the in-flight cap.
type breaker struct {
	failures int
	openFor  time.Duration
	maxCalls int64
	timeout  time.Duration
	now      func() time.Time
	report   func(StoreEvent) // may be nil

	calls   atomic.Int64 // in progress
	healthy atomic.Bool  // state and reported are StoreUp, no failure counted: no lock needed

	mu          sync.Mutex
	state       StoreState // of the breaker: calls go (Up, Failing) or not (Down)
	reported    StoreState // as last reported: an outage lasts until quiet
	lastFail    time.Time
	outageFails int       // failed calls since the outage began
	fails       int       // in a row
	since       time.Time // first failure of the outage
	openUntil   time.Time
	probing     bool
	lastErr     error
}

func newBreaker(b Breaker, now func() time.Time, report func(StoreEvent)) *breaker {
	br := &breaker{
		failures: b.Failures,
		openFor:  b.OpenFor,
		maxCalls: int64(b.MaxInFlight),
		timeout:  b.CallTimeout,
		now:      now,
		report:   report,
	}
	if br.failures <= 0 {
		br.failures = DefaultBreakerFailures
	}
	if br.openFor <= 0 {
		br.openFor = DefaultBreakerOpenFor
	}
	if br.maxCalls <= 0 {
		br.maxCalls = DefaultBreakerMaxInFlight
	}
	if br.timeout <= 0 {
		br.timeout = DefaultBreakerCallTimeout
	}
	br.healthy.Store(true)
	return br
}

// call runs f, a store call, with a context derived from ctx that ends
// after the call budget, unless the breaker is open or too many calls are
// in progress, and records its outcome. It returns f's error, or the
// reason f was not run or not waited for.
//
// f runs on a goroutine of its own, so the caller waits for at most the
// budget. If the budget ends first, the call is abandoned: it runs on
// (counted in flight) until its context ends it, and then, if it
// succeeded, undo (if not nil) runs on that goroutine to take back its
// effect.
func (b *breaker) call(ctx context.Context, f func(context.Context) error, undo func()) error {
	probe := false
	if !b.healthy.Load() {
		var err error
		if probe, err = b.admit(); err != nil {
			return err
		}
	}
	if b.calls.Add(1) > b.maxCalls {
		b.calls.Add(-1)
		if probe {
			b.mu.Lock()
			b.probing = false
			b.mu.Unlock()
		}
		return errTooManyCalls
	}
	err := b.run(ctx, f, undo)
	switch {
	case err == nil:
		if !probe && b.healthy.Load() {
			return nil
		}
		b.succeeded(probe)
	case storeFault(ctx, err):
		b.failed(probe, err)
	case probe:
		b.mu.Lock()
		b.probing = false // no verdict: let the next call probe
		b.mu.Unlock()
	}
	return err
}

// Outcomes of a detached call, in detached.state.
const (
	callRunning int32 = iota
	callReturned
	callAbandoned
)

// run runs f on its own goroutine and waits for it, for ctx, or for the
// budget, whichever ends first; see call. It releases the in-flight slot
// taken by call when f (and undo) are done.
func (b *breaker) run(ctx context.Context, f func(context.Context) error, undo func()) error {
	cctx, cancel := context.WithTimeout(ctx, b.timeout)
	var state atomic.Int32
	done := make(chan error, 1)
	go func() {
		defer b.calls.Add(-1)
		// Not before the verdict: cancel ends cctx, which the caller
		// would take for the budget running out.
		defer cancel()
		err := f(cctx)
		if state.CompareAndSwap(callRunning, callReturned) {
			done <- err
			return
		}
		if err == nil && undo != nil {
			undo()
		}
	}()
	select {
	case err := <-done:
		return err
	case <-cctx.Done():
	}
	if !state.CompareAndSwap(callRunning, callAbandoned) {
		return <-done // it returned just now
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("%w after %v: %w", errCallTimeout, b.timeout, context.DeadlineExceeded)
}

// admit decides whether a call may go while the breaker is not healthy,
// and whether it is the probe.
func (b *breaker) admit() (probe bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != StoreDown {
		return false, nil
	}
	if b.probing || b.now().Before(b.openUntil) {
		return false, fmt.Errorf("%w (last error: %w)", errCircuitOpen, b.lastErr)
	}
	b.probing = true
	return true, nil
}

// succeeded records a call that succeeded. The breaker closes at once;
// the recovery is reported once the store has answered for quiet (OpenFor)
// since its last failure, so a store that fails and answers in turn (stale
// pooled connections after a restart, a flapping link) is one outage, not
// a report per request.
func (b *breaker) succeeded(probe bool) {
	b.mu.Lock()
	if probe {
		b.probing = false
	}
	now := b.now()
	b.state, b.fails, b.lastErr = StoreUp, 0, nil
	var ev StoreEvent
	changed := false
	if b.reported != StoreUp && now.Sub(b.lastFail) >= b.openFor {
		ev = StoreEvent{State: StoreUp, Prev: b.reported, Failures: b.outageFails, Outage: now.Sub(b.since)}
		b.reported, changed = StoreUp, true
	}
	b.healthy.Store(b.reported == StoreUp)
	b.mu.Unlock()
	if changed && b.report != nil {
		b.report(ev)
	}
}

// failed records a call that failed: err is the store's error.
func (b *breaker) failed(probe bool, err error) {
	b.mu.Lock()
	now := b.now()
	if probe {
		b.probing = false
	}
	b.healthy.Store(false)
	b.lastErr, b.lastFail = err, now
	b.fails++
	b.outageFails++
	prevState := b.state
	switch {
	case b.state == StoreUp:
		b.state = StoreFailing
		if b.fails >= b.failures {
			b.state = StoreDown
		}
	case b.state == StoreFailing && b.fails >= b.failures:
		b.state = StoreDown
	}
	if b.state == StoreDown && (prevState != StoreDown || probe) {
		b.openUntil = now.Add(b.openFor)
	}
	var ev StoreEvent
	changed := false
	switch {
	case b.reported == StoreUp:
		b.since, b.outageFails = now, 1
		ev = StoreEvent{State: max(b.state, StoreFailing), Prev: StoreUp, Err: err, Failures: b.outageFails}
		changed = true
	case b.reported == StoreFailing && b.state == StoreDown:
		ev = StoreEvent{State: StoreDown, Prev: StoreFailing, Err: err, Failures: b.outageFails}
		changed = true
	}
	if changed {
		b.reported = ev.State
	}
	b.mu.Unlock()
	if changed && b.report != nil {
		b.report(ev)
	}
}
