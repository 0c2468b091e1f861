package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlidingLogMatchesMemoryStore drives the sliding logs of take.lua,
// cancel.lua and sync.lua and the in-process store with the same seeded
// random steps (demands on one or two logs, half of them with their
// entries scored by a quota.LogExpiry, reservations, cancels of any
// outstanding grant, syncs, clock moves) on logs of hundreds of entries,
// and asserts the same decisions and the same Inspect states. After every
// step each log key keeps its layout: members "instant:cost:id" in order
// of instant, each scored with the running total of the costs up to it.
func TestSlidingLogMatchesMemoryStore(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			slidingLogDifferential(t, seed, 1500)
		})
	}
}

func slidingLogDifferential(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 18))
	clock := storetest.NewClock(storetest.Start)
	// A server of its own: every step inspects the logs, a SCAN of the
	// whole key space, which the package's shared server fills with the
	// conformance suite's keys (tens of thousands, alive an hour on the
	// test clock).
	c := newClient(t, redistest.Start(t).Addr(), func(o *redis.Options) { o.MaxRetries = -1 })
	prefix := redistest.Prefix(t)
	rs := newStoreOn(t, c, prefix, redisstore.WithNow(clock.Now), redisstore.WithReplay(redisstore.ReplayNoRetries))
	ms := memstore.New(memstore.WithClock(clock.Now))
	const scope = "log"

	limits := []quota.Limit{
		{Name: "a", Rate: 50 + rng.IntN(300), Per: time.Duration(2000+rng.IntN(20000)) * time.Microsecond, Algorithm: quota.SlidingLog},
		{Name: "b", Rate: 5 + rng.IntN(30), Per: time.Duration(500+rng.IntN(5000)) * time.Microsecond, Algorithm: quota.SlidingLog},
	}
	t.Logf("limits: %+v", limits)
	bucket := func(i int) quota.Bucket { return quota.Bucket{Limit: limits[i], Key: "k"} }
	logKey := func(i int) string { return prefix + "v1:{" + scope + "}:l:" + limits[i].Name + ":k" }

	type held struct{ rs, ms *quota.Reservation }
	var outstanding []held
	for n := range steps {
		what := fmt.Sprintf("step %d", n)
		switch r := rng.IntN(100); {
		case r < 30:
			clock.Advance(time.Duration(rng.IntN(int(limits[0].Per/time.Microsecond)/20+1)) * time.Microsecond)
		case r < 38 && len(outstanding) > 0:
			k := rng.IntN(len(outstanding))
			h := outstanding[k]
			outstanding = append(outstanding[:k], outstanding[k+1:]...)
			require.NoError(t, rs.Cancel(ctx(t), h.rs), what)
			require.NoError(t, ms.Cancel(ctx(t), h.ms), what)
		case r < 42:
			i := rng.IntN(len(limits))
			left, within := rng.IntN(limits[i].Rate+2)-1, time.Duration(1+rng.IntN(int(limits[i].Per)))
			require.NoError(t, rs.Sync(ctx(t), scope, bucket(i), left, within), what)
			require.NoError(t, ms.Sync(ctx(t), scope, bucket(i), left, within), what)
		default:
			d := &quota.Demand{Scope: scope, Cost: 1}
			switch rng.IntN(3) {
			case 0:
				d.Limits = []quota.Bucket{bucket(0)}
			case 1:
				d.Limits = []quota.Bucket{bucket(0), bucket(1)}
			default:
				d.Limits = []quota.Bucket{bucket(1), bucket(0)}
			}
			maxCost := limits[1].Rate
			if len(d.Limits) == 1 {
				maxCost = limits[0].Rate
			}
			if rng.IntN(10) == 0 {
				d.Cost = 1 + rng.IntN(maxCost)
			} else {
				d.Cost = 1 + rng.IntN(min(maxCost, 4))
			}
			if rng.IntN(2) == 0 {
				d.MaxWait = time.Duration(rng.IntN(int(2 * limits[0].Per)))
			}
			if rng.IntN(2) == 0 {
				// Entries scored by a grid's windows (quota.LogExpiry), as an
				// Anchor limit's log has them once the vendor's phase is known.
				for j := range d.Limits {
					d.Limits[j].Expiry = logExpiry(rng, d.Limits[j].Limit.Per)
				}
			}
			got, err := rs.Take(ctx(t), d)
			require.NoError(t, err, what)
			want, err := ms.Take(ctx(t), d)
			require.NoError(t, err, what)
			what = fmt.Sprintf("%s: cost %d, MaxWait %v, limits %d", what, d.Cost, d.MaxWait, len(d.Limits))
			assert.Equal(t, want.OK, got.OK, what)
			assert.Equal(t, want.Delay, got.Delay, what)
			assert.Equal(t, want.Limit, got.Limit, what)
			if got.OK && want.OK {
				outstanding = append(outstanding, held{got.Reservation, want.Reservation})
				// A grant prunes its logs: no entry at or before now-Per stays.
				for _, b := range d.Limits {
					head, err := c.ZRange(ctx(t), prefix+"v1:{"+scope+"}:l:"+b.Limit.Name+":k", 0, 0).Result()
					require.NoError(t, err, what)
					require.Len(t, head, 1, what)
					at, err := strconv.ParseInt(strings.SplitN(head[0], ":", 2)[0], 10, 64)
					require.NoError(t, err, what)
					assert.Greater(t, at, clock.Now().UnixMicro()-b.Limit.Per.Microseconds(), "%s: %s: not pruned", what, b.Limit.Name)
				}
			}
		}
		gotStates, err := rs.Inspect(ctx(t), scope, limits)
		require.NoError(t, err, what)
		wantStates, err := ms.Inspect(ctx(t), scope, limits)
		require.NoError(t, err, what)
		assert.Equal(t, wantStates, gotStates, what)
		for i := range limits {
			checkLogLayout(t, c, logKey(i), what)
		}
		if t.Failed() {
			t.FailNow()
		}
	}
}

