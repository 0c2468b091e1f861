package redisstore_test

import (
	"testing"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSettleLostReply settles a reservation whose reply is lost after
// Redis ran the settlement, so that go-redis runs settle.lua again: the
// refund is given once, whatever the store does about resent calls.
func TestSettleLostReply(t *testing.T) {
	direct := newClient(t, srv.Addr())
	cases := []struct {
		name    string
		opts    []redisstore.Option
		client  func(*redis.Options)
		wantErr bool
	}{
		{name: "detect (the default for this client)"},
		{name: "ids", opts: []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs)}},
		{name: "no ids", opts: []redisstore.Option{redisstore.WithoutReplayIDs()}},
		{
			name:    "client without retries",
			client:  func(o *redis.Options) { o.MaxRetries = -1 },
			opts:    []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)},
			wantErr: true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := faultproxy.New(t, srv.Addr())
			var copts []func(*redis.Options)
			if tc.client != nil {
				copts = append(copts, tc.client)
			}
			prefix := redistest.Prefix(t)
			s := newStoreOn(t, newClient(t, p.Addr(), copts...), prefix, tc.opts...)
			d := gcraDemand("settle", 100)
			d.Cost = 10
			dec, err := s.Take(ctx(t), d)
			require.NoError(t, err)
			require.True(t, dec.OK)
			// Load the script and open a connection: settling to 0 leaves
			// the charge as it is.
			require.NoError(t, s.Settle(ctx(t), dec.Reservation, []int{0}))
			require.Equal(t, 10, charged(t, direct, prefix, "settle", 100))

			p.DropReplyTo("evalsha")
			err = s.Settle(ctx(t), dec.Reservation, []int{3})
			if tc.wantErr {
				assert.Error(t, err)
			} else {
				assert.NoError(t, err)
			}
			assert.Equal(t, 1, p.Stats().Dropped, "replies dropped")
			assert.Equal(t, 3, charged(t, direct, prefix, "settle", 100), "units charged after the settlement")

			// Settling again, as a caller does after an error, changes
			// nothing more.
			require.NoError(t, s.Settle(ctx(t), dec.Reservation, []int{3}))
			assert.Equal(t, 3, charged(t, direct, prefix, "settle", 100), "units charged after settling again")
		})
	}
}

// TestSettleKeyExpires: the settlement key lives until the reservation's
// charges can be settled no more, and no longer.
func TestSettleKeyExpires(t *testing.T) {
	direct := newClient(t, srv.Addr())
	prefix := redistest.Prefix(t)
	s := newStore(t, prefix)
	d := gcraDemand("settle-ttl", 100) // Per an hour
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	require.NoError(t, s.Settle(ctx(t), dec.Reservation, []int{2}))
	key := prefix + "v1:{settle-ttl}:s:" + dec.Reservation.ID
	v, err := direct.Get(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Equal(t, "2", v, "the costs settled to")
	ttl, err := direct.PTTL(ctx(t), key).Result()
	require.NoError(t, err)
	// Per (an hour) after the arrival time the charge of 2 set.
	assert.Greater(t, ttl.Minutes(), 60.0)
	assert.LessOrEqual(t, ttl.Minutes(), 60.0+2*36.0/60+1)

	// A reservation of a concurrency limit only has nothing to settle.
	cd := &quota.Demand{Scope: "settle-ttl", Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "c", Rate: 1, Per: 60e9, Algorithm: quota.Concurrency}}}}
	dec, err = s.Take(ctx(t), cd)
	require.NoError(t, err)
	require.NoError(t, s.Settle(ctx(t), dec.Reservation, []int{5}))
	n, err := direct.Exists(ctx(t), prefix+"v1:{settle-ttl}:s:"+dec.Reservation.ID).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "no settlement key")
}
