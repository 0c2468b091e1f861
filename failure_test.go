package throttle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowStore is a MemoryStore behind a link that can be made slow: while
// delay is set, every Take answers only after it (or when its context
// ends, if honour is set).
type slowStore struct {
	*memstore.Store
	delay     atomic.Int64 // time.Duration
	slowScope atomic.Value // string: only this scope is slow, if set
	honour    bool
	cancels   atomic.Int64

	takes, inFlight, maxInFlight atomic.Int64
}

func (s *slowStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	s.takes.Add(1)
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.maxInFlight.Load(); n > m && !s.maxInFlight.CompareAndSwap(m, n); m = s.maxInFlight.Load() {
	}
	scope, _ := s.slowScope.Load().(string)
	if delay := time.Duration(s.delay.Load()); delay > 0 && (scope == "" || scope == d.Scope) {
		t := time.NewTimer(delay)
		defer t.Stop()
		if s.honour {
			select {
			case <-t.C:
			case <-ctx.Done():
				return quota.Decision{}, ctx.Err()
			}
		} else {
			// A client that ignores deadlines: it answers anyway.
			<-t.C
			ctx = context.WithoutCancel(ctx)
		}
	}
	return s.Store.Take(ctx, d)
}

func (s *slowStore) Cancel(ctx context.Context, r *quota.Reservation) error {
	s.cancels.Add(1)
	return s.Store.Cancel(ctx, r)
}

// A store that ignores deadlines still costs a request only the call
// budget, and a grant it makes after the request moved on is given back.
func TestBreakerCallBudget(t *testing.T) {
	v := newVendor(t)
	s := &slowStore{Store: memstore.New()}
	var mu sync.Mutex
	var states []throttle.StoreState
	p := throttle.Policy{Rules: []throttle.Rule{{
		Name: "r", Host: "127.0.0.1", Wait: waiters.FailFast(), OnStoreFailure: throttle.FailClosed,
		Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Hour}},
	}}}
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(s),
		throttle.WithBreaker(throttle.Breaker{CallTimeout: 50 * time.Millisecond, Failures: 1, OpenFor: 100 * time.Millisecond}),
		throttle.WithHooks(throttle.Hooks{OnStoreState: func(ev throttle.StoreEvent) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, ev.State)
		}}))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	get := func() error {
		resp, err := c.Get(v.URL)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}

	s.delay.Store(int64(300 * time.Millisecond))
	start := time.Now()
	err = get()
	took := time.Since(start)
	// The failure itself shows the caller did not wait for the store: the
	// store grants once it answers, after 300 ms.
	assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("failed after %v (budget 50 ms)", took)
	err = get()
	assert.ErrorIs(t, err, throttle.ErrStoreUnavailable, "the breaker is open")
	assert.Eventually(t, func() bool { return s.cancels.Load() == 1 }, 10*time.Second, 5*time.Millisecond,
		"the abandoned grant is given back")

	s.delay.Store(0)
	assert.Eventually(t, func() bool { return get() == nil }, 10*time.Second, 10*time.Millisecond)
	// Every unit of the limit is still there: 1 sent above, 9 left.
	sent := 1
	for get() == nil {
		sent++
	}
	assert.Equal(t, 10, sent)
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []throttle.StoreState{throttle.StoreDown, throttle.StoreUp}, states)
}

// The in-flight cap: calls over it wait for a call to end, so no more than
// MaxInFlight run at once; once the store counts as down, the waiting
// requests get their failure mode without calling it.
func TestBreakerMaxInFlight(t *testing.T) {
	v := newVendor(t)
	s := &slowStore{Store: memstore.New(), honour: true}
	s.delay.Store(int64(time.Hour)) // silent until the call's context ends
	p := throttle.Policy{Rules: []throttle.Rule{{
		Name: "r", Host: "127.0.0.1", Wait: waiters.FailFast(), OnStoreFailure: throttle.FailOpen,
		Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Hour}},
	}}}
	var failedOpen atomic.Int64
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(s),
		throttle.WithBreaker(throttle.Breaker{CallTimeout: 100 * time.Millisecond, MaxInFlight: 4}),
		throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
			if ev.Fallback == throttle.FailOpen {
				failedOpen.Add(1)
			}
		}}))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			resp, err := c.Get(v.URL)
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(20), failedOpen.Load(), "every request got its failure mode")
	assert.LessOrEqual(t, s.maxInFlight.Load(), int64(4), "never more than MaxInFlight calls at once")
	assert.Less(t, s.takes.Load(), int64(20), "requests that waited for a call slot when the breaker opened did not call")
	tr.CloseIdleConnections()
}

