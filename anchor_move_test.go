package throttle_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

// TestAnchorMove forces the shared windows to move in the middle of a
// saturated fleet (8 instances of 16 callers, GitHub search: 30 per 1 s
// window starting anywhere, on a vendor clock 300 ms ahead): the vendor
// tells its reset in whole seconds for the first second of the run, then
// to the millisecond (as a delay), which narrows the evidence to a round
// trip at once. The vendor rejects nothing, and in the vendor's windows
// that start after the first move and end before the run does, every
// window from the fifth on is full, and the four before lose at most
// one window's quota (moveFleet). Before the log's entries were scored by
// the vendor's windows once their phase is known (quota.LogExpiry), a
// saturated fleet's bursts came the log's Per plus its margin apart and
// one window in about eleven got none ([30 0 30 30] after a move); before
// the holds cost nothing on time (anchorHold), the window after a move
// took 5-23 of its 30 and the next ones 0-5.
//
// The in-process store runs in a synctest bubble, on virtual time, so the
// windows and latencies are exact whatever the machine's load; the
// phases are seeded (THROTTLE_SEED) and THROTTLE_REPEAT runs more.
func TestAnchorMove(t *testing.T) {
	rng := seeded(t)
	moved := 0
	for range 2 * repeats(t) {
		phase := time.Duration(rng.Int64N(int64(time.Second)))
		synctest.Test(t, func(t *testing.T) {
			store := memstore.New()
			if moveFleet(t, phase, 9*time.Second, 20*time.Millisecond, 16, true, func() quota.Store { return store }) {
				moved++
			}
		})
	}
	assert.NotZero(t, moved, "no run moved the windows")
}

// TestAnchorMoveRedis is TestAnchorMove on redisstore, each instance its
// own client, on real time (so shorter), with 4 callers an instance: 32
// still ask for more than the quota, and a queue a window deep keeps the
// log short. With 16 (a queue of four windows) under -race on a loaded
// machine, Redis answered a burst's grants 0.1-0.8 s after it charged
// them (it writes a loop's replies at its end), and the grants that came
// later than the pace and the log's margin cover were held.
func TestAnchorMoveRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet against real-time windows for about 5 s")
	}
	srv := redistest.Start(t)
	rng := seeded(t)
	moved := 0
	for range 2 * repeats(t) {
		phase := time.Duration(rng.Int64N(int64(time.Second)))
		prefix := redistest.Prefix(t)
		ok := moveFleet(t, phase, 5*time.Second, 5*time.Millisecond, 4, false, func() quota.Store {
			rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { _ = rc.Close() })
			s, err := redisstore.New(rc, redisstore.WithPrefix(prefix))
			require.NoError(t, err)
			return s
		})
		if ok {
			moved++
		}
	}
	assert.NotZero(t, moved, "no run moved the windows")
}

