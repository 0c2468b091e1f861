package throttle_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/redisstore"
)

// coarseVendor is an in-process GitHub search API (a base RoundTripper,
// no sockets, so it runs in a synctest bubble): rate requests per fixed
// window of per, its windows starting phase after the epoch's, on a clock
// skew ahead of ours. It tells the window's end only as GitHub does:
// X-RateLimit-Reset in whole epoch seconds (rounded up) and a Date in
// whole seconds (rounded down), and answers 403 with nothing remaining
// when over. Each way takes a random latency up to maxLatency.
type coarseVendor struct {
	rate       int
	per, phase time.Duration
	skew       time.Duration
	maxLatency time.Duration
	// With noGrid, the fleet (searchFleet) does not set AnchorGrid,
	// though the windows are a grid.
	noGrid bool
	// With spikeEvery > 0, one way in spikeEvery (at random) takes
	// spikeLatency instead.
	spikeEvery   int
	spikeLatency time.Duration
	// From fineFrom on (never if zero), the reset is told to the
	// millisecond, as a delay (X-RateLimit-Reset-After, Discord's),
	// rounded up: evidence narrow enough for the windows to move.
	fineFrom time.Time

	// With sticky, a window starts at the first request after the last
	// one ended (GitHub's), and phase is not used: the windows end later
	// after every gap. stickyK and stickyEnd are the current window's.
	sticky    bool
	stickyK   int64
	stickyEnd time.Time

	mu         sync.Mutex
	accepted   map[int64]int
	rejected   int
	rejectedIn map[int64]int // by window
}

func (v *coarseVendor) travel() {
	if v.spikeEvery > 0 && rand.N(v.spikeEvery) == 0 {
		time.Sleep(v.spikeLatency)
		return
	}
	if v.maxLatency > 0 {
		time.Sleep(rand.N(v.maxLatency))
	}
}

func (v *coarseVendor) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
	v.travel()
	now := time.Now().Add(v.skew) // the vendor's clock
	since := now.Sub(time.Unix(0, 0)) - v.phase
	k := int64(since / v.per)
	if since < 0 {
		k--
	}
	end := time.Unix(0, 0).Add(v.phase + time.Duration(k+1)*v.per)
	v.mu.Lock()
	if v.sticky {
		if !now.Before(v.stickyEnd) {
			v.stickyK++
			v.stickyEnd = now.Add(v.per)
		}
		k, end = v.stickyK, v.stickyEnd
	}
	ok := v.accepted[k] < v.rate
	if ok {
		v.accepted[k]++
	} else {
		v.rejected++
		if v.rejectedIn == nil {
			v.rejectedIn = map[int64]int{}
		}
		v.rejectedIn[k]++
	}
	used := v.accepted[k]
	v.mu.Unlock()
	resetSec := end.Unix()
	if end.Sub(time.Unix(resetSec, 0)) > 0 {
		resetSec++
	}
	h := http.Header{}
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	h.Set("X-RateLimit-Limit", strconv.Itoa(v.rate))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(v.rate-used))
	h.Set("X-RateLimit-Used", strconv.Itoa(used))
	if !v.fineFrom.IsZero() && !now.Add(-v.skew).Before(v.fineFrom) {
		ms := (end.Sub(now) + time.Millisecond - 1) / time.Millisecond
		h.Set("X-RateLimit-Reset-After", strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64))
	} else {
		h.Set("X-RateLimit-Reset", strconv.FormatInt(resetSec, 10))
	}
	h.Set("X-RateLimit-Resource", "search")
	h.Set("X-Test-Window-End", strconv.FormatInt(end.Add(-v.skew).UnixNano(), 10)) // on our clock, for the test's eyes only
	status := http.StatusOK
	if !ok {
		status = http.StatusForbidden
	}
	v.travel()
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// window returns the index of the vendor's window that holds local
// instant t.
func (v *coarseVendor) window(t time.Time) int64 {
	since := t.Add(v.skew).Sub(time.Unix(0, 0)) - v.phase
	k := int64(since / v.per)
	if since < 0 {
		k--
	}
	return k
}

