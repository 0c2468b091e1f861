package redisstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// learningVendor is an httptest server that answers its first request
// with first and every later one with 200, and records when each request
// arrived (its own clock) and its body.
type learningVendor struct {
	*httptest.Server

	mu       sync.Mutex
	n        int
	answered time.Time // when the first answer was written
	arrivals []time.Time
	bodies   []string
}

func newLearningVendor(t *testing.T, first func(w http.ResponseWriter)) *learningVendor {
	v := &learningVendor{}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		v.mu.Lock()
		v.n++
		n := v.n
		v.arrivals = append(v.arrivals, time.Now())
		v.bodies = append(v.bodies, string(body))
		v.mu.Unlock()
		w.Header().Set("Date", time.Now().UTC().Format(http.TimeFormat))
		if n == 1 {
			first(w)
			v.mu.Lock()
			v.answered = time.Now()
			v.mu.Unlock()
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(v.Close)
	return v
}

func (v *learningVendor) snapshot() (answered time.Time, arrivals []time.Time, bodies []string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.answered, append([]time.Time(nil), v.arrivals...), append([]string(nil), v.bodies...)
}

// fleet returns n transports, each with its own Redis client and store
// (separate instances of a service), on one prefix.
func fleet(t *testing.T, n int, p throttle.Policy) []*throttle.Transport {
	prefix := redistest.Prefix(t)
	ts := make([]*throttle.Transport, n)
	for i := range ts {
		tr, err := throttle.NewTransport(nil, p, throttle.WithStore(newStore(t, prefix)))
		require.NoError(t, err)
		t.Cleanup(tr.CloseIdleConnections)
		ts[i] = tr
	}
	return ts
}

func vendorPolicy(host string, learn throttle.Learning, retry throttle.Retry, limits ...throttle.Limit) throttle.Policy {
	learn.Jitter = -1 // exact instants
	if limits == nil {
		limits = []throttle.Limit{{Name: "rps", Rate: 1000, Per: time.Second}}
	}
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor", Host: host, Limits: limits, Learn: learn, Retry: retry,
	}}}
}

