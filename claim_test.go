package throttle_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
)

// writesAndReads is one POST rule (1 write a second and 1 slot in flight)
// and one GET rule sharing that slot: same scope, same limit name and key.
func writesAndReads(w throttle.Waiter) throttle.Policy {
	inflight := throttle.Limit{Name: "inflight", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency}
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "writes", Method: http.MethodPost, Scope: "vendor",
		Limits: []throttle.Limit{{Name: "writes", Rate: 1, Per: time.Second, Burst: 1}, inflight},
		Wait:   w,
	}, {
		Name: "reads", Method: http.MethodGet, Scope: "vendor",
		Limits: []throttle.Limit{inflight},
		Wait:   w,
	}}}
}

// holdVendor is an in-memory base transport, for synctest bubbles, whose
// requests take hold[method] to answer. It records the methods in the
// order they arrive, and the peak of requests in flight.
type holdVendor struct {
	hold map[string]time.Duration

	mu        sync.Mutex
	arrivals  []string
	cur, peak int
}

func (v *holdVendor) RoundTrip(req *http.Request) (*http.Response, error) {
	v.mu.Lock()
	v.arrivals = append(v.arrivals, req.Method)
	v.cur++
	v.peak = max(v.peak, v.cur)
	v.mu.Unlock()
	defer func() { v.mu.Lock(); v.cur--; v.mu.Unlock() }()
	timer := time.NewTimer(v.hold[req.Method])
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// seen returns the methods received so far, in order, and the peak.
func (v *holdVendor) seen() ([]string, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.arrivals...), v.peak
}

// sendMethod sends one request and closes its body, releasing its slot.
func sendMethod(c *http.Client, ctx context.Context, method string) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://vendor.test/", nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// TestWaitingRequestHoldsNoSlot: POST #1 goes at once; POST #2 must wait
// a second for the write rate, and holds no slot while it waits, so a GET
// sharing the slot, sent at 20 ms, goes at once, before POST #2, which
// goes at its instant.
func TestWaitingRequestHoldsNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := &holdVendor{}
		tr, err := throttle.NewTransport(v, writesAndReads(waiters.Block()))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		start := time.Now()

		require.NoError(t, sendMethod(c, context.Background(), http.MethodPost))
		var wg sync.WaitGroup
		wg.Go(func() {
			assert.NoError(t, sendMethod(c, context.Background(), http.MethodPost))
			assert.Equal(t, time.Second, time.Since(start), "POST #2 goes at its reserved instant")
		})
		synctest.Wait() // POST #2 sleeps on its reservation

		time.Sleep(20 * time.Millisecond)
		require.NoError(t, sendMethod(c, context.Background(), http.MethodGet))
		assert.Equal(t, 20*time.Millisecond, time.Since(start), "the GET went at once")
		wg.Wait()
		arrivals, peak := v.seen()
		assert.Equal(t, []string{"POST", "GET", "POST"}, arrivals, "the GET reached the vendor while POST #2 waited")
		assert.Equal(t, 1, peak, "never more than the one slot in flight")
	})
}

