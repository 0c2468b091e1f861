package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTakeWindowMatchesTake runs the same random one-limit fixed-window
// and sliding-window demands (with no pause key or one) through
// take_window.lua and through take.lua, each on its own prefix, on one clock, with some reservations
// cancelled, and asserts the same decisions and the same hashes and TTLs.
func TestTakeWindowMatchesTake(t *testing.T) {
	for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingWindow} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%v/seed=%d", alg, seed), func(t *testing.T) {
				compareWindowTakes(t, alg, seed)
			})
		}
	}
}

func compareWindowTakes(t *testing.T, alg quota.Algorithm, seed uint64) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(seed, 11))
	clock := storetest.NewClock(storetest.Start)
	c, fast, slow, fastPrefix, slowPrefix := differential(t, clock, "fast:", "slow:", redisstore.WithGenericTake())
	limits := []quota.Limit{
		{Name: "a", Rate: 4, Per: time.Millisecond, Algorithm: alg},
		{Name: "b", Rate: 6, Per: 1500 * time.Microsecond, Algorithm: alg},
	}
	seen := map[string]int{}
	spans := writeSpans{}
	var held [][2]*quota.Reservation
	for step := range 400 {
		if rng.IntN(8) == 0 {
			d := time.Duration(rng.IntN(3000)) * time.Microsecond
			require.NoError(t, fast.Pause(ctx(t), "s", "p", d))
			require.NoError(t, slow.Pause(ctx(t), "s", "p", d))
		}
		if len(held) > 0 && rng.IntN(6) == 0 {
			i := rng.IntN(len(held))
			require.NoError(t, slow.Cancel(ctx(t), held[i][0]))
			require.NoError(t, fast.Cancel(ctx(t), held[i][1]))
			held = append(held[:i], held[i+1:]...)
		}
		b := quota.Bucket{Limit: limits[rng.IntN(2)], Key: []string{"x", "y"}[rng.IntN(2)]}
		d := &quota.Demand{Scope: "s", Cost: 1 + rng.IntN(3), MaxWait: time.Duration(rng.IntN(4000)) * time.Microsecond,
			Limits: []quota.Bucket{b}}
		if rng.IntN(2) == 0 {
			d.Pauses = []string{"p"}
		}
		// Classes noted on the counter (share.lua's notes, take_window.lua
		// since issue 31): a top class, and a class with a headroom of 1
		// lent while no top class is active.
		switch rng.IntN(4) {
		case 0:
			d.Limits[0].Classed = true
		case 1:
			d.Limits[0].Headroom, d.Cost = 1, 1+rng.IntN(2)
		}
		stepStart := time.Now()
		want, err := slow.Take(ctx(t), d)
		require.NoError(t, err)
		got, err := fast.Take(ctx(t), d)
		require.NoError(t, err)
		if want.OK {
			spans.charged(b.Limit.Name+":"+b.Key, stepStart)
		}
		where := fmt.Sprintf("step %d: %+v", step, d)
		seen[outcome(want)]++
		if sameDecision(t, want, got, where) && want.OK && want.Delay > 0 {
			held = append(held, [2]*quota.Reservation{want.Reservation, got.Reservation})
		}
		k := "v1:{s}:" + map[quota.Algorithm]string{quota.FixedWindow: "f", quota.SlidingWindow: "w"}[alg] + ":" + b.Limit.Name + ":" + b.Key
		wv, err := c.HGetAll(ctx(t), slowPrefix+k).Result()
		require.NoError(t, err)
		gv, err := c.HGetAll(ctx(t), fastPrefix+k).Result()
		require.NoError(t, err)
		assert.Equal(t, wv, gv, "%s: hash %s", where, k)
		readStart := time.Now()
		wt, err := c.PTTL(ctx(t), slowPrefix+k).Result()
		require.NoError(t, err)
		gt, err := c.PTTL(ctx(t), fastPrefix+k).Result()
		require.NoError(t, err)
		samePTTL(t, wt.Milliseconds(), gt.Milliseconds(), spans[b.Limit.Name+":"+b.Key], time.Since(readStart), where+": PTTL of "+k)
		notes := "v1:{s}:h" + k[len("v1:{s}:"):]
		wn, err := c.HGetAll(ctx(t), slowPrefix+notes).Result()
		require.NoError(t, err)
		gn, err := c.HGetAll(ctx(t), fastPrefix+notes).Result()
		require.NoError(t, err)
		assert.Equal(t, wn, gn, "%s: notes %s", where, notes)
		clock.Advance(time.Duration(rng.IntN(700)) * time.Microsecond)
	}
	t.Logf("outcomes: %v", seen)
	assert.Len(t, seen, 4, "every kind of outcome occurs")
}