func get(ctx context.Context, tr *throttle.Transport, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// checkFleetPaused sends from instance 0 (which gets the vendor's first
// answer), then from the seven others at once, some failing fast, and
// checks that none of them reached the vendor before until(answered).
func checkFleetPaused(t *testing.T, v *learningVendor, ts []*throttle.Transport, until func(answered time.Time) time.Time) {
	ctx := ctx(t)
	require.NoError(t, get(ctx, ts[0], v.URL+"/x"))
	answered, _, _ := v.snapshot()
	end := until(answered)

	for _, tr := range ts[1:] {
		var le *throttle.LimitError
		err := get(throttle.WithWaiter(ctx, waiters.FailFast()), tr, v.URL+"/x")
		if time.Now().Before(end.Add(-100 * time.Millisecond)) {
			require.ErrorAs(t, err, &le, "a fail-fast caller is refused during the pause")
			assert.Positive(t, le.RetryAfter)
		}
	}
	var wg sync.WaitGroup
	for _, tr := range ts[1:] {
		wg.Go(func() { assert.NoError(t, get(ctx, tr, v.URL+"/x")) })
	}
	wg.Wait()

	_, arrivals, _ := v.snapshot()
	require.Len(t, arrivals, len(ts), "one request per instance reached the vendor, none lost")
	for i, at := range arrivals[1:] {
		assert.False(t, at.Before(end), "request %d arrived %v before the pause ended", i+1, end.Sub(at))
	}
	last := arrivals[len(arrivals)-1]
	t.Logf("pause ended %v after the answer; the blocked instances resumed within %v of its end",
		end.Sub(answered).Round(time.Millisecond), last.Sub(end).Round(time.Millisecond))
}

func TestFleetPausesOn429RetryAfter(t *testing.T) {
	t.Parallel()
	v := newLearningVendor(t, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	ts := fleet(t, 8, vendorPolicy("", throttle.Learning{}, throttle.Retry{}))
	checkFleetPaused(t, v, ts, func(answered time.Time) time.Time { return answered.Add(2 * time.Second) })
}

func TestFleetPausesUntilGitHubReset(t *testing.T) {
	t.Parallel()
	var reset atomic.Int64 // epoch seconds, set by the handler
	v := newLearningVendor(t, func(w http.ResponseWriter) {
		reset.Store(time.Now().Unix() + 3)
		w.Header().Set("X-RateLimit-Limit", "5000")
		w.Header().Set("X-RateLimit-Remaining", "0")
		w.Header().Set("X-RateLimit-Reset", strconv.FormatInt(reset.Load(), 10))
		w.Header().Set("X-RateLimit-Resource", "core")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"message":"API rate limit exceeded"}`)
	})
	// The vendor is on loopback, so give it GitHub's profile by its host.
	host := strings.TrimPrefix(v.URL, "http://")
	gh := quotaheader.GitHub
	gh.Hosts = []string{host}
	prefix := redistest.Prefix(t)
	ts := make([]*throttle.Transport, 8)
	for i := range ts {
		tr, err := throttle.NewTransport(nil, vendorPolicy("", throttle.Learning{}, throttle.Retry{}),
			throttle.WithStore(newStore(t, prefix)), throttle.WithProfiles(gh))
		require.NoError(t, err)
		t.Cleanup(tr.CloseIdleConnections)
		ts[i] = tr
	}
	checkFleetPaused(t, v, ts, func(time.Time) time.Time { return time.Unix(reset.Load(), 0) })
}

func TestRetriesAreChargedAndReplayBodies(t *testing.T) {
	t.Parallel()
	v := newLearningVendor(t, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	// Two per minute, exactly: the first send and its resend use both.
	lim := throttle.Limit{Name: "rpm", Rate: 2, Per: time.Minute, Algorithm: throttle.SlidingLog}
	ts := fleet(t, 2, vendorPolicy("", throttle.Learning{}, throttle.Retry{Max: 3}, lim))
	ctx := ctx(t)

	const payload = `{"text":"deploy finished"}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, v.URL+"/post", strings.NewReader(payload))
	require.NoError(t, err)
	resp, err := ts[0].RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the caller gets the resend's answer")
	require.NoError(t, resp.Body.Close())

	answered, arrivals, bodies := v.snapshot()
	assert.Equal(t, []string{payload, payload}, bodies, "the body arrived whole both times")
	require.Len(t, arrivals, 2)
	assert.False(t, arrivals[1].Before(answered.Add(time.Second)), "the resend waited out the pause")

	var le *throttle.LimitError
	require.ErrorAs(t, get(throttle.WithWaiter(ctx, waiters.FailFast()), ts[1], v.URL+"/x"), &le,
		"the resend was charged: the other instance finds the quota spent")
	assert.Equal(t, "rpm", le.Limit)
}

func TestHeaderSyncAcrossInstances(t *testing.T) {
	t.Parallel()
	v := newLearningVendor(t, func(w http.ResponseWriter) {
		w.Header().Set("RateLimit-Limit", "60")
		w.Header().Set("RateLimit-Remaining", "0")
		w.Header().Set("RateLimit-Reset", "30")
		w.WriteHeader(http.StatusOK)
	})
	lim := throttle.Limit{Name: "rpm", Rate: 60, Per: time.Minute}
	ts := fleet(t, 2, vendorPolicy("", throttle.Learning{Sync: "rpm"}, throttle.Retry{}, lim))
	ctx := ctx(t)
	require.NoError(t, get(ctx, ts[0], v.URL+"/x"))
	var le *throttle.LimitError
	require.ErrorAs(t, get(throttle.WithWaiter(ctx, waiters.FailFast()), ts[1], v.URL+"/x"), &le)
	// Synced to 0 left for 30 s: the limit binds for about 31 s (the
	// pause for remaining 0 binds for 30 s; the longer wins).
	assert.Equal(t, "rpm", le.Limit)
	assert.InDelta(t, float64(31*time.Second), float64(le.RetryAfter), float64(2*time.Second))
}
