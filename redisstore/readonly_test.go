package redisstore_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadOnlyReplicaAtRunTime: a client whose fixed address is a replica
// gets a configuration error naming that address, the master and the fix
// from every call, as from Check: the Take (a marked call, which go-redis
// retries after READONLY and the mark refuses as resent), batched or not,
// and the pause. A Limiter on it logs one Error naming the address, and
// its fallback grant carries the configuration error.
func TestReadOnlyReplicaAtRunTime(t *testing.T) {
	t.Parallel()
	replica := redistest.Start(t, redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(srv.Port())))
	wantAddr := "the client's address " + replica.Addr() + " is a replica of " + srv.Addr()
	d := &quota.Demand{Scope: "vendor", Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: 10, Per: time.Second}, Key: "k"}}}
	for name, opts := range map[string][]redisstore.Option{"batched": nil, "unbatched": {redisstore.WithBatching(0)}} {
		t.Run(name, func(t *testing.T) {
			s := newStoreOn(t, newClient(t, replica.Addr()), redistest.Prefix(t), opts...)
			_, err := s.Take(ctx(t), d)
			require.Error(t, err)
			t.Logf("Take: %v", err)
			assert.ErrorIs(t, err, quota.ErrStoreConfig)
			assert.ErrorContains(t, err, wantAddr)
			assert.ErrorContains(t, err, "point the client at the master")

			err = s.Pause(ctx(t), "vendor", "", time.Second)
			assert.ErrorIs(t, err, quota.ErrStoreConfig)
			assert.ErrorContains(t, err, "the client's address "+replica.Addr()+" is a replica")

			err = s.Check(ctx(t))
			assert.ErrorIs(t, err, quota.ErrStoreConfig)
			assert.ErrorContains(t, err, replica.Addr())
		})
	}

	t.Run("Limiter", func(t *testing.T) {
		s := newStoreOn(t, newClient(t, replica.Addr()), redistest.Prefix(t))
		var (
			mu   sync.Mutex
			logs bytes.Buffer
			evs  []throttle.StoreEvent
		)
		lim, err := throttle.NewLimiter(throttle.Policy{Instances: 1, Rules: []throttle.Rule{{Name: "vendor",
			Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Second}}}}},
			throttle.WithStore(s),
			throttle.WithLogger(slog.New(slog.NewTextHandler(&syncWriter{mu: &mu, w: &logs}, nil))),
			throttle.WithHooks(throttle.Hooks{OnStoreState: func(ev throttle.StoreEvent) {
				mu.Lock()
				evs = append(evs, ev)
				mu.Unlock()
			}}))
		require.NoError(t, err)
		p, err := lim.Allow(ctx(t), "vendor")
		require.NoError(t, err, "FailLocal grants from the local share")
		assert.Equal(t, throttle.FailLocal, p.Fallback)
		assert.ErrorIs(t, p.StoreErr, quota.ErrStoreConfig)
		assert.ErrorContains(t, p.StoreErr, wantAddr)
		p.Done()

		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, evs)
		assert.ErrorIs(t, evs[0].Err, quota.ErrStoreConfig)
		assert.Equal(t, throttle.StoreDown, evs[0].State, "one configuration error opens the breaker")
		assert.Contains(t, logs.String(), "level=ERROR")
		assert.Contains(t, logs.String(), "store misconfigured")
		assert.Contains(t, logs.String(), wantAddr)
	})
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// TestReadOnlyOnSentinelClient: a READONLY reply is a configuration error
// on a client with a fixed address and not on a Sentinel client (either
// way of making one), whose demoted master answers READONLY during a
// failover. No server is needed: the clients are never used.
func TestReadOnlyOnSentinelClient(t *testing.T) {
	t.Parallel()
	const reply = "READONLY You can't write against a read only replica. script: 1bb4, on @user_script:68."
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	universal := redis.NewUniversalClient(&redis.UniversalOptions{MasterName: "m", Addrs: []string{"127.0.0.1:1"}})
	plain := redis.NewClient(&redis.Options{Addr: "10.0.0.7:6379"})
	t.Cleanup(func() { _, _, _ = failover.Close(), universal.Close(), plain.Close() })

	assert.Empty(t, redisstore.ConfigCause(reply, failover), "NewFailoverClient")
	assert.Empty(t, redisstore.ConfigCause(reply, universal), "NewUniversalClient with MasterName")
	assert.Contains(t, redisstore.ConfigCause(reply, plain), "the client's address 10.0.0.7:6379 is a replica")
	assert.Contains(t, redisstore.ConfigCause("ERR Error running script: -READONLY You can't write against a read only replica.", plain), "read-only replica")
}
