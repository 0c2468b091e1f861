package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestReadsBeforeReservedWrites is issue 28's first reproduction through
// a Limiter, on Redis (TestCluster runs it on a Cluster; the root
// package's test of the same name in process).
func TestReadsBeforeReservedWrites(t *testing.T) {
	readsBeforeReservedWrites(t, newClient(t, srv.Addr()))
}

// readsBeforeReservedWrites: sliding logs "points" (300/s, shared by
// rules "writes" and "reads") and "content" (100/s, writes only), a
// write costing 5 of each. 48 writes reserve content at 0, 1s and 2s;
// reads then take the 200 points free now at once, and the 201st is due
// at 1s, not after the last write. The store's clock stands still.
func readsBeforeReservedWrites(t *testing.T, c redis.UniversalClient) {
	points := throttle.Limit{Name: "points", Rate: 300, Per: time.Second, Algorithm: throttle.SlidingLog}
	content := throttle.Limit{Name: "content", Rate: 100, Per: time.Second, Algorithm: throttle.SlidingLog}
	policy := throttle.Policy{Rules: []throttle.Rule{
		{Name: "writes", Scope: "api", Limits: []throttle.Limit{points, content}, Wait: waiters.Block()},
		{Name: "reads", Scope: "api", Limits: []throttle.Limit{points}, Wait: waiters.Block()},
	}}
	clock := storetest.NewClock(storetest.Start)
	store := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithNow(clock.Now))
	lim, err := throttle.NewLimiter(policy, throttle.WithStore(store))
	require.NoError(t, err)
	delays := map[string][]time.Duration{}
	for _, call := range []struct {
		rule    string
		n, cost int
	}{{"writes", 48, 5}, {"reads", 201, 1}} {
		for range call.n {
			p, err := lim.Reserve(t.Context(), call.rule, call.cost)
			require.NoError(t, err)
			delays[call.rule] = append(delays[call.rule], p.Delay)
		}
	}
	for i, d := range delays["writes"] {
		require.Equal(t, time.Duration(i/20)*time.Second, d, "write %d: 20 writes' content a second", i)
	}
	for i, d := range delays["reads"][:200] {
		require.Zero(t, d, "read %d: 200 of the 300 points are free now", i)
	}
	require.Equal(t, time.Second, delays["reads"][200], "the 201st read waits until the first writes' points leave, not until the last write")
}