// moveFleet runs one fleet of TestAnchorMove for run, on the stores that
// newStore returns, against a vendor whose windows start phase after the
// epoch's and whose answers take up to latency each way. It reports
// whether the windows moved: they need not, when the store's windows,
// which start at a first charge, already end where the vendor's do.
// With full (virtual time), it asserts full windows from the fifth
// after the move on, and at most one window's quota lost before; else
// (real time, a loaded machine) 90% of what the log's own rule lets
// through after the move.
func moveFleet(t *testing.T, phase, run, latency time.Duration, callers int, full bool, newStore func() quota.Store) bool {
	const rate, per = 30, time.Second
	v := &coarseVendor{rate: rate, per: per, phase: phase, skew: 300 * time.Millisecond,
		maxLatency: latency, accepted: map[int64]int{}}
	var (
		mu    sync.Mutex
		moves int
		moved time.Time // the first move
	)
	hooks := throttle.Hooks{OnAnchor: func(ev throttle.AnchorEvent) {
		assert.NoError(t, ev.Err)
		if !ev.Moved {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if moves++; moved.IsZero() {
			moved = time.Now()
		}
	}}
	start := time.Now()
	v.fineFrom = start.Add(time.Second)
	failed := searchFleet(t, run, 0, v, 8, callers, true, newStore, hooks)
	end := start.Add(run)
	assert.Zero(t, failed, "requests failed")

	mu.Lock()
	defer mu.Unlock()
	if moved.IsZero() {
		assert.Zero(t, v.rejected, "the vendor rejected requests")
		t.Logf("phase %v: the windows did not move (the store's already ended where the vendor's do); rejected %d", phase, v.rejected)
		return false
	}
	// The vendor's windows that start after the first move and end before
	// the run does.
	from, to := v.window(moved)+1, v.window(end)
	v.mu.Lock()
	defer v.mu.Unlock()
	var after []int
	total := 0
	for k := from; k < to; k++ {
		after = append(after, v.accepted[k])
		total += v.accepted[k]
	}
	rejectedAfter := 0
	for k, n := range v.rejectedIn {
		if k >= from-1 {
			rejectedAfter += n
		}
	}
	// What the log lets through at least meanwhile, under a load that
	// saturates it: rate per Per plus its margin (a tenth of Per), in the
	// time those windows span.
	span := time.Duration(to-from) * per
	most := rate * int(span/(per+per/10))
	t.Logf("phase %v: moved %v after the start (%d moves); accepted in the %d windows after the move %v (%d of %d, %.0f%% of the windows' quota, %.0f%% of the least the log lets through), rejected %d (%d from the move's window on)",
		phase, moved.Sub(start).Round(time.Millisecond), moves, len(after), after, total, len(after)*rate,
		100*float64(total)/float64(len(after)*rate), 100*float64(total)/float64(most), v.rejected, rejectedAfter)
	assert.Zero(t, v.rejected, "the vendor rejected requests")
	if most == 0 {
		return false // moved too late in the run to tell (a loaded machine)
	}
	if !full {
		assert.GreaterOrEqual(t, float64(total), 0.9*float64(most), "the fleet used %v after the move", after)
		return true
	}
	// Once the phase is known the log counts each request in the
	// vendor's windows that may hold it (quota.LogExpiry, anchor.go):
	// every window full. Before, for up to four windows, bursts of the
	// log's own rule still queued (reserved a span ahead at most,
	// anchorHorizon) space the first ones the phase scores, and one of
	// those may reach the vendor within the margin of a window's end,
	// counted in both windows: at most one window's quota lost. (The
	// changeover reached into the fourth window in 3 of 60 runs of
	// TestAnchorMoveLaggedStore: [30 30 7 27 30 30 30], [30 30 18 28 ...],
	// [30 30 29 28 ...].)
	const changeover = 4
	require.Greater(t, len(after), changeover, "too few windows after the move")
	lost := changeover * rate
	for i, n := range after {
		if i < changeover {
			lost -= n
			continue
		}
		assert.Equal(t, rate, n, "window %d after the move is not full: %v", i+1, after)
	}
	assert.LessOrEqual(t, lost, rate, "the %d windows after the move lost more than one window's quota: %v", changeover, after)
	return true
}

// laggedStore is an in-process store whose decisions reach it up to lag
// after they are asked (a Redis that queues a burst's calls): the
// instant a grant is charged is then known only to that width.
type laggedStore struct {
	*memstore.Store
	lag time.Duration
}

func (s laggedStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	time.Sleep(rand.N(s.lag))
	return s.Store.Take(ctx, d)
}

// TestAnchorMoveLaggedStore is TestAnchorMove on a store whose decisions
// come up to 150 ms after they are asked, as a loaded Redis's do (under
// -race with 128 callers, the fastest call of a fleet took 74-115 ms
// from its start to the store's decision): the instant each grant was
// charged is known only to that width, so a request sent sendLag after
// the latest instant may be later than the log covers after the
// earliest, and is held where a window may end (anchorHold). The vendor
// rejects nothing, and the windows after the move are full as in
// TestAnchorMove (at main 284563b: [30 0 30 30], a window lost to the
// log's spacing).
func TestAnchorMoveLaggedStore(t *testing.T) {
	rng := seeded(t)
	moved := 0
	for range 2 * repeats(t) {
		phase := time.Duration(rng.Int64N(int64(time.Second)))
		synctest.Test(t, func(t *testing.T) {
			store := laggedStore{memstore.New(), 150 * time.Millisecond}
			if moveFleet(t, phase, 9*time.Second, 20*time.Millisecond, 16, true, func() quota.Store { return store }) {
				moved++
			}
			time.Sleep(time.Second) // the calls that callers cancelled at the end are over
			synctest.Wait()
		})
	}
	assert.NotZero(t, moved, "no run moved the windows")
}
