package faulttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The budgets under test: the transport's defaults.
const (
	callBudget = 2 * time.Second        // Breaker.CallTimeout's default
	openFor    = 500 * time.Millisecond // Breaker.OpenFor's default

	// slack is what a loaded 2-core machine running -race may add on top
	// of a budget. Latency bounds are generous on purpose: the figures
	// themselves are logged and reported, not asserted.
	slack = 500 * time.Millisecond

	// addedBound bounds the latency a store fault may add to one request.
	addedBound = callBudget + slack

	// recoveryBound bounds the time from "Redis answers again" to "the
	// transport decides through Redis again" under steady traffic; the
	// design target is about a second (openFor plus one call).
	recoveryBound = 3 * time.Second

	// instances is Policy.Instances: the local fallback gives this
	// instance quota/instances.
	instances = 2
)

// noLeaks checks for leaked goroutines once t's cleanups (servers,
// proxies, clients) have run. Call it first: cleanups run last in, first
// out.
func noLeaks(t *testing.T) {
	t.Cleanup(func() {
		if err := findLeaks(); err != nil {
			t.Error(err)
		}
	})
}

// findLeaks is goleak.Find with a few seconds' patience for goroutines
// that end on their own: go-redis's pool, once it failed to dial PoolSize
// times, probes the dead address every second on a goroutine that
// notices the pool was closed only after its sleep.
func findLeaks() error {
	deadline := time.Now().Add(4 * time.Second)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// vendor is a local HTTP API that counts the requests it receives. A
// request to /slow-down gets a 429 with Retry-After: 30.
type vendor struct {
	*httptest.Server
	got atomic.Int64
}

func newVendor(t *testing.T) *vendor {
	v := &vendor{}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.got.Add(1)
		if r.URL.Path == "/slow-down" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(v.Close)
	return v
}

// clientOptions are the go-redis options docs/when-redis-fails.md
// recommends: the transport's call deadline reaches socket reads and
// writes, a refused or unroutable address fails fast, and no timeout of the
// client's own is below the transport's budget (a read timeout below it
// would turn a slow answer into a failure).
func clientOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		DialerRetries:         1,
		DialerRetryTimeout:    10 * time.Millisecond,
		MinRetryBackoff:       8 * time.Millisecond,
		MaxRetryBackoff:       64 * time.Millisecond,
	}
}

func newClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(clientOptions(addr))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newStore(t *testing.T, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(redistest.Prefix(t))}, opts...)...)
	require.NoError(t, err)
	return s
}

// recorder keeps what the hooks report.
type recorder struct {
	mu        sync.Mutex
	states    []throttle.StoreEvent
	at        []time.Time
	fallbacks map[throttle.FailureMode]int
	byStore   atomic.Int64 // decisions made by the store
	lastStore atomic.Int64 // UnixNano of the last one
	storeAt   []time.Time  // when each was made
}

func (r *recorder) hooks() throttle.Hooks {
	r.fallbacks = map[throttle.FailureMode]int{}
	return throttle.Hooks{
		OnStoreState: func(ev throttle.StoreEvent) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.states = append(r.states, ev)
			r.at = append(r.at, time.Now())
		},
		OnDecision: func(ev throttle.DecisionEvent) {
			if ev.Fallback == throttle.FailDefault && ev.Outcome != throttle.Failed {
				now := time.Now()
				r.byStore.Add(1)
				r.lastStore.Store(now.UnixNano())
				r.mu.Lock()
				r.storeAt = append(r.storeAt, now)
				r.mu.Unlock()
				return
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			r.fallbacks[ev.Fallback]++
		},
	}
}

// stateLog returns the states reported, in order.
func (r *recorder) stateLog() []throttle.StoreState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []throttle.StoreState
	for _, ev := range r.states {
		s = append(s, ev.State)
	}
	return s
}

