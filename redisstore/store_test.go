package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	retrying := newClient(t, srv.Addr())
	noRetry := newClient(t, srv.Addr(), func(o *redis.Options) { o.MaxRetries = -1 })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
	t.Cleanup(func() { _ = cluster.Close() })
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		opts   []redisstore.Option
		ok     bool
	}{
		{"defaults", retrying, nil, true},
		{"nil client", nil, nil, false},
		{"prefix with a brace", retrying, []redisstore.Option{redisstore.WithPrefix("a{b}:")}, false},
		{"no retries required, client retries", retrying, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)}, false},
		{"no retries required, client does not retry", noRetry, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)}, true},
		{"no retries required, cluster redirects", cluster, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)}, false},
		{"unknown replay mode", retrying, []redisstore.Option{redisstore.WithReplay(7)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redisstore.New(tc.client, tc.opts...)
			if tc.ok {
				assert.NoError(t, err)
				assert.NotNil(t, s)
			} else {
				assert.Error(t, err)
				assert.Nil(t, s)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	s := newStore(t, redistest.Prefix(t))
	c := ctx(t)
	lim := func(l quota.Limit) *quota.Demand {
		return &quota.Demand{Scope: "bad", Limits: []quota.Bucket{{Limit: l}}, Cost: 1}
	}
	for name, d := range map[string]*quota.Demand{
		"nil":             nil,
		"cost 0":          {Scope: "bad", Cost: 0},
		"no name":         lim(quota.Limit{Rate: 1, Per: time.Second}),
		"name with colon": lim(quota.Limit{Name: "a:b", Rate: 1, Per: time.Second}),
		"zero rate":       lim(quota.Limit{Name: "a", Per: time.Second}),
		"per below 1µs":   lim(quota.Limit{Name: "a", Rate: 1, Per: time.Nanosecond}),
		"too large":       lim(quota.Limit{Name: "a", Rate: 1 << 40, Per: time.Hour}),
		"window burst":    lim(quota.Limit{Name: "a", Rate: 2, Burst: 3, Per: time.Hour, Algorithm: quota.FixedWindow}),
	} {
		_, err := s.Take(c, d)
		assert.Error(t, err, name)
	}
	_, err := s.Take(c, lim(quota.Limit{Name: "a", Rate: 0, Per: time.Second}))
	assert.ErrorIs(t, err, quota.ErrInvalid)

	for name, r := range map[string]*quota.Reservation{
		"nil":           nil,
		"no demand":     {},
		"marks missing": {Demand: gcraDemand("bad", 1)},
	} {
		assert.Error(t, s.Cancel(c, r), name)
	}
	assert.NoError(t, s.Pause(c, "bad", "p", 0))
	assert.NoError(t, s.Pause(c, "bad", "p", -time.Second))
}

func TestErrorsWrap(t *testing.T) {
	s := newStore(t, redistest.Prefix(t))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Take(cancelled, gcraDemand("wrap", 1))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "redisstore: ")
	assert.ErrorIs(t, s.Pause(cancelled, "wrap", "p", time.Second), context.Canceled)

	// A server that is gone: the go-redis error comes through.
	gone := redistest.Start(t)
	addr := gone.Addr()
	require.NoError(t, gone.Stop())
	s2 := newStoreOn(t, newClient(t, addr, func(o *redis.Options) { o.MaxRetries = -1 }), "x:")
	_, err = s2.Take(ctx(t), gcraDemand("wrap", 1))
	assert.Error(t, err)
	assert.ErrorContains(t, err, "redisstore: take: ")
}

// TestTimeout: a Redis that stalls costs a caller with no deadline of its
// own the store's per-call timeout, reported as the context's error.
func TestTimeout(t *testing.T) {
	p := faultproxy.New(t, srv.Addr())
	c := newClient(t, p.Addr(), func(o *redis.Options) { o.ContextTimeoutEnabled = true })
	s := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithTimeout(50*time.Millisecond))
	_, err := s.Take(context.Background(), gcraDemand("timeout", 10))
	require.NoError(t, err)

	p.SetBlackhole(true)
	_, err = s.Take(context.Background(), gcraDemand("timeout", 10))
	p.SetBlackhole(false)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}
