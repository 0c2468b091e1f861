package throttle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle/quota"
)

// Breaker configures the circuit breaker a [Limiter] keeps in front of a
// shared store. It tells a slow store from a dead one: a call fails only
// when the store returns an error or has answered no call at all for the
// call budget, so a slow store is waited for and never decided twice.
// After Failures failed calls in a row (or one [ErrStoreConfig]) the store
// is down: for OpenFor every request gets its rule's [FailureMode] at
// once, then one request probes it. At most MaxInFlight calls run at once.
// The zero value is the default for every field; docs/when-redis-fails.md
// has the states and the measured bounds.
type Breaker struct {
	Failures    int           // calls in a row that open the breaker; zero or less means 3
	OpenFor     time.Duration // how long it stays open before a probe; zero or less means 500 ms
	MaxInFlight int           // store calls in progress at once; zero or less means 256

	// CallTimeout is the least time the store may stay silent before a
	// call fails; the budget adapts to the store's latency (as TCP's
	// retransmission timeout) up to four times this. A failed call runs on
	// and a grant it makes late is given back. Zero or less means 2 s.
	CallTimeout time.Duration
}

// Defaults of [Breaker].
const (
	defaultBreakerFailures    = 3
	defaultBreakerOpenFor     = 500 * time.Millisecond
	defaultBreakerMaxInFlight = 256
	defaultBreakerCallTimeout = 2 * time.Second
)

// WithBreaker configures the transport's circuit breaker; see [Breaker].
func WithBreaker(b Breaker) Option {
	return func(lim *Limiter) { lim.failure.settings = b }
}

// A StoreState is the health of the store as a [Limiter] sees it.
type StoreState int

const (
	StoreUp      StoreState = iota // it answers (recovered: a success OpenFor after the last failure)
	StoreFailing                   // a call failed, fewer than Breaker.Failures in a row
	StoreDown                      // the breaker is open: failure modes at once, one probe per OpenFor
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

// A StoreEvent reports a change of the store's state, once per change
// and never per request: an outage is at most three events.
type StoreEvent struct {
	State, Prev StoreState
	Err         error         // the cause of a change to failing or down
	Failures    int           // calls failed since the outage began
	Outage      time.Duration // for StoreUp: since the outage's first failure
}

// reportStore hands a change of the store's state to the hook and the
// logger (slog.Default when the transport has none).
func (lim *Limiter) reportStore(ev StoreEvent) {
	if ev.State == StoreUp {
		lim.failure.seeds.recovered() // localseed.go
	}
	if lim.hooks.OnStoreState != nil {
		lim.hooks.OnStoreState(ev)
	}
	l := lim.logger
	if l == nil {
		l = slog.Default()
	}
	attrs := []any{"state", ev.State.String(), "prev", ev.Prev.String(), "failures", ev.Failures}
	switch {
	case ev.State == StoreUp:
		l.Info("throttle: store answers again; decisions are shared again", append(attrs, "outage", ev.Outage)...)
	case errors.Is(ev.Err, ErrStoreConfig):
		l.Error("throttle: store misconfigured; requests get their rules' failure modes until it is fixed", append(attrs, "err", ev.Err)...)
	case ev.State == StoreFailing:
		l.Warn("throttle: store call failed; requests get their rules' failure modes", append(attrs, "err", ev.Err)...)
	default:
		l.Warn("throttle: store calls suspended (breaker open) after Breaker.Failures failures in a row; failure modes apply at once", append(attrs, "err", ev.Err)...)
	}
}

// errCircuitOpen is the cause of a failure mode applied without calling
// the store, or without waiting longer for a call, because the breaker is
// open.
var errCircuitOpen = errors.New("store calls suspended while the breaker is open")

// errCallTimeout is the cause of a failure mode applied because the store
// did not answer in time (see [Breaker].CallTimeout). It is reported
// together with [context.DeadlineExceeded].
var errCallTimeout = errors.New("throttle: store call timed out")

// breaker is the circuit breaker of [Breaker], with the in-flight cap.
type breaker struct {
	failures int
	openFor  time.Duration
	floor    time.Duration // CallTimeout: the least budget
	now      func() time.Time
	report   func(StoreEvent) // may be nil

	sem     chan struct{} // a token per call in progress
	healthy atomic.Bool   // state and reported are StoreUp, no failure counted: no lock needed

	// answers counts the calls the store answered, so that a call can
	// tell whether the store said anything since it began.
	answers atomic.Uint64
	// srtt and rttvar smooth the latency of answered calls, in ns.
	srtt, rttvar atomic.Int64

	// down is closed when the breaker opens and replaced when it closes;
	// read without the lock on every call, written under mu.
	down atomic.Pointer[chan struct{}]

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
		floor:    b.CallTimeout,
		now:      now,
		report:   report,
	}
	down := make(chan struct{})
	br.down.Store(&down)
	if br.failures <= 0 {
		br.failures = defaultBreakerFailures
	}
	if br.openFor <= 0 {
		br.openFor = defaultBreakerOpenFor
	}
	if br.floor <= 0 {
		br.floor = defaultBreakerCallTimeout
	}
	maxCalls := b.MaxInFlight
	if maxCalls <= 0 {
		maxCalls = defaultBreakerMaxInFlight
	}
	br.sem = make(chan struct{}, maxCalls)
	br.healthy.Store(true)
	return br
}

