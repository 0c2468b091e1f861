package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
)

// methodVendor answers 429 with Retry-After: 30 on /api/slow and 200 on
// every other /api/{method}, counting arrivals per method.
type methodVendor struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func newMethodVendor(t *testing.T) *methodVendor {
	v := &methodVendor{hits: make(map[string]int)}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", func(w http.ResponseWriter, r *http.Request) {
		m := r.PathValue("method")
		v.mu.Lock()
		v.hits[m]++
		v.mu.Unlock()
		if m == "slow" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = w.Write([]byte(`{"ok":true}`))
	})
	v.Server = httptest.NewServer(mux)
	t.Cleanup(v.Close)
	return v
}

func (v *methodVendor) count(m string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.hits[m]
}

func methodRule(pauseBy string) throttle.Rule {
	return throttle.Rule{
		Name: "api", Path: "/api/{method}",
		Limits: []throttle.Limit{{Name: "method", Rate: 1000, Per: time.Second, Key: throttle.KeyFromPath("method")}},
		Learn:  throttle.Learning{PauseBy: pauseBy, Jitter: -1},
		Wait:   waiters.FailFast(),
	}
}

func get(t *testing.T, c *http.Client, url string) (int, error) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode, nil
}

func TestLearningPauseByPausesOnlyThatKey(t *testing.T) {
	v := newMethodVendor(t)
	store := memstore.New()
	policy := throttle.Policy{Rules: []throttle.Rule{methodRule("method")}}
	a, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	require.NoError(t, err)
	b, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	require.NoError(t, err)
	ca, cb := &http.Client{Transport: a}, &http.Client{Transport: b}
	defer ca.CloseIdleConnections()
	defer cb.CloseIdleConnections()

	status, err := get(t, ca, v.URL+"/api/slow")
	require.NoError(t, err, "a 429 is a response, not an error")
	assert.Equal(t, http.StatusTooManyRequests, status)

	for name, c := range map[string]*http.Client{"learner": ca, "other instance": cb} {
		_, err = get(t, c, v.URL+"/api/slow")
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le, "%s: the paused key is refused", name)
		assert.True(t, errors.Is(err, throttle.ErrLimited))
		assert.Equal(t, "method", le.Pause, "%s: the limit is named, never its key", name)
		assert.InDelta(t, 30, le.RetryAfter.Seconds(), 1, name)

		status, err = get(t, c, v.URL+"/api/fast")
		require.NoError(t, err, "%s: another key of the same rule is not paused", name)
		assert.Equal(t, http.StatusOK, status)
	}
	assert.Equal(t, 1, v.count("slow"))
	assert.Equal(t, 2, v.count("fast"))

	slow, _ := http.NewRequest(http.MethodGet, v.URL+"/api/slow", nil)
	fast, _ := http.NewRequest(http.MethodGet, v.URL+"/api/fast", nil)
	assert.InDelta(t, 30, a.LearnedPause(slow).Seconds(), 1)
	assert.Zero(t, a.LearnedPause(fast))
	assert.Zero(t, b.LearnedPause(slow), "b learned nothing itself; the store holds the pause")

	// A pause of the whole scope still holds back every key.
	require.NoError(t, store.Pause(context.Background(), "api", "", 10*time.Second))
	_, err = get(t, cb, v.URL+"/api/fast")
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "", le.Pause)
	assert.Equal(t, 2, v.count("fast"))
}

func TestLearningWithoutPauseByPausesTheScope(t *testing.T) {
	v := newMethodVendor(t)
	tr, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{methodRule("")}})
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	status, err := get(t, c, v.URL+"/api/slow")
	require.NoError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, status)
	_, err = get(t, c, v.URL+"/api/fast")
	assert.ErrorIs(t, err, throttle.ErrLimited, "the whole scope is paused")
	assert.Equal(t, 0, v.count("fast"))
}

func TestLearningPauseByValidation(t *testing.T) {
	r := methodRule("nope")
	err := throttle.Policy{Rules: []throttle.Rule{r}}.Validate()
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "api", pe.Rule)
	assert.Equal(t, "Learn.PauseBy", pe.Field)
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
}