// A slow store that keeps answering other calls is waited for: no request
// gets its failure mode, however long its own call takes, while a store
// that answers nothing for the budget is down (TestBreakerCallBudget).
func TestBreakerSlowIsNotDown(t *testing.T) {
	v := newVendor(t)
	s := &slowStore{Store: memstore.New()}
	var mu sync.Mutex
	var states []throttle.StoreState
	p := throttle.Policy{Rules: []throttle.Rule{
		// A fixed window of a day: a grant whose answer came late is sent
		// on it, since its window has not ended (late.go), so each slow
		// request is decided once.
		{Name: "slow", Host: "127.0.0.1", Path: "/slow", Wait: waiters.FailFast(), OnStoreFailure: throttle.FailClosed,
			Limits: []throttle.Limit{{Name: "l", Rate: 1000, Per: 24 * time.Hour, Algorithm: throttle.FixedWindow}}},
		{Name: "fast", Host: "127.0.0.1", Wait: waiters.FailFast(), OnStoreFailure: throttle.FailClosed,
			Limits: []throttle.Limit{{Name: "f", Rate: 1 << 20, Per: time.Hour}}},
	}}
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(s),
		throttle.WithBreaker(throttle.Breaker{CallTimeout: 200 * time.Millisecond, Failures: 1}),
		throttle.WithHooks(throttle.Hooks{OnStoreState: func(ev throttle.StoreEvent) {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, ev.State)
		}}))
	require.NoError(t, err)
	get := getter(&http.Client{Transport: tr}, v.URL)
	// The fast rule's calls keep the store answering while the slow one
	// takes three budgets (a call fails after four, whatever happens).
	s.slowScope.Store("slow")
	s.delay.Store(int64(600 * time.Millisecond))
	stopFast := keepAnswering(t, get)
	var slow sync.WaitGroup
	for range 4 {
		slow.Go(func() { assert.NoError(t, get("/slow"), "decided by the store, not failed over") })
	}
	slow.Wait()
	stopFast()
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, states, "a slow store is not a failing one")
	st, err := s.Inspect(context.Background(), "slow", []quota.Limit{p.Rules[0].Limits[0].Quota()})
	require.NoError(t, err)
	require.Len(t, st, 1)
	assert.Equal(t, int64(4), st[0].Used, "the store charged each slow request once")
	tr.CloseIdleConnections()
}

// A call the store does not answer fails after four budgets even while
// the store answers other calls (Breaker.CallTimeout): a slow store is
// waited for, not for ever. Its grant, made after the request moved on,
// is given back.
func TestBreakerFourBudgets(t *testing.T) {
	// CallTimeout: the fast calls keep the budget at its floor, and answer
	// many times in each budget even on a loaded machine (a budget with
	// no answer at all would fail the call for silence instead).
	const budget = 250 * time.Millisecond
	v := newVendor(t)
	s := &slowStore{Store: memstore.New()}
	p := throttle.Policy{Rules: []throttle.Rule{
		{Name: "slow", Host: "127.0.0.1", Path: "/slow", Wait: waiters.FailFast(), OnStoreFailure: throttle.FailClosed,
			Limits: []throttle.Limit{{Name: "l", Rate: 1000, Per: time.Hour}}},
		{Name: "fast", Host: "127.0.0.1", Wait: waiters.FailFast(), OnStoreFailure: throttle.FailClosed,
			Limits: []throttle.Limit{{Name: "f", Rate: 1 << 20, Per: time.Hour}}},
	}}
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(s),
		throttle.WithBreaker(throttle.Breaker{CallTimeout: budget, Failures: 100}))
	require.NoError(t, err)
	get := getter(&http.Client{Transport: tr}, v.URL)
	require.NoError(t, get("/fast")) // the budget's first sample
	s.slowScope.Store("slow")
	s.delay.Store(int64(10 * budget)) // answers, ignoring its deadline, long after four budgets
	stopFast := keepAnswering(t, get)
	start := time.Now()
	err = get("/slow")
	took := time.Since(start)
	stopFast()
	assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorContains(t, err, "no answer after", "failed for running four budgets, not for silence")
	assert.GreaterOrEqual(t, took, 4*budget, "waited four budgets while the store answered other calls")
	assert.Eventually(t, func() bool { return s.cancels.Load() == 1 }, 10*time.Second, 10*time.Millisecond,
		"the abandoned grant is given back")
	tr.CloseIdleConnections()
}

