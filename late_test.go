package throttle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
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
	slowBy            atomic.Int64 // time.Duration, before the next decision only
	always            atomic.Bool  // lateBy for every answer
	refuse            atomic.Bool  // Retime refuses
	granted, canceled atomic.Int64
}

func (s *lateStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	if slow := time.Duration(s.slowBy.Swap(0)); slow > 0 {
		// The fault: a call slow before the store decides (a goroutine
		// scheduled late, a busy Redis), not an assertion.
		time.Sleep(slow)
	}
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

// Retime is the in-process store's, or, with refuse set, a refusal that
// changes nothing, as when the limits have no room at the send.
func (s *lateStore) Retime(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	if s.refuse.Load() {
		return quota.Decision{Limit: 0}, nil
	}
	dec, err := s.Store.Retime(ctx, r)
	if s.always.Load() {
		time.Sleep(time.Duration(s.lateBy.Load())) // the fault: a late reply, not an assertion
	}
	return dec, err
}

// noRetimer is a store that cannot retime: only quota.Store's methods.
type noRetimer struct{ quota.Store }

// A grant whose answer comes late after the store charged it (a reply
// held on the wire) is retimed to the send, or given back and decided
// again when the store cannot retime it, before the call goes, for every
// algorithm that counts when a call is made; under a fixed window, only
// when its window may have ended before the call goes (here a day's
// window, which a 200 ms delay does not cross). A call as slow before
// the store decides (the machine's own lag, or a busy store) is not late:
// its charge is as late as its answer. Virtual time (synctest): the
// lags are exact.
func TestLateGrant(t *testing.T) {
	for _, c := range []struct {
		name  string
		alg   throttle.Algorithm
		per   time.Duration
		slow  string // where the call is slow: "after" the store decided (a late reply), or "before"
		late  bool
		store string // how the store retimes: "retimes", "refuses" or "cannot"
	}{
		{"sliding log", throttle.SlidingLog, 10 * time.Second, "after", true, "retimes"},
		{"sliding window", throttle.SlidingWindow, 10 * time.Second, "after", true, "retimes"},
		{"GCRA", throttle.GCRA, 10 * time.Second, "after", true, "retimes"},
		{"fixed window, within it", throttle.FixedWindow, 24 * time.Hour, "after", false, "retimes"},
		{"sliding log, a retime refused", throttle.SlidingLog, 10 * time.Second, "after", true, "refuses"},
		{"sliding log, a store that cannot retime", throttle.SlidingLog, 10 * time.Second, "after", true, "cannot"},
		{"sliding log, slow before the decision", throttle.SlidingLog, 10 * time.Second, "before", false, "retimes"},
		{"GCRA, slow before the decision", throttle.GCRA, 10 * time.Second, "before", false, "retimes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := &lateStore{Store: memstore.New()}
				s.refuse.Store(c.store == "refuses")
				var store quota.Store = s
				if c.store == "cannot" {
					store = noRetimer{s}
				}
				lim, late, retimed := lateLimiter(t, store, c.per, c.alg)

				if c.slow == "after" {
					s.lateBy.Store(int64(200 * time.Millisecond))
				} else {
					s.slowBy.Store(int64(200 * time.Millisecond))
				}
				_, err := lim.Wait(context.Background(), "api")
				require.NoError(t, err)
				if c.late {
					assert.Equal(t, int64(1), late.Load(), "late grants")
				} else {
					assert.Zero(t, late.Load(), "late grants")
				}
				if c.store == "retimes" {
					assert.Equal(t, late.Load(), retimed.Load(), "every late grant retimed")
				} else {
					assert.Zero(t, retimed.Load(), "late grants retimed")
				}
				assert.Equal(t, int64(71), s.granted.Load()-s.canceled.Load(), "charges kept: one per call")
				assert.Equal(t, late.Load()-retimed.Load(), s.canceled.Load(), "a charge given back per late grant not retimed")
			})
		})
	}
}

// lateLimiter returns a Limiter of one rule, "api", of one limit of
// 1000 per per decided by alg, on store, after 70 calls answered
// promptly (the store's least lag), and the counts of late and of
// retimed grants ([throttle.DecisionEvent]) from then on.
func lateLimiter(t *testing.T, store quota.Store, per time.Duration, alg throttle.Algorithm) (lim *throttle.Limiter, late, retimed *atomic.Int64) {
	t.Helper()
	late, retimed = new(atomic.Int64), new(atomic.Int64)
	lim, err := throttle.NewLimiter(throttle.Policy{Instances: 1, Rules: []throttle.Rule{{
		Name:   "api",
		Limits: []throttle.Limit{{Name: "calls", Rate: 1000, Per: per, Algorithm: alg}},
	}}}, throttle.WithStore(store), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
		late.Add(int64(ev.Late))
		retimed.Add(int64(ev.Retimed))
	}}))
	require.NoError(t, err)
	for range 70 {
		_, err = lim.Wait(context.Background(), "api")
		require.NoError(t, err)
	}
	late.Store(0)
	retimed.Store(0)
	return lim, late, retimed
}

