package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTakeShareBatchMatchesTakeShare sends random demands with a tenant
// on one of one or two GCRA limits in random batches through
// take_share_batch.lua, and the same demands one call each through
// take_share.lua on another prefix at the same instant of one clock: the
// decisions must be the same, and so must the keys afterwards (the GCRA
// keys' values and TTLs; the shares, claims and ends keys' members,
// scores and whether they expire). Three tenants on limits of a few
// units make claims, demands held back by them, tenants becoming active
// and pruned within a batch, and one counter under two windows; demands repeat the one before (sent as "=")
// or differ from it in the tenant only (sent as "=tenant"); a few have
// no tenant, and go in the same batch call's take_batch.lua part.
func TestTakeShareBatchMatchesTakeShare(t *testing.T) {
	for _, alike := range []bool{false, true} {
		for seed := uint64(1); seed <= 3; seed++ {
			name := fmt.Sprintf("seed=%d", seed)
			if alike {
				name = "alike/" + name
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				compareShareBatches(t, seed, alike)
			})
		}
	}
}

// compareShareBatches is TestTakeShareBatchMatchesTakeShare; with alike,
// each batch is copies of one demand with a tenant, which
// take_share_batch.lua decides in straight lines while no claim is live.
func compareShareBatches(t *testing.T, seed uint64, alike bool) {
	rng := rand.New(rand.NewPCG(seed, 17))
	clock := storetest.NewClock(storetest.Start)
	c, batched, single, batchPrefix, onePrefix := differential(t, clock, "batch:", "one:", redisstore.WithBatching(0))
	// and a's counter under another window (Per): the batch counts the
	// active tenants again for it
	limits := append(slices.Clone(shareLimits), quota.Limit{Name: "a", Rate: 10, Per: 20 * time.Millisecond})
	tenants := []string{"t1", "t2", "t3"}
	seen, claimed, batches := map[string]int{}, 0, 0
	spans := writeSpans{}
	for step := range 150 {
		if rng.IntN(8) == 0 {
			d := time.Duration(rng.IntN(3000)) * time.Microsecond
			require.NoError(t, batched.Pause(ctx(t), "s", "p", d))
			require.NoError(t, single.Pause(ctx(t), "s", "p", d))
		}
		ds := make([]*quota.Demand, 1+rng.IntN(8))
		for i := range ds {
			switch {
			case i > 0 && (alike || rng.IntN(4) == 0): // the one before again ("=")
				again := *ds[i-1]
				ds[i] = &again
			case i > 0 && rng.IntN(3) == 0: // the one before for another tenant ("=tenant")
				other := *ds[i-1]
				other.Limits = append([]quota.Bucket(nil), other.Limits...)
				for j := range other.Limits {
					if other.Limits[j].Tenant != "" {
						other.Limits[j].Tenant = tenants[rng.IntN(len(tenants))]
					}
				}
				ds[i] = &other
			default:
				d := &quota.Demand{Scope: "s", Cost: 1 + rng.IntN(2), MaxWait: time.Duration(rng.IntN(6000)) * time.Microsecond}
				for _, j := range rng.Perm(len(limits))[:1+rng.IntN(2)] {
					if len(d.Limits) == 0 || d.Limits[0].Limit.Name != limits[j].Name { // one counter once
						d.Limits = append(d.Limits, quota.Bucket{Limit: limits[j], Key: "x"})
					}
				}
				if alike || rng.IntN(6) > 0 { // else a plain demand, decided by take_batch.lua after these
					d.Limits[rng.IntN(len(d.Limits))].Tenant = tenants[rng.IntN(len(tenants))]
				}
				if rng.IntN(3) == 0 {
					d.Pauses = []string{"p"}
				}
				ds[i] = d
			}
		}
		if len(ds) > 1 {
			batches++
		}
		stepStart := time.Now()
		got, errs := redisstore.TakeBatch(batched, ds)
		charged := false
		// A batch decides its demands with a tenant first, then the
		// plain ones (share_batch.go): the single calls go in that order.
		order := make([]int, 0, len(ds))
		for _, shared := range []bool{true, false} {
			for i, d := range ds {
				if d.Shared() == shared {
					order = append(order, i)
				}
			}
		}
		for _, i := range order {
			d := ds[i]
			where := fmt.Sprintf("step %d, demand %d of %d: %+v", step, i, len(ds), d)
			want, err := single.Take(ctx(t), d)
			require.NoError(t, err, where)
			require.NoError(t, errs[i], where)
			seen[outcome(want)]++
			if !sameDecision(t, want, got[i], where) {
				return
			}
			charged = charged || want.OK
		}
		for _, l := range limits {
			if charged {
				spans.charged(l.Name, stepStart)
			}
			where := fmt.Sprintf("step %d", step)
			sameGCRAKey(t, c, onePrefix, batchPrefix, quota.Bucket{Limit: l, Key: "x"}, spans[l.Name], where)
			for _, kind := range []string{"z", "k", "e"} {
				k := "v1:{s}:" + kind + gcraTag(l) + l.Name + ":x"
				want := zsetState(t, c, onePrefix+k)
				if !assert.Equal(t, want, zsetState(t, c, batchPrefix+k), "%s: %s", where, k) {
					return
				}
				if kind == "k" && !strings.HasPrefix(want, "[] ") {
					claimed++
				}
			}
		}
		clock.Advance(time.Duration(rng.IntN(2500)) * time.Microsecond)
	}
	t.Logf("outcomes: %v; keys with claims after a step: %d; batches: %d", seen, claimed, batches)
	assert.Len(t, seen, 4, "every kind of outcome occurs: %v", seen)
	assert.Positive(t, claimed, "claims were made")
}

