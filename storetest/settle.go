package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSettle runs the settlement cases when the stores are
// [quota.Settler]s: the step tables, and settlements racing on one store
// and on several instances.
func (s *suite) testSettle(t *testing.T) {
	skipUnless[quota.Settler](t, s)
	t.Run("Steps", func(t *testing.T) { s.runCases(t, settleCases()) })
	for _, a := range algorithms {
		t.Run("Contention/"+a.String(), func(t *testing.T) {
			t.Parallel()
			store, _ := s.newStore(t)
			s.contendSettle(t, a, slices.Repeat([]quota.Store{store}, 64))
		})
		t.Run("ContentionInstances/"+a.String(), func(t *testing.T) {
			if s.c.Instances == nil {
				t.Skip("storetest: Config.Instances is nil")
			}
			t.Parallel()
			var all []quota.Store
			for _, st := range s.instances(t, NewClock(Start), 8) {
				all = append(all, slices.Repeat([]quota.Store{st}, 8)...)
			}
			s.contendSettle(t, a, all)
		})
	}
}

// settleCases pin [quota.Settler.Settle]: refunds, extra charges, debts,
// settling twice, and what each algorithm does with a charge that no
// longer counts.
func settleCases() []stepCase {
	return []stepCase{{
		// T = 1/3 µs: a settlement moves the arrival time by the exact
		// difference, fraction included, and settling again moves it
		// from there.
		name:    "GCRA: 3*10^6 a second, settled exactly",
		buckets: on(gcra("g", 3_000_000, sec, 0)),
		steps: []step{
			{cost: 3_000_000, ok: true},
			{cost: 2, maxWait: hour, ok: true, delay: us}, // TAT = S+1s+2/3
			{op: opSettle, cancel: 2, settle: []int{1}},   // S+1s+1/3
			{cost: 2, delay: us},                          // ceil(1/3 + 2/3), not 2 µs
			{op: opSettle, cancel: 2, settle: []int{4}},   // S+1s+4/3
			{cost: 1, delay: 2 * us},                      // ceil(4/3 + 1/3)
			{op: opSettle, cancel: 2, settle: []int{2}},   // back to S+1s+2/3
			{cost: 3, delay: 2 * us},                      // ceil(2/3 + 1)
			{cost: 1, delay: us},                          // ceil(2/3 + 1/3)
		},
	}, {
		// T = 100ms, B = 10.
		name:    "GCRA: a refund moves the arrival time back by the difference",
		buckets: on(gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 10, ok: true},
			{delay: 100 * ms},
			{op: opSettle, cancel: 1, settle: []int{4}},
			{cost: 6, ok: true},
			{delay: 100 * ms},
		},
	}, {
		name:    "GCRA: an extra charge beyond the burst is a debt",
		buckets: on(gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 2, ok: true},
			// The arrival time goes to now+2.5s: 1.5s past a full burst.
			{op: opSettle, cancel: 1, settle: []int{25}},
			{delay: 1600 * ms},
			{advance: 1600*ms - us, delay: us},
			{advance: us, ok: true},
		},
	}, {
		name:    "settling twice with the same costs changes nothing; other costs correct the first",
		buckets: on(gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 10, ok: true},
			{op: opSettle, cancel: 1, settle: []int{4}},
			{op: opSettle, cancel: 1, settle: []int{4}},
			{cost: 6, ok: true},
			{delay: 100 * ms},
			// From 4 to 2, not from 10 to 2.
			{op: opSettle, cancel: 1, settle: []int{2}},
			{cost: 2, ok: true},
			{delay: 100 * ms},
			// 0 leaves the limit as it was settled.
			{op: opSettle, cancel: 1, settle: []int{0}},
			{delay: 100 * ms},
		},
	}, {
		name:    "GCRA: an extra charge on a bucket that has run empty counts from now; Per after the arrival time, nothing changes",
		buckets: on(gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 10, ok: true}, // the arrival time it sets is Start+1s
			// Empty since Start+1s: the 5 more count from now.
			{advance: 1500 * ms, op: opSettle, cancel: 1, settle: []int{15}},
			{cost: 10, delay: 500 * ms},
			// Start+2s is Per after the arrival time: too late.
			{advance: 500 * ms, op: opSettle, cancel: 1, settle: []int{25}},
			{cost: 10, ok: true},
		},
	}, {
		name:    "FixedWindow: the count of the window charged moves, a debt stays in its window",
		buckets: on(fixed("f", 10, sec)),
		steps: []step{
			{cost: 10, ok: true},
			{delay: sec},
			{op: opSettle, cancel: 1, settle: []int{3}},
			{cost: 7, ok: true},
			{delay: sec},
			{op: opSettle, cancel: 1, settle: []int{5}}, // 12 in a window of 10
			{op: opSettle, cancel: 4, settle: []int{4}}, // 9
			{ok: true},
			{delay: sec},
			{advance: sec, cost: 10, ok: true},
		},
	}, {
		name:    "FixedWindow: a window that has ended is left as it is",
		buckets: on(fixed("f", 10, sec)),
		steps: []step{
			{cost: 10, ok: true},
			{advance: sec, op: opSettle, cancel: 1, settle: []int{20}},
			{cost: 10, ok: true},
			{op: opSettle, cancel: 1, settle: []int{1}},
			{delay: sec},
		},
	}, {
		name:    "FixedWindow: a reservation is settled in the window it charged",
		buckets: on(fixed("f", 10, sec)),
		steps: []step{
			{cost: 10, ok: true},
			{cost: 10, maxWait: 2 * sec, ok: true, delay: sec},
			{op: opSettle, cancel: 2, settle: []int{4}},
			{delay: sec},
			{advance: sec, cost: 6, ok: true},
			{delay: sec},
		},
	}, {
		name:    "SlidingWindow: the count moves while the window still weighs",
		buckets: on(slidingWin("w", 10, sec)),
		steps: []step{
			{cost: 10, ok: true},
			{op: opSettle, cancel: 1, settle: []int{4}},
			{cost: 6, ok: true},
			// The next window: prev 10, room 9 from 100ms into it.
			{delay: 1100 * ms},
			// In the next window the first still weighs as its previous.
			{advance: sec, op: opSettle, cancel: 1, settle: []int{2}}, // prev 8
			{cost: 2, ok: true},
			// prev 8, cur 2: room 7, from 1000 - floor(7000/8) = 125ms on.
			{delay: 125 * ms},
		},
	}, {
		name:    "SlidingLog: the entry takes the new cost, a debt until it leaves the log",
		buckets: on(slidingLog("l", 10, sec)),
		steps: []step{
			{cost: 10, ok: true},
			{advance: 100 * ms, delay: 900 * ms},
			{op: opSettle, cancel: 1, settle: []int{4}},
			{cost: 6, ok: true},
			{delay: 900 * ms},
			{op: opSettle, cancel: 4, settle: []int{1}}, // 4 + 1
			{cost: 5, ok: true},
			{op: opSettle, cancel: 7, settle: []int{9}}, // 4 + 1 + 9
			// Not 900ms: the debt keeps 1 + 9 after the first leaves.
			{delay: sec},
			// The first entry has left; the other two hold 10 until they
			// leave too.
			{advance: 900 * ms, delay: 100 * ms},
			{advance: 100 * ms, cost: 10, ok: true},
		},
	}, {
		name:    "all limits at once, each its own cost, 0 leaving one as it is",
		buckets: on(gcra("g", 10, sec, 0), fixed("f", 10, sec)),
		steps: []step{
			{cost: 10, ok: true},
			{op: opSettle, cancel: 1, settle: []int{4, 0}},
			{use: []int{0}, cost: 6, ok: true},
			{use: []int{0}, delay: 100 * ms},
			{use: []int{1}, delay: sec},
			{op: opSettle, cancel: 1, settle: []int{0, 2}},
			{use: []int{1}, cost: 8, ok: true},
			{use: []int{1}, delay: sec},
			{use: []int{0}, delay: 100 * ms},
		},
	}, {
		name:    "per-limit costs: the settlement replaces each limit's own",
		buckets: on(gcra("points", 10, sec, 0), fixed("writes", 4, sec)),
		steps: []step{
			{costs: []int{5, 1}, ok: true},
			{op: opSettle, cancel: 1, settle: []int{2, 0}},
			{use: []int{0}, cost: 8, ok: true},
			{use: []int{0}, delay: 100 * ms},
			{use: []int{1}, cost: 3, ok: true},
			{use: []int{1}, delay: sec},
		},
	}, {
		name:    "a concurrency limit is not settled",
		buckets: on(conc("c", 1, sec), gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 10, ok: true},
			{op: opSettle, cancel: 1, settle: []int{7, 4}},
			{use: []int{1}, cost: 6, ok: true},
			{use: []int{1}, delay: 100 * ms, limit: 0},
			{use: []int{0}, delay: sec, limit: 0},
		},
	}, {
		name:    "a claimed reservation and its claim settle as one",
		buckets: on(conc("c", 1, sec), gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 10, ok: true},
			{op: opRelease, cancel: 1},
			{cost: 10, maxWait: 2 * sec, ok: true, delay: sec},
			{advance: sec, op: opClaim, cancel: 3, ok: true},
			{op: opSettle, cancel: 4, settle: []int{0, 4}},
			{op: opSettle, cancel: 3, settle: []int{0, 4}},
			{use: []int{1}, cost: 6, ok: true},
			{use: []int{1}, delay: 100 * ms, limit: 0},
		},
	}, {
		name:    "bad costs are an error and settle nothing",
		buckets: on(gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 2, ok: true},
			{op: opSettle, cancel: 1, settle: []int{1, 1}, err: quota.ErrInvalid},
			{op: opSettle, cancel: 1, settle: []int{-1}, err: quota.ErrInvalid},
			{op: opSettle, cancel: 1, settle: nil, err: quota.ErrInvalid},
			{cost: 8, ok: true},
			{delay: 100 * ms},
		},
	}}
}

