package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/quotakit/throttle/internal/queuetest"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
)

// TestQueueDropOldest runs issue 28's reproductions of DropOldest
// (package queuetest) on a real redis-server; TestCluster runs them on a
// Cluster.
func TestQueueDropOldest(t *testing.T) {
	queueDropOldest(t, func(t *testing.T) redis.UniversalClient { return newClient(t, srv.Addr()) })
	// Three instances, each with a client and a queue of its own.
	t.Run("Fleet", func(t *testing.T) {
		for _, c := range queuetest.Cases {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				var instances []quota.Store
				for range 3 {
					instances = append(instances, newStore(t, prefix))
				}
				queuetest.Fleet(t, instances, newStore(t, prefix), c)
			})
		}
	})
}

// queueDropOldest runs the reproductions with stores on clients from
// dial: the callers, the fail-fast prober and each run of the comparison
// get a client of their own, as separate instances would.
func queueDropOldest(t *testing.T, dial func(t *testing.T) redis.UniversalClient) {
	t.Run("Horizon", func(t *testing.T) {
		for _, c := range queuetest.Cases {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				prefix := redistest.Prefix(t)
				queuetest.Horizon(t, newStoreOn(t, dial(t), prefix), newStoreOn(t, dial(t), prefix), c)
			})
		}
	})
	// Every run goes at once, each on a store of its own, on Redis's
	// clock: 5 s, more on a loaded machine, which stretches the runs'
	// offers and wakes their waiters late. So each run is measured
	// against what the limit allows over its own window, and the two with
	// wide margins: a queue that loses the dropped waiters' quota sends
	// a tenth of it (6% with GCRA, 20% with a log).
	t.Run("Throughput", func(t *testing.T) {
		t.Parallel() // mostly asleep: beside the other scenarios
		const rate = 10
		sent := queuetest.Throughputs(t, func() quota.Store { return newStoreOn(t, dial(t), redistest.Prefix(t)) })
		for i, c := range queuetest.Cases {
			refuse, drop := sent[i][0], sent[i][1]
			t.Logf("%s: RefuseNew sent %d in %v (%.2f of the limit), DropOldest %d in %v (%.2f)",
				c.Name, refuse.Sent, refuse.Window, refuse.Share(rate), drop.Sent, drop.Window, drop.Share(rate))
			assert.GreaterOrEqual(t, refuse.Share(rate), 0.5, "%s: RefuseNew uses most of the quota", c.Name)
			assert.GreaterOrEqual(t, drop.Share(rate), 0.5, "%s: DropOldest uses most of the quota", c.Name)
			assert.GreaterOrEqual(t, drop.Share(rate), 0.75*refuse.Share(rate), "%s: DropOldest sends about as many as RefuseNew", c.Name)
		}
	})
}