// getter returns a func that sends a GET of base + path with c and
// closes the response's body.
func getter(c *http.Client, base string) func(path string) error {
	return func(path string) error {
		resp, err := c.Get(base + path)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
}

// keepAnswering sends requests to "/fast" through get, one after the
// other, until the returned stop is called: the store keeps answering
// them meanwhile.
func keepAnswering(t *testing.T, get func(path string) error) (stop func()) {
	quit := make(chan struct{})
	var fast sync.WaitGroup
	fast.Go(func() {
		for {
			select {
			case <-quit:
				return
			default:
			}
			assert.NoError(t, get("/fast"))
		}
	})
	return func() {
		close(quit)
		fast.Wait()
	}
}

// A store error that wraps ErrStoreConfig opens the breaker at once and is
// logged at Error, to slog.Default when the transport has no logger.
func TestBreakerConfigErrorIsLoud(t *testing.T) {
	var buf syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	v := newVendor(t)
	s := &countingFailStore{failingStore: failingStore{err: fmt.Errorf("redisstore: %w: WRONGPASS invalid username-password pair", quota.ErrStoreConfig)}}
	var states []throttle.StoreState
	p := throttle.Policy{Instances: 2, Rules: []throttle.Rule{{
		Name: "r", Host: "127.0.0.1", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Hour}},
	}}}
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(s),
		throttle.WithHooks(throttle.Hooks{OnStoreState: func(ev throttle.StoreEvent) { states = append(states, ev.State) }}))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	var last error
	for range 8 {
		resp, err := c.Get(v.URL)
		if err == nil {
			_ = resp.Body.Close()
		}
		last = err
	}
	assert.Equal(t, []throttle.StoreState{throttle.StoreDown}, states, "down after one call, reported once")
	// The local share (5 of 10) refused the last: it names the fallback and
	// the cause, and does not claim repeated failures after one.
	assert.ErrorIs(t, last, throttle.ErrStoreUnavailable)
	assert.ErrorIs(t, last, throttle.ErrStoreConfig)
	if assert.Error(t, last) {
		assert.Contains(t, last.Error(), "WRONGPASS")
		assert.NotContains(t, last.Error(), "repeated")
	}
	out := buf.String()
	assert.Equal(t, 1, strings.Count(out, "level=ERROR"), out)
	assert.Contains(t, out, "store misconfigured")
	assert.Contains(t, out, "WRONGPASS")
	assert.Equal(t, int64(1), s.calls.Load(), "no more calls until OpenFor has passed")
	tr.CloseIdleConnections()
}

// countingFailStore fails every Take with err, counting them.
type countingFailStore struct {
	failingStore
	calls atomic.Int64
}

