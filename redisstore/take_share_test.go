package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTakeShareMatchesTake runs the same random demands with a tenant on
// one of one or two GCRA limits through take_share.lua and through
// take.lua (share.lua), each on its own prefix, on one clock, and asserts
// the same decisions and the same state afterwards: the GCRA keys, the
// shares key (active tenants, clocks, the claims' lapse) and the claims.
// Three tenants on limits of a few units make claims and demands held
// back by them; the conformance tables check both against the model.
func TestTakeShareMatchesTake(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			compareShareTakes(t, seed)
		})
	}
}

// shareLimits are the GCRA limits of the tenant differentials: limits of
// a few units, so that three tenants make claims and are held back by
// them.
var shareLimits = []quota.Limit{
	{Name: "a", Rate: 5, Per: 10 * time.Millisecond},           // T = 2000 µs
	{Name: "b", Rate: 4, Per: 8 * time.Millisecond, Burst: 2},  // T = 2000 µs
	{Name: "c", Rate: 10, Per: 5 * time.Millisecond, Burst: 3}, // T = 500 µs
}

func compareShareTakes(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	clock := storetest.NewClock(storetest.Start)
	opts := []redisstore.Option{redisstore.WithNow(clock.Now), redisstore.WithReplay(redisstore.ReplayNoRetries), redisstore.WithBatching(0)}
	c := newClient(t, srv.Addr(), func(o *redis.Options) { o.MaxRetries = -1 })
	fastPrefix, slowPrefix := redistest.Prefix(t)+"fast:", redistest.Prefix(t)+"slow:"
	fast := newStoreOn(t, c, fastPrefix, opts...)
	slow := newStoreOn(t, c, slowPrefix, append(opts, redisstore.WithGenericTake())...)
	limits := shareLimits
	seen, claimed := map[string]int{}, 0
	for step := range 400 {
		if rng.IntN(10) == 0 {
			d := time.Duration(rng.IntN(3000)) * time.Microsecond
			require.NoError(t, fast.Pause(ctx(t), "s", "p", d))
			require.NoError(t, slow.Pause(ctx(t), "s", "p", d))
		}
		d := &quota.Demand{Scope: "s", Cost: 1 + rng.IntN(2), MaxWait: time.Duration(rng.IntN(6000)) * time.Microsecond}
		for _, i := range rng.Perm(len(limits))[:1+rng.IntN(2)] {
			d.Limits = append(d.Limits, quota.Bucket{Limit: limits[i], Key: "x"})
		}
		d.Limits[rng.IntN(len(d.Limits))].Tenant = []string{"t1", "t2", "t3"}[rng.IntN(3)]
		if rng.IntN(3) == 0 {
			d.Pauses = []string{"p"}
		}
		want, err := slow.Take(ctx(t), d)
		require.NoError(t, err)
		got, err := fast.Take(ctx(t), d)
		require.NoError(t, err)
		where := fmt.Sprintf("step %d: %+v", step, d)
		seen[outcome(want)]++
		if !sameDecision(t, want, got, where) {
			return
		}
		for _, b := range d.Limits {
			k := gcraKey(quota.Bucket{Limit: b.Limit, Key: "x"})
			wv, _ := keyState(t, c, slowPrefix+k)
			gv, _ := keyState(t, c, fastPrefix+k)
			assert.Equal(t, wv, gv, "%s: value of %s", where, k)
			if b.Tenant == "" {
				continue
			}
			for _, kind := range []string{"z", "k", "e"} {
				k := "v1:{s}:" + kind + gcraTag(b.Limit) + b.Limit.Name + ":x"
				want := zsetState(t, c, slowPrefix+k)
				assert.Equal(t, want, zsetState(t, c, fastPrefix+k), "%s: %s", where, k)
				if kind == "k" && !strings.HasPrefix(want, "[] ") {
					claimed++
				}
			}
		}
		clock.Advance(time.Duration(rng.IntN(1500)) * time.Microsecond)
	}
	t.Logf("outcomes: %v; steps after which a claim was kept: %d", seen, claimed)
	assert.Len(t, seen, 4, "every kind of outcome occurs: %v", seen)
	assert.Positive(t, claimed, "claims were made")
}

// zsetState returns a sorted set's members and scores, and whether it
// has a TTL.
func zsetState(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	zs, err := c.ZRangeWithScores(ctx(t), key, 0, -1).Result()
	require.NoError(t, err)
	ttl, err := c.PTTL(ctx(t), key).Result()
	require.NoError(t, err)
	return fmt.Sprintf("%v ttl=%v", zs, ttl >= 0 || len(zs) == 0)
}
