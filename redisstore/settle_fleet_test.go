package redisstore_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fleet of TestSettleFleet and the GitHub GraphQL-like vendor it
// calls, scaled down: a points budget per window, each query costing
// 1..gqlMaxCost points, which the vendor reports only in its answer.
const (
	gqlInstances = 8
	gqlWorkers   = 16 // per instance
	gqlBudget    = 2000
	gqlWindow    = time.Minute // of the shared fake clock
	gqlSteps     = 10          // clock steps per window
	gqlWindows   = 3
	gqlMaxCost   = 50
)

// gqlVendor answers like GitHub's GraphQL endpoint under its primary
// limit: gqlBudget points per window of gqlWindow (aligned to the epoch
// of the clock it shares with the fleet's stores), each query costing a
// random 1..gqlMaxCost points, reported in data.rateLimit.cost and in the
// x-ratelimit-* headers. A query that does not fit in what is left of
// the window is answered 403 with x-ratelimit-remaining: 0, charged
// nothing, and counted as rejected: a query the fleet should not have
// sent.
type gqlVendor struct {
	*httptest.Server
	now func() time.Time

	mu       sync.Mutex
	rng      *rand.Rand
	used     map[int64]int // points per window index
	answered int
	rejected int
}

func newGQLVendor(t *testing.T, now func() time.Time) *gqlVendor {
	v := &gqlVendor{now: now, rng: rand.New(rand.NewPCG(7, 11)), used: map[int64]int{}}
	v.Server = httptest.NewServer(http.HandlerFunc(v.serve))
	t.Cleanup(v.Close)
	return v
}

func (v *gqlVendor) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := v.now()
	k := now.UnixMicro() / gqlWindow.Microseconds()
	v.mu.Lock()
	cost := 1 + v.rng.IntN(gqlMaxCost)
	ok := v.used[k]+cost <= gqlBudget
	if ok {
		v.used[k] += cost
		v.answered++
	} else {
		v.rejected++
	}
	used := v.used[k]
	v.mu.Unlock()
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Ratelimit-Limit", strconv.Itoa(gqlBudget))
	h.Set("X-Ratelimit-Remaining", strconv.Itoa(gqlBudget-used))
	h.Set("X-Ratelimit-Used", strconv.Itoa(used))
	h.Set("X-Ratelimit-Reset", strconv.FormatInt((k+1)*int64(gqlWindow/time.Second), 10))
	h.Set("X-Ratelimit-Resource", "graphql")
	if !ok {
		h.Set("X-Ratelimit-Remaining", "0")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, `{"errors":[{"type":"RATE_LIMITED","message":"API rate limit exceeded"}]}`)
		return
	}
	fmt.Fprintf(w, `{"data":{"rateLimit":{"cost":%d,"remaining":%d},"viewer":{"login":"octocat"}}}`, cost, gqlBudget-used)
}

// stepper moves a fake clock only when every worker of the fleet waits
// for it, having been refused at the current instant: the clock stands
// still while any request is decided, sent, answered and settled, so the
// vendor's window of a request is the window its store charged, and the
// counts are exact however slow the machine is.
type stepper struct {
	mu      sync.Mutex
	cond    *sync.Cond
	workers int // still running
	waiting int // waiting for the clock to move past tick
	tick    int
}

func newStepper(workers int) *stepper {
	s := &stepper{workers: workers}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// now returns the current tick.
func (s *stepper) now() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tick
}

// wait blocks a worker refused at tick until the clock has moved past
// it, and returns the new tick.
func (s *stepper) wait(tick int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tick != tick {
		return s.tick // moved since the refusal: try again
	}
	s.waiting++
	s.cond.Broadcast()
	for s.tick == tick {
		s.cond.Wait()
	}
	return s.tick
}

// leave takes a worker that stops out of the count.
func (s *stepper) leave() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers--
	s.cond.Broadcast()
}

// advance waits until every worker waits, calls at (with the clock
// still), then moves to the next tick with move.
func (s *stepper) advance(at func(tick int), move func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.waiting < s.workers {
		s.cond.Wait()
	}
	at(s.tick)
	move()
	s.waiting = 0
	s.tick++
	s.cond.Broadcast()
}

// gqlPolicy is the fleet's rule for the vendor: every query is charged
// gqlMaxCost, the most it can cost, and settled to what the answer
// reports (unless settle is false: the control). The limit is alg's
// reading of the vendor's budget: a fixed window or a sliding log of the
// budget per window, or a GCRA whose burst plus what accrues in 0.9 of a
// window (the instants of one window's steps) fits in the budget.
func gqlPolicy(alg quota.Algorithm, settle bool) throttle.Policy {
	l := throttle.Limit{Name: "points", Rate: gqlBudget, Per: gqlWindow, Algorithm: alg}
	if alg == quota.GCRA {
		// 290 + 0.9*1900 = 2000; a step's accrual (190) plus what a step
		// leaves (under 50) never overflows the burst.
		l.Rate, l.Burst = gqlBudget-100, 290
	}
	r := throttle.Rule{
		Name: "graphql", Path: "/graphql",
		Limits: []throttle.Limit{l},
		Cost:   func(*http.Request) int { return gqlMaxCost },
		Wait:   waiters.FailFast(), // refused: the worker waits for the clock
		Learn:  throttle.Learning{Off: true},
	}
	if settle {
		r.Settle = throttle.SettleFromJSON("data.rateLimit.cost")
	}
	return throttle.Policy{Rules: []throttle.Rule{r}, Instances: gqlInstances}
}

