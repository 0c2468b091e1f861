package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slotLimits are the Concurrency limits of randomSlotDemand: few slots and
// short leases, so that demands are refused for want of a slot and leases
// expire within a run.
var slotLimits = []quota.Limit{
	{Name: "s2", Rate: 2, Per: 30 * time.Millisecond, Algorithm: quota.Concurrency},
	{Name: "s3", Rate: 3, Per: 50 * time.Millisecond, Algorithm: quota.Concurrency},
}

// randomSlotDemand returns a demand of scope "s" of one or two GCRA limits
// of limits and one or two Concurrency limits, in a random order (so
// that take_batch.lua's order, GCRA first, differs from the demand's).
func randomSlotDemand(rng *rand.Rand, limits []quota.Limit) *quota.Demand {
	d := randomDemandOf(rng, limits)
	d.Limits = d.Limits[:1+rng.IntN(min(2, len(d.Limits)))]
	for _, i := range rng.Perm(len(slotLimits))[:1+rng.IntN(2)] {
		d.Limits = append(d.Limits, quota.Bucket{Limit: slotLimits[i], Key: []string{"x", "y"}[rng.IntN(2)]})
	}
	rng.Shuffle(len(d.Limits), func(i, j int) { d.Limits[i], d.Limits[j] = d.Limits[j], d.Limits[i] })
	return d
}

// TestTakeBatchSlotsMatchTake sends random demands of GCRA and
// Concurrency limits in random batches through take_batch.lua, and the
// same demands one call each through take.lua (WithGenericTake) on
// another prefix at the same instant of one clock; both sides release,
// claim (a reservation come due) and let expire the same leases; the
// releases are carried by later calls (take_batch.lua's runs of one key,
// take.lua's and claim.lua's layout) or, every third step, flushed. The
// decisions (marks, Remaining and ResetAfter included), the claims and the
// live leases of every slot key must be the same.
//
// "lone" runs batches of one demand of one GCRA limit (whole
// microseconds), one Concurrency limit and at most one pause, and
// "alike" batches of one to six copies of such a demand: take_batch.lua
// decides both in straight lines.
func TestTakeBatchSlotsMatchTake(t *testing.T) {
	for _, limits := range []struct {
		name        string
		ls          []quota.Limit
		lone, alike bool
	}{{"fractions", gcraLimits, false, false}, {"exact", exactLimits, false, false}, {"lone", exactLimits, true, false}, {"alike", exactLimits, true, true}} {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", limits.name, seed), func(t *testing.T) {
				t.Parallel()
				compareSlotBatches(t, limits.ls, limits.lone, limits.alike, seed)
			})
		}
	}
}

