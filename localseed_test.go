package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// switchedStore is a shared store that fails while down is set, as Redis
// does when it is killed.
type switchedStore struct {
	*memstore.Store
	down atomic.Bool
}

var errKilled = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (s *switchedStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	if s.down.Load() {
		return quota.Decision{}, errKilled
	}
	return s.Store.Take(ctx, d)
}

// TestLocalSharesStartFromTheStore: 8 limiters share a store that is then
// killed. Each local share starts from what the store last told its
// instance remained, so the fleet admits about what was left of the
// quota, where shares that start full admit the whole quota again on top
// of the store's grants; and once the store's charges would have reset,
// the shares are whole again.
func TestLocalSharesStartFromTheStore(t *testing.T) {
	const instances = 8
	for _, tc := range []struct {
		l      throttle.Limit
		slots  int // with a Concurrency limit of this many slots beside l (0: none)
		before int // the fleet's asks of the store, in turns, before the kill
		// The fleet's grants by its local shares just after the kill, both
		// bounds included; unseeded, its shares' whole capacity.
		lo, hi, unseeded int
	}{
		// 80 a minute, 60 granted: 20 left; each instance's last answer
		// said 20-27 remained, its part 2-3.
		{throttle.Limit{Name: "window", Rate: 80, Per: time.Minute, Algorithm: throttle.FixedWindow}, 0, 60, 16, 24, 80},
		{throttle.Limit{Name: "log", Rate: 80, Per: time.Minute, Algorithm: throttle.SlidingLog}, 0, 60, 16, 24, 80},
		// The same beside 100 slots in flight (GitHub's preset): the
		// grants' Remaining counts the log's room, not the free slots,
		// so they are evidence as well.
		{throttle.Limit{Name: "log", Rate: 80, Per: time.Minute, Algorithm: throttle.SlidingLog}, 100, 60, 16, 24, 80},
		// A bucket of 20 at 100 a second, emptied: nothing left.
		{throttle.Limit{Name: "bucket", Rate: 100, Per: time.Second, Burst: 20}, 0, 20, 0, 0, 16},
		// Slack's posting, 1 a second, used: nothing left (1 granted, 7
		// refused).
		{throttle.Limit{Name: "post", Rate: 1, Per: time.Second}, 0, 8, 0, 0, 8},
		// Nothing granted before: no evidence, whole shares.
		{throttle.Limit{Name: "unused", Rate: 80, Per: time.Minute, Algorithm: throttle.FixedWindow}, 0, 0, 80, 80, 80},
	} {
		t.Run(fmt.Sprintf("%s, %s %d per %v, %d slots", tc.l.Name, tc.l.Algorithm, tc.l.Rate, tc.l.Per, tc.slots), func(t *testing.T) {
			// A window's start, so that the fixed windows do not end
			// between the store's grants and the kill.
			c := storetest.NewClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
			clock, advance := c.Now, c.Advance
			store := &switchedStore{Store: memstore.New(memstore.WithClock(clock))}
			limits := []throttle.Limit{tc.l}
			if tc.slots > 0 {
				limits = append(limits, throttle.Limit{Name: "in-flight", Rate: tc.slots, Per: time.Minute, Algorithm: throttle.Concurrency})
			}
			p := throttle.Policy{Instances: instances, Rules: []throttle.Rule{{Name: "r", Limits: limits}}}
			var local atomic.Int64 // grants decided by a local share
			hooks := throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
				if ev.Fallback == throttle.FailLocal && ev.Outcome == throttle.Allowed {
					local.Add(1)
				}
			}}
			fleet := make([]*throttle.Limiter, instances)
			for i := range fleet {
				lim, err := throttle.NewLimiter(p, throttle.WithStore(store), throttle.WithClock(clock), throttle.WithHooks(hooks),
					throttle.WithLogger(slog.New(slog.DiscardHandler)))
				require.NoError(t, err)
				fleet[i] = lim
			}
			ctx := context.Background()
			granted := 0
			for i := range tc.before {
				// Every instance asks, in turns; those after the quota is
				// used are refused.
				if _, err := fleet[i%instances].Allow(ctx, "r"); err == nil {
					granted++
				} else {
					require.ErrorIs(t, err, throttle.ErrLimited, "ask %d, of the store", i)
				}
			}
			store.down.Store(true)
			advance(time.Millisecond)
			got := drainShares(t, ctx, fleet)
			t.Logf("after %d granted by the store: the local shares admitted %d at once (unseeded: %d)", granted, got, tc.unseeded)
			assert.GreaterOrEqual(t, got, tc.lo)
			assert.LessOrEqual(t, got, tc.hi)
			assert.LessOrEqual(t, got, tc.unseeded, "more than unseeded shares")
			assert.Equal(t, int64(got), local.Load(), "every grant is a local share's")

			// Once the store's charges would have reset (a window, a
			// bucket refilled; for the stretched shares, their own
			// window), the shares admit their whole capacity again.
			advance(time.Duration(instances) * tc.l.Per)
			again := drainShares(t, ctx, fleet)
			assert.Equal(t, tc.unseeded, again, "the shares' capacity once the store's charges have reset")
		})
	}
}

