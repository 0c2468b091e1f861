package throttle_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateStore is an in-process store behind a link whose next answer can be
// made late: the store decides (and charges) at once, and the answer
// reaches the caller lateBy later, as a reply held up on the network.
type lateStore struct {
	*memstore.Store
	lateBy            atomic.Int64 // time.Duration, for the next answer only
	always            atomic.Bool  // lateBy for every answer
	granted, canceled atomic.Int64
}

func (s *lateStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	dec, err := s.Store.Take(ctx, d)
	if err == nil && dec.OK {
		s.granted.Add(1)
	}
	late := time.Duration(s.lateBy.Load())
	if !s.always.Load() {
		late = time.Duration(s.lateBy.Swap(0))
	}
	if late > 0 {
		time.Sleep(late) // the fault: a late reply, not an assertion
	}
	return dec, err
}

func (s *lateStore) Cancel(ctx context.Context, r *quota.Reservation) error {
	s.canceled.Add(1)
	return s.Store.Cancel(ctx, r)
}

// With Breaker.LateGrants, a grant whose answer comes late is given back and decided again before
// the call goes, for every algorithm that counts when a call is made;
// under a fixed window, only when its window may have ended before the
// call goes (here a day's window, which a 200 ms delay does not cross).
func TestLateGrant(t *testing.T) {
	for _, c := range []struct {
		name     string
		alg      throttle.Algorithm
		per      time.Duration
		redecide bool
	}{
		{"sliding log", throttle.SlidingLog, 10 * time.Second, true},
		{"sliding window", throttle.SlidingWindow, 10 * time.Second, true},
		{"GCRA", throttle.GCRA, 10 * time.Second, true},
		{"fixed window, within it", throttle.FixedWindow, 24 * time.Hour, false},
		{"sliding log, Breaker.LateGrants off (the default)", throttle.SlidingLog, 10 * time.Second, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := &lateStore{Store: memstore.New()}
			var late atomic.Int64
			b := throttle.Breaker{LateGrants: !strings.Contains(c.name, "off")}
			lim, err := throttle.NewLimiter(throttle.Policy{Instances: 1, Rules: []throttle.Rule{{
				Name:   "api",
				Limits: []throttle.Limit{{Name: "calls", Rate: 1000, Per: c.per, Algorithm: c.alg}},
			}}}, throttle.WithStore(s), throttle.WithBreaker(b), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
				late.Add(int64(ev.Late))
			}}))
			require.NoError(t, err)

			// Prompt answers first: the store's usual latency.
			for range 70 {
				_, err = lim.Wait(context.Background(), "api")
				require.NoError(t, err)
			}
			late.Store(0)

			s.lateBy.Store(int64(200 * time.Millisecond))
			_, err = lim.Wait(context.Background(), "api")
			require.NoError(t, err)
			if c.redecide {
				assert.Positive(t, late.Load(), "late grants decided again")
			} else {
				assert.Zero(t, late.Load(), "late grants decided again")
			}
			assert.Equal(t, int64(71), s.granted.Load()-s.canceled.Load(), "charges kept: one per call")
			assert.Equal(t, late.Load(), s.canceled.Load(), "a charge given back per late grant")
		})
	}
}

// A store whose every answer is slow, after prompt ones, still lets a
// request go: each late grant of the same request widens its tolerance,
// so it is decided a few times, not for ever.
func TestLateGrantSlowForGood(t *testing.T) {
	s := &lateStore{Store: memstore.New()}
	var late atomic.Int64
	lim, err := throttle.NewLimiter(throttle.Policy{Instances: 1, Rules: []throttle.Rule{{
		Name:   "api",
		Limits: []throttle.Limit{{Name: "calls", Rate: 1000, Per: 10 * time.Second, Algorithm: throttle.SlidingLog}},
	}}}, throttle.WithStore(s), throttle.WithBreaker(throttle.Breaker{LateGrants: true}), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
		late.Add(int64(ev.Late))
	}}))
	require.NoError(t, err)
	for range 70 {
		_, err = lim.Wait(context.Background(), "api")
		require.NoError(t, err)
	}
	late.Store(0)

	s.always.Store(true)
	s.lateBy.Store(int64(250 * time.Millisecond))
	_, err = lim.Wait(context.Background(), "api")
	require.NoError(t, err)
	// Tolerances of 100 ms, 100, 200, then 400 > 250: three late
	// grants, more on a machine that adds 150 ms to a call.
	assert.GreaterOrEqual(t, late.Load(), int64(3), "late grants decided again")
	assert.LessOrEqual(t, late.Load(), int64(6), "late grants decided again")
	assert.Equal(t, int64(71), s.granted.Load()-s.canceled.Load(), "charges kept: one per call")
}