// logExpiry returns a random quota.LogExpiry for a log of period per: a
// grid of a tenth less, its ends known exactly or within up to half a
// window, and a reach up to a third of per.
func logExpiry(rng *rand.Rand, per time.Duration) quota.LogExpiry {
	every := max(per*9/10, time.Microsecond).Truncate(time.Microsecond)
	e := quota.LogExpiry{Every: every, Phase: time.Duration(rng.Int64N(int64(every/time.Microsecond))) * time.Microsecond,
		Reach: time.Duration(rng.Int64N(int64(per/time.Microsecond)/3+1)) * time.Microsecond}
	if rng.IntN(2) == 0 {
		e.Spread = time.Duration(rng.Int64N(int64(every/time.Microsecond)/2+1)) * time.Microsecond
	}
	return e
}

// checkLogLayout asserts the layout of sliding-log key: members
// "instant:cost:id" in order of instant, each scored with the running
// total of the costs up to it, which starts at 0 or above.
func checkLogLayout(t *testing.T, c *redis.Client, key, what string) {
	t.Helper()
	zs, err := c.ZRangeWithScores(ctx(t), key, 0, -1).Result()
	require.NoError(t, err, what)
	var prevAt, prevTotal int64
	for i, z := range zs {
		m := z.Member.(string)
		f := strings.SplitN(m, ":", 3)
		require.Len(t, f, 3, "%s: member %q", what, m)
		at, err1 := strconv.ParseInt(f[0], 10, 64)
		cost, err2 := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err1, "%s: member %q", what, m)
		require.NoError(t, err2, "%s: member %q", what, m)
		total := int64(z.Score)
		if i == 0 {
			assert.GreaterOrEqual(t, total-cost, int64(0), "%s: %s: first member %q, total %d", what, key, m, total)
		} else {
			assert.GreaterOrEqual(t, at, prevAt, "%s: %s: member %q out of order", what, key, m)
			assert.Equal(t, prevTotal+cost, total, "%s: %s: member %q: running total", what, key, m)
		}
		prevAt, prevTotal = at, total
	}
}

