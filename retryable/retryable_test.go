package retryable_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/retryable"
	"github.com/quotakit/throttle/waiters"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// vendor is an httptest server that answers with the statuses and headers
// its answer function gives, and records what it received.
type vendor struct {
	*httptest.Server
	mu     sync.Mutex
	at     []time.Time
	bodies []string
	answer func(n int, w http.ResponseWriter) // n counts from 1
}

func newVendor(t *testing.T, answer func(n int, w http.ResponseWriter)) *vendor {
	v := &vendor{answer: answer}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		v.mu.Lock()
		v.at = append(v.at, time.Now())
		v.bodies = append(v.bodies, string(b))
		n := len(v.at)
		v.mu.Unlock()
		v.answer(n, w)
	}))
	t.Cleanup(v.Close)
	return v
}

func (v *vendor) received() ([]time.Time, []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]time.Time(nil), v.at...), append([]string(nil), v.bodies...)
}

// stack returns a retryablehttp client on a throttle transport with one
// rule for every request to v, and a counter of the transport's decisions.
func stack(t *testing.T, limit throttle.Limit, w throttle.Waiter, p retryable.Policy) (*retryablehttp.Client, *atomic.Int64) {
	t.Helper()
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	var decisions atomic.Int64
	rule := throttle.Rule{Name: "vendor", Wait: w}
	if limit.Rate > 0 {
		rule.Limits = []throttle.Limit{limit}
	}
	tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{rule}},
		throttle.WithHooks(throttle.Hooks{OnDecision: func(throttle.DecisionEvent) { decisions.Add(1) }}))
	require.NoError(t, err)
	c := retryable.NewClient(tr, p)
	c.RetryWaitMin = time.Millisecond
	c.RetryWaitMax = 10 * time.Millisecond
	c.RetryMax = 3
	return c, &decisions
}

func tooMany(retryAfter string) func(int, http.ResponseWriter) {
	return func(n int, w http.ResponseWriter) {
		if n == 1 {
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}
}

func TestRetryWaitsForRetryAfterAndReplaysTheBody(t *testing.T) {
	v := newVendor(t, tooMany("0.3"))
	c, decisions := stack(t, throttle.Limit{}, waiters.FailFast(), retryable.Policy{})

	resp, err := c.Post(v.URL+"/chat.postMessage", "text/plain", strings.NewReader("hello"))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok", string(body))

	at, bodies := v.received()
	require.Len(t, at, 2, "one 429, one retry")
	assert.Equal(t, []string{"hello", "hello"}, bodies, "the retry carries the whole body")
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 300*time.Millisecond, "never retried before Retry-After")
	assert.Equal(t, int64(2), decisions.Load(), "the retry went through the limiter")
}

func TestRetryWaitsForTheLearnedPause(t *testing.T) {
	// A 429 without Retry-After: the transport pauses the rule for its
	// DefaultPause, and the retry waits for that pause.
	v := newVendor(t, tooMany(""))
	var decisions atomic.Int64
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor", Wait: waiters.FailFast(),
		Learn: throttle.Learning{DefaultPause: 250 * time.Millisecond, Jitter: -1},
	}}}, throttle.WithHooks(throttle.Hooks{OnDecision: func(throttle.DecisionEvent) { decisions.Add(1) }}))
	require.NoError(t, err)
	c := retryable.NewClient(tr, retryable.Policy{})
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 2*time.Millisecond

	resp, err := c.Get(v.URL + "/x")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	at, _ := v.received()
	require.Len(t, at, 2)
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 250*time.Millisecond,
		"the retry waited for the pause the transport learned, not the 1 ms backoff")
	assert.Equal(t, int64(2), decisions.Load(), "Backoff waited out the pause: the retry was not refused first")
}

