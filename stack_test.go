package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// githubLike is one rule with GitHub's kind of stacked limits (scaled
// down): shared points where a write costs 5 and a read 1, writes only on
// the content limit, search only on the search limit.
func githubLike(per time.Duration) throttle.Rule {
	writes := func(r *http.Request) bool { return r.Method != http.MethodGet && r.Method != http.MethodHead }
	return throttle.Rule{
		Name: "github",
		Limits: []throttle.Limit{
			{Name: "points", Rate: 90, Per: per, Algorithm: throttle.SlidingLog,
				Cost: throttle.CostByMethod(5, map[string]int{"GET": 1, "HEAD": 1}), Key: throttle.KeyFromHeader("Authorization")},
			{Name: "content", Rate: 8, Per: per, Algorithm: throttle.SlidingLog, Match: writes, Key: throttle.KeyFromHeader("Authorization")},
			{Name: "search", Rate: 6, Per: per, Algorithm: throttle.SlidingLog, Key: throttle.KeyFromHeader("Authorization"),
				Match: func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/search/") }},
		},
		Wait: waiters.FailFast(),
	}
}

// TestStackedLimits pins the decisions of stacked limits on a store whose
// clock stands still: each request is charged to the limits that apply
// to it, each its own cost, all or none.
func TestStackedLimits(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()
	at := time.Unix(1_700_000_000, 0)
	store := memstore.New(memstore.WithClock(func() time.Time { return at }))
	tr, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{githubLike(time.Minute)}}, throttle.WithStore(store))
	require.NoError(t, err)
	send := func(method, path string) error {
		req, err := http.NewRequest(method, vendor.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "token-a")
		resp, err := tr.RoundTrip(req)
		if err == nil {
			require.NoError(t, resp.Body.Close())
		}
		return err
	}
	refusedBy := func(err error) string {
		var le *throttle.LimitError
		if errors.As(err, &le) {
			return le.Limit
		}
		return "not refused: " + errOrNil(err)
	}
	state := func() map[string]int64 {
		sts, err := store.Inspect(context.Background(), "github", []quota.Limit{
			githubLike(time.Minute).Limits[0].Quota(), githubLike(time.Minute).Limits[1].Quota(), githubLike(time.Minute).Limits[2].Quota()})
		require.NoError(t, err)
		used := map[string]int64{}
		for _, st := range sts {
			used[st.Limit] = st.Used
		}
		return used
	}

	// 8 writes: 40 points, the whole content limit; no search charged.
	for range 8 {
		require.NoError(t, send(http.MethodPost, "/repos/o/r/issues"))
	}
	assert.Equal(t, map[string]int64{"points": 40, "content": 8}, state())
	// A 9th write is refused by content, and charges no points.
	assert.Equal(t, "content", refusedBy(send(http.MethodPost, "/repos/o/r/issues")))
	assert.Equal(t, map[string]int64{"points": 40, "content": 8}, state())
	// Searches cost 1 point and 1 search; the 7th is refused by search.
	for range 6 {
		require.NoError(t, send(http.MethodGet, "/search/code"))
	}
	assert.Equal(t, "search", refusedBy(send(http.MethodGet, "/search/code")))
	assert.Equal(t, map[string]int64{"points": 46, "content": 8, "search": 6}, state())
	// Reads fill the points: 44 more, then the points refuse a read.
	for range 44 {
		require.NoError(t, send(http.MethodGet, "/repos/o/r"))
	}
	assert.Equal(t, "points", refusedBy(send(http.MethodGet, "/repos/o/r")))
	assert.Equal(t, map[string]int64{"points": 90, "content": 8, "search": 6}, state())
}

// TestStackedLimitsErrors: a limit's cost below 1 or above its capacity is
// the caller's error, and a PauseBy limit may not have a Match.
func TestStackedLimitsErrors(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()
	for _, tc := range []struct {
		cost int
		want error
	}{{0, throttle.ErrInvalidPolicy}, {-3, throttle.ErrInvalidPolicy}, {11, throttle.ErrCostTooHigh}} {
		tr, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{{Name: "r",
			Limits: []throttle.Limit{{Name: "a", Rate: 100, Per: time.Second}, {Name: "b", Rate: 10, Per: time.Second,
				Cost: func(*http.Request) int { return tc.cost }}}}}})
		require.NoError(t, err)
		req, _ := http.NewRequest(http.MethodGet, vendor.URL, nil)
		_, err = tr.RoundTrip(req)
		assert.ErrorIs(t, err, tc.want, "cost %d", tc.cost)
		assert.ErrorContains(t, err, "limit b")
	}
	_, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{{Name: "r",
		Limits: []throttle.Limit{{Name: "a", Rate: 100, Per: time.Second, Match: func(*http.Request) bool { return true }}},
		Learn:  throttle.Learning{PauseBy: "a"}}}})
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Learn.PauseBy", pe.Field)
}

func errOrNil(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// TestStackedLimitsLimiter: a Limiter call's n is the cost of the limits
// without a Cost of their own, as for LLM calls metered in requests and
// tokens.
func TestStackedLimitsLimiter(t *testing.T) {
	one := func(*http.Request) int { return 1 }
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{Name: "llm", Limits: []throttle.Limit{
		{Name: "requests", Rate: 3, Per: time.Minute, Algorithm: throttle.FixedWindow, Cost: one},
		{Name: "tokens", Rate: 1000, Per: time.Minute, Algorithm: throttle.FixedWindow},
	}}}}, throttle.WithStore(memstore.New(memstore.WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) }))))
	require.NoError(t, err)
	p, err := lim.AllowN(t.Context(), "llm", 600)
	require.NoError(t, err)
	assert.Equal(t, int64(2), p.Remaining, "2 requests left, 400 tokens left")
	p, err = lim.AllowN(t.Context(), "llm", 400)
	require.NoError(t, err)
	assert.Equal(t, int64(0), p.Remaining, "no tokens left")
	_, err = lim.AllowN(t.Context(), "llm", 1)
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "tokens", le.Limit)
}

// TestStackedLimitsFailLocal: with the store down, FailLocal decides the
// limits that apply to each request on this instance's share of each,
// the skipped limit included in none.
func TestStackedLimitsFailLocal(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()
	writes := func(r *http.Request) bool { return r.Method == http.MethodPost }
	tr, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Instances: 2, Rules: []throttle.Rule{{Name: "r",
		Wait: waiters.FailFast(),
		Limits: []throttle.Limit{
			{Name: "writes", Rate: 2, Per: time.Hour, Algorithm: throttle.FixedWindow, Match: writes},
			{Name: "all", Rate: 10, Per: time.Hour, Algorithm: throttle.FixedWindow},
		}}}}, throttle.WithStore(failingStore{errors.New("connection refused")}))
	require.NoError(t, err)
	send := func(method string) string {
		req, _ := http.NewRequest(method, vendor.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			var le *throttle.LimitError
			if errors.As(err, &le) {
				return le.Limit
			}
			return err.Error()
		}
		resp.Body.Close()
		return "sent"
	}
	// This instance's shares: writes 1, all 5.
	assert.Equal(t, "sent", send(http.MethodPost))
	assert.Equal(t, "writes", send(http.MethodPost))
	for range 4 {
		assert.Equal(t, "sent", send(http.MethodGet))
	}
	assert.Equal(t, "all", send(http.MethodGet))
}
