package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/storetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Each instance's share of a limit while the store is down: for GCRA the
// pace of Rate/instances exactly (a longer window), for the window
// algorithms Rate/instances per window, or 1 per several windows where
// Rate is less than instances.
func TestLocalShare(t *testing.T) {
	for _, tc := range []struct {
		name      string
		l         throttle.Limit
		instances int
		want      throttle.Limit
	}{
		{"one instance", throttle.Limit{Name: "l", Rate: 10, Per: time.Minute}, 1,
			throttle.Limit{Name: "l", Rate: 10, Per: time.Minute}},
		{"zero instances", throttle.Limit{Name: "l", Rate: 10, Per: time.Minute}, 0,
			throttle.Limit{Name: "l", Rate: 10, Per: time.Minute}},
		{"GCRA", throttle.Limit{Name: "l", Rate: 10, Per: time.Minute}, 3,
			throttle.Limit{Name: "l", Rate: 10, Per: 3 * time.Minute, Burst: 3}},
		{"GCRA, a rate that instances do not divide", throttle.Limit{Name: "l", Rate: 100, Per: time.Second, Burst: 20}, 8,
			throttle.Limit{Name: "l", Rate: 100, Per: 8 * time.Second, Burst: 2}},
		{"GCRA, fewer units than instances", throttle.Limit{Name: "post", Rate: 1, Per: time.Second}, 8,
			throttle.Limit{Name: "post", Rate: 1, Per: 8 * time.Second, Burst: 1}},
		{"GCRA, a window too long to stretch", throttle.Limit{Name: "l", Rate: 10, Per: quota.MaxPer / 2}, 3,
			throttle.Limit{Name: "l", Rate: 3, Per: quota.MaxPer / 2, Burst: 3}},
		{"fixed window", throttle.Limit{Name: "l", Rate: 10, Per: time.Second, Algorithm: throttle.FixedWindow, Phase: 300 * time.Millisecond}, 3,
			throttle.Limit{Name: "l", Rate: 3, Per: time.Second, Algorithm: throttle.FixedWindow, Phase: 300 * time.Millisecond}},
		{"fixed window, fewer units than instances", throttle.Limit{Name: "l", Rate: 3, Per: time.Second, Algorithm: throttle.FixedWindow}, 8,
			throttle.Limit{Name: "l", Rate: 1, Per: 3 * time.Second, Algorithm: throttle.FixedWindow}},
		{"sliding window, fewer units than instances", throttle.Limit{Name: "l", Rate: 2, Per: time.Minute, Algorithm: throttle.SlidingWindow}, 4,
			throttle.Limit{Name: "l", Rate: 1, Per: 2 * time.Minute, Algorithm: throttle.SlidingWindow}},
		{"sliding log, one unit", throttle.Limit{Name: "l", Rate: 1, Per: time.Minute, Algorithm: throttle.SlidingLog}, 5,
			throttle.Limit{Name: "l", Rate: 1, Per: 5 * time.Minute, Algorithm: throttle.SlidingLog}},
		{"sliding log, a window too long to stretch", throttle.Limit{Name: "l", Rate: 1, Per: quota.MaxPer / 2, Algorithm: throttle.SlidingLog}, 5,
			throttle.Limit{Name: "l", Rate: 1, Per: quota.MaxPer / 2, Algorithm: throttle.SlidingLog}},
		{"concurrency", throttle.Limit{Name: "l", Rate: 4, Per: time.Minute, Algorithm: throttle.Concurrency}, 8,
			throttle.Limit{Name: "l", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := throttle.LocalShare(tc.l, tc.instances)
			assert.Equal(t, tc.want, got)
			assert.NoError(t, got.Quota().Validate())
		})
	}
}

// While the store is down, a fleet's local shares together keep the
// quota's pace: over many windows they admit the quota, give or take
// each instance's burst (GCRA), or somewhat less where Rate is less than
// instances (windows), where shares of Rate/instances rounded to at least
// 1 admitted instances times a quota of 1 a second (8 a second), and 96
// of 100 a second.
func TestLocalSharesKeepThePace(t *testing.T) {
	const (
		instances = 8
		span      = 40 * time.Second
		step      = 10 * time.Millisecond
	)
	for _, tc := range []struct {
		l      throttle.Limit
		lo, hi int // the fleet's admissions over span, both bounds included
	}{
		// Each share: 1 every 8 s (its burst of 1 the first), 5 in 40 s.
		{throttle.Limit{Name: "post", Rate: 1, Per: time.Second}, 40, 40 + instances},
		// Each share: its burst of 2, then 12.5 a second.
		{throttle.Limit{Name: "api", Rate: 100, Per: time.Second, Burst: 20}, 4000, 4000 + 2*instances},
		// 1 per 3 s each: 8 in 3 s, against a quota of 9, in the 14
		// windows of 3 s that 40 s touch.
		{throttle.Limit{Name: "window", Rate: 3, Per: time.Second, Algorithm: throttle.FixedWindow}, 8 * 13, 8 * 14},
	} {
		t.Run(fmt.Sprintf("%s %d per %v", tc.l.Algorithm, tc.l.Rate, tc.l.Per), func(t *testing.T) {
			c := storetest.NewClock(time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC))
			clock := c.Now
			p := throttle.Policy{Instances: instances, Rules: []throttle.Rule{{Name: "r", Limits: []throttle.Limit{tc.l}}}}
			local := 0 // grants decided by a local share
			hooks := throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
				if ev.Fallback == throttle.FailLocal && ev.Outcome == throttle.Allowed {
					local++ // the test's goroutine: Allow calls the hook before it returns
				}
			}}
			fleet := make([]*throttle.Limiter, instances)
			for i := range fleet {
				lim, err := throttle.NewLimiter(p, throttle.WithStore(failingStore{err: errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")}), throttle.WithClock(clock), throttle.WithHooks(hooks),
					throttle.WithLogger(slog.New(slog.DiscardHandler)))
				require.NoError(t, err)
				fleet[i] = lim
			}
			ctx := context.Background()
			admitted := 0
			for end := clock().Add(span); clock().Before(end); {
				admitted += drainShares(t, ctx, fleet)
				c.Advance(step)
			}
			assert.Equal(t, admitted, local, "every grant is a local share's")
			assert.GreaterOrEqual(t, admitted, tc.lo)
			assert.LessOrEqual(t, admitted, tc.hi)
			t.Logf("admitted %d in %v (the quota's pace: %d)", admitted, span, int(int64(span)*int64(tc.l.Rate)/int64(tc.l.Per)))
		})
	}
}

// drainShares asks each limiter of fleet, whose store is down, for rule
// "r" until its local share refuses, and returns how many were admitted.
func drainShares(t *testing.T, ctx context.Context, fleet []*throttle.Limiter) int {
	t.Helper()
	n := 0
	for _, lim := range fleet {
		for {
			if _, err := lim.Allow(ctx, "r"); err != nil {
				require.ErrorIs(t, err, throttle.ErrStoreUnavailable, "refused by the local share")
				break
			}
			n++
		}
	}
	return n
}