func TestAbsurdRetryAfterReturnsTheResponse(t *testing.T) {
	v := newVendor(t, tooMany("86400"))
	c, decisions := stack(t, throttle.Limit{}, waiters.FailFast(), retryable.Policy{MaxWait: time.Minute})

	done := make(chan struct{})
	var resp *http.Response
	var err error
	go func() {
		defer close(done)
		resp, err = c.Get(v.URL + "/x")
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the client is sleeping for the vendor's Retry-After of a day")
	}
	require.NoError(t, err, "the 429 comes back as a response")
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "86400", resp.Header.Get("Retry-After"))
	at, _ := v.received()
	assert.Len(t, at, 1, "not retried")
	assert.Equal(t, int64(1), decisions.Load())
}

func TestRefusalIsRetriedAfterItsRetryAfter(t *testing.T) {
	v := newVendor(t, func(int, http.ResponseWriter) {})
	limit := throttle.Limit{Name: "l", Rate: 1, Per: 300 * time.Millisecond, Burst: 1}
	c, decisions := stack(t, limit, waiters.FailFast(), retryable.Policy{})

	for range 2 {
		resp, err := c.Get(v.URL + "/x")
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
	}
	at, _ := v.received()
	require.Len(t, at, 2)
	// The vendor sees arrivals: the first request dials the connection
	// the second reuses, so it lands later after its admission, by 1.3 ms
	// in a CI run under -race. The transport promises arrivals within a
	// twentieth of the window of the limit (late.go's lateTolerance), as
	// vendors' counters forgive.
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 300*time.Millisecond-300*time.Millisecond/20, "sent within the limit")
	// Admitted, refused, admitted: the refusal was retried once, after its
	// RetryAfter, not hammered every millisecond of backoff.
	assert.Equal(t, int64(3), decisions.Load())
}

func TestLongRefusalIsNotRetried(t *testing.T) {
	v := newVendor(t, func(int, http.ResponseWriter) {})
	limit := throttle.Limit{Name: "hourly", Rate: 1, Per: time.Hour, Burst: 1}
	c, decisions := stack(t, limit, waiters.FailFast(), retryable.Policy{MaxWait: time.Minute})

	resp, err := c.Get(v.URL + "/x")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	_, err = c.Get(v.URL + "/x")
	require.ErrorIs(t, err, throttle.ErrLimited, "the refusal reaches the caller through go-retryablehttp")
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "hourly", le.Limit)
	assert.Greater(t, le.RetryAfter, 59*time.Minute)
	assert.Equal(t, int64(2), decisions.Load(), "no retry of a refusal beyond MaxWait")
	at, _ := v.received()
	assert.Len(t, at, 1)
}

func TestRefusalPastTheDeadlineIsNotRetried(t *testing.T) {
	v := newVendor(t, func(int, http.ResponseWriter) {})
	limit := throttle.Limit{Name: "l", Rate: 1, Per: 10 * time.Second, Burst: 1}
	c, decisions := stack(t, limit, waiters.FailFast(), retryable.Policy{})

	resp, err := c.Get(v.URL + "/x")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, v.URL+"/x", nil)
	require.NoError(t, err)
	_, err = c.Do(req)
	require.ErrorIs(t, err, throttle.ErrLimited)
	assert.NoError(t, ctx.Err(), "gave up at once, without sleeping into the deadline")
	assert.Equal(t, int64(2), decisions.Load())
}

func TestUndecidableRequestIsNotRetried(t *testing.T) {
	v := newVendor(t, func(int, http.ResponseWriter) {})
	limit := throttle.Limit{Name: "per-team", Rate: 10, Per: time.Minute, Key: throttle.KeyFromContext("team")}
	c, decisions := stack(t, limit, waiters.FailFast(), retryable.Policy{})

	_, err := c.Get(v.URL + "/x") // no team in the context
	require.ErrorIs(t, err, throttle.ErrMissingKey)
	assert.Equal(t, int64(1), decisions.Load(), "retrying cannot find the key")
}