// gqlFleetResult is what the vendor counted.
type gqlFleetResult struct {
	used     map[int64]int // points per window, from the first
	answered int
	rejected int
	share    float64 // of the budget of all windows used
}

// runGQLFleet runs gqlInstances instances, each with its own client of
// Redis (from dial), its own redisstore.Store and its own Transport, with
// gqlWorkers workers each sending queries as fast as the limit allows,
// for gqlWindows windows of the fake clock. At the end of each window it
// checks that the store's count of it (fixed window, sliding log, when
// settling) is the vendor's, point for point.
func runGQLFleet(t *testing.T, dial func(t *testing.T) redis.UniversalClient, alg quota.Algorithm, settle bool) gqlFleetResult {
	clock := storetest.NewClock(storetest.Start) // a whole number of windows since the epoch
	v := newGQLVendor(t, clock.Now)
	prefix := redistest.Prefix(t)
	policy := gqlPolicy(alg, settle)
	st := newStepper(gqlInstances * gqlWorkers)
	total := gqlWindows * gqlSteps

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		problems []error
		stores   []*redisstore.Store
	)
	fail := func(err error) {
		mu.Lock()
		problems = append(problems, err)
		mu.Unlock()
	}
	for i := range gqlInstances {
		s := newStoreOn(t, dial(t), prefix, redisstore.WithNow(clock.Now))
		stores = append(stores, s)
		base := &http.Transport{MaxIdleConnsPerHost: gqlWorkers}
		t.Cleanup(base.CloseIdleConnections)
		tr, err := throttle.NewTransport(base, policy, throttle.WithStore(s), throttle.WithClock(clock.Now),
			// A slow call on a loaded machine must not fall back to a local
			// share, which would admit more than the fleet's budget.
			throttle.WithBreaker(throttle.Breaker{CallTimeout: 20 * time.Second}))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		for g := range gqlWorkers {
			wg.Go(func() {
				defer st.leave()
				for tick := st.now(); tick < total; {
					req, err := http.NewRequest(http.MethodPost, v.URL+"/graphql", strings.NewReader(`{"query":"{ rateLimit { cost } viewer { login } }"}`))
					if err != nil {
						fail(err)
						return
					}
					resp, err := c.Do(req)
					var le *throttle.LimitError
					switch {
					case errors.As(err, &le):
						tick = st.wait(tick)
					case err != nil:
						fail(fmt.Errorf("instance %d worker %d: %w", i, g, err))
						return
					default:
						_, err = io.Copy(io.Discard, resp.Body)
						if cerr := resp.Body.Close(); err == nil {
							err = cerr
						}
						if err != nil {
							fail(fmt.Errorf("instance %d worker %d: reading the answer: %w", i, g, err))
							return
						}
					}
				}
			})
		}
	}

	limit := policy.Rules[0].Limits[0].Quota()
	for range total {
		st.advance(func(tick int) {
			if (tick+1)%gqlSteps != 0 || alg == quota.GCRA || !settle {
				return
			}
			// The window's last instant: what the store counts of the
			// window is what the vendor counted.
			states, err := stores[0].Inspect(t.Context(), "graphql", []quota.Limit{limit})
			var used int64
			if err == nil && len(states) > 0 {
				used = states[0].Used
			}
			v.mu.Lock()
			want := v.used[clock.Now().UnixMicro()/gqlWindow.Microseconds()]
			v.mu.Unlock()
			if err != nil || used != int64(want) {
				fail(fmt.Errorf("window %d: the store counts %d points (%v), the vendor %d", tick/gqlSteps, used, err, want))
			}
		}, func() { clock.Advance(gqlWindow / gqlSteps) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(problems...))

	v.mu.Lock()
	defer v.mu.Unlock()
	res := gqlFleetResult{used: map[int64]int{}, answered: v.answered, rejected: v.rejected}
	first := storetest.Start.UnixMicro() / gqlWindow.Microseconds()
	sum := 0
	for k, n := range v.used {
		res.used[k-first] = n
		sum += n
	}
	res.share = float64(sum) / float64(gqlWindows*gqlBudget)
	t.Logf("%v, settle %v: %d queries answered, %d rejected; points per window %v of %d: %.1f%% of the budget",
		alg, settle, res.answered, res.rejected, res.used, gqlBudget, 100*res.share)
	return res
}

// TestSettleFleet: a fleet of 8 instances of 16 workers, each instance
// with its own Redis client, store and Transport, sends GraphQL queries
// as fast as its limit allows to a vendor that reports each query's cost
// (1 to 50 points) only in its answer. Every query is charged the most
// it can cost, 50, and settled to what the vendor reports: the vendor
// rejects nothing, and the fleet uses at least 90% of the budget
// (measured: see the log). Without settling (the control), the estimate
// stands and about half the budget goes unused.
func TestSettleFleet(t *testing.T) {
	single := func(t *testing.T) redis.UniversalClient { return newClient(t, srv.Addr()) }
	for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.SlidingLog, quota.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			res := runGQLFleet(t, single, alg, true)
			assert.Zero(t, res.rejected, "queries the vendor rejected")
			assert.GreaterOrEqual(t, res.share, 0.9, "share of the budget used")
		})
	}
	t.Run("control: estimates only", func(t *testing.T) {
		res := runGQLFleet(t, single, quota.FixedWindow, false)
		assert.Zero(t, res.rejected, "queries the vendor rejected")
		assert.Less(t, res.share, 0.7, "share of the budget used by estimates that are never settled")
	})
}