// contendSettle runs one goroutine per element of stores, each taking a
// demand of cost 50 and settling it three times (to a random cost, to
// another, and to that one again) in rounds, on a frozen clock. The
// limit then admits exactly what the last settlements leave: its Rate
// less their sum, and not one unit more.
func (s *suite) contendSettle(t *testing.T, a quota.Algorithm, stores []quota.Store) {
	const (
		rounds   = 8
		estimate = 50
		rate     = 64 * rounds * estimate
	)
	scope := s.scope(t, "")
	b := quota.Bucket{Limit: limitOf(a, "points", rate, hour)}
	demand := func(cost int) *quota.Demand {
		return &quota.Demand{Scope: scope, Cost: cost, Limits: []quota.Bucket{b}}
	}
	var (
		mu       sync.Mutex
		settled  int
		problems []error
	)
	atOnce(len(stores), func(g int) {
		rng := rand.New(rand.NewPCG(uint64(g), uint64(a)))
		settler := stores[g].(quota.Settler)
		for r := range rounds {
			dec, err := stores[g].Take(t.Context(), demand(estimate))
			if err == nil && !dec.OK {
				err = fmt.Errorf("refused, delay %v", dec.Delay)
			}
			first, last := 1+rng.IntN(estimate), 1+rng.IntN(estimate)
			for _, c := range []int{first, last, last} {
				if err == nil {
					err = settler.Settle(t.Context(), dec.Reservation, []int{c})
				}
			}
			mu.Lock()
			if err != nil {
				problems = append(problems, fmt.Errorf("goroutine %d round %d: %w", g, r, err))
			} else {
				settled += last
			}
			mu.Unlock()
		}
	})
	require.NoError(t, errors.Join(problems...))
	left := rate - settled
	dec, err := stores[0].Take(t.Context(), demand(left))
	require.NoError(t, err)
	assert.True(t, dec.OK, "what the settlements left (%d of %d) is admitted", left, rate)
	dec, err = stores[0].Take(t.Context(), demand(1))
	require.NoError(t, err)
	assert.False(t, dec.OK, "one unit more than the settlements left is refused")
}