// storeAfter returns when the store first decided a request after since.
func (r *recorder) storeAfter(since time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, at := range r.storeAt {
		if at.After(since) {
			return at, true
		}
	}
	return time.Time{}, false
}

// upAfter returns when the first StoreUp after since was reported.
func (r *recorder) upAfter(since time.Time) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, ev := range r.states {
		if ev.State == throttle.StoreUp && r.at[i].After(since) {
			return r.at[i], true
		}
	}
	return time.Time{}, false
}

// fallbacksOf is how many decisions got failure mode m.
func (r *recorder) fallbacksOf(m throttle.FailureMode) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fallbacks[m]
}

func (r *recorder) fallbackCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.fallbacks {
		n += c
	}
	return n
}

// policy is one rule "api" on the vendor's host: quota requests per hour
// (so nothing refills during a test), failing fast, with mode on store
// failure, for a fleet of [instances]. Requests to /slow-down fall under
// rule "paused", which learns pauses.
func policy(quota int, mode throttle.FailureMode) throttle.Policy {
	return throttle.Policy{
		Instances: instances,
		Rules: []throttle.Rule{
			{Name: "paused", Host: "127.0.0.1", Path: "/slow-down", Wait: waiters.FailFast(), OnStoreFailure: mode,
				Limits: []throttle.Limit{{Name: "p", Rate: 1000, Per: time.Hour}}},
			{Name: "api", Host: "127.0.0.1", Wait: waiters.FailFast(), OnStoreFailure: mode,
				Limits: []throttle.Limit{{Name: "calls", Rate: quota, Per: time.Hour}}},
		},
	}
}

func newTransport(t *testing.T, s quota.Store, p throttle.Policy, rec *recorder, opts ...throttle.Option) *throttle.Transport {
	opts = append([]throttle.Option{throttle.WithStore(s), throttle.WithHooks(rec.hooks())}, opts...)
	tr, err := throttle.NewTransport(nil, p, opts...)
	require.NoError(t, err)
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// result is what one RoundTrip returned and how long it took.
type result struct {
	status  int // 0: error
	err     error
	latency time.Duration
}

// results summarises a batch.
type results []result

func (rs results) sent() int {
	n := 0
	for _, r := range rs {
		if r.err == nil {
			n++
		}
	}
	return n
}

// count returns how many errors match target.
func (rs results) count(target error) int {
	n := 0
	for _, r := range rs {
		if errors.Is(r.err, target) {
			n++
		}
	}
	return n
}

func (rs results) latencies() []time.Duration {
	l := make([]time.Duration, len(rs))
	for i, r := range rs {
		l[i] = r.latency
	}
	slices.Sort(l)
	return l
}

func (rs results) max() time.Duration {
	if len(rs) == 0 {
		return 0
	}
	l := rs.latencies()
	return l[len(l)-1]
}

func (rs results) median() time.Duration {
	if len(rs) == 0 {
		return 0
	}
	return rs.latencies()[len(rs)/2]
}

// roundTrip sends one GET to path on v through tr. It fails the test if
// RoundTrip panics, or if it does not return within a bound far above any
// budget.
func roundTrip(t *testing.T, tr http.RoundTripper, v *vendor, path string) result {
	t.Helper()
	rs := fire(t, tr, v, path, 1, 1)
	return rs[0]
}

// fire sends n requests to path through tr from conc goroutines and
// returns their results. It asserts that every RoundTrip returns exactly
// once, without panicking, within a hard bound.
func fire(t *testing.T, tr http.RoundTripper, v *vendor, path string, n, conc int) results {
	t.Helper()
	out := make(results, n)
	var returned, panics atomic.Int64
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				out[i] = do(tr, v, path, &panics)
				returned.Add(1)
			}
		})
	}
	waitOrFail(t, &wg, 30*time.Second)
	require.Zero(t, panics.Load(), "RoundTrip panicked")
	require.Equal(t, int64(n), returned.Load(), "every RoundTrip returns exactly once")
	return out
}

