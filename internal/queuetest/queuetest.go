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
			// Slots enough that a claim seldom finds them all held (a
			// release may be sent with a later call): the claim path
			// is not what these scenarios measure.
			{Name: "inflight", Rate: 4, Per: time.Minute, Algorithm: throttle.Concurrency},
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

// retryAfter is what a fail-fast Limiter on s says of rule "bulk" of c
// (probe).
func retryAfter(t *testing.T, s quota.Store, c Case, rate int, per time.Duration) time.Duration {
	t.Helper()
	d, err := probe(s, c, rate, per)
	require.NoError(t, err)
	return d
}

// probe asks a fail-fast Limiter on s about rule "bulk" of c: the time
// until a call can go (zero if it could go now, and then it gives its
// quota back).
func probe(s quota.Store, c Case, rate int, per time.Duration) (time.Duration, error) {
	lim, err := throttle.NewLimiter(policy(c, rate, per, waiters.FailFast(), 0, throttle.RefuseNew), throttle.WithStore(s))
	if err != nil {
		return 0, err
	}
	p, err := lim.Allow(context.Background(), "bulk")
	if err == nil {
		return 0, p.Cancel(context.Background())
	}
	var le *throttle.LimitError
	if !errors.As(err, &le) {
		return 0, err
	}
	return le.RetryAfter, nil
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
	s, count := counting(callers)
	lim, err := throttle.NewLimiter(policy(c, rate, per, waiters.Block(), Bound, throttle.DropOldest), throttle.WithStore(s))
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
	assert.Equal(t, int64(1+Bound), count.granted.Load(), "the store granted the first call and one reservation per place: a drop costs no grant")
	assert.Equal(t, int64(Bound), count.cancels.Load(), "the reservations given back are those of the callers that stayed")
	t.Logf("%s: retry after %v after the first call, %v with %d waiting, %v when all went; %d grants, %d cancels",
		c.Name, base, held, Bound, after, count.granted.Load(), count.cancels.Load())
}

// Fleet is Horizon on several instances: a Limiter on each of
// instances (each its own queue), and the 1,000 callers spread over
// them. The store grants the first call and one reservation per place of
// every instance, however many are dropped, so while they wait the next
// call is at most Bound reservations per instance further away. Once
// every caller has gone, window and log charges are all back; a GCRA
// reservation is refunded only if no later one sits on it, and the
// instances' lines interleave, so there it is checked only that nothing
// more was charged.
func Fleet(t *testing.T, instances []quota.Store, prober quota.Store, c Case) {
	const n = 1000
	rate, per := 1, time.Hour
	k := len(instances)
	lims := make([]*throttle.Limiter, k)
	cs := make([]*counts, k)
	for i, s := range instances {
		var err error
		s, cs[i] = counting(s)
		lims[i], err = throttle.NewLimiter(policy(c, rate, per, waiters.Block(), Bound, throttle.DropOldest), throttle.WithStore(s))
		require.NoError(t, err)
	}
	granted := func() (g int64) {
		for _, c := range cs {
			g += c.granted.Load()
		}
		return g
	}
	first, err := lims[0].Wait(context.Background(), "bulk")
	require.NoError(t, err)
	first.Done()
	base := retryAfter(t, prober, c, rate, per)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			p, err := lims[i%k].Wait(ctx, "bulk")
			if err == nil {
				p.Done()
			}
			out <- err
		})
	}
	for i := range n - k*Bound {
		if err := <-out; !assert.ErrorIs(t, err, throttle.ErrQueueDropped, "caller %d", i) {
			break
		}
	}
	held := retryAfter(t, prober, c, rate, per)
	assert.LessOrEqual(t, held, base+time.Duration(k*Bound*c.Spacing)*per/time.Duration(rate),
		"with %d waiting on each of %d instances, the next call is at most that many reservations further away", Bound, k)
	assert.Equal(t, int64(1+k*Bound), granted(), "the store granted the first call and one reservation per place")

	cancel()
	wg.Wait()
	close(out)
	for err := range out {
		assert.ErrorIs(t, err, context.Canceled)
	}
	after := retryAfter(t, prober, c, rate, per)
	if c.Limits(rate, per)[0].Algorithm == throttle.GCRA {
		assert.LessOrEqual(t, after, held, "giving back charges nothing")
	} else {
		assert.LessOrEqual(t, after, base, "every reservation was given back")
	}
	t.Logf("%s on %d instances: retry after %v after the first call, %v with %d waiting on each, %v when all went; %d grants",
		c.Name, k, base, held, Bound, after, granted())
}

