package faulttest

import (
	"context"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The GitHub-like secondary limits of TestInFlightQuotaShare's vendor.
const (
	ghInFlight     = 10  // requests in flight at once
	ghWrites       = 20  // writes (POSTs) a second
	ghPoints       = 300 // points a second
	ghWriteCost    = 5   // points of a POST; a GET costs 1
	ghLatency      = 20 * time.Millisecond
	ghInstances    = 8
	ghGoroutines   = 16
	ghRun          = 5 * time.Second // the load runs this long
	ghWarmUp       = time.Second     // left out of the measured span
	ghPostFraction = 0.05            // of the requests a goroutine sends
)

// ghBucket is a vendor-side token bucket: capacity tokens, refilled at
// rate a second, full at the start.
type ghBucket struct {
	tokens, capacity, rate float64
	last                   time.Time
}

func (b *ghBucket) refill(now time.Time) {
	if b.last.IsZero() {
		b.tokens = b.capacity
	} else {
		b.tokens = min(b.capacity, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
}

// ghVendor is an HTTP API with GitHub-like secondary limits: at most
// ghInFlight requests in flight (from the handler's start to its return,
// before the response is written), ghWrites writes a second and ghPoints
// points a second, each a token bucket holding one second of quota. A
// request over a limit gets a 403 (in flight) or a 429 (a rate) and is
// counted as a violation; an admitted one takes ghLatency to answer.
type ghVendor struct {
	*httptest.Server

	mu             sync.Mutex
	points, writes ghBucket
	cur, peak      int
	start          time.Time
	admitted       []ghArrival
	violations     map[string]int
}

// ghArrival is one admitted request: when it arrived, after start, and
// its points.
type ghArrival struct {
	at     time.Duration
	points int
}

func newGHVendor(t *testing.T) *ghVendor {
	v := &ghVendor{
		points:     ghBucket{capacity: ghPoints, rate: ghPoints},
		writes:     ghBucket{capacity: ghWrites, rate: ghWrites},
		violations: map[string]int{},
	}
	v.Server = httptest.NewServer(http.HandlerFunc(v.serve))
	t.Cleanup(v.Close)
	return v
}

func (v *ghVendor) serve(w http.ResponseWriter, r *http.Request) {
	cost, write := 1, r.Method == http.MethodPost
	if write {
		cost = ghWriteCost
	}
	v.mu.Lock()
	now := time.Now()
	if v.start.IsZero() {
		v.start = now
	}
	v.points.refill(now)
	v.writes.refill(now)
	status := 0
	switch {
	case v.cur >= ghInFlight:
		status = http.StatusForbidden
		v.violations["in flight"]++
	case v.points.tokens < float64(cost):
		status = http.StatusTooManyRequests
		v.violations["points"]++
	case write && v.writes.tokens < 1:
		status = http.StatusTooManyRequests
		v.violations["writes"]++
	}
	if status != 0 {
		v.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(status)
		return
	}
	v.points.tokens -= float64(cost)
	if write {
		v.writes.tokens--
	}
	v.cur++
	v.peak = max(v.peak, v.cur)
	v.admitted = append(v.admitted, ghArrival{at: now.Sub(v.start), points: cost})
	v.mu.Unlock()

	time.Sleep(ghLatency) // the vendor's work, not a test's wait

	v.mu.Lock()
	v.cur--
	v.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

// claimCounter counts the claims of a store, the refused ones and their
// cost: the points reserved for requests that then were not sent on them.
// It also counts the claims made early: before the reservation's rate
// quota came due, Take's call start plus its Delay (the charge is at that
// start or later, so a claim before it holds a slot while its request
// still waits for its points).
type claimCounter struct {
	*redisstore.Store
	claims, refused, refusedCost, early *atomic.Int64
	due                                 *sync.Map // reservation id -> time.Time, the earliest it is due
}

func (c claimCounter) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	start := time.Now()
	dec, err := c.Store.Take(ctx, d)
	if err == nil && dec.OK && dec.Reservation != nil && dec.Reservation.Unclaimed {
		c.due.Store(dec.Reservation.ID, start.Add(dec.Delay))
	}
	return dec, err
}

func (c claimCounter) Claim(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	if due, ok := c.due.LoadAndDelete(r.ID); ok && time.Now().Before(due.(time.Time)) {
		c.early.Add(1)
	}
	dec, err := c.Store.Claim(ctx, r)
	c.claims.Add(1)
	if err == nil && !dec.OK {
		c.refused.Add(1)
		c.refusedCost.Add(int64(r.Demand.Cost))
	}
	return dec, err
}

// ghPolicy is the client's view of the vendor's limits: one rule for
// POSTs (writes and points, cost 5) and one for GETs (points, cost 1),
// sharing the points and the in-flight slots (one scope). The GCRA bursts
// are a tenth of a second of quota, so the fleet stays within the
// vendor's buckets even when requests reach the vendor up to nine tenths
// of a second later than their instants, in bunches.
func ghPolicy() throttle.Policy {
	points := throttle.Limit{Name: "points", Rate: ghPoints, Per: time.Second, Burst: ghPoints / 10}
	inflight := throttle.Limit{Name: "inflight", Rate: ghInFlight, Per: 10 * time.Second, Algorithm: throttle.Concurrency}
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "writes", Method: http.MethodPost, Scope: "github",
		Limits: []throttle.Limit{
			// Cost applies to every limit of the rule: 5 per write.
			{Name: "writes", Rate: ghWrites * ghWriteCost, Per: time.Second, Burst: 2 * ghWriteCost},
			points, inflight,
		},
		Cost: func(*http.Request) int { return ghWriteCost },
		Wait: waiters.Block(),
	}, {
		Name: "reads", Method: http.MethodGet, Scope: "github",
		Limits: []throttle.Limit{points, inflight},
		Wait:   waiters.Block(),
	}}}
}