// totals returns what the vendor accepted and rejected in all, and the
// number of windows that accepted anything.
func (v *coarseVendor) totals() (accepted, rejected, windows int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, n := range v.accepted {
		accepted += n
		if n > 0 {
			windows++
		}
	}
	return accepted, v.rejected, windows
}

// searchFleet runs instances Transports, one per store that newStore
// returns, on one vendor, with callers goroutines each sending searches
// for run (then cancelled: a deadline would refuse, at once, the waits
// that end after it), and reports the requests that failed. For the
// first light of the run, the callers pause at random between requests,
// asking for about three quarters of the quota, spread over the windows;
// then they send as fast as they are let.
func searchFleet(t *testing.T, run, light time.Duration, v *coarseVendor, instances, callers int, anchor bool, newStore func() quota.Store, hooks throttle.Hooks) int64 {
	t.Helper()
	learn := throttle.Learning{Sync: "search"}
	if anchor {
		// A fleet that knows its vendor: AnchorGrid for windows on a
		// fixed grid, not for windows that start at a first request.
		learn.Anchor, learn.AnchorGrid = "search", !v.sticky && !v.noGrid
	}
	policy := throttle.Policy{Instances: instances, Rules: []throttle.Rule{{
		Name: "search", Host: "api.github.com",
		Limits: []throttle.Limit{{Name: "search", Rate: v.rate, Per: v.per, Algorithm: throttle.FixedWindow}},
		Learn:  learn,
	}}}
	clients := make([]*http.Client, instances)
	for i := range clients {
		tr, err := throttle.NewTransport(v, policy, throttle.WithStore(newStore()), throttle.WithHooks(hooks),
			throttle.WithProfiles(quotaheader.GitHub))
		require.NoError(t, err)
		clients[i] = &http.Client{Transport: tr}
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	stop := time.AfterFunc(run, cancel)
	defer stop.Stop()
	lightEnd := time.Now().Add(light)
	gap := 2 * v.per * time.Duration(instances*callers) / time.Duration(v.rate*3/4)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for _, c := range clients {
		for range callers {
			wg.Go(func() {
				for ctx.Err() == nil {
					if left := time.Until(lightEnd); left > 0 {
						time.Sleep(min(rand.N(gap), left))
					}
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.github.com/search/code?q=x", nil)
					if err != nil {
						panic(err)
					}
					resp, err := c.Do(req)
					if err != nil {
						// Refused by the limit (a reservation further ahead than
						// the store grants) is the limiter at work, not a failure.
						if ctx.Err() == nil && !errors.Is(err, throttle.ErrLimited) && failed.Add(1) == 1 {
							t.Logf("first failure: %v", err)
						}
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	return failed.Load()
}

// repeats returns how many times a randomized fleet test runs its
// scenarios: once in CI, THROTTLE_REPEAT times when set.
func repeats(t *testing.T) int {
	t.Helper()
	s := os.Getenv("THROTTLE_REPEAT")
	if s == "" {
		return 1
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "THROTTLE_REPEAT")
	return max(n, 1)
}

// seeded returns a source of random numbers for a test's scenario,
// seeded from the clock and logged, so that a failing run can be told
// apart and rerun (THROTTLE_SEED).
func seeded(t *testing.T) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("THROTTLE_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "THROTTLE_SEED")
	}
	t.Logf("THROTTLE_SEED=%d", seed)
	return rand.New(rand.NewPCG(seed, seed))
}

// TestAnchorCoarseClock is the reproduction of issue 29: a fleet of 8
// instances of 16 callers on GitHub-like search windows of 1 s, 2 s and
// 60 s that start anywhere (and on a vendor clock 300 ms ahead), told only
// by whole-second resets and Dates, from .700 of a second. Each run has a
// light half (spread requests, which let the evidence narrow) and a heavy
// one. With Learning.Anchor the vendor rejects nothing, in every phase
// tried, from the first request on: every request is also counted in
// every vendor window that may hold it (anchor.go, anchorLog), so
// anchoring never admits more than a limit that knows nothing of the
// vendor's phase could. The same runs without Anchor (windows on the
// epoch's grid, Sync only) are the baseline: they may be rejected, and
// are for phases away from the epoch's.
//
// The in-process store runs in a synctest bubble, on virtual time: the
// windows and latencies are exact whatever the machine's load. The
// phases are seeded (THROTTLE_SEED); THROTTLE_REPEAT runs them more times.
func TestAnchorCoarseClock(t *testing.T) {
	for _, per := range []time.Duration{time.Second, 2 * time.Second, time.Minute} {
		t.Run(per.String(), func(t *testing.T) {
			t.Parallel()
			rng := seeded(t)
			windows := 6
			if per == time.Minute {
				windows = 3
			}
			for run := range 4 * repeats(t) {
				phase := time.Duration(run%4)*per/4 + time.Duration(rng.Int64N(int64(per/4))) // the phases cover the window
				if run%4 == 0 {
					phase = time.Duration(rng.Int64N(int64(time.Second))) // anywhere in the first second
				}
				t.Run(strconv.Itoa(run), func(t *testing.T) {
					var got [2]struct{ accepted, rejected, moves int }
					for i, anchor := range []bool{false, true} {
						synctest.Test(t, func(t *testing.T) {
							v := &coarseVendor{rate: 30, per: per, phase: phase, skew: 300 * time.Millisecond,
								maxLatency: 20 * time.Millisecond, accepted: map[int64]int{}}
							store := memstore.New()
							var (
								mu    sync.Mutex
								moves int
							)
							hooks := throttle.Hooks{OnAnchor: func(ev throttle.AnchorEvent) {
								mu.Lock()
								defer mu.Unlock()
								if ev.Moved {
									moves++
								}
								assert.NoError(t, ev.Err)
							}}
							time.Sleep(700 * time.Millisecond) // start at .700 of a second, as in the issue
							failed := searchFleet(t, time.Duration(windows)*per, time.Duration(windows/2)*per, v, 8, 16, anchor,
								func() quota.Store { return store }, hooks)
							assert.Zero(t, failed, "requests failed")
							accepted, rejected, _ := v.totals()
							mu.Lock()
							defer mu.Unlock()
							got[i].accepted, got[i].rejected, got[i].moves = accepted, rejected, moves
						})
					}
					full := float64(windows * 30) // the run's windows' quota (the light half asks for three quarters of it)
					t.Logf("phase %v: without Anchor accepted %d (%.0f%% of the quota), rejected %d; with Anchor accepted %d (%.0f%%), rejected %d, %d moves",
						phase, got[0].accepted, 100*float64(got[0].accepted)/full, got[0].rejected,
						got[1].accepted, 100*float64(got[1].accepted)/full, got[1].rejected, got[1].moves)
					assert.Zero(t, got[1].rejected, "the vendor rejected requests of the anchored fleet")
					// Counting requests in every window that may hold them,
					// and holding them out of the instants where windows may
					// end once anchored, cost
					// some quota: measured, 55-140% of the runs without
					// Anchor (which may be rejected).
					assert.GreaterOrEqual(t, float64(got[1].accepted), 0.35*float64(got[0].accepted), "anchoring used less of the quota")
				})
			}
		})
	}
}

// TestAnchorCoarseClockRedis is TestAnchorCoarseClock on redisstore, on
// real time (so shorter): every instance has its own client. The 60 s
// window's run starts 1.5 s before one of the vendor's windows ends. The
// vendor rejects nothing, before the first move as after it, but requests
// sent uncovered (DecisionEvent.Uncovered; docs/learning.md, "What
// anchoring cannot promise").
func TestAnchorCoarseClockRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("runs fleets against real-time windows for about 5 s")
	}
	srv := redistest.Start(t)
	for _, per := range []time.Duration{time.Second, 2 * time.Second, time.Minute} {
		t.Run(per.String(), func(t *testing.T) {
			t.Parallel()
			rng := seeded(t)
			for range repeats(t) {
				run := 4 * time.Second
				phase := time.Duration(rng.Int64N(int64(time.Second)))
				if per == time.Minute {
					// A boundary 1.5 s from now, anywhere in the second.
					now := time.Now().Add(300 * time.Millisecond)
					end := now.Add(1500*time.Millisecond + phase/10)
					phase = time.Duration(end.UnixNano() % int64(per))
				}
				v := &coarseVendor{rate: 30, per: per, phase: phase, skew: 300 * time.Millisecond,
					maxLatency: 5 * time.Millisecond, accepted: map[int64]int{}}
				prefix := redistest.Prefix(t)
				newStore := func() quota.Store {
					rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
					t.Cleanup(func() { _ = rc.Close() })
					s, err := redisstore.New(rc, redisstore.WithPrefix(prefix))
					require.NoError(t, err)
					return s
				}
				var (
					mu    sync.Mutex
					moves int
				)
				var fellBack, uncovered atomic.Int64
				hooks := throttle.Hooks{OnAnchor: func(ev throttle.AnchorEvent) {
					mu.Lock()
					defer mu.Unlock()
					if ev.Moved {
						moves++
					}
				}, OnDecision: func(ev throttle.DecisionEvent) {
					if ev.Fallback != throttle.FailDefault {
						fellBack.Add(1)
					}
					if ev.Uncovered && ev.Err == nil {
						uncovered.Add(1)
					}
				}}
				failed := searchFleet(t, run, run/2, v, 8, 16, true, newStore, hooks)
				accepted, rejected, used := v.totals()
				mu.Lock()
				t.Logf("phase %v: accepted %d in %d windows (%.0f%% of their quota), rejected %d; %d sent uncovered; %d moves; %d decisions on the store's fallback",
					phase, accepted, used, 100*float64(accepted)/float64(max(used, 1)*v.rate), rejected, uncovered.Load(), moves, fellBack.Load())
				mu.Unlock()
				// As in TestAnchoredSearchFleet: only a request sent
				// uncovered (later after its charge than the log's reach,
				// while the vendor's windows are not known) may be one too
				// many. On a loaded machine Redis's answers come late
				// enough for that: 2 rejected with 7 sent uncovered in 1
				// of 30 fleets beside CPU burners under -race, where
				// fleets sent 1-19 uncovered; 1 rejected in a CI run.
				assert.LessOrEqual(t, int64(rejected), uncovered.Load(), "the vendor rejected requests that no uncovered send explains")
				assert.Zero(t, failed, "requests failed")
			}
		})
	}
}

// TestAnchorStickyWindows runs the fleet of TestAnchorCoarseClock against
// a vendor whose windows start at the first request after the last one
// ended, as GitHub's do: they end later after every gap, so no phase
// learned from earlier answers holds. With Learning.Anchor and without
// AnchorGrid (the fleet does not claim a fixed grid), every request is
// counted in the limit's log for a window and its margin from its
// charge, and the vendor rejects nothing (48 of 48 runs). Scoring the
// log's entries by the phase learned (AnchorGrid, quota.LogExpiry) lets
// bursts in before the vendor's window has ended: with AnchorGrid this
// test failed, 5-23 rejections in some runs of three, and a fleet whose
// starts were 117 ms apart had 2-42 in every one of 16 runs. Virtual
// time (synctest), seeded starts.
func TestAnchorStickyWindows(t *testing.T) {
	for _, per := range []time.Duration{time.Second, 2 * time.Second} {
		t.Run(per.String(), func(t *testing.T) {
			t.Parallel()
			rng := seeded(t)
			for run := range 8 * repeats(t) {
				start := time.Duration(rng.Int64N(int64(per)))
				synctest.Test(t, func(t *testing.T) {
					v := &coarseVendor{rate: 30, per: per, skew: 300 * time.Millisecond, sticky: true,
						maxLatency: 20 * time.Millisecond, accepted: map[int64]int{}}
					store := memstore.New()
					time.Sleep(start)
					failed := searchFleet(t, 10*per, 4*per, v, 8, 16, true, func() quota.Store { return store }, throttle.Hooks{})
					assert.Zero(t, failed, "requests failed")
					accepted, rejected, windows := v.totals()
					t.Logf("run %d, start %v: accepted %d in %d windows (%.0f%% of their quota; the first four ask for three quarters), rejected %d",
						run, start, accepted, windows, 100*float64(accepted)/float64(max(windows, 1)*v.rate), rejected)
					assert.Zero(t, rejected, "the vendor rejected requests of the anchored fleet")
				})
			}
		})
	}
}

// TestAnchorReachFollowsLatency runs the fleet of TestAnchorCoarseClock
// (8 instances of 16 callers, whole-second resets and Dates, windows of
// 1 s on a grid anywhere in the second, without AnchorGrid) against a
// vendor whose answers mostly take a few milliseconds each way but one
// way in 40 takes 40 ms: a request counted 40 ms after it was sent,
// later than the shortest reach of a log entry (25 ms). Each entry
// counts for twice the longest lateness its instance measured over the
// last windows (anchor.go, phase.reach), which such answers keep above
// their time: the vendor rejects nothing, and few requests are held for
// coming later than their entry covers (each held one is decided again
// and sent sendLag later). Against it and a prompt vendor, each answered
// entry is shortened to the end of its vendor window (shorten.go) and
// the pause of a spent window holds decisions a send lag less than the
// sends (pauselead.go): the bursts reach the vendor as its windows
// start, every window full (900 of 900 in every run measured). Without
// the shortening, bursts a Per and a reach apart got 816-840 (spiky)
// and 870 (prompt); without the pause lead, 870 in half the phases.
// Virtual time (synctest), seeded phases.
func TestAnchorReachFollowsLatency(t *testing.T) {
	const per, windows = time.Second, 30
	rng := seeded(t)
	for run := range 4 * repeats(t) {
		phase := time.Duration(rng.Int64N(int64(per)))
		var got [2]int
		for i, spiky := range []bool{true, false} {
			synctest.Test(t, func(t *testing.T) {
				v := &coarseVendor{rate: 30, per: per, phase: phase, maxLatency: 2 * time.Millisecond, noGrid: true, accepted: map[int64]int{}}
				if spiky {
					v.spikeEvery, v.spikeLatency = 40, 40*time.Millisecond
				}
				store := memstore.New()
				time.Sleep(700 * time.Millisecond)
				failed := searchFleet(t, windows*per, 0, v, 8, 16, true, func() quota.Store { return store }, throttle.Hooks{})
				assert.Zero(t, failed, "requests failed")
				accepted, rejected, _ := v.totals()
				got[i] = accepted
				assert.Zero(t, rejected, "the vendor rejected requests (spikes %v)", spiky)
			})
		}
		t.Logf("run %d, phase %v: accepted %d of %d with spikes, %d without", run, phase, got[0], windows*30, got[1])
		// Bursts a Per and a reach apart fit 29 times in 30 s: 870.
		assert.GreaterOrEqual(t, 100*got[1], 98*windows*30, "a prompt vendor's fleet left windows idle")
		// A reach that forgot the slow answers would hold, and decide
		// again, every request it does not cover (a reach of twice the
		// sends' lateness alone: 150-557 of 900).
		assert.GreaterOrEqual(t, 100*got[0], 98*windows*30, "the spiky vendor's fleet: requests held, or windows left idle")
	}
}
