package quotaview_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaview"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
)

// Two instances, each with its own Redis client, share a real
// redis-server: instance A's page shows what B spent and the pause B
// learned from the vendor's 429, and B's page names the 429 as the cause.
func TestFleetOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	prefix := redistest.Prefix(t)
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok") // a body: a slot is held until it is closed
	}))
	defer vendor.Close()
	p := throttle.Policy{Rules: []throttle.Rule{{
		Name: "send", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{
			{Name: "per-user", Rate: 10, Per: time.Hour, Algorithm: throttle.SlidingLog, Key: throttle.KeyFromHeader("X-User")},
			{Name: "slots", Rate: 3, Per: time.Minute, Algorithm: throttle.Concurrency},
		},
	}}}
	type instance struct {
		store *redisstore.Store
		tr    *throttle.Transport
		page  http.Handler
	}
	var fleet [2]instance
	for i := range fleet {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		t.Cleanup(func() { client.Close() })
		store, err := redisstore.New(client, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		rec := quotaview.NewRecorder()
		base := &http.Transport{}
		t.Cleanup(base.CloseIdleConnections)
		tr, err := throttle.NewTransport(base, p, throttle.WithStore(store), throttle.WithHooks(rec.Hooks(throttle.Hooks{})))
		require.NoError(t, err)
		fleet[i] = instance{store, tr, quotaview.New(tr.Limiter(), quotaview.WithRecorder(rec))}
	}
	a, b := fleet[0], fleet[1]

	send := func(path string) *http.Response {
		req, _ := http.NewRequest(http.MethodGet, vendor.URL+path, nil)
		req.Header.Set("X-User", "ann")
		resp, err := b.tr.RoundTrip(req)
		require.NoError(t, err)
		return resp
	}
	for range 2 {
		resp := send("/")
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	held := send("/") // its slot is held until its body is closed
	defer held.Body.Close()

	states, err := a.store.Inspect(context.Background(), "send", []quota.Limit{p.Rules[0].Limits[0].Quota(), p.Rules[0].Limits[1].Quota()})
	require.NoError(t, err)
	sa := snapshot(t, a.page, "")
	for _, st := range states {
		c, ok := counter(sa, st.Limit, st.Key)
		require.True(t, ok, "%s %q", st.Limit, st.Key)
		assert.Equal(t, st.Remaining, c.Remaining, "%s %q", st.Limit, st.Key)
	}
	c, _ := counter(sa, "per-user", "ann")
	assert.EqualValues(t, 7, c.Remaining, "B's three requests, on A's page")
	c, _ = counter(sa, "slots", "")
	assert.EqualValues(t, 1, c.Used, "B's held slot")
	assert.Equal(t, 0, sa.Rules[0].InFlight, "A holds none")
	assert.Equal(t, 1, snapshot(t, b.page, "").Rules[0].InFlight, "B holds one")

	resp := send("/slow")
	resp.Body.Close()
	sa, sb := snapshot(t, a.page, ""), snapshot(t, b.page, "")
	require.Len(t, sa.Pauses, 1)
	require.Len(t, sb.Pauses, 1)
	assert.InDelta(t, 120, sa.Pauses[0].Reset.Seconds(), 10)
	assert.Equal(t, "learned by another instance", sa.Pauses[0].Cause)
	assert.Regexp(t, `^HTTP 429 to rule send, \d+s ago: paused 2m`, sb.Pauses[0].Cause)
	assert.Equal(t, "*redisstore.Store", sa.Store.Type)
}
