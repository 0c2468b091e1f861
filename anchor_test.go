package throttle_test

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

// windowVendor is a fake vendor with fixed windows of per that start at
// phase (window k covers [phase + k*per, phase + (k+1)*per) of the Unix
// time), which it tells only through the reset of its rate-limit headers
// (written by header). It admits rate requests a window and answers 429
// beyond, and counts both exactly.
type windowVendor struct {
	rate   int
	per    time.Duration
	phase  time.Duration
	header func(h http.Header, v *windowVendor, remaining int, end, now time.Time)
	trace  func(format string, args ...any) // when set, logs what happens (tests' eyes only)
	// Before fineUntil, githubSearch tells the reset to the millisecond,
	// as a delay (X-RateLimit-Reset-After).
	fineUntil time.Time

	mu       sync.Mutex
	accepted map[int64]int
	rejected int
	firstAt  map[int64]time.Duration // githubSearch, when not nil: by window, when its first request was accepted, into it
}

// window returns the index of the window that holds t, and its end.
func (v *windowVendor) window(t time.Time) (int64, time.Time) {
	k := int64(math.Floor(float64(t.UnixNano()-int64(v.phase)) / float64(v.per)))
	return k, time.Unix(0, int64(v.phase)+(k+1)*int64(v.per))
}

func (v *windowVendor) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	k, end := v.window(now)
	v.mu.Lock()
	ok := v.accepted[k] < v.rate
	if ok {
		v.accepted[k]++
	} else {
		v.rejected++
	}
	remaining := v.rate - v.accepted[k]
	v.mu.Unlock()
	v.header(w.Header(), v, remaining, end, now)
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(end.Sub(now).Seconds()))))
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

// counts returns what the vendor accepted in windows [from, from+n), and
// what it rejected in all.
func (v *windowVendor) counts(from int64, n int) (accepted []int, rejected int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k := from; k < from+int64(n); k++ {
		accepted = append(accepted, v.accepted[k])
	}
	return accepted, v.rejected
}

// ceilSeconds is d in whole seconds, rounded up: a vendor's reset is never
// early.
func ceilSeconds(d time.Duration) int64 { return int64(math.Ceil(d.Seconds())) }

// The vendors' ways of saying when the window ends.
var (
	// GitHub's: X-RateLimit-Reset in epoch seconds, read against the Date
	// header (whole seconds) that net/http adds.
	epochReset = func(h http.Header, v *windowVendor, remaining int, end, _ time.Time) {
		h.Set("X-RateLimit-Limit", strconv.Itoa(v.rate))
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(int64(math.Ceil(float64(end.UnixNano())/1e9)), 10))
	}
	// The IETF draft -07 dictionary: RateLimit: limit, remaining, reset
	// (delta seconds), with RateLimit-Policy giving the window.
	ietf07 = func(h http.Header, v *windowVendor, remaining int, end, now time.Time) {
		h.Set("RateLimit-Policy", fmt.Sprintf("%d;w=%d", v.rate, int(v.per.Seconds())))
		h.Set("RateLimit", fmt.Sprintf("limit=%d, remaining=%d, reset=%d", v.rate, remaining, ceilSeconds(end.Sub(now))))
	}
	// The IETF draft -08 structured fields: RateLimit "default";r;t.
	ietf08 = func(h http.Header, v *windowVendor, remaining int, end, now time.Time) {
		h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, v.rate, int(v.per.Seconds())))
		h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, remaining, ceilSeconds(end.Sub(now))))
	}
)