// budget returns how long the store may stay silent before a call fails:
// the smoothed latency plus four deviations, times four, within [floor,
// 4*floor].
func (b *breaker) budget() time.Duration {
	rto := 4 * time.Duration(b.srtt.Load()+4*b.rttvar.Load())
	return min(max(rto, b.floor), 4*b.floor)
}

// observe records the latency of an answered call, as TCP smooths round
// trip times (RFC 6298): gains 1/8 and 1/4. Concurrent updates may lose
// one another's sample, which an estimate can afford.
func (b *breaker) observe(d time.Duration) {
	srtt := b.srtt.Load()
	if srtt == 0 {
		b.srtt.Store(int64(d))
		b.rttvar.Store(int64(d / 2))
		return
	}
	dev := int64(d) - srtt
	b.srtt.Store(srtt + dev/8)
	if dev < 0 {
		dev = -dev
	}
	v := b.rttvar.Load()
	b.rttvar.Store(v + (dev-v)/4)
}

// answered reports whether err, returned by a store call, is an answer of
// the store (it is alive), as opposed to a failure to reach it.
func answered(err error) bool {
	return err == nil || errors.Is(err, ErrStoreConfig) || errors.Is(err, ErrCostTooHigh) ||
		errors.Is(err, ErrInvalidPolicy) || errors.Is(err, quota.ErrLeaseLost)
}

// A storeJob is a store call made through the breaker ([breaker.call]).
type storeJob interface {
	// do makes the call with ctx.
	do(ctx context.Context) error
	// undo takes back the effect of a call that succeeded after its
	// caller stopped waiting for it. It runs on the call's goroutine.
	undo()
}

// jobFunc is a storeJob with nothing to take back.
type jobFunc func(context.Context) error

func (f jobFunc) do(ctx context.Context) error { return f(ctx) }
func (jobFunc) undo()                          {}

// call makes job, a store call, with a context derived from ctx, unless
// the breaker is open, and records its outcome. It returns the call's
// error, or the reason it was not made or not waited for.
//
// The call runs on a goroutine of its own, and the caller waits until it
// returns, ctx ends, the store has been silent for the budget since it
// began, it has run for four budgets, or the breaker opens, whichever
// comes first. If the caller stops waiting, the call is abandoned: it
// runs on until its context ends it, and then, if it succeeded, job.undo
// runs on that goroutine to take back its effect.
func (b *breaker) call(ctx context.Context, job storeJob) error {
	probe := false
	if !b.healthy.Load() {
		var err error
		if probe, err = b.admit(); err != nil {
			return err
		}
	}
	if err := b.acquire(ctx, probe); err != nil {
		if probe {
			b.mu.Lock()
			b.probing = false
			b.mu.Unlock()
		}
		return err
	}
	err := b.run(ctx, job, probe)
	switch {
	case err == nil:
		if !probe && b.healthy.Load() {
			return nil
		}
		b.succeeded(probe)
	case errors.Is(err, errCircuitOpen):
		// Other calls opened the breaker while this one waited: no
		// verdict on this call, and the request gets its failure mode.
	case storeFault(ctx, err):
		b.failed(probe, err)
	case probe:
		b.mu.Lock()
		b.probing = false // no verdict: let the next call probe
		b.mu.Unlock()
	}
	return err
}

