package redisstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBatchCompany: plain demands of a scope go alone until
// redisstore.BatchInFlight calls are in flight while its batches hold one
// demand, and until one fewer once a batch had company. Script calls are
// held at a gate before they are sent (a hook), each until the test lets
// it go, so what is in flight and what waits is known without timing;
// the count of units left then shows every decision charged once.
func TestBatchCompany(t *testing.T) {
	t.Parallel()
	gate := &gateHook{entered: make(chan chan struct{}, 16)}
	c := newClient(t, srv.Addr())
	c.AddHook(gate)
	s := newStoreOn(t, c, redistest.Prefix(t))
	const rate = 100 // per hour: every demand admitted, none refilled during the test
	d := &quota.Demand{Scope: "co", Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: time.Hour}, Key: "k"}}}
	require.NoError(t, s.Check(ctx(t))) // loads every script: no EVAL after a NOSCRIPT at the gate
	_, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	gate.closed.Store(true)
	t.Cleanup(gate.open) // on a failure, no call is left held

	results := make(chan quota.Decision, 16)
	take := func(n int) {
		for range n {
			go func() {
				dec, err := s.Take(ctx(t), d)
				assert.NoError(t, err)
				results <- dec
			}()
		}
	}
	// entered returns the release of each of the next n calls at the gate.
	entered := func(n int) []chan struct{} {
		t.Helper()
		var held []chan struct{}
		for range n {
			select {
			case r := <-gate.entered:
				held = append(held, r)
			case <-time.After(20 * time.Second):
				t.Fatal("a call did not reach the gate")
			}
		}
		return held
	}
	waiting := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for redisstore.BatchWaiting(s, "co") != n {
			require.True(t, time.Now().Before(deadline), "waiting: %d, want %d", redisstore.BatchWaiting(s, "co"), n)
			time.Sleep(time.Millisecond)
		}
	}
	got := func(n int, release ...chan struct{}) {
		t.Helper()
		for _, r := range release {
			r <- struct{}{}
		}
		for range n {
			assert.True(t, (<-results).OK)
		}
	}
	in := redisstore.BatchInFlight
	require.GreaterOrEqual(t, in, 2)

	// No batch yet: BatchInFlight calls go alone, and the next two wait.
	take(in)
	alone := entered(in)
	take(2)
	waiting(2)
	// A call ends: the two waiting go in one batch, which has company.
	got(1, alone[0])
	batch := entered(1)
	waiting(0)
	got(in-1, alone[1:]...)
	// In flight: the batch alone. Demands now go alone only up to one
	// call fewer in flight; the next waits.
	take(in - 2)
	alone = entered(in - 2)
	take(1)
	waiting(1)
	// The batch ends; the demand waiting goes in a batch of its own (no
	// company) ...
	got(2, batch...)
	batch = entered(1)
	got(in-2, alone...)
	// ... and from then on as many go alone as at the start.
	take(in - 1)
	alone = entered(in - 1)
	waiting(0)
	got(in, append(batch, alone...)...)

	// Exact: the warm-up, then in+2, in-1 and in-1 decisions, each
	// charged once.
	gate.open()
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	require.True(t, dec.OK)
	assert.Equal(t, int64(rate-(1+3*in)-1), dec.Remaining, "units left after every decision")
}

// gateHook holds each script call of its client, while closed, until the
// test sends on the call's release, which it hands over on entered.
type gateHook struct {
	closed  atomic.Bool
	entered chan chan struct{}
	mu      sync.Mutex
	held    []chan struct{} // every release handed out
}

// open lets every call go, those held and those to come.
func (h *gateHook) open() {
	h.closed.Store(false)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.held {
		select {
		case r <- struct{}{}:
		default: // released already
		}
	}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); h.closed.Load() && (n == "evalsha" || n == "eval") {
			release := make(chan struct{}, 1)
			h.mu.Lock()
			h.held = append(h.held, release)
			h.mu.Unlock()
			h.entered <- release
			<-release
		}
		return next(ctx, cmd)
	}
}
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
