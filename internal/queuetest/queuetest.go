// Package queuetest holds the scenarios that check what a rule's queue
// ([throttle.Rule.MaxQueue]) does with the quota of the waiters it drops
// ([throttle.DropOldest]): none is lost, on every algorithm. The root
// package runs them on the in-process store in a testing/synctest bubble
// (virtual time), and redisstore on a real redis-server, single node and
// Cluster. Each takes the stores to use, so that a test can give the
// callers and the prober separate clients.
package queuetest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

// Bound is the queue bound of the scenarios (Rule.MaxQueue).
const Bound = 10

// A Case is the limits of one scenario's rule: one rate limit, and for
// the in-flight case a Concurrency limit beside it.
type Case struct {
	Name   string
	Limits func(rate int, per time.Duration) []throttle.Limit
	// Spacing is how many emission intervals (Per/Rate) apart a limit of
	// rate 1 grants reservations one after another: 1, but 2 for a
	// sliding window, whose estimate still weighs a window's one unit
	// until the next window ends.
	Spacing int
}

// Cases are the scenarios' limits: each algorithm, and GCRA with an
// in-flight limit (whose reservations are unclaimed while they wait).
var Cases = []Case{
	{"GCRA", one(throttle.GCRA), 1},
	{"FixedWindow", one(throttle.FixedWindow), 1},
	{"SlidingWindow", one(throttle.SlidingWindow), 2},
	{"SlidingLog", one(throttle.SlidingLog), 1},
	{"GCRA+InFlight", func(rate int, per time.Duration) []throttle.Limit {
		return []throttle.Limit{
			{Name: "rate", Rate: rate, Per: per, Burst: 1},
			{Name: "inflight", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency},
		}
	}, 1},
}

func one(alg throttle.Algorithm) func(int, time.Duration) []throttle.Limit {
	return func(rate int, per time.Duration) []throttle.Limit {
		l := throttle.Limit{Name: "rate", Rate: rate, Per: per, Algorithm: alg}
		if alg == throttle.GCRA {
			l.Burst = 1 // one at a time: the emission interval is Per/Rate
		}
		return []throttle.Limit{l}
	}
}

// policy is one rule "bulk" on c's limits with waiter w, and queue full
// (a zero bound: none).
func policy(c Case, rate int, per time.Duration, w throttle.Waiter, bound int, full throttle.QueueFull) throttle.Policy {
	return throttle.Policy{Rules: []throttle.Rule{{
		Name:      "bulk",
		Limits:    c.Limits(rate, per),
		Wait:      w,
		MaxQueue:  bound,
		QueueFull: full,
	}}}
}

// retryAfter is what a fail-fast Limiter on s says of rule "bulk" of c:
// the time until a call can go (zero if it could go now, and then it
// gives its quota back).
func retryAfter(t *testing.T, s quota.Store, c Case, rate int, per time.Duration) time.Duration {
	t.Helper()
	probe, err := throttle.NewLimiter(policy(c, rate, per, waiters.FailFast(), 0, throttle.RefuseNew), throttle.WithStore(s))
	require.NoError(t, err)
	p, err := probe.Allow(context.Background(), "bulk")
	if err == nil {
		require.NoError(t, p.Cancel(context.Background()))
		return 0
	}
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	return le.RetryAfter
}

// Horizon is the reproduction of issue 28's first: rule c at 1 per hour,
// Block, MaxQueue Bound, DropOldest; one call goes, then 1,000 callers
// come at once on callers. All but Bound are dropped; a fail-fast Limiter
// on prober then says the next call can go at most Bound reservations
// (Bound hours, c.Spacing each) later than it said after the first call
// (every queued waiter holds one, none is lost), and, once every caller
// has gone, no later than it said then (every reservation was given
// back).
func Horizon(t *testing.T, callers, prober quota.Store, c Case) {
	const n = 1000
	rate, per := 1, time.Hour
	lim, err := throttle.NewLimiter(policy(c, rate, per, waiters.Block(), Bound, throttle.DropOldest), throttle.WithStore(callers))
	require.NoError(t, err)
	first, err := lim.Wait(context.Background(), "bulk")
	require.NoError(t, err)
	first.Done()
	base := retryAfter(t, prober, c, rate, per)
	require.Positive(t, base, "the first call spent the hour")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			p, err := lim.Wait(ctx, "bulk")
			if err == nil {
				p.Done()
			}
			out <- err
		})
	}
	for i := range n - Bound {
		err := <-out
		if !assert.ErrorIs(t, err, throttle.ErrQueueDropped, "caller %d", i) {
			break
		}
	}
	held := retryAfter(t, prober, c, rate, per)
	assert.LessOrEqual(t, held, base+time.Duration(Bound*c.Spacing)*per/time.Duration(rate),
		"with %d waiting, the next call is at most %d reservations further away than after the first", Bound, Bound)

	cancel()
	wg.Wait()
	close(out)
	for err := range out {
		assert.ErrorIs(t, err, context.Canceled)
	}
	after := retryAfter(t, prober, c, rate, per)
	assert.LessOrEqual(t, after, base, "every reservation of the callers that went was given back")
	t.Logf("%s: retry after %v after the first call, %v with %d waiting, %v when all went", c.Name, base, held, Bound, after)
}

// Throughput is the reproduction of issue 28's second: rule c at 10 per
// second, Block, MaxQueue Bound, queue full; 250 calls offered at 50 per
// second for 5 s. It returns how many calls went within the 5 s and half
// an emission interval (so that no grant falls on the edge), counted
// from the Limiter's answers (Wait returned a permit), and checks at the
// end that the next call is at most Bound emission intervals (1 s) away,
// plus the limit's own wait after a full window (the first call's probe).
func Throughput(t *testing.T, s quota.Store, c Case, full throttle.QueueFull) int {
	const (
		rate   = 10
		per    = time.Second
		every  = 20 * time.Millisecond
		offers = 250
	)
	lim, err := throttle.NewLimiter(policy(c, rate, per, waiters.Block(), Bound, full), throttle.WithStore(s))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg   sync.WaitGroup
		open atomic.Bool // within the 5 s
		sent atomic.Int64
	)
	open.Store(true)
	for range offers {
		wg.Go(func() {
			p, err := lim.Wait(ctx, "bulk")
			if err != nil {
				if !errors.Is(err, throttle.ErrLimited) && !errors.Is(err, context.Canceled) {
					t.Errorf("unexpected error: %v", err)
				}
				return
			}
			if open.Load() {
				sent.Add(1)
			}
			p.Done()
		})
		time.Sleep(every)
	}
	time.Sleep(per / rate / 2)
	open.Store(false)
	got := int(sent.Load())
	held := retryAfter(t, s, c, rate, per)
	cancel()
	wg.Wait()
	assert.LessOrEqual(t, held, 2*per+Bound*per/rate, "the queue's reservations reach at most %d intervals ahead", Bound)
	return got
}
