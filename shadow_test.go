package throttle_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
)

// shadowRun sends n requests through a rule that allows 2 a minute,
// against a vendor that answers 429 with Retry-After from the reply-th
// request on (0: never), and returns what the vendor received, the
// errors the caller saw and the decisions recorded.
func shadowRun(t *testing.T, shadow bool, n, reply int, keyed bool) (int64, []error, []throttle.DecisionEvent) {
	return shadowRunPer(t, time.Minute, shadow, n, reply, keyed)
}

// shadowRunPer is shadowRun with a limit of 2 per per.
func shadowRunPer(t *testing.T, per time.Duration, shadow bool, n, reply int, keyed bool) (int64, []error, []throttle.DecisionEvent) {
	t.Helper()
	var received atomic.Int64
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := received.Add(1); reply > 0 && got >= int64(reply) {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	t.Cleanup(vendor.Close)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)

	limit := throttle.Limit{Name: "per-minute", Rate: 2, Per: per}
	if keyed {
		limit.Key = throttle.KeyFromContext("team")
	}
	var mu sync.Mutex
	var events []throttle.DecisionEvent
	tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
		Name: "new-limit", Limits: []throttle.Limit{limit},
		Wait:   waiters.Block(), // a shadow rule must not wait even so
		Shadow: shadow,
		Retry:  throttle.Retry{Max: 3},
	}}}, throttle.WithHooks(throttle.Hooks{OnDecision: func(e throttle.DecisionEvent) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}}))
	require.NoError(t, err)

	var errs []error
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, vendor.URL+"/x", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			require.NoError(t, resp.Body.Close())
		}
		cancel()
		errs = append(errs, err)
	}
	mu.Lock()
	defer mu.Unlock()
	return received.Load(), errs, append([]throttle.DecisionEvent(nil), events...)
}

func TestShadowRecordsRefusalsButSends(t *testing.T) {
	received, errs, events := shadowRun(t, true, 5, 0, false)
	assert.Equal(t, int64(5), received, "every request was sent")
	for _, err := range errs {
		assert.NoError(t, err)
	}
	require.Len(t, events, 5)
	outcomes := map[throttle.Outcome]int{}
	for _, e := range events {
		assert.True(t, e.Shadow)
		assert.NotEqual(t, throttle.Waited, e.Outcome, "a shadow rule never waits")
		outcomes[e.Outcome]++
		if e.Outcome == throttle.Refused {
			assert.Equal(t, "per-minute", e.Limit)
			assert.Greater(t, e.Wait, time.Duration(0), "the refusal's retry time is recorded")
			assert.ErrorIs(t, e.Err, throttle.ErrLimited, "the event carries what would have been returned")
		}
	}
	assert.Equal(t, map[throttle.Outcome]int{throttle.Allowed: 2, throttle.Refused: 3}, outcomes)
}

func TestWithoutShadowTheSameRuleRefuses(t *testing.T) {
	// The control for the test above: enforced, with a waiter that cannot
	// wait a minute within the request's deadline.
	received, errs, _ := shadowRun(t, false, 5, 0, false)
	assert.Equal(t, int64(2), received)
	refused := 0
	for _, err := range errs {
		if err != nil {
			assert.ErrorIs(t, err, throttle.ErrLimited)
			refused++
		}
	}
	assert.Equal(t, 3, refused)
}

func TestShadowIgnoresLearnedPausesAndDoesNotRetry(t *testing.T) {
	// The first answer is a 429 with Retry-After: 60, which pauses the
	// rule; in shadow mode the next request is still sent (and recorded
	// as refused by the pause), and the 429 is not retried.
	received, errs, events := shadowRun(t, true, 2, 1, false)
	assert.Equal(t, int64(2), received, "one request each, no retries, the pause not enforced")
	for _, err := range errs {
		assert.NoError(t, err)
	}
	require.Len(t, events, 2)
	assert.Equal(t, throttle.Allowed, events[0].Outcome)
	assert.Equal(t, throttle.Refused, events[1].Outcome, "recorded as refused by the pause")
	assert.Empty(t, events[1].Limit)
	assert.Greater(t, events[1].Wait, 59*time.Second)
}

func TestShadowSendsUndecidableRequests(t *testing.T) {
	received, errs, events := shadowRun(t, true, 1, 0, true) // no team in the context
	assert.Equal(t, int64(1), received)
	assert.NoError(t, errs[0])
	require.Len(t, events, 1)
	assert.Equal(t, throttle.Failed, events[0].Outcome)
	assert.ErrorIs(t, events[0].Err, throttle.ErrMissingKey)
}

func TestShadowNeverWaits(t *testing.T) {
	// Slots every 100 ms: the Block waiter would wait for them; the shadow
	// rule records a refusal and sends at once.
	received, errs, events := shadowRunPer(t, 200*time.Millisecond, true, 4, 0, false)
	assert.Equal(t, int64(4), received)
	for _, err := range errs {
		assert.NoError(t, err)
	}
	refused := 0
	for _, e := range events {
		assert.NotEqual(t, throttle.Waited, e.Outcome)
		if e.Outcome == throttle.Refused {
			refused++
		}
	}
	assert.Positive(t, refused)

	_, _, enforced := shadowRunPer(t, 200*time.Millisecond, false, 4, 0, false)
	waited := 0
	for _, e := range enforced {
		if e.Outcome == throttle.Waited {
			waited++
		}
	}
	assert.Positive(t, waited, "the control: enforced, the same requests wait")
}