// TestAnchoredFleet runs a fleet against vendors whose fixed windows start
// at an arbitrary phase that only their reset headers tell: 8 instances
// (each a Transport with its own Redis client and http.Client) of 16
// goroutines that ask for more than the quota for several windows. With
// the limit named in Learning.Anchor (and Sync), the vendor rejects
// nothing while the fleet uses at least 95% of its quota, counted by the
// vendor. (The load's bursts, a log's Per apart (anchor.go, anchorLog),
// leave the evidence wider than half of these windows of 3-4 s: the
// windows do not move here, and the runs logged 0 anchor calls; the log
// is what holds. TestAnchorCoarseClock sees windows move.)
//
// The vendors' windows start 10-50ms after the epoch's: a fleet on the
// epoch's windows (no Anchor) sends its bursts just before the vendor's
// windows turn, and some land in the next one, which gets a burst of its
// own: measured, 6, 20 and 6 rejections and 89%, 79% and 94% of the quota used.
// One instance sends a first request alone, 1ms before a vendor window
// ends: an anchored counter starts its windows at its first charge, so
// windows left there would end just before the vendor's too; the fleet's
// load starts 250ms into the next window, inside the lateness of the
// windows that the rounded resets anchor (up to 1s, 2s when read against
// a Date header).
func TestAnchoredFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a fleet against real-time windows for about 30s")
	}
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name   string
		per    time.Duration
		header func(h http.Header, v *windowVendor, remaining int, end, now time.Time)
	}{
		{"X-RateLimit-Reset epoch seconds", 4 * time.Second, epochReset},
		{"IETF RateLimit reset", 3 * time.Second, ietf07},
		{"IETF RateLimit t", 3 * time.Second, ietf08},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const (
				instances = 8
				callers   = 16
				rate      = 20
				windows   = 5
			)
			v := &windowVendor{rate: rate, per: tc.per, header: tc.header, accepted: map[int64]int{},
				phase: 10*time.Millisecond + rand.N(40*time.Millisecond)}
			t.Logf("the vendor's windows start at %v + k*%v", v.phase, v.per)
			vendor := httptest.NewServer(v)
			t.Cleanup(vendor.Close)
			u, err := url.Parse(vendor.URL)
			require.NoError(t, err)

			policy := throttle.Policy{Instances: instances, Rules: []throttle.Rule{{
				Name: "vendor", Host: u.Host,
				Limits: []throttle.Limit{{Name: "window", Rate: rate, Per: tc.per, Algorithm: throttle.FixedWindow}},
				Learn:  throttle.Learning{Sync: "window", Anchor: "window"},
			}}}
			prefix := redistest.Prefix(t)
			var moves, anchors atomic.Int64
			hooks := throttle.Hooks{OnAnchor: func(ev throttle.AnchorEvent) {
				anchors.Add(1)
				if ev.Moved {
					moves.Add(1)
				}
				assert.NoError(t, ev.Err)
			}}
			clients := make([]*http.Client, instances)
			for i := range clients {
				rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				t.Cleanup(func() { _ = rc.Close() })
				store, err := redisstore.New(rc, redisstore.WithPrefix(prefix))
				require.NoError(t, err)
				base := &http.Transport{MaxIdleConnsPerHost: callers}
				t.Cleanup(base.CloseIdleConnections)
				tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store), throttle.WithHooks(hooks))
				require.NoError(t, err)
				clients[i] = &http.Client{Transport: tr}
			}
			get := func(ctx context.Context, c *http.Client) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, vendor.URL, nil)
				if err != nil {
					return err
				}
				resp, err := c.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.Body.Close()
			}

			// The first request, alone, 1ms before a vendor window ends.
			k0, end := v.window(time.Now())
			time.Sleep(time.Until(end.Add(-time.Millisecond)))
			require.NoError(t, get(t.Context(), clients[0]))
			// One answer bounds the window's end only to the reset's
			// resolution (and the Date's): too little to move windows of a
			// few seconds; the load's answers, on both sides of the
			// vendor's window ends, narrow it.

			// The load, from 250ms into the next window, for windows whole
			// windows.
			first := k0 + 1
			_, firstEnd := v.window(end)
			start := firstEnd.Add(-v.per).Add(250 * time.Millisecond)
			time.Sleep(time.Until(start))
			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			var failed atomic.Int64
			for _, c := range clients {
				for range callers {
					wg.Go(func() {
						for ctx.Err() == nil {
							if err := get(ctx, c); err != nil && ctx.Err() == nil {
								failed.Add(1)
								t.Errorf("request: %v", err)
							}
						}
					})
				}
			}
			time.Sleep(time.Until(firstEnd.Add(time.Duration(windows-1) * v.per)))
			cancel()
			wg.Wait()

			accepted, rejected := v.counts(first, windows)
			total := 0
			for _, n := range accepted {
				total += n
			}
			t.Logf("accepted per window %v, rejected %d; %d anchor calls, %d moves", accepted, rejected, anchors.Load(), moves.Load())
			assert.Zero(t, rejected, "the vendor rejected requests")
			assert.Zero(t, failed.Load(), "requests failed")
			assert.GreaterOrEqual(t, float64(total), 0.95*windows*rate, "the fleet used %d of %d", total, windows*rate)
		})
	}
}