// TestSlidingLogRebasesTheTotal: once the running total reaches 2^52 a
// take counts it again from 0 before the first entry, and decides as
// before.
func TestSlidingLogRebasesTheTotal(t *testing.T) {
	clock := storetest.NewClock(storetest.Start)
	c := newClient(t, srv.Addr())
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, c, prefix, redisstore.WithNow(clock.Now))
	l := quota.Limit{Name: "l", Rate: 5, Per: 10 * time.Microsecond, Algorithm: quota.SlidingLog}
	key := prefix + "v1:{rebase}:l:l:"
	now := storetest.Start.UnixMicro()
	const big = 1 << 52
	// Three entries of cost 1 at now-12 (out of the window), now-3 and
	// now-2, with totals just below 2^52.
	require.NoError(t, c.ZAdd(ctx(t), key,
		redis.Z{Score: big - 3, Member: fmt.Sprintf("%d:1:x", now-12)},
		redis.Z{Score: big - 2, Member: fmt.Sprintf("%d:1:y", now-3)},
		redis.Z{Score: big - 1, Member: fmt.Sprintf("%d:1:z", now-2)},
	).Err())
	d := &quota.Demand{Scope: "rebase", Cost: 3, Limits: []quota.Bucket{{Limit: l}}}
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.True(t, dec.OK)
	assert.Equal(t, time.Duration(0), dec.Delay)

	zs, err := c.ZRangeWithScores(ctx(t), key, 0, -1).Result()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, z := range zs {
		got[strings.Join(strings.SplitN(z.Member.(string), ":", 3)[:2], ":")] = z.Score
	}
	assert.Equal(t, map[string]float64{
		fmt.Sprintf("%d:1", now-3): 1,
		fmt.Sprintf("%d:1", now-2): 2,
		fmt.Sprintf("%d:3", now):   5,
	}, got)

	// Full: the next unit waits until the entry at now-3 leaves.
	d.Cost = 1
	dec, err = s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.False(t, dec.OK)
	assert.Equal(t, 7*time.Microsecond, dec.Delay)
}

// TestSlidingLogManyLaterEntries: Sync and Cancel move the running
// totals of every later entry, here 700 reservations waiting behind a
// pause (more than one ZADD's worth), and the store still agrees with the
// in-process store.
func TestSlidingLogManyLaterEntries(t *testing.T) {
	clock := storetest.NewClock(storetest.Start)
	c := newClient(t, srv.Addr())
	prefix := redistest.Prefix(t)
	rs := newStoreOn(t, c, prefix, redisstore.WithNow(clock.Now))
	ms := memstore.New(memstore.WithClock(clock.Now))
	stores := []quota.Store{rs, ms}
	l := quota.Limit{Name: "a", Rate: 2000, Per: time.Second, Algorithm: quota.SlidingLog}
	b := quota.Bucket{Limit: l}
	const scope = "later"
	key := prefix + "v1:{" + scope + "}:l:a:"
	compare := func(what string) {
		t.Helper()
		var states [2][]quota.LimitState
		for i, s := range stores {
			var err error
			states[i], err = s.(quota.Inspector).Inspect(ctx(t), scope, []quota.Limit{l})
			require.NoError(t, err)
		}
		assert.Equal(t, states[1], states[0], what)
		checkLogLayout(t, c, key, what)
	}

	reserved := make([][]*quota.Reservation, 2)
	for i, s := range stores {
		require.NoError(t, s.Pause(ctx(t), scope, "p", 500*time.Millisecond))
		for range 700 {
			dec, err := s.Take(ctx(t), &quota.Demand{Scope: scope, Cost: 1, MaxWait: time.Second, Pauses: []string{"p"}, Limits: []quota.Bucket{b}})
			require.NoError(t, err)
			require.True(t, dec.OK)
			require.Equal(t, 500*time.Millisecond, dec.Delay)
			reserved[i] = append(reserved[i], dec.Reservation)
		}
	}
	compare("reserved")
	for _, s := range stores {
		require.NoError(t, s.(quota.Syncer).Sync(ctx(t), scope, b, 0, time.Second))
	}
	compare("synced")
	for i, s := range stores {
		require.NoError(t, s.Cancel(ctx(t), reserved[i][0]))
	}
	compare("cancelled")

	clock.Advance(600 * time.Millisecond)
	d := &quota.Demand{Scope: scope, Cost: 1, MaxWait: 5 * time.Second, Limits: []quota.Bucket{b}}
	got, err := rs.Take(ctx(t), d)
	require.NoError(t, err)
	want, err := ms.Take(ctx(t), d)
	require.NoError(t, err)
	assert.Equal(t, want.OK, got.OK)
	assert.Equal(t, want.Delay, got.Delay)
	compare("taken")
}
