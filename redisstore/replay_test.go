package redisstore_test

import (
	"errors"
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

// gcraDemand is a demand on one GCRA limit of rate per hour, so its charges
// never drain during a test.
func gcraDemand(scope string, rate int) *quota.Demand {
	return &quota.Demand{
		Scope:  scope,
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: time.Hour}, Key: "k"}},
		Cost:   1,
	}
}

// charged returns how many units of a rate-per-hour GCRA bucket are used,
// read without charging from the store's own key.
func charged(t *testing.T, c *redis.Client, prefix, scope string, rate int) int {
	t.Helper()
	v, err := c.Get(ctx(t), prefix+"v1:{"+scope+"}:g:l:k").Int64()
	if err == redis.Nil {
		return 0
	}
	require.NoError(t, err)
	tm, err := c.Time(ctx(t)).Result()
	require.NoError(t, err)
	T := time.Hour.Microseconds() / int64(rate)
	return int((v - tm.UnixMicro() + T - 1) / T)
}

// TestReplayLostReply runs decisions whose reply is lost after Redis ran
// them, so go-redis runs the script again, and counts the charges. The
// demand is GCRA-only, so it runs take_gcra.lua unless a case forces
// take.lua.
func TestReplayLostReply(t *testing.T) {
	direct := newClient(t, srv.Addr())
	cases := []struct {
		name string
		// fault arms the fault for one call and returns its undo.
		fault   func(p *faultproxy.Proxy) func()
		opts    []redisstore.Option
		client  func(*redis.Options)
		wantErr bool
		resent  bool // the error is ErrResent
		want    int  // units charged by one Take
	}{{
		name:  "dropped reply, ids",
		fault: func(p *faultproxy.Proxy) func() { p.DropReplyTo("evalsha"); return func() {} },
		opts:  []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs)},
		want:  1,
	}, {
		name:  "dropped reply, ids, take.lua",
		fault: func(p *faultproxy.Proxy) func() { p.DropReplyTo("evalsha"); return func() {} },
		opts:  []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs), redisstore.WithGenericTake()},
		want:  1,
	}, {
		name:    "dropped reply, detect (the default for this client)",
		fault:   func(p *faultproxy.Proxy) func() { p.DropReplyTo("evalsha"); return func() {} },
		wantErr: true,
		resent:  true,
		want:    1,
	}, {
		name:    "dropped reply, detect, take.lua",
		fault:   func(p *faultproxy.Proxy) func() { p.DropReplyTo("evalsha"); return func() {} },
		opts:    []redisstore.Option{redisstore.WithReplay(redisstore.ReplayDetect), redisstore.WithGenericTake()},
		wantErr: true,
		resent:  true,
		want:    1,
	}, {
		name:  "dropped reply, no ids (the double charge ids prevent)",
		fault: func(p *faultproxy.Proxy) func() { p.DropReplyTo("evalsha"); return func() {} },
		opts:  []redisstore.Option{redisstore.WithoutReplayIDs()},
		want:  2,
	}, {
		name:    "dropped reply, client without retries",
		fault:   func(p *faultproxy.Proxy) func() { p.DropReplyTo("evalsha"); return func() {} },
		client:  func(o *redis.Options) { o.MaxRetries = -1 },
		opts:    []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)},
		wantErr: true,
		want:    1,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := faultproxy.New(t, srv.Addr())
			var copts []func(*redis.Options)
			if tc.client != nil {
				copts = append(copts, tc.client)
			}
			prefix := redistest.Prefix(t)
			s := newStoreOn(t, newClient(t, p.Addr(), copts...), prefix, tc.opts...)
			d := gcraDemand("replay", 10)

			// Warm up: load the script and open a connection.
			_, err := s.Take(ctx(t), d)
			require.NoError(t, err)
			require.Equal(t, 1, charged(t, direct, prefix, "replay", 10))

			undo := tc.fault(p)
			dec, err := s.Take(ctx(t), d)
			undo()
			if tc.wantErr {
				assert.Error(t, err)
				assert.Equal(t, tc.resent, errors.Is(err, redisstore.ErrResent), "errors.Is(err, ErrResent): %v", err)
			} else {
				require.NoError(t, err)
				assert.True(t, dec.OK)
			}
			assert.Equal(t, 1+tc.want, charged(t, direct, prefix, "replay", 10), "units charged")
			assert.Equal(t, 1, p.Stats().Dropped, "replies dropped")
		})
	}
}
