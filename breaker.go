package throttle

import (
	"context"
	"errors"
	"fmt"
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
}

// Defaults of [Breaker].
const (
	DefaultBreakerFailures    = 3
	DefaultBreakerOpenFor     = 500 * time.Millisecond
	DefaultBreakerMaxInFlight = 256
)

// WithBreaker configures the transport's circuit breaker; see [Breaker].
func WithBreaker(b Breaker) Option {
	return func(t *Transport) { t.failure.settings = b }
}

// A StoreState is the health of the store as a [Transport] sees it.
type StoreState int

const (
	// StoreUp: the store answers. Reported when it answers again after
	// failing.
	StoreUp StoreState = iota

	// StoreFailing: a call to the store failed; requests whose call
	// fails get their rule's [FailureMode], and calls continue.
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
// not per request: up to failing, failing to down (the breaker opened),
// failing or down to up (recovered).
type StoreEvent struct {
	// State is the new state; Prev the one before.
	State, Prev StoreState

	// Err is the store error that caused the change to StoreFailing or
	// StoreDown; nil for StoreUp.
	Err error

	// Failures is the number of calls in a row that had failed, at the
	// change.
	Failures int

	// Outage is, for StoreUp, how long since the first failed call of the
	// outage.
	Outage time.Duration
}

// errCircuitOpen is the cause of a failure mode applied without calling
// the store, because the breaker is open.
var errCircuitOpen = errors.New("throttle: store calls suspended after repeated failures")

// errTooManyCalls is the cause of a failure mode applied without calling
// the store, because MaxInFlight calls are already in progress.
var errTooManyCalls = errors.New("throttle: too many store calls in progress")

// breaker is the circuit breaker of [Breaker], with the in-flight cap.
type breaker struct {
	failures int
	openFor  time.Duration
	maxCalls int64
	now      func() time.Time
	report   func(StoreEvent) // may be nil

	calls   atomic.Int64 // in progress
	healthy atomic.Bool  // state is StoreUp and no failure is counted: no lock needed

	mu        sync.Mutex
	state     StoreState
	fails     int       // in a row
	since     time.Time // first failure of the outage
	openUntil time.Time
	probing   bool
	lastErr   error
}

func newBreaker(b Breaker, now func() time.Time, report func(StoreEvent)) *breaker {
	br := &breaker{
		failures: b.Failures,
		openFor:  b.OpenFor,
		maxCalls: int64(b.MaxInFlight),
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
	br.healthy.Store(true)
	return br
}

// call runs f, a store call made with ctx, unless the breaker is open or
// too many calls are in progress, and records its outcome. It returns f's
// error, or the reason f was not run.
func (b *breaker) call(ctx context.Context, f func() error) error {
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
	err := f()
	b.calls.Add(-1)
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

func (b *breaker) succeeded(probe bool) {
	b.mu.Lock()
	if probe {
		b.probing = false
	}
	ev := StoreEvent{State: StoreUp, Prev: b.state, Failures: b.fails}
	changed := b.state != StoreUp
	if changed {
		ev.Outage = b.now().Sub(b.since)
	}
	b.state, b.fails, b.lastErr = StoreUp, 0, nil
	b.healthy.Store(true)
	b.mu.Unlock()
	if changed && b.report != nil {
		b.report(ev)
	}
}

func (b *breaker) failed(probe bool, err error) {
	b.mu.Lock()
	now := b.now()
	if probe {
		b.probing = false
	}
	b.healthy.Store(false)
	b.lastErr = err
	b.fails++
	prev := b.state
	switch {
	case b.state == StoreUp:
		b.state, b.since = StoreFailing, now
		if b.fails >= b.failures {
			b.state = StoreDown
		}
	case b.state == StoreFailing && b.fails >= b.failures:
		b.state = StoreDown
	}
	if b.state == StoreDown && (prev != StoreDown || probe) {
		b.openUntil = now.Add(b.openFor)
	}
	ev := StoreEvent{State: b.state, Prev: prev, Err: err, Failures: b.fails}
	b.mu.Unlock()
	if prev != ev.State && b.report != nil {
		b.report(ev)
	}
}