// TestInFlightQuotaShare: a fleet of ghInstances Transports, each with its
// own Redis client and store, ghGoroutines goroutines each, sends a mix
// of GETs and POSTs as fast as the limits allow to a vendor with
// GitHub-like secondary limits (in flight, writes, points). A request
// waiting for its points holds no in-flight slot (no claim comes before
// its points are due), so the slots are held only by requests on their
// way to the vendor, at it and back: the vendor rejects nothing, and on a
// machine that keeps up the fleet uses nearly all of the points quota
// (measured and logged, see below).
func TestInFlightQuotaShare(t *testing.T) {
	r := runQuotaShare(t, false)
	assert.Empty(t, r.violations, "requests the vendor rejected")
	// What the design promises, on any machine: no slot is claimed
	// before its request's points come due.
	assert.Zero(t, r.early, "claims made before their points came due: slots held while waiting")
	// The share it buys depends on the machine. Quiet, or beside two CPU
	// burners, the fleet used 97-99% of the points quota (holding slots
	// while waiting, 43-45%). On a loaded machine a slot is held in the
	// store for the claim's and the release's round trips as well as the
	// vendor's 20 ms, and the slots bind before the points do: 70-86%
	// beside four burners, 39-43% beside six, 45-51% in the whole suite
	// beside two or three (2026-11-28, -race). The floor only catches a
	// gross regression.
	assert.GreaterOrEqual(t, r.share, 0.3, "share of the points quota used")
}

// TestInFlightQuotaShareHoldingSlots measures, for comparison, the same
// fleet when a request holds its slot while it waits for its points (the
// design before Claim, emulated by claiming at once). It runs only when
// THROTTLE_INFLIGHT_COMPARE is set, and asserts nothing but the vendor's
// limits.
func TestInFlightQuotaShareHoldingSlots(t *testing.T) {
	if os.Getenv("THROTTLE_INFLIGHT_COMPARE") == "" {
		t.Skip("a measurement for comparison; set THROTTLE_INFLIGHT_COMPARE=1 to run it")
	}
	r := runQuotaShare(t, true)
	assert.Empty(t, r.violations, "requests the vendor rejected")
	assert.Positive(t, r.early, "claims made before their points came due: the emulation holds slots while waiting")
}

// claimAtOnce makes a store hold a reservation's slots while it waits:
// Take claims them at once, and refuses, bound by the Concurrency limit,
// when they are not free (the semantics before Claim).
type claimAtOnce struct{ claimCounter }

