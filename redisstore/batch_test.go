package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTakeBatchMatchesTakeGCRA sends random GCRA-only demands in random
// batches through take_batch.lua, and the same demands one call each
// through take_gcra.lua on another prefix at the same instant of one
// clock: the decisions, and the keys afterwards (values and TTLs), must be
// the same.
//
// With exactLimits only (every emission interval whole microseconds),
// a batch answers a 1-limit demand granted at the clock with its TAT
// alone (take_batch.lua), which these runs cover. "alike" runs batches of
// copies of one demand of one or two such limits and at most one pause,
// which take_batch.lua decides in straight lines.
func TestTakeBatchMatchesTakeGCRA(t *testing.T) {
	for _, limits := range []struct {
		name  string
		ls    []quota.Limit
		alike bool
	}{{"fractions", gcraLimits, false}, {"exact", exactLimits, false}, {"alike", exactLimits, true}} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", limits.name, seed), func(t *testing.T) {
				t.Parallel()
				compareBatches(t, limits.ls, limits.alike, seed)
			})
		}
	}
}

// exactLimits are GCRA limits whose emission interval T is whole
// microseconds.
var exactLimits = []quota.Limit{
	{Name: "b", Rate: 5, Per: 7 * time.Millisecond, Burst: 2}, // T = 1400 µs
	{Name: "f", Rate: 4, Per: 10 * time.Millisecond},          // T = 2500 µs
	{Name: "g", Rate: 1000, Per: time.Second, Burst: 3},       // T = 1000 µs
}

// compareBatches is TestTakeBatchMatchesTakeGCRA on demands of limits;
// with alike, each batch is copies of one demand of one or two limits and
// at most one pause.
func compareBatches(t *testing.T, limits []quota.Limit, alike bool, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 11))
	clock := storetest.NewClock(storetest.Start)
	c, batched, single, batchPrefix, onePrefix := differential(t, clock, "batch:", "one:")
	seen := map[string]int{}
	spans := writeSpans{}
	var charged []*quota.Demand
	for step := range 120 {
		if rng.IntN(6) == 0 {
			key, d := randomPause(rng)
			require.NoError(t, batched.Pause(ctx(t), "s", key, d))
			require.NoError(t, single.Pause(ctx(t), "s", key, d))
		}
		ds := make([]*quota.Demand, 2+rng.IntN(7))
		for i := range ds {
			ds[i] = randomDemandOf(rng, limits)
			if alike {
				d := ds[i]
				d.Limits, d.Pauses = d.Limits[:min(len(d.Limits), 1+rng.IntN(2))], d.Pauses[:min(len(d.Pauses), 1)]
			}
			if i > 0 && (alike || rng.IntN(3) == 0) { // the one before again (sent as "=", take_batch.lua)
				again := *ds[i-1]
				ds[i] = &again
			}
		}
		stepStart := time.Now()
		got, errs := redisstore.TakeBatch(batched, ds)
		for i, d := range ds {
			where := fmt.Sprintf("step %d, demand %d of %d: %+v", step, i, len(ds), d)
			want, err := single.Take(ctx(t), d)
			require.NoError(t, err, where)
			require.NoError(t, errs[i], where)
			seen[outcome(want)]++
			sameDecision(t, want, got[i], where)
			if want.OK {
				charged = append(charged, d)
			}
		}
		for _, d := range charged {
			for _, b := range d.Limits {
				spans.charged(b.Limit.Name+":"+b.Key, stepStart)
			}
		}
		charged = charged[:0]
		for _, l := range limits {
			for _, key := range []string{"x", "y"} {
				k := l.Name + ":" + key
				sameGCRAKey(t, c, onePrefix, batchPrefix, quota.Bucket{Limit: l, Key: key}, spans[k], fmt.Sprintf("step %d", step))
			}
		}
		clock.Advance(time.Duration(rng.IntN(5000)) * time.Microsecond)
	}
	t.Logf("outcomes: %v", seen)
	assert.Len(t, seen, 4, "every kind of outcome occurs: %v", seen)
}

// TestDemandFieldsAlike: alike (batch.go), which lets a batch send a
// demand as "=" when it equals the one before, compares Demand's five
// fields; a sixth must be compared there too.
func TestDemandFieldsAlike(t *testing.T) {
	assert.Equal(t, 5, reflect.TypeFor[quota.Demand]().NumField(), "quota.Demand gained a field: compare it in alike (batch.go)")
}

// TestTakeBatchResent: a batch sent again by go-redis (its reply lost) is
// refused as a whole with ErrResent, and only its first sending charged.
func TestTakeBatchResent(t *testing.T) {
	l := quota.Limit{Name: "l", Rate: 5, Per: 24 * time.Hour}
	batchResentOnce(t, quota.Bucket{Limit: l, Key: "k"}, quota.Bucket{Limit: l, Key: "warm"})
}

