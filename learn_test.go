package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
)

// scriptedVendor answers like a rate-limited API, in memory so tests can
// run in a synctest bubble: each request gets the next scripted answer (the
// last one repeats). It records when each request arrived and its body.
type scriptedVendor struct {
	start   time.Time
	answers []func(h http.Header) int // sets headers, returns the status

	mu     sync.Mutex
	n      int
	at     []time.Duration
	bodies []string
}

func newScriptedVendor(answers ...func(h http.Header) int) *scriptedVendor {
	return &scriptedVendor{start: time.Now(), answers: answers}
}

func (v *scriptedVendor) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	v.mu.Lock()
	answer := v.answers[min(v.n, len(v.answers)-1)]
	v.n++
	v.at = append(v.at, time.Since(v.start))
	v.bodies = append(v.bodies, string(body))
	v.mu.Unlock()
	h := make(http.Header)
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	status := answer(h)
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

func (v *scriptedVendor) arrivals() []time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]time.Duration(nil), v.at...)
}

func ok200(http.Header) int { return http.StatusOK }

func tooMany(retryAfter string) func(http.Header) int {
	return func(h http.Header) int {
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		return http.StatusTooManyRequests
	}
}

// learningPolicy is a loose limit, so only pauses hold requests back.
func learningPolicy(w throttle.Waiter, learn throttle.Learning, retry throttle.Retry) throttle.Policy {
	if learn.Jitter == 0 {
		learn.Jitter = -1 // exact instants in tests
	}
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor", Limits: []throttle.Limit{{Name: "rps", Rate: 1000, Per: time.Second}},
		Wait: w, Learn: learn, Retry: retry,
	}}}
}

func TestRetryAfterPausesEveryInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("2"), ok200)
		store := throttle.NewMemoryStore() // shared by the instances, as Redis would be
		var pauses []throttle.PauseEvent
		a, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{}),
			throttle.WithStore(store), throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { pauses = append(pauses, e) }}))
		require.NoError(t, err)

		req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
		resp, err := a.RoundTrip(req)
		require.NoError(t, err, "a 429 is a response")
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, "2", resp.Header.Get("Retry-After"), "returned unchanged")
		require.NoError(t, resp.Body.Close())
		require.Len(t, pauses, 1)
		assert.Equal(t, 2*time.Second, pauses[0].Pause)

		// Seven other instances, each with its own transport on the store.
		var wg sync.WaitGroup
		for range 7 {
			other, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{}), throttle.WithStore(store))
			require.NoError(t, err)
			ff := throttle.WithWaiter(context.Background(), waiters.FailFast())
			var le *throttle.LimitError
			require.ErrorAs(t, send(ff, other), &le, "fail-fast callers are refused during the pause")
			assert.Equal(t, 2*time.Second, le.RetryAfter)
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, send(context.Background(), other))
			}()
		}
		wg.Wait()
		got := vendor.arrivals()
		require.Len(t, got, 8)
		assert.Equal(t, time.Duration(0), got[0])
		for i, at := range got[1:] {
			assert.Equal(t, 2*time.Second, at, "instance %d sent nothing before the pause ended", i+1)
		}
	})
}

func TestRemainingZeroPausesUntilReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := time.Now().Add(30 * time.Second).Unix()
		vendor := newScriptedVendor(func(h http.Header) int {
			h.Set("X-RateLimit-Limit", "5000")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
			return http.StatusOK
		}, ok200)
		store := throttle.NewMemoryStore()
		p := learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{})
		a, err := throttle.NewTransport(vendor, p, throttle.WithStore(store))
		require.NoError(t, err)
		b, err := throttle.NewTransport(vendor, p, throttle.WithStore(store))
		require.NoError(t, err)

		require.NoError(t, send(context.Background(), a))
		require.NoError(t, send(context.Background(), b))
		assert.Equal(t, []time.Duration{0, 30 * time.Second}, vendor.arrivals(),
			"the other instance waited for the reset before any 429")
	})
}

func TestSlowDownWithoutTimeBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany(""), tooMany(""), tooMany(""), ok200)
		var pauses []time.Duration
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.Block(), throttle.Learning{DefaultPause: 10 * time.Second}, throttle.Retry{}),
			throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { pauses = append(pauses, e.Pause) }}))
		require.NoError(t, err)
		for range 4 {
			require.NoError(t, send(context.Background(), tr))
		}
		require.Len(t, pauses, 3)
		// 10s, then about 20s and 40s (backoff randomizes by 10%).
		assert.InDelta(t, float64(10*time.Second), float64(pauses[0]), float64(time.Second))
		assert.InDelta(t, float64(20*time.Second), float64(pauses[1]), float64(2*time.Second))
		assert.InDelta(t, float64(40*time.Second), float64(pauses[2]), float64(4*time.Second))
		at := vendor.arrivals()
		assert.Equal(t, at[1], pauses[0])
		assert.Equal(t, at[3], pauses[0]+pauses[1]+pauses[2])
	})
}

func TestMaxPauseCapsAbsurdRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("999999999"), ok200)
		var pauses []throttle.PauseEvent
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.FailFast(), throttle.Learning{MaxPause: time.Minute}, throttle.Retry{}),
			throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { pauses = append(pauses, e) }}))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))
		require.Len(t, pauses, 1)
		assert.Equal(t, time.Minute, pauses[0].Pause)
	})
}

func TestRetryGoesThroughTheLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("1"), ok200)
		var events []throttle.DecisionEvent
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{Max: 3}),
			throttle.WithHooks(throttle.Hooks{OnDecision: func(e throttle.DecisionEvent) { events = append(events, e) }}))
		require.NoError(t, err)

		const payload = `{"text":"hello"}`
		req, _ := http.NewRequest(http.MethodPost, "http://api.example.com/x", strings.NewReader(payload))
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "the caller sees the successful resend")
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, []time.Duration{0, time.Second}, vendor.arrivals(), "the resend waited out the pause")
		assert.Equal(t, []string{payload, payload}, vendor.bodies, "the body was replayed whole")
		require.Len(t, events, 2, "the resend was decided (and charged) like any request")
		assert.Equal(t, throttle.Waited, events[1].Outcome)
	})
}

func TestRetryGivesUpAndReturnsTheAnswer(t *testing.T) {
	t.Run("body cannot be replayed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vendor := newScriptedVendor(tooMany("1"), ok200)
			tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{Max: 3}))
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodPost, "http://api.example.com/x", io.NopCloser(strings.NewReader("x")))
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Len(t, vendor.arrivals(), 1)
		})
	})
	t.Run("pause beyond the waiter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vendor := newScriptedVendor(tooMany("60"), ok200)
			tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.UpTo(time.Second), throttle.Learning{}, throttle.Retry{Max: 3}))
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, "{}", string(body), "the answer is returned unread")
			assert.Len(t, vendor.arrivals(), 1)
		})
	})
	t.Run("attempts are capped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vendor := newScriptedVendor(tooMany("1"))
			tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{Max: 2}))
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, vendor.arrivals())
		})
	})
}

// pauseLosingStore is a shared store that loses every pause, as a Redis
// restart would.
type pauseLosingStore struct{ *throttle.MemoryStore }

func (pauseLosingStore) Pause(context.Context, string, string, time.Duration) error {
	return errors.New("connection reset")
}

func TestLocalPauseSurvivesStoreLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("3"), ok200)
		var perr error
		tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{}),
			throttle.WithStore(pauseLosingStore{throttle.NewMemoryStore()}),
			throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { perr = e.Err }}))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))
		assert.Error(t, perr, "the store could not record the pause")
		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, []time.Duration{0, 3 * time.Second}, vendor.arrivals(), "this instance's own copy held")
	})
}

func TestLearningOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("30"), ok200)
		tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.FailFast(), throttle.Learning{Off: true}, throttle.Retry{}))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))
		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, []time.Duration{0, 0}, vendor.arrivals())
	})
}