// compareSlotBatches runs TestTakeBatchSlotsMatchTake's steps: with lone,
// every demand is of one GCRA limit, one Concurrency limit and at most
// one pause, alone in its batch, or with alike in a batch of copies of it.
func compareSlotBatches(t *testing.T, limits []quota.Limit, lone, alike bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 17))
	clock := storetest.NewClock(storetest.Start)
	// Releases wait for a later call to carry them (no release.lua call
	// on a timer), and are flushed on some steps only: the others' are
	// carried by the next batch, in runs of one key.
	c, _, single, batchPrefix, onePrefix := differential(t, clock, "batch:", "one:", redisstore.WithGenericTake(), redisstore.WithReleaseLinger(time.Hour))
	batched := newStoreOn(t, c, batchPrefix, redisstore.WithNow(clock.Now), redisstore.WithReplay(redisstore.ReplayNoRetries), redisstore.WithReleaseLinger(time.Hour))
	type held struct{ batched, single *quota.Reservation }
	var holding, waiting []held // leases held; reservations to claim
	seen := map[string]int{}
	for step := range 100 {
		if rng.IntN(6) == 0 {
			key, d := randomPause(rng)
			require.NoError(t, batched.Pause(ctx(t), "s", key, d))
			require.NoError(t, single.Pause(ctx(t), "s", key, d))
		}
		ds := make([]*quota.Demand, 1+rng.IntN(6))
		if lone && !alike {
			ds = ds[:1]
		}
		for i := range ds {
			ds[i] = randomSlotDemand(rng, limits)
			if lone {
				d := ds[i]
				d.Limits = []quota.Bucket{{Limit: limits[rng.IntN(len(limits))], Key: "x"}, {Limit: slotLimits[rng.IntN(len(slotLimits))], Key: "x"}}
				d.Pauses = d.Pauses[:min(len(d.Pauses), 1)]
			}
			if i > 0 && (alike || rng.IntN(3) == 0) { // sent as "="
				again := *ds[i-1]
				ds[i] = &again
			}
		}
		got, errs := redisstore.TakeBatch(batched, ds)
		for i, d := range ds {
			where := fmt.Sprintf("step %d, demand %d of %d: %+v", step, i, len(ds), d)
			want, err := single.Take(ctx(t), d)
			require.NoError(t, err, where)
			require.NoError(t, errs[i], where)
			seen[outcome(want)]++
			if !want.OK && want.Limit >= 0 && d.Limits[want.Limit].Limit.Algorithm == quota.Concurrency {
				seen["refused for a slot"]++
			}
			if !sameDecision(t, want, got[i], where) {
				return
			}
			switch {
			case want.OK && want.Delay == 0:
				holding = append(holding, held{got[i].Reservation, want.Reservation})
			case want.OK:
				assert.True(t, got[i].Reservation.Unclaimed, where)
				waiting = append(waiting, held{got[i].Reservation, want.Reservation})
			}
		}
		// Release some leases on both sides: the next batch (or take.lua
		// call) carries them.
		for len(holding) > 0 && rng.IntN(3) > 0 {
			k := rng.IntN(len(holding))
			h := holding[k]
			holding = append(holding[:k], holding[k+1:]...)
			require.NoError(t, batched.Release(ctx(t), h.batched))
			require.NoError(t, single.Release(ctx(t), h.single))
			if rng.IntN(4) == 0 { // released twice: nothing more
				require.NoError(t, batched.Release(ctx(t), h.batched))
				require.NoError(t, single.Release(ctx(t), h.single))
			}
		}
		clock.Advance(time.Duration(rng.IntN(8000)) * time.Microsecond)
		// Claim the reservations that came due, on both sides.
		for len(waiting) > 0 && rng.IntN(2) == 0 {
			h := waiting[0]
			waiting = waiting[1:]
			want, err := single.Claim(ctx(t), h.single)
			require.NoError(t, err)
			got, err := batched.Claim(ctx(t), h.batched)
			require.NoError(t, err)
			where := fmt.Sprintf("step %d, claim", step)
			assert.Equal(t, want.OK, got.OK, where)
			assert.Equal(t, want.Delay, got.Delay, where)
			assert.Equal(t, want.Limit, got.Limit, where)
			if want.OK && got.OK {
				seen["claimed"]++
				holding = append(holding, held{got.Reservation, want.Reservation})
			}
		}
		if step%3 == 0 {
			require.NoError(t, batched.Flush(ctx(t)))
			require.NoError(t, single.Flush(ctx(t)))
		}
		now := fmt.Sprint(clock.Now().UnixMicro())
		for _, l := range slotLimits {
			for _, key := range []string{"x", "y"} {
				k := "v1:{s}:c:" + l.Name + ":" + key
				want, err := c.ZCount(ctx(t), onePrefix+k, "("+now, "+inf").Result()
				require.NoError(t, err)
				got, err := c.ZCount(ctx(t), batchPrefix+k, "("+now, "+inf").Result()
				require.NoError(t, err)
				assert.Equal(t, want, got, "step %d: live leases of %s", step, k)
			}
		}
	}
	t.Logf("outcomes: %v", seen)
	assert.Len(t, seen, 6, "every kind of outcome occurs: %v", seen)
}