// TestLocalSharesSeedEachOutage: a second outage starts each share from
// the store's answers between the two.
func TestLocalSharesSeedEachOutage(t *testing.T) {
	c := storetest.NewClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	clock := c.Now
	store := &switchedStore{Store: memstore.New(memstore.WithClock(clock))}
	p := throttle.Policy{Instances: 2, Rules: []throttle.Rule{{Name: "r",
		Limits: []throttle.Limit{{Name: "window", Rate: 10, Per: time.Minute, Algorithm: throttle.FixedWindow}}}}}
	lim, err := throttle.NewLimiter(p, throttle.WithStore(store), throttle.WithClock(clock),
		throttle.WithBreaker(throttle.Breaker{OpenFor: time.Nanosecond}), throttle.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	ctx := context.Background()
	take := func() error { _, err := lim.Allow(ctx, "r"); return err }

	require.NoError(t, take()) // 9 left: a share of 4 of the local 5
	store.down.Store(true)
	for range 4 {
		require.NoError(t, take())
	}
	require.ErrorIs(t, take(), throttle.ErrStoreUnavailable)

	// The next window: the store answers again, and its window fills to 8.
	c.Advance(time.Minute)
	store.down.Store(false)
	for range 8 {
		require.NoError(t, take())
	}
	// 2 left: a share of 1.
	store.down.Store(true)
	require.NoError(t, take())
	require.ErrorIs(t, take(), throttle.ErrStoreUnavailable)
}

// TestLocalSharesSeedOncePerOutage: a store that answers once between two
// failures, before the breaker reports it up, is in one outage: its
// shares are not charged again.
func TestLocalSharesSeedOncePerOutage(t *testing.T) {
	c := storetest.NewClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
	store := &switchedStore{Store: memstore.New(memstore.WithClock(c.Now))}
	p := throttle.Policy{Instances: 2, Rules: []throttle.Rule{{Name: "r",
		Limits: []throttle.Limit{{Name: "window", Rate: 10, Per: time.Minute, Algorithm: throttle.FixedWindow}}}}}
	var states []throttle.StoreState
	lim, err := throttle.NewLimiter(p, throttle.WithStore(store), throttle.WithClock(c.Now),
		throttle.WithBreaker(throttle.Breaker{OpenFor: 10 * time.Second}), throttle.WithLogger(slog.New(slog.DiscardHandler)),
		throttle.WithHooks(throttle.Hooks{OnStoreState: func(ev throttle.StoreEvent) { states = append(states, ev.State) }}))
	require.NoError(t, err)
	ctx := context.Background()
	take := func() error { _, err := lim.Allow(ctx, "r"); return err }

	require.NoError(t, take()) // by the store: 9 left, a share of 4 of the local 5
	store.down.Store(true)
	require.NoError(t, take()) // local: 3 left of the share
	store.down.Store(false)
	require.NoError(t, take()) // by the store, within OpenFor of the failure: 8 left
	store.down.Store(true)
	// Seeded again from the 8, the share would have 1 left of its 3 (a
	// charge of 5 - 8/2); seeded once, it has its 3.
	for range 3 {
		require.NoError(t, take())
	}
	require.ErrorIs(t, take(), throttle.ErrStoreUnavailable)
	assert.NotContains(t, states, throttle.StoreUp, "the store was not reported up between the failures")
}
