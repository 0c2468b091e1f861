package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
)

// TestCluster runs the conformance suite and the key layout checks on a
// real 3-master Redis Cluster: a script touching keys of two slots would
// fail with CROSSSLOT.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	cl := redistest.StartCluster(t, 3, 0)
	newCluster := func(t *testing.T) *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	prefix := redistest.Prefix(t)

	t.Run("Inspect", func(t *testing.T) {
		inspectConcurrency(t, newStoreOn(t, newCluster(t), prefix))
	})

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Config{
			New: func(t *testing.T, now func() time.Time) throttle.Store {
				return newStoreOn(t, newCluster(t), prefix, redisstore.WithNow(now))
			},
			Instances: func(t *testing.T, now func() time.Time, n int) []throttle.Store {
				ss := make([]throttle.Store, n)
				for i := range ss {
					ss[i] = newStoreOn(t, newCluster(t), prefix, redisstore.WithNow(now))
				}
				return ss
			},
		})
	})

	t.Run("KeyLayout", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		s := newStoreOn(t, newCluster(t), prefix)
		scopes, keys := hostile()
		for _, sc := range scopes {
			for _, k := range keys {
				exercise(t, s, sc, k)
			}
		}
		var nodes []*redis.Client
		for _, m := range cl.Masters() {
			nodes = append(nodes, newClient(t, m.Addr()))
		}
		checkLayout(t, nodes, prefix, scopes, true)
	})
}