// TestBatchSlotsContention: 4 instances x 16 goroutines take one slot of
// a Concurrency limit of 7 and a GCRA limit of 20 an hour together, in
// rounds in which nobody releases: each round grants exactly min(7, what
// the GCRA limit has left), 7, 7, 6 and then 0, whatever the batches;
// after each round every lease is released (Release, carried by later
// calls or sent alone) and the instances' queues flushed, and the slot
// key holds no lease: none lost, none freed twice.
func TestBatchSlotsContention(t *testing.T) {
	t.Parallel()
	prefix, stores, sent := countedStores(t, 4)
	d := &quota.Demand{Scope: "sc", Cost: 1, Limits: []quota.Bucket{
		{Limit: quota.Limit{Name: "slots", Rate: 7, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"},
		{Limit: quota.Limit{Name: "rate", Rate: 20, Per: time.Hour}, Key: "k"},
	}}
	check := newClient(t, srv.Addr())
	slotKey := prefix + "v1:{sc}:c:slots:k"
	var decisions int64
	for round, want := range []int{7, 7, 6, 0} {
		var (
			mu      sync.Mutex
			granted []*quota.Reservation
			owner   []*redisstore.Store
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		for _, s := range stores {
			for range 16 {
				wg.Go(func() {
					<-start
					dec, err := s.Take(ctx(t), d)
					if !assert.NoError(t, err) {
						return
					}
					if dec.OK {
						assert.Zero(t, dec.Delay)
						mu.Lock()
						granted, owner = append(granted, dec.Reservation), append(owner, s)
						mu.Unlock()
					}
				})
			}
		}
		close(start)
		wg.Wait()
		decisions += int64(16 * len(stores))
		require.Len(t, granted, want, "round %d", round)
		n, err := check.ZCard(ctx(t), slotKey).Result()
		require.NoError(t, err)
		assert.Equal(t, int64(want), n, "round %d: leases held", round)
		for i, r := range granted {
			require.NoError(t, owner[i].Release(ctx(t), r))
		}
		for _, s := range stores {
			require.NoError(t, s.Flush(ctx(t)))
		}
		n, err = check.ZCard(ctx(t), slotKey).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "round %d: leases left after every release", round)
	}
	t.Logf("%d decisions in %d calls", decisions, sent.Load())
	assert.Less(t, sent.Load(), decisions, "no batch formed")
}

// TestBatchSlotsInFlight: 4 instances x 16 goroutines take, hold and
// release one of 5 slots (and a GCRA limit that always admits) in a loop.
// Held slots counted in process (counted after the grant, uncounted
// before the release) never exceed 5; every lease is freed at the end.
func TestBatchSlotsInFlight(t *testing.T) {
	t.Parallel()
	const slots = 5
	prefix := redistest.Prefix(t)
	stores := make([]*redisstore.Store, 4)
	for i := range stores {
		stores[i] = newStoreOn(t, newClient(t, srv.Addr()), prefix)
	}
	d := &quota.Demand{Scope: "sf", Cost: 1, Limits: []quota.Bucket{
		{Limit: quota.Limit{Name: "rate", Rate: 1_000_000, Per: time.Second}},
		{Limit: quota.Limit{Name: "slots", Rate: slots, Per: time.Minute, Algorithm: quota.Concurrency}},
	}}
	var inFlight, most, grants atomic.Int64
	var wg sync.WaitGroup
	for _, s := range stores {
		for range 16 {
			wg.Go(func() {
				for range 40 {
					dec, err := s.Take(ctx(t), d)
					if !assert.NoError(t, err) {
						return
					}
					if !dec.OK {
						continue
					}
					grants.Add(1)
					n := inFlight.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(100 * time.Microsecond) // hold the slot a moment
					inFlight.Add(-1)
					assert.NoError(t, s.Release(ctx(t), dec.Reservation))
				}
			})
		}
	}
	wg.Wait()
	for _, s := range stores {
		require.NoError(t, s.Flush(ctx(t)))
	}
	n, err := newClient(t, srv.Addr()).ZCard(ctx(t), prefix+"v1:{sf}:c:slots:").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "leases left after every release")
	assert.LessOrEqual(t, most.Load(), int64(slots))
	assert.Greater(t, grants.Load(), int64(slots), "slots were never freed for others")
	t.Logf("%d grants, at most %d held at once", grants.Load(), most.Load())
}

// TestTakeBatchSlotsResent: a batch with Concurrency limits that go-redis
// sends again (its reply lost) is refused with ErrResent; its first
// sending charged the GCRA limit once and took the slots, which the store
// releases since nobody holds them.
func TestTakeBatchSlotsResent(t *testing.T) {
	t.Parallel()
	p := faultproxy.New(t, srv.Addr())
	c := newClient(t, p.Addr())
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, c, prefix, redisstore.WithReplay(redisstore.ReplayDetect))
	d := &quota.Demand{Scope: "sr", Cost: 1, Limits: []quota.Bucket{
		{Limit: quota.Limit{Name: "rate", Rate: 5, Per: 24 * time.Hour}, Key: "k"},
		{Limit: quota.Limit{Name: "slots", Rate: 10, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"},
	}}
	dec, err := s.Take(ctx(t), d) // connect and load the scripts
	require.NoError(t, err)
	require.True(t, dec.OK)
	require.NoError(t, s.Release(ctx(t), dec.Reservation))
	p.DropNextReply()
	_, errs := redisstore.TakeBatch(s, []*quota.Demand{d, d})
	for _, err := range errs {
		assert.ErrorIs(t, err, redisstore.ErrResent)
	}
	require.NoError(t, s.Flush(ctx(t)))
	n, err := newClient(t, srv.Addr()).ZCard(ctx(t), prefix+"v1:{sr}:c:slots:k").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the refused batch's leases were not released")
	// 1 + 2 charged of 5: two more fit, not three.
	for range 2 {
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		assert.True(t, dec.OK)
	}
	dec, err = s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.False(t, dec.OK, "the batch was charged twice")
}

// TestBatchReleasesWakeAsMany: a call that carries two releases of one
// key announces them in one message, which wakes two of the key's
// watchers.
func TestBatchReleasesWakeAsMany(t *testing.T) {
	t.Parallel()
	s := newStoreOn(t, newClient(t, srv.Addr()), redistest.Prefix(t), redisstore.WithReleaseLinger(time.Hour))
	b := quota.Bucket{Limit: quota.Limit{Name: "slots", Rate: 10, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"}
	d := &quota.Demand{Scope: "sw", Cost: 1, Limits: []quota.Bucket{b}}
	var held []*quota.Reservation
	for range 2 {
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		require.True(t, dec.OK)
		held = append(held, dec.Reservation)
	}
	var wakes []<-chan struct{}
	for range 3 {
		c, stop, err := s.WatchRelease(ctx(t), "sw", b)
		require.NoError(t, err)
		t.Cleanup(stop)
		wakes = append(wakes, c)
	}
	for _, r := range held {
		require.NoError(t, s.Release(ctx(t), r))
	}
	dec, err := s.Take(ctx(t), d) // carries both releases
	require.NoError(t, err)
	require.True(t, dec.OK)
	woken := 0
	deadline := time.After(10 * time.Second)
	for woken < 2 {
		select {
		case <-wakes[0]:
			woken++
		case <-wakes[1]:
			woken++
		case <-wakes[2]:
			woken++
		case <-deadline:
			t.Fatalf("%d watchers woke, want 2", woken)
		}
	}
}