// Throughputs is the reproduction of issue 28's second: for each of
// Cases, RefuseNew and then DropOldest, a rule of 10 per second, Block,
// MaxQueue Bound, and 250 calls offered at 50 per second for 5 s, each
// run on a store of its own from newStore, all at once. It returns, per
// case, how many calls went under RefuseNew and under DropOldest while
// calls were offered and half an emission interval more (so that no
// grant falls on the edge), counted from the Limiters' answers (Wait
// returned a permit), and how long that was: 5.05 s, or more on a loaded
// machine (in a synctest bubble, exactly). It
// checks at the end of each run that the next call is at most Bound
// emission intervals away, plus the limit's own wait after a full
// window.
func Throughputs(t *testing.T, newStore func() quota.Store) [][2]Run {
	sent := make([][2]Run, len(Cases))
	stores := make([][2]quota.Store, len(Cases))
	for i := range stores {
		stores[i] = [2]quota.Store{newStore(), newStore()}
	}
	var wg sync.WaitGroup
	for i, c := range Cases {
		for j, full := range []throttle.QueueFull{throttle.RefuseNew, throttle.DropOldest} {
			wg.Go(func() { sent[i][j] = throughput(t, stores[i][j], c, full) })
		}
	}
	wg.Wait()
	return sent
}

// A Run is what one run of Throughputs saw: Sent calls went within
// Window.
type Run struct {
	Sent   int
	Window time.Duration
}

// Share is the part of what a limit of rate per second allows within
// the run's window (rate times the window) that went.
func (r Run) Share(rate int) float64 {
	return float64(r.Sent) / (float64(rate) * r.Window.Seconds())
}

// throughput is one run of Throughputs. It reports problems with
// t.Errorf only, from any goroutine.
func throughput(t *testing.T, s quota.Store, c Case, full throttle.QueueFull) Run {
	const (
		rate   = 10
		per    = time.Second
		every  = 20 * time.Millisecond
		offers = 250
	)
	lim, err := throttle.NewLimiter(policy(c, rate, per, waiters.Block(), Bound, full), throttle.WithStore(s))
	if err != nil {
		t.Errorf("%s %s: %v", c.Name, full, err)
		return Run{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		wg   sync.WaitGroup
		open atomic.Bool // within the 5 s
		sent atomic.Int64
	)
	open.Store(true)
	start := time.Now()
	for range offers {
		wg.Go(func() {
			p, err := lim.Wait(ctx, "bulk")
			if err != nil {
				if !errors.Is(err, throttle.ErrLimited) && !errors.Is(err, context.Canceled) {
					t.Errorf("%s %s: unexpected error: %v", c.Name, full, err)
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
	got := Run{Sent: int(sent.Load()), Window: time.Since(start)}
	held, err := probe(s, c, rate, per)
	cancel()
	wg.Wait()
	if err != nil {
		t.Errorf("%s %s: probe: %v", c.Name, full, err)
	} else if bound := 2*per + Bound*per/rate; held > bound {
		t.Errorf("%s %s: the next call is %v away, more than %v: the queue's reservations reach beyond %d intervals", c.Name, full, held, bound, Bound)
	}
	return got
}

// counts are the decisions of a store seen through counting.
type counts struct {
	granted atomic.Int64 // Takes granted (now or as a reservation)
	cancels atomic.Int64 // Cancel calls
}

// counting returns s, counting its Take grants and its Cancel calls. It
// is a [quota.LeaseStore] if s is one.
func counting(s quota.Store) (quota.Store, *counts) {
	c := &countingStore{Store: s}
	if ls, ok := s.(quota.LeaseStore); ok {
		return countingLeases{c, ls}, &c.counts
	}
	return c, &c.counts
}

type countingStore struct {
	quota.Store
	counts
}

func (s *countingStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	dec, err := s.Store.Take(ctx, d)
	if err == nil && dec.OK {
		s.granted.Add(1)
	}
	return dec, err
}

func (s *countingStore) Cancel(ctx context.Context, r *quota.Reservation) error {
	s.cancels.Add(1)
	return s.Store.Cancel(ctx, r)
}

// countingLeases is a countingStore of a LeaseStore.
type countingLeases struct {
	*countingStore
	ls quota.LeaseStore
}

func (s countingLeases) Release(ctx context.Context, r *quota.Reservation) error {
	return s.ls.Release(ctx, r)
}

func (s countingLeases) Claim(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	return s.ls.Claim(ctx, r)
}

func (s countingLeases) Renew(ctx context.Context, r *quota.Reservation) error {
	return s.ls.Renew(ctx, r)
}

func (s countingLeases) WatchRelease(ctx context.Context, scope string, b quota.Bucket) (<-chan struct{}, func(), error) {
	return s.ls.WatchRelease(ctx, scope, b)
}