// demandStore records the limits of the demands a store is asked.
type demandStore struct {
	*memstore.Store
	mu     sync.Mutex
	limits []quota.Limit
}

func (s *demandStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	s.mu.Lock()
	for _, b := range d.Limits {
		s.limits = append(s.limits, b.Limit)
	}
	s.mu.Unlock()
	return s.Store.Take(ctx, d)
}

// notAnchorer is a store that cannot move windows.
type notAnchorer struct{ quota.Store }

// TestAnchorPolicy: Learning.Anchor names a window limit of the rule,
// without a Phase, on a store that can anchor; the limit is anchored in
// every rule that uses it, and a Phase reaches the store.
func TestAnchorPolicy(t *testing.T) {
	window := throttle.Limit{Name: "window", Rate: 10, Per: time.Minute, Algorithm: throttle.FixedWindow}
	rule := func(learn throttle.Learning, limits ...throttle.Limit) throttle.Rule {
		return throttle.Rule{Name: "r", Limits: limits, Learn: learn}
	}
	for _, c := range []struct {
		name  string
		rule  throttle.Rule
		field string
	}{
		{"no such limit", rule(throttle.Learning{Anchor: "x"}, window), "Learn.Anchor"},
		{"a gcra limit", rule(throttle.Learning{Anchor: "g"}, throttle.Limit{Name: "g", Rate: 1, Per: time.Second}), "Learn.Anchor"},
		{"a phased limit", rule(throttle.Learning{Anchor: "window"}, throttle.Limit{Name: "window", Rate: 1, Per: time.Minute, Algorithm: throttle.FixedWindow, Phase: time.Second}), "Learn.Anchor"},
		{"a phase of a whole window", rule(throttle.Learning{}, throttle.Limit{Name: "window", Rate: 1, Per: time.Minute, Algorithm: throttle.FixedWindow, Phase: time.Minute}), "Limits[0].Phase"},
		{"a negative tolerance", rule(throttle.Learning{Anchor: "window", AnchorTolerance: -time.Second}, window), "Learn.AnchorTolerance"},
		{"a grid without an anchor", rule(throttle.Learning{AnchorGrid: true}, window), "Learn.AnchorGrid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := throttle.Policy{Rules: []throttle.Rule{c.rule}}.Validate()
			require.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var pe *throttle.PolicyError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, c.field, pe.Field, "%v", err)
		})
	}

	shared := throttle.Policy{Rules: []throttle.Rule{
		{Name: "a", Scope: "s", Limits: []throttle.Limit{window}, Learn: throttle.Learning{Anchor: "window"}},
		{Name: "b", Scope: "s", Limits: []throttle.Limit{window, {Name: "day", Rate: 100, Per: 24 * time.Hour, Algorithm: throttle.FixedWindow, Phase: 8 * time.Hour}}},
	}}
	_, err := throttle.NewLimiter(shared, throttle.WithStore(notAnchorer{memstore.New()}))
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Learn.Anchor", pe.Field)

	store := &demandStore{Store: memstore.New()}
	lim, err := throttle.NewLimiter(shared, throttle.WithStore(store))
	require.NoError(t, err)
	for _, r := range []string{"a", "b"} {
		p, err := lim.Allow(t.Context(), r)
		require.NoError(t, err)
		p.Done()
	}
	// Each request is also counted in a sliding log of the anchored
	// window's rate over its Per and logMargin (anchor.go, anchorLog),
	// after the rule's limits.
	require.Len(t, store.limits, 5)
	assert.True(t, store.limits[0].Anchored, "rule a's window")
	assert.Equal(t, quota.Limit{Name: "window", Rate: 10, Per: 61 * time.Second, Algorithm: quota.SlidingLog}, store.limits[1], "rule a's log")
	assert.True(t, store.limits[2].Anchored, "rule b's window, the same counter")
	assert.False(t, store.limits[3].Anchored, "rule b's day")
	assert.Equal(t, 8*time.Hour, store.limits[3].Phase)
	assert.Equal(t, store.limits[1], store.limits[4], "rule b's log")
}