// TestShareBatchContention: 4 instances x 16 goroutines, each goroutine
// a tenant of 8, take at once from a GCRA limit of 20 an hour shared
// among tenants and a plain one of 30 an hour beside it, in two rounds:
// exactly 20 grants, then none, each limit charged exactly 20 times (its
// arrival time), and every tenant active on the shares key; demands went together (fewer calls than decisions), so batches of
// demands with tenants decided them.
func TestShareBatchContention(t *testing.T) {
	t.Parallel()
	prefix, stores, sent := countedStores(t, 4)
	shared := quota.Limit{Name: "rate", Rate: 20, Per: time.Hour}
	plain := quota.Limit{Name: "day", Rate: 30, Per: time.Hour}
	check := newClient(t, srv.Addr())
	var decisions int64
	for round, want := range []int{20, 0} {
		var (
			granted atomic.Int64
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		for _, s := range stores {
			for g := range 16 {
				d := &quota.Demand{Scope: "sh", Cost: 1, Limits: []quota.Bucket{
					{Limit: shared, Key: "k", Tenant: fmt.Sprintf("t%d", g%8)},
					{Limit: plain, Key: "k"},
				}}
				wg.Go(func() {
					<-start
					dec, err := s.Take(ctx(t), d)
					if !assert.NoError(t, err) {
						return
					}
					if dec.OK {
						assert.Zero(t, dec.Delay)
						granted.Add(1)
					}
				})
			}
		}
		close(start)
		wg.Wait()
		decisions += int64(16 * len(stores))
		require.Equal(t, int64(want), granted.Load(), "round %d: grants", round)
	}
	// Every grant charged both limits once, from the first grant's
	// instant: TAT = first + 20 T on each.
	var firsts []int64
	for _, l := range []quota.Limit{shared, plain} {
		tat, err := check.Get(ctx(t), prefix+"v1:{sh}:g:"+l.Name+":k").Int64()
		require.NoError(t, err)
		firsts = append(firsts, tat-20*(l.Per/time.Duration(l.Rate)).Microseconds())
	}
	assert.Equal(t, firsts[0], firsts[1], "first grant's instant from each limit's TAT")
	active, err := check.ZCount(ctx(t), prefix+"v1:{sh}:zg:rate:k", "0", "+inf").Result()
	require.NoError(t, err)
	assert.Equal(t, int64(8), active, "tenants active")
	t.Logf("%d decisions in %d calls", decisions, sent.Load())
	assert.Less(t, sent.Load(), decisions, "no batch formed")
}

// TestTakeShareBatchResent: a batch of demands with a tenant sent again
// by go-redis (its reply lost) is refused as a whole with ErrResent, and
// only its first sending charged.
func TestTakeShareBatchResent(t *testing.T) {
	l := quota.Limit{Name: "l", Rate: 5, Per: 24 * time.Hour}
	batchResentOnce(t, quota.Bucket{Limit: l, Key: "k", Tenant: "acme"}, quota.Bucket{Limit: l, Key: "warm", Tenant: "acme"})
}