func do(tr http.RoundTripper, v *vendor, path string, panics *atomic.Int64) (r result) {
	defer func() {
		if p := recover(); p != nil {
			panics.Add(1)
			r = result{err: fmt.Errorf("panic: %v", p)}
		}
	}()
	req, err := http.NewRequest(http.MethodGet, v.URL+path, nil)
	if err != nil {
		return result{err: err}
	}
	start := time.Now()
	resp, err := tr.RoundTrip(req)
	r.latency = time.Since(start)
	if err != nil {
		r.err = err
		return r
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	r.status = resp.StatusCode
	return r
}

func waitOrFail(t *testing.T, wg *sync.WaitGroup, bound time.Duration) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("RoundTrips still running after %v", bound)
	}
}

// traffic sends requests to path through tr from conc goroutines, each
// pausing every between requests, until stop is called; stop returns the
// results.
func traffic(t *testing.T, tr http.RoundTripper, v *vendor, path string, conc int, every time.Duration) (stop func() results) {
	var mu sync.Mutex
	var out results
	var panics atomic.Int64
	quit := make(chan struct{})
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for {
				select {
				case <-quit:
					return
				default:
				}
				r := do(tr, v, path, &panics)
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				select {
				case <-quit:
					return
				case <-time.After(every):
				}
			}
		})
	}
	return func() results {
		close(quit)
		waitOrFail(t, &wg, 30*time.Second)
		require.Zero(t, panics.Load(), "RoundTrip panicked")
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

// waitStoreDecides polls until a request through tr is decided by the
// store again and returns how long that took from since; it sends a
// request every 10 ms meanwhile (the steady traffic that recovery needs:
// the breaker probes on behalf of requests).
func waitStoreDecides(t *testing.T, tr http.RoundTripper, v *vendor, rec *recorder, since time.Time, bound time.Duration) time.Duration {
	t.Helper()
	before := rec.byStore.Load()
	deadline := since.Add(bound)
	for time.Now().Before(deadline) {
		roundTrip(t, tr, v, "/")
		if rec.byStore.Load() > before {
			return time.Unix(0, rec.lastStore.Load()).Sub(since)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the store did not decide a request within %v", bound)
	return 0
}

// freeAddr returns a loopback address on which nothing listens.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// assertLatency asserts the added-latency bound on every result and logs
// the figures under name.
func assertLatency(t *testing.T, name string, rs results) {
	t.Helper()
	t.Logf("%s: %d requests, latency median %v, max %v", name, len(rs), rs.median().Round(time.Microsecond), rs.max().Round(time.Microsecond))
	assert.LessOrEqual(t, rs.max(), addedBound, "%s: a store fault may add at most the call budget (%v) plus slack", name, callBudget)
}

// countingStore counts the calls that reach a store and the most in
// progress at once. It only observes: every call goes to the real store.
type countingStore struct {
	quota.Store
	calls, inFlight, maxInFlight atomic.Int64
}

func (c *countingStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	c.calls.Add(1)
	n := c.inFlight.Add(1)
	for {
		m := c.maxInFlight.Load()
		if n <= m || c.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	defer c.inFlight.Add(-1)
	return c.Store.Take(ctx, d)
}

func containsLine(s, line string) bool {
	for l := range strings.SplitSeq(s, "\n") {
		if strings.TrimSpace(l) == line {
			return true
		}
	}
	return false
}

func itoa(i int) string { return strconv.Itoa(i) }

// waitReported keeps sending a request every 10 ms until the transport
// has reported recovery after since, and returns when it did.
func waitReported(t *testing.T, tr http.RoundTripper, v *vendor, rec *recorder, since time.Time, bound time.Duration) time.Duration {
	t.Helper()
	deadline := since.Add(bound)
	for time.Now().Before(deadline) {
		if up, ok := rec.upAfter(since); ok {
			return up.Sub(since)
		}
		roundTrip(t, tr, v, "/")
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no recovery reported within %v", bound)
	return 0
}