// A store whose every answer is slow, after prompt ones, still lets a
// request go: each late grant of the same request widens its tolerance,
// so it is retimed a few times, not for ever; and given back and decided
// again a few times by a store that cannot retime.
func TestLateGrantSlowForGood(t *testing.T) {
	for _, retimes := range []bool{true, false} {
		t.Run(map[bool]string{true: "retimed", false: "decided again"}[retimes], func(t *testing.T) {
			t.Parallel()
			s := &lateStore{Store: memstore.New()}
			var store quota.Store = s
			if !retimes {
				store = noRetimer{s}
			}
			lim, late, retimed := lateLimiter(t, store, 10*time.Second, throttle.SlidingLog)

			s.always.Store(true)
			s.lateBy.Store(int64(250 * time.Millisecond))
			_, err := lim.Wait(context.Background(), "api")
			require.NoError(t, err)
			// Tolerances of 100 ms four times, 200, then 400 > 250: five
			// late grants, more on a machine that adds 150 ms to a call.
			assert.GreaterOrEqual(t, late.Load(), int64(5), "late grants")
			assert.LessOrEqual(t, late.Load(), int64(8), "late grants")
			if retimes {
				assert.Equal(t, late.Load(), retimed.Load()+s.canceled.Load(), "each late grant retimed or given back")
				assert.Positive(t, retimed.Load(), "late grants retimed")
			}
			assert.Equal(t, int64(71), s.granted.Load()-s.canceled.Load(), "charges kept: one per call")
		})
	}
}

// A GCRA grant whose answer comes late while later grants were charged
// on the same bucket, pushing its arrival time past the retime's instant,
// cannot be moved, and Cancel would give back nothing: the grant is kept
// and sent, not given back and decided again, which would cost the bucket
// a second unit for one request. The bucket then admits as many more
// requests as after two prompt ones. Virtual time (synctest).
func TestLateGrantBuried(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "prompt", true: "late"}[late], func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				s := &lateStore{Store: memstore.New()}
				var lateGrants atomic.Int64
				lim, err := throttle.NewLimiter(throttle.Policy{Instances: 1, Rules: []throttle.Rule{
					{Name: "warm", Limits: []throttle.Limit{{Name: "warm", Rate: 1000, Per: 10 * time.Second, Algorithm: throttle.GCRA}}},
					// 200 ms per unit: a grant 50 ms after a first one
					// sets the arrival time 400 ms after the first's charge.
					{Name: "api", Limits: []throttle.Limit{{Name: "calls", Rate: 50, Per: 10 * time.Second, Algorithm: throttle.GCRA}}},
				}}, throttle.WithStore(s), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
					lateGrants.Add(int64(ev.Late))
				}}))
				require.NoError(t, err)
				// Prompt answers first, on another bucket: the store's least lag.
				for range 10 {
					_, err = lim.Allow(context.Background(), "warm")
					require.NoError(t, err)
				}
				s.granted.Store(0)

				// The first grant of a fresh bucket, answered 200 ms late;
				// a second, prompt, 50 ms after it was charged.
				if late {
					s.lateBy.Store(int64(200 * time.Millisecond))
				}
				start := time.Now()
				done := make(chan error, 1)
				go func() {
					_, err := lim.Allow(context.Background(), "api")
					done <- err
				}()
				time.Sleep(50 * time.Millisecond)
				_, err = lim.Allow(context.Background(), "api")
				require.NoError(t, err)
				require.NoError(t, <-done)
				time.Sleep(time.Until(start.Add(300 * time.Millisecond))) // both runs read the bucket at the same instant

				if late {
					assert.Equal(t, int64(1), lateGrants.Load(), "the first grant came late")
				} else {
					assert.Zero(t, lateGrants.Load())
				}
				assert.Zero(t, s.canceled.Load(), "nothing given back")
				assert.Equal(t, int64(2), s.granted.Load(), "one charge per request")
				// What the bucket admits now: the same after a late grant
				// as after a prompt one.
				more := 0
				for {
					if _, err := lim.Allow(context.Background(), "api"); err != nil {
						require.ErrorIs(t, err, throttle.ErrLimited)
						break
					}
					more++
				}
				assert.Equal(t, 49, more, "units left: 50 less the half of the two charges (400 ms) not drained in 300 ms")
			})
		})
	}
}
