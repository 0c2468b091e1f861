package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowStore is a MemoryStore behind a link that can be made slow: while
// delay is set, every Take answers only after it (or when its context
// ends, if honour is set).
type slowStore struct {
	*throttle.MemoryStore
	delay   atomic.Int64 // time.Duration
	honour  bool
	cancels atomic.Int64
}

func (s *slowStore) Take(ctx context.Context, d *throttle.Demand) (throttle.Decision, error) {
	if d := time.Duration(s.delay.Load()); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		if s.honour {
			select {
			case <-t.C:
			case <-ctx.Done():
				return throttle.Decision{}, ctx.Err()
			}
		} else {
			// A client that ignores deadlines: it answers anyway.
			<-t.C
			ctx = context.WithoutCancel(ctx)
		}
	}
	return s.MemoryStore.Take(ctx, d)
}

func (s *slowStore) Cancel(ctx context.Context, r *throttle.Reservation) error {
	s.cancels.Add(1)
	return s.MemoryStore.Cancel(ctx, r)
}

// A store that ignores deadlines still costs a request only the call
// budget, and a grant it makes after the request moved on is given back.
func TestBreakerCallBudget(t *testing.T) {
	v := newVendor(t)
	s := &slowStore{MemoryStore: throttle.NewMemoryStore()}
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
	assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 250*time.Millisecond, "the caller does not wait for the store")
	err = get()
	assert.ErrorIs(t, err, throttle.ErrStoreUnavailable, "the breaker is open")
	assert.Eventually(t, func() bool { return s.cancels.Load() == 1 }, 2*time.Second, 5*time.Millisecond,
		"the abandoned grant is given back")

	s.delay.Store(0)
	assert.Eventually(t, func() bool { return get() == nil }, 2*time.Second, 10*time.Millisecond)
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

// The in-flight cap: calls over it are not made, and get the failure mode
// at once.
func TestBreakerMaxInFlight(t *testing.T) {
	v := newVendor(t)
	s := &slowStore{MemoryStore: throttle.NewMemoryStore(), honour: true}
	s.delay.Store(int64(time.Second))
	p := throttle.Policy{Rules: []throttle.Rule{{
		Name: "r", Host: "127.0.0.1", Wait: waiters.FailFast(), OnStoreFailure: throttle.FailOpen,
		Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Hour}},
	}}}
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(s),
		throttle.WithBreaker(throttle.Breaker{CallTimeout: 200 * time.Millisecond, MaxInFlight: 4, Failures: 1000}))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	var fast atomic.Int64
	for range 20 {
		wg.Go(func() {
			start := time.Now()
			resp, err := c.Get(v.URL)
			if assert.NoError(t, err) {
				_ = resp.Body.Close()
			}
			if time.Since(start) < 100*time.Millisecond {
				fast.Add(1)
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(20), tr.FailedOpen())
	assert.GreaterOrEqual(t, fast.Load(), int64(16-4), "calls over the cap fail over at once")
	tr.CloseIdleConnections()
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
	assert.Equal(t, throttle.Limit{Name: "l", Rate: 3, Per: time.Minute, Burst: 3},
		throttle.LocalShare(throttle.Limit{Name: "l", Rate: 10, Per: time.Minute}, 3))
}