func (c claimAtOnce) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	dec, err := c.claimCounter.Take(ctx, d)
	if err != nil || !dec.OK || !dec.Reservation.Unclaimed {
		return dec, err
	}
	cdec, err := c.claimCounter.Claim(ctx, dec.Reservation)
	if err == nil && cdec.OK {
		cdec.Delay = dec.Delay
		return cdec, nil
	}
	_ = c.Store.Cancel(ctx, dec.Reservation)
	if err != nil {
		return quota.Decision{}, err
	}
	return cdec, nil
}

// quotaShareRun is what one fleet of TestInFlightQuotaShare got.
type quotaShareRun struct {
	share      float64        // of the points quota, from ghWarmUp to ghRun
	violations map[string]int // the vendor's, by limit
	early      int64          // claims made before their points came due
}

// runQuotaShare runs the fleet and returns what it got.
func runQuotaShare(t *testing.T, holdWhileWaiting bool) quotaShareRun {
	noLeaks(t)
	srv := redistest.Start(t)
	v := newGHVendor(t)
	prefix := redistest.Prefix(t)
	var claims, refused, refusedCost, failed, early atomic.Int64
	var due sync.Map
	runCtx, stopRun := context.WithTimeout(context.Background(), ghRun)
	defer stopRun()

	var wg sync.WaitGroup
	for i := range ghInstances {
		rdb := newClient(t, srv.Addr())
		s, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		base := &http.Transport{MaxIdleConnsPerHost: ghGoroutines}
		t.Cleanup(base.CloseIdleConnections)
		var store quota.Store = claimCounter{Store: s, claims: &claims, refused: &refused, refusedCost: &refusedCost, early: &early, due: &due}
		if holdWhileWaiting {
			store = claimAtOnce{store.(claimCounter)}
		}
		tr, err := throttle.NewTransport(base, ghPolicy(), throttle.WithStore(store),
			// A slow call on a loaded machine must not fall back to a
			// local share, which would admit more than the fleet's quota.
			throttle.WithBreaker(throttle.Breaker{CallTimeout: 10 * time.Second}))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		for g := range ghGoroutines {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
			wg.Go(func() {
				for runCtx.Err() == nil {
					method := http.MethodGet
					if rng.Float64() < ghPostFraction {
						method = http.MethodPost
					}
					// The request's own context is not runCtx: a request
					// admitted before the end is sent and counted.
					req, err := http.NewRequestWithContext(context.Background(), method, v.URL, nil)
					if err != nil {
						failed.Add(1)
						return
					}
					resp, err := c.Do(req)
					if err != nil {
						failed.Add(1)
						t.Errorf("request: %v", err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()

	v.mu.Lock()
	defer v.mu.Unlock()
	var points, requests, all int
	var last time.Duration
	for _, a := range v.admitted {
		all += a.points
		last = max(last, a.at)
		if a.at >= ghWarmUp && a.at < ghRun {
			points += a.points
			requests++
		}
	}
	span := ghRun - ghWarmUp
	share := float64(points) / (ghPoints * span.Seconds())
	t.Logf("vendor: %d requests admitted (%d points) over %v; peak in flight %d of %d; violations %v",
		len(v.admitted), all, last.Round(time.Millisecond), v.peak, ghInFlight, v.violations)
	t.Logf("points quota used from %v to %v: %d of %d points a second = %.1f%%",
		ghWarmUp, ghRun, int(float64(points)/span.Seconds()), ghPoints, 100*share)
	// A refused claim gives its reservation back; a GCRA charge comes
	// back only if no later reservation sits on it, so at most the
	// refused claims' points are lost.
	t.Logf("claims: %d, refused %d (%.2f%%; each gave its reservation back and waited for a release): at most %d points lost, %.1f%% of the quota over the run",
		claims.Load(), refused.Load(), 100*float64(refused.Load())/max(1, float64(claims.Load())),
		refusedCost.Load(), 100*float64(refusedCost.Load())/(ghPoints*last.Seconds()))

	assert.Zero(t, failed.Load(), "requests that failed")
	assert.LessOrEqual(t, v.peak, ghInFlight, "peak in flight at the vendor")
	t.Logf("claims made before their points came due: %d", early.Load())
	return quotaShareRun{share: share, violations: maps.Clone(v.violations), early: early.Load()}
}