// batchResentOnce checks, for demands of bucket b on a limit of 5, that
// a batch of two sent again by go-redis (its reply lost) is refused as a
// whole with ErrResent and charged once. A batch of warm, on other keys,
// loads the batch's script first: run alone on a fresh server, the
// dropped reply would be NOSCRIPT's, and nothing charged.
func batchResentOnce(t *testing.T, b, warmBucket quota.Bucket) {
	t.Helper()
	p := faultproxy.New(t, srv.Addr())
	c := newClient(t, p.Addr())
	s := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithReplay(redisstore.ReplayDetect))
	d := &quota.Demand{Scope: "s", Cost: 1, Limits: []quota.Bucket{b}}
	_, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	warm := &quota.Demand{Scope: "s", Cost: 1, Limits: []quota.Bucket{warmBucket}}
	_, errs := redisstore.TakeBatch(s, []*quota.Demand{warm, warm})
	require.NoError(t, errors.Join(errs...))
	p.DropNextReply()
	_, errs = redisstore.TakeBatch(s, []*quota.Demand{d, d})
	for _, err := range errs {
		assert.ErrorIs(t, err, redisstore.ErrResent)
	}
	// 1 + 2 charged of 5: two more fit, not three.
	for range 2 {
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		assert.True(t, dec.OK)
	}
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.False(t, dec.OK, "the batch was charged twice")
}

// TestBatchingContention: 8 instances with batching x 16 goroutines on a
// rule of a global GCRA limit and a per-category one, some demands
// waiting for their slot and some not. On Redis's clock (the marks, each
// a limit's arrival time after the grant) the grants of every limit are
// at least its interval apart: none admitted over, none charged twice;
// the keys end at the last grant's mark: none lost. The instances sent
// fewer calls than they made decisions: batches formed. It runs with the
// default batching (demands wait from BatchInFlight calls in flight on)
// and with demands waiting from the second call in flight on.
func TestBatchingContention(t *testing.T) {
	t.Run("default", func(t *testing.T) { batchingContention(t) })
	t.Run("two in flight", func(t *testing.T) { batchingContention(t, redisstore.WithBatchInFlight(2)) })
}