// TestClaimRefusedWaitsForRelease: a GET sent at 500 ms takes the slot
// for 1.5 s while POST #2 waits for its write quota (due at 1 s). At 1 s
// POST #2 does not send late on its old charge: it gives the reservation
// back, waits for the GET's release (no poll), takes the whole demand
// again, and goes at the instant of the release, 2 s. Its wait is
// reported as one.
func TestClaimRefusedWaitsForRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const getHold = 1500 * time.Millisecond
		v := &holdVendor{hold: map[string]time.Duration{http.MethodGet: getHold}}
		var (
			mu     sync.Mutex
			events []throttle.DecisionEvent
		)
		tr, err := throttle.NewTransport(v, writesAndReads(waiters.Block()), throttle.WithHooks(throttle.Hooks{
			OnDecision: func(e throttle.DecisionEvent) { mu.Lock(); events = append(events, e); mu.Unlock() },
		}))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		start := time.Now()

		require.NoError(t, sendMethod(c, context.Background(), http.MethodPost))
		var wg sync.WaitGroup
		wg.Go(func() {
			assert.NoError(t, sendMethod(c, context.Background(), http.MethodPost))
			assert.Equal(t, 500*time.Millisecond+getHold, time.Since(start), "POST #2 goes at the GET's release")
		})
		synctest.Wait()

		time.Sleep(500 * time.Millisecond)
		require.NoError(t, sendMethod(c, context.Background(), http.MethodGet))
		wg.Wait()
		arrivals, peak := v.seen()
		assert.Equal(t, []string{"POST", "GET", "POST"}, arrivals)
		assert.Equal(t, 1, peak, "never more than the one slot in flight")

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, events, 3)
		post2 := events[2]
		assert.Equal(t, "writes", post2.Rule)
		assert.Equal(t, throttle.Waited, post2.Outcome)
		assert.Equal(t, 500*time.Millisecond+getHold, post2.Wait)
	})
}

// TestClaimRefusedWithinBudget: when the slot is still taken at the
// reserved instant and the waiter's budget is spent by then, the request
// is refused by the in-flight limit without being sent, and its write
// quota is given back: the next POST goes at the GET's release, not a
// write interval later.
func TestClaimRefusedWithinBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const getHold = 1500 * time.Millisecond
		v := &holdVendor{hold: map[string]time.Duration{http.MethodGet: getHold}}
		tr, err := throttle.NewTransport(v, writesAndReads(waiters.UpTo(time.Second)))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		start := time.Now()

		require.NoError(t, sendMethod(c, context.Background(), http.MethodPost))
		var wg sync.WaitGroup
		wg.Go(func() {
			err := sendMethod(c, context.Background(), http.MethodPost)
			var le *throttle.LimitError
			if assert.ErrorAs(t, err, &le) {
				assert.Equal(t, "inflight", le.Limit)
			}
			assert.Equal(t, time.Second, time.Since(start), "refused at its instant, when the claim was")
		})
		synctest.Wait()
		wg.Go(func() { assert.NoError(t, sendMethod(c, context.Background(), http.MethodGet)) })
		synctest.Wait()
		wg.Wait()

		require.NoError(t, sendMethod(c, throttle.WithWaiter(context.Background(), waiters.Block()), http.MethodPost))
		assert.Equal(t, getHold, time.Since(start), "POST #3 goes at the GET's release")
		arrivals, peak := v.seen()
		assert.Equal(t, []string{"POST", "GET", "POST"}, arrivals, "POST #2 was not sent")
		assert.Equal(t, 1, peak)
	})
}

// TestClaimLocalFallback: with the store away, a reservation made by the
// local fallback store ([throttle.FailLocal]) is claimed there, and holds
// no slot while it waits either.
func TestClaimLocalFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		v := &holdVendor{}
		store := &downStore{Store: memstore.New()}
		tr, err := throttle.NewTransport(v, writesAndReads(waiters.Block()), throttle.WithStore(store))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		start := time.Now()

		require.NoError(t, sendMethod(c, context.Background(), http.MethodPost))
		var wg sync.WaitGroup
		wg.Go(func() {
			assert.NoError(t, sendMethod(c, context.Background(), http.MethodPost))
			assert.Equal(t, time.Second, time.Since(start), "POST #2 goes at its reserved instant")
		})
		synctest.Wait()
		require.NoError(t, sendMethod(c, context.Background(), http.MethodGet))
		assert.Zero(t, time.Since(start), "the GET went at once")
		wg.Wait()
		arrivals, peak := v.seen()
		assert.Equal(t, []string{"POST", "GET", "POST"}, arrivals)
		assert.Equal(t, 1, peak)
		assert.Zero(t, store.releases.Load(), "no lease call sent to the store that did not grant")
	})
}