func TestCheckRetry(t *testing.T) {
	p := retryable.Policy{MaxWait: time.Second}
	ctx := context.Background()

	retry, err := p.CheckRetry(ctx, nil, &throttle.LimitError{Rule: "r", RetryAfter: time.Millisecond})
	assert.True(t, retry)
	assert.NoError(t, err)

	gaveUp := &throttle.LimitError{Rule: "r", Err: context.DeadlineExceeded}
	retry, err = p.CheckRetry(ctx, nil, gaveUp)
	assert.False(t, retry, "a request that gave up waiting is not resent")
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	retry, err = p.CheckRetry(cancelled, nil, &throttle.LimitError{Rule: "r", RetryAfter: time.Millisecond})
	assert.False(t, retry)
	assert.ErrorIs(t, err, context.Canceled)

	retry, err = p.CheckRetry(ctx, &http.Response{StatusCode: http.StatusInternalServerError}, nil)
	assert.True(t, retry, "everything else goes to go-retryablehttp's policy")
	assert.NoError(t, err)

	retry, _ = p.CheckRetry(ctx, &http.Response{StatusCode: http.StatusOK}, nil)
	assert.False(t, retry)

	boom := errors.New("boom")
	p.Next = func(context.Context, *http.Response, error) (bool, error) { return false, boom }
	_, err = p.CheckRetry(ctx, &http.Response{StatusCode: http.StatusBadGateway}, nil)
	assert.ErrorIs(t, err, boom, "Next decides the rest")
}

func TestBackoff(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	p := retryable.Policy{MaxWait: time.Minute, Now: func() time.Time { return now }}
	resp := func(status int, kv ...string) *http.Response {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return &http.Response{StatusCode: status, Header: h}
	}
	cases := []struct {
		name string
		resp *http.Response
		want time.Duration
	}{
		{"delay seconds", resp(429, "Retry-After", "2"), 2 * time.Second},
		{"fractional", resp(429, "Retry-After", "0.5"), 500 * time.Millisecond},
		{"HTTP date against Date", resp(503, "Retry-After", "Mon, 23 Nov 2026 12:00:30 GMT",
			"Date", "Mon, 23 Nov 2026 12:00:10 GMT"), 20 * time.Second},
		{"capped at MaxWait", resp(429, "Retry-After", "86400"), time.Minute},
		{"remaining 0 until reset", resp(429, "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", "1795435215"), 15 * time.Second},
		{"garbage: exponential", resp(429, "Retry-After", "soon"), 400 * time.Millisecond},
		{"no response: exponential", nil, 400 * time.Millisecond},
		{"500: exponential", resp(500, "Retry-After", "9"), 400 * time.Millisecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, p.Backoff(100*time.Millisecond, time.Second, 2, c.resp))
		})
	}
	assert.Equal(t, time.Second, p.Backoff(100*time.Millisecond, time.Second, 200, nil), "at most max")
}

func TestGitHubSpentQuotaIsRetriedAfterTheReset(t *testing.T) {
	// GitHub answers a spent primary quota with a 403, which
	// go-retryablehttp alone would not retry; the transport's GitHub
	// profile pauses the rule until the reset, and the retry waits for it.
	reset := time.Now().Add(1500 * time.Millisecond).Unix() // whole seconds, as GitHub sends it
	v := newVendor(t, func(n int, w http.ResponseWriter) {
		if n == 1 {
			w.Header().Set("X-RateLimit-Remaining", "0")
			w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"message":"API rate limit exceeded"}`)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	gh := quotaheader.GitHub
	gh.Hosts = []string{strings.TrimPrefix(v.URL, "http://")}
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
		Name: "github", Wait: waiters.FailFast(), Learn: throttle.Learning{Jitter: -1},
	}}}, throttle.WithProfiles(gh))
	require.NoError(t, err)
	c := retryable.NewClient(tr, retryable.Policy{})
	c.RetryWaitMin, c.RetryWaitMax = time.Millisecond, 2*time.Millisecond

	resp, err := c.Get(v.URL + "/repos/o/r")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	at, _ := v.received()
	require.Len(t, at, 2)
	assert.False(t, at[1].Before(time.Unix(reset, 0)), "not resent before the reset")
}