// acquire takes a token for a call: at once, or once a call in progress
// ends. It gives up when ctx ends or, except for the probe, when the
// breaker opens.
func (b *breaker) acquire(ctx context.Context, probe bool) error {
	select {
	case b.sem <- struct{}{}:
		return nil
	default:
	}
	var down <-chan struct{}
	if !probe {
		down = b.downSignal()
	}
	select {
	case b.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-down:
		return b.openErr()
	}
}

// downSignal returns a channel that is closed when the breaker opens.
func (b *breaker) downSignal() <-chan struct{} { return *b.down.Load() }

// openErr is the error of a call not made, or not waited for, because the
// breaker is open.
func (b *breaker) openErr() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Errorf("%w (last error: %w)", errCircuitOpen, b.lastErr)
}

// Outcomes of a detached call, in a breakerCall's state.
const (
	callRunning int32 = iota
	callReturned
	callAbandoned
)

// A breakerCall is one store call in progress, shared by its goroutine
// and its caller. (Not pooled: a channel made in a testing/synctest
// bubble must not be used outside it, nor one made outside in it.)
type breakerCall struct {
	b      *breaker
	job    storeJob
	ctx    context.Context // the call's
	cancel context.CancelFunc
	start  time.Time
	state  atomic.Int32
	err    error         // the call's, once done is sent to
	done   chan struct{} // sent to when the call returns, unless abandoned (no pointer in it: one allocation)
}

// exec makes the call on its own goroutine, and hands its error to the
// caller, or, if the caller has stopped waiting, takes back what it did.
func (c *breakerCall) exec() {
	b := c.b
	err := c.job.do(c.ctx)
	if answered(err) {
		b.answers.Add(1)
	}
	c.cancel()
	if c.state.CompareAndSwap(callRunning, callReturned) {
		if err == nil {
			b.observe(b.now().Sub(c.start))
		}
		<-b.sem
		c.err = err
		c.done <- struct{}{}
		return
	}
	if err == nil {
		c.job.undo()
	}
	<-b.sem
}

// run makes job's call on its own goroutine and waits for it as call
// says. The call gives back the token taken by acquire when it is done
// (and job.undo, if it runs).
func (b *breaker) run(ctx context.Context, job storeJob, probe bool) error {
	budget := b.budget()
	c := &breakerCall{b: b, job: job, done: make(chan struct{}, 1)}
	c.ctx, c.cancel = context.WithTimeout(ctx, 4*budget)
	heard := b.answers.Load()
	c.start = b.now()
	go c.exec()
	var down <-chan struct{}
	if !probe {
		down = b.downSignal()
	}
	// One timer for both bounds: it fires each budget, and the fourth
	// budget ends the wait even if the store answered other calls. The
	// call's own context ends at four budgets too, ending the call.
	timer := time.NewTimer(budget)
	defer timer.Stop()
	var why error
wait:
	for waited := time.Duration(0); ; {
		select {
		case <-c.done:
			return c.err
		case <-ctx.Done():
			why = ctx.Err()
			break wait
		case <-down:
			why = b.openErr()
			break wait
		case <-timer.C:
			if waited += budget; waited >= 4*budget {
				why = fmt.Errorf("%w: no answer after %v: %w", errCallTimeout, 4*budget, context.DeadlineExceeded)
				break wait
			}
			if h := b.answers.Load(); h != heard {
				// The store answered other calls meanwhile: slow, not
				// down. Keep waiting for this one.
				heard = h
				timer.Reset(budget)
				continue
			}
			why = fmt.Errorf("%w: the store answered nothing for %v: %w", errCallTimeout, budget, context.DeadlineExceeded)
			break wait
		}
	}
	if !c.state.CompareAndSwap(callRunning, callAbandoned) {
		<-c.done // it returned just now
		return c.err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return why
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
	if b.state == StoreDown {
		down := make(chan struct{})
		b.down.Store(&down)
	}
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
	if errors.Is(err, ErrStoreConfig) {
		b.fails = max(b.fails, b.failures) // waiting will not mend it
	}
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
	if b.state == StoreDown && prevState != StoreDown {
		close(*b.down.Load())
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
