package throttle_test

import (
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadsBeforeReservedWrites is issue 28's first reproduction, on the
// in-process store (redisstore's TestReadsBeforeReservedWrites runs it on
// Redis and a Cluster): rules "writes" {points 300/s, content 100/s} and
// "reads" {points}, sliding logs in one scope, a write costing 5 of each.
// 48 writes reserve content at 0, 1s and 2s; then 200 of the 300 points
// are free now, and reads take them at once, not after the last write's
// reservation. The 201st read is due at 1s, when the first writes' points
// leave: reads never take the points the writes reserved.
//
// The store's clock stands still, so the delays are exact however slowly
// a loaded machine runs the test.
func TestReadsBeforeReservedWrites(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	lim, err := throttle.NewLimiter(placementPolicy(), throttle.WithStore(store))
	require.NoError(t, err)
	checkReadsBeforeReservedWrites(t, lim)
}

func placementPolicy() throttle.Policy {
	points := throttle.Limit{Name: "points", Rate: 300, Per: time.Second, Algorithm: throttle.SlidingLog}
	content := throttle.Limit{Name: "content", Rate: 100, Per: time.Second, Algorithm: throttle.SlidingLog}
	return throttle.Policy{Rules: []throttle.Rule{
		{Name: "writes", Scope: "api", Limits: []throttle.Limit{points, content}, Wait: waiters.Block()},
		{Name: "reads", Scope: "api", Limits: []throttle.Limit{points}, Wait: waiters.Block()},
	}}
}

func checkReadsBeforeReservedWrites(t *testing.T, lim *throttle.Limiter) {
	t.Helper()
	ctx := t.Context()
	for i := range 48 {
		p, err := lim.Reserve(ctx, "writes", 5)
		require.NoError(t, err, "write %d", i)
		require.Equal(t, time.Duration(i/20)*time.Second, p.Delay, "write %d: 20 writes' content a second", i)
	}
	for i := range 200 {
		p, err := lim.Reserve(ctx, "reads", 1)
		require.NoError(t, err, "read %d", i)
		require.Zero(t, p.Delay, "read %d: 200 of the 300 points are free now", i)
	}
	p, err := lim.Reserve(ctx, "reads", 1)
	require.NoError(t, err)
	assert.Equal(t, time.Second, p.Delay, "the 201st read waits until the first writes' points leave, not until the last write")
}