func (s *countingFailStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	s.calls.Add(1)
	return s.failingStore.Take(ctx, d)
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestPolicyFailureModes(t *testing.T) {
	ok := throttle.Limit{Name: "l", Rate: 1, Per: time.Second}
	for _, tc := range []struct {
		name string
		p    throttle.Policy
	}{
		{"bad policy mode", throttle.Policy{OnStoreFailure: 9, Rules: []throttle.Rule{{Name: "r", Limits: []throttle.Limit{ok}}}}},
		{"bad rule mode", throttle.Policy{Rules: []throttle.Rule{{Name: "r", OnStoreFailure: -1, Limits: []throttle.Limit{ok}}}}},
		{"negative instances", throttle.Policy{Instances: -2, Rules: []throttle.Rule{{Name: "r", Limits: []throttle.Limit{ok}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
		})
	}
	m, err := throttle.ParseFailureMode("closed")
	require.NoError(t, err)
	assert.Equal(t, throttle.FailClosed, m)
	_, err = throttle.ParseFailureMode("sideways")
	assert.True(t, errors.Is(err, throttle.ErrInvalidPolicy))
}

// A refusal by this instance's local share, while the store is down, says
// so: Fallback is set, it matches ErrStoreUnavailable and the store's own
// error, so a caller can tell it from a real limit. So does a Limiter's
// grant and refusal.
func TestFallbackRefusalSaysSo(t *testing.T) {
	storeErr := errors.New("dial tcp 127.0.0.1:1: connection refused")
	p := throttle.Policy{Instances: 2, Rules: []throttle.Rule{{
		Name: "r", Host: "127.0.0.1", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "l", Rate: 2, Per: time.Hour}},
	}}}

	t.Run("transport", func(t *testing.T) {
		v := newVendor(t)
		tr, err := throttle.NewTransport(nil, p, throttle.WithStore(failingStore{err: storeErr}), throttle.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		resp, err := c.Get(v.URL)
		require.NoError(t, err, "the local share (1 of 2) admits the first")
		_ = resp.Body.Close()
		_, err = c.Get(v.URL)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, throttle.FailLocal, le.Fallback)
		assert.Equal(t, "l", le.Limit)
		assert.ErrorIs(t, err, throttle.ErrLimited)
		assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
		assert.ErrorIs(t, err, storeErr)
		assert.Contains(t, err.Error(), "connection refused")
		tr.CloseIdleConnections()
	})

	t.Run("limiter", func(t *testing.T) {
		lim, err := throttle.NewLimiter(p, throttle.WithStore(failingStore{err: storeErr}), throttle.WithLogger(slog.New(slog.DiscardHandler)))
		require.NoError(t, err)
		permit, err := lim.Allow(t.Context(), "r")
		require.NoError(t, err)
		assert.Equal(t, throttle.FailLocal, permit.Fallback)
		assert.ErrorIs(t, permit.StoreErr, storeErr)
		permit.Done()
		_, err = lim.Allow(t.Context(), "r")
		assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
		assert.ErrorIs(t, err, storeErr)
	})

	t.Run("a real limit is not a fallback", func(t *testing.T) {
		lim, err := throttle.NewLimiter(p, throttle.WithStore(memstore.New()))
		require.NoError(t, err)
		for range 2 {
			permit, err := lim.Allow(t.Context(), "r")
			require.NoError(t, err)
			assert.Equal(t, throttle.FailDefault, permit.Fallback)
			permit.Done()
		}
		_, err = lim.Allow(t.Context(), "r")
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, throttle.FailDefault, le.Fallback)
		assert.NotErrorIs(t, err, throttle.ErrStoreUnavailable)
	})
}

// Policy.Instances left at zero while a rule falls back to its local
// share on a shared store is said once, at construction, with the cause;
// not for the in-process store, nor once Instances is set.
func TestInstancesUnsetIsLoud(t *testing.T) {
	rule := throttle.Rule{Name: "r", Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Hour}}}
	for _, tc := range []struct {
		name  string
		p     throttle.Policy
		store quota.Store
		warns bool
	}{
		{"shared store, unset", throttle.Policy{Rules: []throttle.Rule{rule}}, failingStore{err: errors.New("down")}, true},
		{"shared store, set", throttle.Policy{Instances: 1, Rules: []throttle.Rule{rule}}, failingStore{err: errors.New("down")}, false},
		{"shared store, fails closed", throttle.Policy{OnStoreFailure: throttle.FailClosed, Rules: []throttle.Rule{rule}}, failingStore{err: errors.New("down")}, false},
		{"in-process store", throttle.Policy{Rules: []throttle.Rule{rule}}, memstore.New(), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf syncBuffer
			_, err := throttle.NewLimiter(tc.p, throttle.WithStore(tc.store), throttle.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
			require.NoError(t, err)
			if !tc.warns {
				assert.Empty(t, buf.String())
				return
			}
			assert.Equal(t, 1, strings.Count(buf.String(), "level=WARN"), buf.String())
			assert.Contains(t, buf.String(), "Policy.Instances is not set")
			assert.Contains(t, buf.String(), "rule=r")
		})
	}
}
