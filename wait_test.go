package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
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

// recorder is a base transport that records, on the bubble's virtual
// clock, when each request was sent. Tests of waiting run in a synctest
// bubble, which keeps sockets out, so the vendor is this in-memory one.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	sent  []time.Duration
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	r.mu.Lock()
	r.sent = append(r.sent, time.Since(r.start))
	r.mu.Unlock()
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: req}, nil
}

func (r *recorder) times() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]time.Duration(nil), r.sent...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// perSecond is one request per second, no burst beyond one.
func perSecond(w throttle.Waiter) throttle.Policy {
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "api", Limits: []throttle.Limit{{Name: "rps", Rate: 1, Per: time.Second}}, Wait: w,
	}}}
}

func send(ctx context.Context, tr http.RoundTripper) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example.com/x", nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err == nil {
		_ = resp.Body.Close()
	}
	return err
}

// sendAll starts n requests at once and returns their errors.
func sendAll(ctx context.Context, tr http.RoundTripper, n int) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = send(ctx, tr)
		}()
	}
	wg.Wait()
	return errs
}

func TestBlockWaitsForReservedSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, perSecond(waiters.Block()))
		require.NoError(t, err)
		for _, err := range sendAll(context.Background(), tr, 5) {
			assert.NoError(t, err)
		}
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}, rec.times(),
			"each request sent at its reserved instant, one per second")
	})
}

func TestUpToFailsAtOnceWithoutHoldingQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, perSecond(waiters.UpTo(2500*time.Millisecond)))
		require.NoError(t, err)
		start := time.Now()
		var refused []time.Duration
		for _, err := range sendAll(context.Background(), tr, 5) {
			if err == nil {
				continue
			}
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, "rps", le.Limit)
			refused = append(refused, le.RetryAfter)
		}
		assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, rec.times())
		assert.Equal(t, []time.Duration{3 * time.Second, 3 * time.Second}, refused,
			"refused requests held nothing: both see the same next slot")
		// The refusals came at once, the last grant at 2s.
		assert.Equal(t, 2*time.Second, time.Since(start))
		// Nothing was charged by the refusals: the next slot is 3s.
		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, 3*time.Second, rec.times()[3])
	})
}

func TestFailFastNeverWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, perSecond(waiters.FailFast()))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))
		err = send(context.Background(), tr)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, time.Second, le.RetryAfter)
		time.Sleep(le.RetryAfter - time.Microsecond)
		assert.ErrorIs(t, send(context.Background(), tr), throttle.ErrLimited, "never early")
		time.Sleep(time.Microsecond)
		assert.NoError(t, send(context.Background(), tr), "exactly at RetryAfter")
	})
}

func TestCancelWhileWaitingRefundsReservation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, perSecond(waiters.Block()))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr)) // t=0; next slot 1s

		ctx, cancel := context.WithCancel(context.Background())
		body := newBody("payload")
		done := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://api.example.com/x", body)
			_, err := tr.RoundTrip(req)
			done <- err
		}()
		time.Sleep(500 * time.Millisecond) // it holds the 1s slot
		cancel()
		err = <-done
		assert.ErrorIs(t, err, context.Canceled)
		assert.ErrorIs(t, err, throttle.ErrLimited)
		assert.Equal(t, int32(1), body.closes.Load())

		time.Sleep(100 * time.Millisecond)
		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, []time.Duration{0, time.Second}, rec.times(),
			"the cancelled reservation's slot went to the next request")
	})
}

func TestDeadlineShorterThanWaitFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, perSecond(waiters.Block()))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))

		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = send(ctx, tr)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, time.Second, le.RetryAfter)
		assert.Zero(t, time.Since(start), "refused without sleeping")
		assert.NoError(t, ctx.Err())

		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, []time.Duration{0, time.Second}, rec.times(), "the refusal held nothing")
	})
}

func TestWithWaiterOverridesRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, perSecond(waiters.Block()))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))

		interactive := throttle.WithWaiter(context.Background(), waiters.FailFast())
		assert.ErrorIs(t, send(interactive, tr), throttle.ErrLimited)

		custom := throttle.WithWaiter(context.Background(), throttle.WaiterFunc(func(context.Context) time.Duration {
			return 2 * time.Second
		}))
		require.NoError(t, send(custom, tr))
		assert.Equal(t, []time.Duration{0, time.Second}, rec.times())
	})
}

func TestPauseHoldsScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		store := memstore.New()
		tr, err := throttle.NewTransport(rec, perSecond(waiters.Block()), throttle.WithStore(store))
		require.NoError(t, err)
		require.NoError(t, store.Pause(context.Background(), "api", "", 3*time.Second))

		err = send(throttle.WithWaiter(context.Background(), waiters.FailFast()), tr)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Empty(t, le.Limit, "a pause, not a limit, bound it")
		assert.Equal(t, 3*time.Second, le.RetryAfter)

		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, []time.Duration{3 * time.Second}, rec.times(), "Block waited out the pause")
	})
}

func TestWaitersBudgets(t *testing.T) {
	ctx := context.Background()
	assert.Equal(t, time.Duration(0), waiters.FailFast().MaxWait(ctx))
	assert.Equal(t, 30*time.Second, waiters.UpTo(30*time.Second).MaxWait(ctx))
	assert.Equal(t, time.Duration(0), waiters.UpTo(-time.Second).MaxWait(ctx))
	assert.Equal(t, waiters.Forever, waiters.Block().MaxWait(ctx))
	assert.Equal(t, "up-to(30s)", waiters.UpTo(30*time.Second).String())
	var _ throttle.Waiter = waiters.Block()
	assert.False(t, errors.Is(nil, throttle.ErrLimited))
}

func TestHooksReportEveryOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var events []throttle.DecisionEvent
		hooks := throttle.Hooks{OnDecision: func(e throttle.DecisionEvent) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}}
		p := perSecond(waiters.Block())
		p.Rules = append(p.Rules, throttle.Rule{Name: "keyed", Host: "keyed.example.com",
			Limits: []throttle.Limit{{Name: "k", Rate: 1, Per: time.Second, Key: throttle.KeyFromContext("tenant")}}})
		p.Rules[0], p.Rules[1] = p.Rules[1], p.Rules[0]
		tr, err := throttle.NewTransport(newRecorder(), p, throttle.WithHooks(hooks))
		require.NoError(t, err)

		require.NoError(t, send(context.Background(), tr)) // allowed
		require.NoError(t, send(context.Background(), tr)) // waited 1s
		assert.Error(t, send(throttle.WithWaiter(context.Background(), waiters.FailFast()), tr))
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		assert.Error(t, send(ctx, tr)) // next slot in 1s; deadline 0.5s: refused at once
		cancel()
		ctx, cancel = context.WithCancel(context.Background())
		go func() { time.Sleep(300 * time.Millisecond); cancel() }()
		assert.ErrorIs(t, send(ctx, tr), context.Canceled) // gave up after 0.3s
		req, _ := http.NewRequest(http.MethodGet, "http://keyed.example.com/", nil)
		_, err = tr.RoundTrip(req)
		assert.ErrorIs(t, err, throttle.ErrMissingKey) // failed

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, events, 6)
		got := make([]string, len(events))
		for i, e := range events {
			got[i] = fmt.Sprintf("%s %s %s %v %v", e.Rule, e.Outcome, e.Limit, e.Wait, e.Err != nil)
		}
		assert.Equal(t, []string{
			"api allowed  0s false",
			"api waited  1s false",
			"api refused rps 1s true",
			"api refused rps 1s true",
			"api gave-up  300ms true",
			"keyed failed  0s true",
		}, got)
	})
}