func batchingContention(t *testing.T, opts ...redisstore.Option) {
	const (
		cats       = 4
		globalRate = 400 // per second: T = 2500 µs
		catRate    = 150 // T = 6667 µs
		run        = 1500 * time.Millisecond
	)
	prefix, stores, sent := countedStores(t, 8, opts...)
	global := quota.Limit{Name: "global", Rate: globalRate, Per: time.Second, Burst: 10}
	perCat := quota.Limit{Name: "cat", Rate: catRate, Per: time.Second, Burst: 3}
	var (
		mu        sync.Mutex
		byLimit   = map[string][]int64{}
		decisions atomic.Int64
		wg        sync.WaitGroup
	)
	stop := time.Now().Add(run)
	for _, s := range stores {
		for w := range 16 {
			wg.Go(func() {
				cat := strconv.Itoa(w % cats)
				d := &quota.Demand{Scope: "bc", Cost: 1, Limits: []quota.Bucket{{Limit: global}, {Limit: perCat, Key: cat}}}
				if w%2 == 1 {
					d.MaxWait = 20 * time.Millisecond
				}
				for time.Now().Before(stop) {
					dec, err := s.Take(ctx(t), d)
					if !assert.NoError(t, err) {
						return
					}
					decisions.Add(1)
					if dec.OK {
						mu.Lock()
						byLimit["global"] = append(byLimit["global"], dec.Reservation.Marks[0])
						byLimit["cat:"+cat] = append(byLimit["cat:"+cat], dec.Reservation.Marks[1])
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	c := newClient(t, srv.Addr())
	for name, marks := range byLimit {
		// Marks are arrival times in ns, rounded up (quotamath's Mark): two
		// grants are at least T = 1e9/rate ns apart, less the rounding.
		slices.Sort(marks)
		l, key := global, prefix+"v1:{bc}:g:global:"
		if name != "global" {
			l, key = perCat, prefix+"v1:{bc}:G:cat:"+name[len("cat:"):] // T = 6666 2/3 µs
		}
		for i := 1; i < len(marks); i++ {
			if !assert.GreaterOrEqual(t, (marks[i]-marks[i-1]+1)*int64(l.Rate), int64(1e9), "%s: grants %d and %d", name, i-1, i) {
				break
			}
		}
		v, err := c.Get(ctx(t), key).Result()
		require.NoError(t, err, name)
		us, frac, err := redisstore.ParseArrival(v)
		require.NoError(t, err, name)
		ql := quotamath.Of(l)
		mark := ql.Mark(quotamath.Time{Micros: us, Frac: frac})
		assert.Equal(t, marks[len(marks)-1], mark, "%s: the key holds the last grant's mark", name)
	}
	n := decisions.Load()
	t.Logf("%d decisions, %d granted, in %d calls", n, len(byLimit["global"]), sent.Load())
	require.Greater(t, len(byLimit["global"]), globalRate, "the run admitted more than a second's quota")
	assert.Less(t, sent.Load(), n, "no batch formed")
}

// countedStores returns a prefix of keys, n stores on it, each on a
// client of its own (instances), with opts, and the count of the script
// calls they send.
func countedStores(t *testing.T, n int, opts ...redisstore.Option) (string, []*redisstore.Store, *atomic.Int64) {
	prefix := redistest.Prefix(t)
	sent := new(atomic.Int64)
	stores := make([]*redisstore.Store, n)
	for i := range stores {
		c := newClient(t, srv.Addr())
		c.AddHook(countHook{sent})
		stores[i] = newStoreOn(t, c, prefix, opts...)
	}
	return prefix, stores, sent
}

// countHook counts the script calls a client sends.
type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBatchedDemandNotSent: a demand that waits behind a call in flight
// and whose context ends first is never sent (ErrNotSent, nothing
// charged), and the demands around it are decided as usual.
func TestBatchedDemandNotSent(t *testing.T) {
	p := faultproxy.New(t, srv.Addr())
	c := newClient(t, p.Addr())
	s := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithBatching(8), redisstore.WithBatchInFlight(1))
	d := &quota.Demand{Scope: "ns", Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: 3, Per: 24 * time.Hour}, Key: "k"}}}
	_, err := s.Take(ctx(t), d) // connect, load the scripts; 1 of 3 used
	require.NoError(t, err)

	p.SetLatency(faultproxy.ToClient, 300*time.Millisecond)
	first := make(chan error, 1)
	go func() {
		_, err := s.Take(ctx(t), d) // in flight for 300 ms: 2 of 3
		first <- err
	}()
	time.Sleep(50 * time.Millisecond)
	short, cancel := context.WithTimeout(ctx(t), 50*time.Millisecond)
	defer cancel()
	_, err = s.Take(short, d)
	require.ErrorIs(t, err, redisstore.ErrNotSent)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-first)
	p.SetLatency(faultproxy.ToClient, 0)

	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.True(t, dec.OK, "the demand not sent was charged")
	dec, err = s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.False(t, dec.OK)
	assert.False(t, errors.Is(err, redisstore.ErrNotSent))
}

// TestBatchLeaderGivesUp: the waiting demand chosen to send the next
// batch (Store.lead) whose caller gives up at that moment leads the
// others without its own: it is never sent (ErrNotSent, nothing
// charged), the others are decided, and its place in flight is handed
// on, so that the scope's queue is left idle (dropped).
func TestBatchLeaderGivesUp(t *testing.T) {
	c := newClient(t, srv.Addr())
	s := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithBatching(8))
	d := &quota.Demand{Scope: "ns", Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: 3, Per: 24 * time.Hour}, Key: "k"}}}
	decs, errs, queued, err := redisstore.LeadEnded(s, []*quota.Demand{d, d, d})
	require.ErrorIs(t, err, redisstore.ErrNotSent)
	require.ErrorIs(t, err, context.Canceled)
	for i := range decs {
		require.NoError(t, errs[i])
		assert.True(t, decs[i].OK, "demand %d after the leader", i+1)
	}
	assert.False(t, queued, "the scope's queue is still there: a place in flight was lost")
	// Two of 3 charged: the leader's is not.
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.True(t, dec.OK, "the leader's demand was charged")
	dec, err = s.Take(ctx(t), d)
	require.NoError(t, err)
	assert.False(t, dec.OK)
}

// TestBatchLeaderDeadline: of the demands waiting, the one whose
// caller's deadline is the latest (none is the latest; the first of
// equals) leads the next batch, whose call its deadline bounds: every
// other caller has given up by then. Every demand is decided.
func TestBatchLeaderDeadline(t *testing.T) {
	c := newClient(t, srv.Addr())
	s := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithBatching(8))
	d := &quota.Demand{Scope: "ns", Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: 100, Per: time.Hour}, Key: "k"}}}
	h := time.Hour
	for _, tc := range []struct {
		deadlines []time.Duration
		lead      int
	}{
		{[]time.Duration{0, 0}, 0},
		{[]time.Duration{h, 0, 2 * h}, 1},
		{[]time.Duration{h, 3 * h, 2 * h}, 1},
		{[]time.Duration{2 * h, 2 * h}, 0},
	} {
		ds := make([]*quota.Demand, len(tc.deadlines))
		for i := range ds {
			ds[i] = d
		}
		lead, decs, errs := redisstore.LeaderAmong(s, ds, tc.deadlines)
		assert.Equal(t, tc.lead, lead, "leader among %v", tc.deadlines)
		for i := range decs {
			if assert.NoError(t, errs[i], "demand %d of %v", i, tc.deadlines) {
				assert.True(t, decs[i].OK, "demand %d of %v", i, tc.deadlines)
			}
		}
		// The leader hands its place on before it returns.
		assert.False(t, redisstore.InFlight(s, "ns"), "the scope's queue is left behind")
	}
}
