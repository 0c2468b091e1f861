package redisstore_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
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
)

// The stacked fleet: GitHub's secondary limits on one token, scaled from
// a minute to seconds. Points (a read costs 1, a write 5) and content
// creation (writes only) are counted by the vendor in sliding windows of
// its own clock, and 100 requests may be in flight. 8 instances with
// their own Redis client, store and Transport each send from 16
// goroutines: 6 write, 10 read, all with waiters.Block(). Writes are
// bound by content, which leaves the rest of the points to the reads.
const (
	stackedPer      = 2 * time.Second        // the vendor's window
	stackedMargin   = 500 * time.Millisecond // the policy's longer window: the send's jitter the vendor tolerates
	stackedPoints   = 300                    // per window; 900 a minute at GitHub
	stackedContent  = 27                     // writes per window; 80 a minute at GitHub
	stackedInFlight = 100
)

// stackedVendor enforces the stacked limits on the instants requests
// reach it: sliding windows of stackedPer, answering 403 beyond them.
type stackedVendor struct {
	*httptest.Server
	mu               sync.Mutex
	points, content  []time.Time // one entry per unit, in order of arrival
	reads, writes    int
	refused          int
	inFlight, busies int64
}

func newStackedVendor(t *testing.T) *stackedVendor {
	v := &stackedVendor{}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := atomic.AddInt64(&v.inFlight, 1); n > stackedInFlight {
			atomic.AddInt64(&v.busies, 1)
		}
		defer atomic.AddInt64(&v.inFlight, -1)
		write := r.Method != http.MethodGet
		cost := 1
		if write {
			cost = 5
		}
		v.mu.Lock()
		now := time.Now()
		since := now.Add(-stackedPer)
		v.points = dropBefore(v.points, since)
		v.content = dropBefore(v.content, since)
		ok := len(v.points)+cost <= stackedPoints && (!write || len(v.content)+1 <= stackedContent)
		if ok {
			for range cost {
				v.points = append(v.points, now)
			}
			if write {
				v.content = append(v.content, now)
				v.writes++
			} else {
				v.reads++
			}
		} else {
			v.refused++
		}
		v.mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"message":"You have exceeded a secondary rate limit."}`)
			return
		}
		_, _ = io.WriteString(w, "{}")
	}))
	t.Cleanup(v.Close)
	return v
}

// dropBefore drops the instants at or before since, a prefix.
func dropBefore(ts []time.Time, since time.Time) []time.Time {
	i := 0
	for i < len(ts) && !ts[i].After(since) {
		i++
	}
	return ts[i:]
}

// ledger is a store that records what it charged: for every grant kept
// (not cancelled), by reservation id, the instant (the sliding logs'
// marks, µs of Redis's clock, moved by a retime) and what it cost the
// points and content limits; and the grants given back after their
// instant had passed (a late grant given back, late.go), whose units no
// later request can take.
type ledger struct {
	*redisstore.Store
	calls  atomic.Int64 // Take, Retime and Cancel calls in progress
	mu     sync.Mutex
	grants map[string]charge
	lost   []charge
}

// settled reports whether no call is in progress, and how many grants are
// kept.
func (l *ledger) settled() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.calls.Load() == 0, len(l.grants)
}

type charge struct {
	at      int64 // µs of the store's clock
	points  int
	content int
}

func (l *ledger) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	l.calls.Add(1)
	defer l.calls.Add(-1)
	dec, err := l.Store.Take(ctx, d)
	if err != nil || !dec.OK {
		return dec, err
	}
	c := charge{at: -1}
	for i, b := range d.Limits {
		switch b.Limit.Name {
		case "points":
			c.points, c.at = d.CostOf(i), dec.Reservation.Marks[i]
		case "content":
			c.content = d.CostOf(i)
		}
	}
	l.mu.Lock()
	l.grants[dec.Reservation.ID] = c
	l.mu.Unlock()
	return dec, nil
}

func (l *ledger) Retime(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	l.calls.Add(1)
	defer l.calls.Add(-1)
	dec, err := l.Store.Retime(ctx, r)
	if err != nil || !dec.OK {
		return dec, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.grants[r.ID]
	if !ok {
		return dec, err
	}
	for i, b := range r.Demand.Limits {
		if b.Limit.Name == "points" {
			c.at = dec.Reservation.Marks[i]
		}
	}
	delete(l.grants, r.ID)
	l.grants[dec.Reservation.ID] = c
	return dec, nil
}

func (l *ledger) Cancel(ctx context.Context, r *quota.Reservation) error {
	l.calls.Add(1)
	defer l.calls.Add(-1)
	err := l.Store.Cancel(ctx, r)
	if err == nil {
		l.mu.Lock()
		// Redis's TIME and this process's clock are the same host's.
		if c, ok := l.grants[r.ID]; ok && c.at < time.Now().UnixMicro() {
			l.lost = append(l.lost, c)
		}
		delete(l.grants, r.ID)
		l.mu.Unlock()
	}
	return err
}

// stackedPolicy is GitHub's stacked rule (the githubquota preset's shape)
// on the scaled limits, points counted by pointsAlg.
func stackedPolicy(host string, pointsAlg throttle.Algorithm) throttle.Policy {
	writes := func(r *http.Request) bool { return r.Method != http.MethodGet && r.Method != http.MethodHead }
	token := throttle.KeyFromHeader("Authorization")
	per := stackedPer + stackedMargin
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "github", Host: host,
		Limits: []throttle.Limit{
			{Name: "points", Rate: stackedPoints, Per: per, Algorithm: pointsAlg, Key: token,
				Cost: throttle.CostByMethod(5, map[string]int{"GET": 1, "HEAD": 1})},
			{Name: "content", Rate: stackedContent, Per: per, Algorithm: throttle.SlidingLog, Key: token, Match: writes},
			{Name: "in-flight", Rate: stackedInFlight, Per: time.Minute, Algorithm: throttle.Concurrency, Key: token},
		},
		Wait: waiters.Block(),
	}}}
}

// stackedRun is what one run of the fleet got.
type stackedRun struct {
	sent          int64    // handed to the base transports
	grants        []charge // kept, in order of their instants
	given         []charge // given back once their instant had passed
	reads, writes int      // the vendor's admissions
	refused       int

	// Over whole windows of the policy's limits: the shares the kept
	// grants used, and the shares the late grants given back would have
	// added (units of the past, which no later request can take).
	used, lost shares

	// What the vendor admitted over the run, as shares of what the
	// policy's limits allow in the run's length (any algorithm).
	vendorPoints, vendorReads float64
}

func runStackedFleet(t *testing.T, pointsAlg throttle.Algorithm, run time.Duration) stackedRun {
	const instances, goroutines, writers = 8, 16, 6
	v := newStackedVendor(t)
	u, err := url.Parse(v.URL)
	require.NoError(t, err)
	prefix := redistest.Prefix(t)
	var sent atomic.Int64
	var ledgers []*ledger
	var clients []*http.Client
	for range instances {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 32})
		t.Cleanup(func() { _ = rdb.Close() })
		lg := &ledger{Store: newStoreOn(t, rdb, prefix), grants: map[string]charge{}}
		ledgers = append(ledgers, lg)
		base := &http.Transport{MaxIdleConnsPerHost: 64}
		t.Cleanup(base.CloseIdleConnections)
		counted := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			sent.Add(1)
			return base.RoundTrip(r)
		})
		tr, err := throttle.NewTransport(counted, stackedPolicy(u.Host, pointsAlg), throttle.WithStore(lg),
			// A slow store call on a loaded machine must not fall back to a
			// local share, which would admit more than the fleet's quota.
			throttle.WithBreaker(throttle.Breaker{CallTimeout: 10 * time.Second}))
		require.NoError(t, err)
		clients = append(clients, &http.Client{Transport: tr})
	}

	// Every goroutine sends until the deadline; a request whose slot
	// would come after it is refused at once, with nothing charged.
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	for i := range instances {
		for g := range goroutines {
			method := http.MethodGet
			if g < writers {
				method = http.MethodPost
			}
			wg.Go(func() {
				for ctx.Err() == nil {
					req, err := http.NewRequestWithContext(ctx, method, v.URL+"/repos/o/r/issues", nil)
					if err != nil {
						return
					}
					req.Header.Set("Authorization", "token fleet")
					resp, err := clients[i].Do(req)
					if err != nil {
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	for _, c := range clients {
		c.CloseIdleConnections()
	}
	// A store call the transport stopped waiting for when the run's
	// context ended runs on, and gives back what it granted (the breaker's
	// undo): wait for those before reading the ledgers, up to a bound that
	// a grant never given back still fails.
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		idle, kept := true, 0
		for _, lg := range ledgers {
			i, k := lg.settled()
			idle, kept = idle && i, kept+k
		}
		if idle && int64(kept) == sent.Load() {
			break
		}
	}

	var r stackedRun
	r.sent = sent.Load()
	for _, lg := range ledgers {
		lg.mu.Lock()
		for _, c := range lg.grants {
			r.grants = append(r.grants, c)
		}
		r.given = append(r.given, lg.lost...)
		lg.mu.Unlock()
	}
	v.mu.Lock()
	r.reads, r.writes, r.refused = v.reads, v.writes, v.refused
	v.mu.Unlock()
	perRun := float64(run) / float64(stackedPer+stackedMargin)
	r.vendorPoints = float64(r.reads+5*r.writes) / (perRun * stackedPoints)
	r.vendorReads = float64(r.reads) / (perRun*stackedPoints - float64(5*r.writes))

	// Shares over whole windows of the policy's limit, from the second
	// window of the run to the last whole one: what the store decided.
	slices.SortFunc(r.grants, func(a, b charge) int { return int(a.at - b.at) })
	if len(r.grants) == 0 {
		return r
	}
	per := (stackedPer + stackedMargin).Microseconds()
	from := r.grants[0].at + per/2
	windows := (r.grants[len(r.grants)-1].at - from) / per
	if windows < 1 {
		return r
	}
	to := from + windows*per
	points, content, reads := unitsIn(r.grants, from, to)
	lostPoints, lostContent, lostReads := unitsIn(r.given, from, to)
	allPoints, allContent := float64(windows*stackedPoints), float64(windows*stackedContent)
	left := allPoints - float64(5*(content+lostContent)) // what the writes leave
	r.used = shares{float64(points) / allPoints, float64(content) / allContent, float64(reads) / left}
	r.lost = shares{float64(lostPoints) / allPoints, float64(lostContent) / allContent, float64(lostReads) / left}
	return r
}

// assertWithinLog checks that no window (x-per, x] of the charges holds
// more than rate, units given by unit.
func assertWithinLog(t *testing.T, name string, grants []charge, unit func(charge) int, per time.Duration, rate int) {
	t.Helper()
	p := per.Microseconds()
	lo, sum, worst := 0, 0, 0
	for hi := range grants {
		sum += unit(grants[hi])
		for grants[lo].at <= grants[hi].at-p {
			sum -= unit(grants[lo])
			lo++
		}
		if hi+1 < len(grants) && grants[hi+1].at == grants[hi].at {
			continue // the window ends after every charge of the instant
		}
		worst = max(worst, sum)
	}
	assert.LessOrEqual(t, worst, rate, "%s: a window of %v held %d, more than %d", name, per, worst, rate)
}

// shares are what a run's grants took of the stacked limits over whole
// windows: of the points limit, of the content limit (writes), and of the
// points that the writes leave (reads), those given back late included.
type shares struct{ points, writes, reads float64 }

// unitsIn sums the points, content and reads' points of the grants with
// instants in (from, to].
func unitsIn(grants []charge, from, to int64) (points, content, reads int) {
	for _, c := range grants {
		if c.at > from && c.at <= to {
			points += c.points
			content += c.content
			if c.content == 0 {
				reads += c.points
			}
		}
	}
	return points, content, reads
}

// TestStackedFleet is issue 28's GitHub mix: reads are not queued behind
// writes reserved on the points they share, and writes are not starved.
// Over whole windows, the store decides at least 95% of the points limit,
// writes take at least 90% of their content limit and reads at least 90%
// of the points writes leave (88%, 80% and 80% under -race). No window of
// either limit holds more than its rate, every request is sent exactly as
// the store charged it, and no answer from the vendor is a refusal.
//
// A grant whose request this process could only send late is given back
// (late.go), and when its instant has passed its units are lost: no later
// request can be charged in the past. The floors hold for what was kept
// and what was given back so, which a store that leaves quota idle while
// requests wait for it still fails; THROTTLE_FLEET_STRICT=1 asks them of
// what was kept alone, as a quiet machine gives.
func TestStackedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of 8 instances for 9 s")
	}
	r := runStackedFleet(t, throttle.SlidingLog, 9*time.Second)
	t.Logf("sliding log, kept: points %.1f%%, writes %.1f%% of content, reads %.1f%% of what writes leave; given back late: %.1f%%, %.1f%%, %.1f%%; vendor: %d reads, %d writes, %d refused",
		100*r.used.points, 100*r.used.writes, 100*r.used.reads, 100*r.lost.points, 100*r.lost.writes, 100*r.lost.reads, r.reads, r.writes, r.refused)
	per := stackedPer + stackedMargin
	assertWithinLog(t, "points", r.grants, func(c charge) int { return c.points }, per, stackedPoints)
	assertWithinLog(t, "content", r.grants, func(c charge) int { return c.content }, per, stackedContent)
	assert.Equal(t, int64(len(r.grants)), r.sent, "every request charged was sent, and none other")
	assert.Zero(t, r.refused, "the vendor refused requests")
	// Under -race beside other packages (load average 14), a run charged
	// 89.5% of the points and reads 80.9% of what writes leave: clients
	// slowed several times leave freed units unused until they wake.
	//
	// With more load, late grants take the rest. In CI (2026-11-28) a run
	// kept 79.5% of the points and writes 53.7% of the content limit. Run
	// alone under -race beside six CPU burners, writes kept 48.1-79.6% of
	// the content limit and gave back late the rest (20.4-51.9%; 4 runs),
	// most of it in the run's second window, the first one reserved: the
	// requests woke too late for their instants, and the windows after
	// them were reserved already, so no retime had room.
	pointsFloor, writesFloor, readsFloor := 0.95, 0.90, 0.90
	if raceEnabled {
		pointsFloor, writesFloor, readsFloor = 0.88, 0.80, 0.80
	}
	got := r.used
	if os.Getenv("THROTTLE_FLEET_STRICT") == "" {
		got = shares{r.used.points + r.lost.points, r.used.writes + r.lost.writes, r.used.reads + r.lost.reads}
	}
	assert.GreaterOrEqual(t, got.points, pointsFloor, "share of the points limit")
	assert.GreaterOrEqual(t, got.writes, writesFloor, "writes' share of the content limit")
	assert.GreaterOrEqual(t, got.reads, readsFloor, "reads' share of the points writes leave")

	// THROTTLE_FLEET_GCRA=1 runs the same fleet with GCRA points, for the
	// figure GCRA's doc gives (one arrival time: reads wait behind writes'
	// reservations).
	if os.Getenv("THROTTLE_FLEET_GCRA") != "" {
		g := runStackedFleet(t, throttle.GCRA, 9*time.Second)
		t.Logf("GCRA: the vendor admitted %.1f%% of the points the run allows, reads %.1f%% of what writes leave (sliding log: %.1f%%, %.1f%%); %d reads, %d writes, %d refused",
			100*g.vendorPoints, 100*g.vendorReads, 100*r.vendorPoints, 100*r.vendorReads, g.reads, g.writes, g.refused)
	}
}
