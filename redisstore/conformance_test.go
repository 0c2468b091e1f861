package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
)

// TestConformance runs the suite on a single node in each of the ways Take
// can run a demand: marked calls (ReplayDetect, the default for a client
// that retries) with the default batching, replay ids, a client that
// never retries, take.lua for every demand, batching off, and batching
// from the second call in flight on (so that concurrent cases batch).
// With -short, only the default and take.lua. The variants run in
// parallel, each on a redis-server of its own.
func TestConformance(t *testing.T) {
	noRetries := func(o *redis.Options) { o.MaxRetries = -1 }
	for _, tc := range []struct {
		name   string
		client []func(*redis.Options)
		opts   []redisstore.Option
	}{
		{"detect", nil, nil},
		{"replay ids", nil, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs)}},
		{"no batching", nil, []redisstore.Option{redisstore.WithBatching(0)}},
		{"eager batching", nil, []redisstore.Option{redisstore.WithBatching(16), redisstore.WithBatchInFlight(1)}},
		{"no retries", []func(*redis.Options){noRetries}, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)}},
		{"take.lua only", nil, []redisstore.Option{redisstore.WithGenericTake()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if testing.Short() && tc.name != "detect" && tc.name != "take.lua only" {
				t.Skip("short: the default and take.lua only")
			}
			t.Parallel()
			own := redistest.Start(t)
			prefix := redistest.Prefix(t)
			newOne := func(t *testing.T, now func() time.Time) quota.Store {
				opts := append([]redisstore.Option{redisstore.WithNow(now)}, tc.opts...)
				return newStoreOn(t, newClient(t, own.Addr(), tc.client...), prefix, opts...)
			}
			storetest.Run(t, storetest.Config{
				New: newOne,
				Instances: func(t *testing.T, now func() time.Time, n int) []quota.Store {
					ss := make([]quota.Store, n)
					for i := range ss {
						ss[i] = newOne(t, now)
					}
					return ss
				},
			})
		})
	}
}