// Settle implements quota.Settler.
func (v view) Settle(_ context.Context, r *quota.Reservation, costs []int) error {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.settle(r, costs, v.micros())
}

var _ quota.Settler = view{}

// settle replaces what r charges each limit with costs at now (see
// quota.Settler). How long a charge can be settled is written out here,
// apart from package quotamath, so that the differential tests check its
// SettleEnd; the arithmetic of each algorithm is quotamath's.
func (m *model) settle(r *quota.Reservation, costs []int, now int64) error {
	if err := r.CheckCosts(costs); err != nil {
		return fmt.Errorf("storetest model: %w", err)
	}
	d := r.Demand
	prev := m.settled[r.ID]
	next := make([]int64, len(costs))
	for i, b := range d.Limits {
		old := int64(d.CostOf(i))
		if len(prev) == len(costs) {
			old = prev[i]
		}
		next[i] = old
		if costs[i] > 0 {
			next[i] = int64(costs[i])
		}
		mark, p, delta := r.Marks[i], per(b.Limit), next[i]-old
		id := bucketID(d.Scope, b)
		switch b.Limit.Algorithm {
		case quota.GCRA: // the mark is the arrival time in ns, rounded up
			if now < (mark+999)/1000+p {
				l := quotamath.Of(b.Limit)
				m.tat[id] = l.GCRASettle(m.tat[id], now, delta)
			}
		case quota.FixedWindow, quota.SlidingWindow:
			m.expire(id, b.Limit, now)
			start := mark // an Anchored limit's mark is its window's start
			if !b.Limit.Anchored {
				start = mark*p + b.Limit.Phase.Microseconds()%p
			}
			end := start + p
			if b.Limit.Algorithm == quota.SlidingWindow {
				end += p
			}
			if now >= end || delta == 0 {
				break
			}
			if !b.Limit.Anchored {
				if m.win[id] == nil {
					m.win[id], m.last[id] = map[int64]int64{}, map[int64]int64{}
				}
				m.win[id][mark] = max(m.win[id][mark]+delta, 0)
				break
			}
			// An anchored window: moved by delta while the windows stay;
			// after a move, an extra charge counts in every window that
			// may hold the request (sent by now), a refund in none.
			if _, ok := m.phase[id]; !ok {
				break
			}
			q := m.grid(id, b.Limit)
			at := max(now, start)
			if quotamath.FloorMod(start-q.Phase, p) == 0 {
				k := q.Window(start)
				if delta > 0 {
					m.count(id, q, k, delta, at)
				} else if n, ok := m.win[id][k]; ok {
					m.win[id][k] = max(n+delta, 0)
				}
				break
			}
			for k := q.Window(start); delta > 0 && k <= q.Window(min(start+p-1, at)); k++ {
				m.count(id, q, k, delta, at)
			}
		case quota.SlidingLog:
			if now < mark+p {
				if j := slices.Index(m.log[id], quotamath.LogEntry{At: mark, Cost: old}); j >= 0 {
					m.log[id][j].Cost = next[i]
				}
			}
		}
	}
	m.settled[r.ID] = next
	return nil
}
