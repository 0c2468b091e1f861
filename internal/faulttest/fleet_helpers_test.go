package faulttest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The fleet of issue 18: fleetSize instances, each with its own go-redis
// client, redisstore.Store and Transport (all defaults), and
// fleetWorkers goroutines per instance offering far more than every quota.
const (
	fleetSize    = 8
	fleetWorkers = 16

	// fleetPer is the period of every rate limit.
	fleetPer = time.Second

	// fleetTraffic is how long each fault run sends: three and a half
	// periods, so every check sees several whole windows.
	fleetTraffic = 3500 * time.Millisecond

	// fleetHold is how long the vendor keeps a request of the concurrency
	// rule in flight.
	fleetHold = 20 * time.Millisecond

	// clockTol widens every span the checks derive from the recorded
	// instants. The instants are wall-clock readings (CLOCK_REALTIME) in
	// this process; the stores decide on the same clock (Redis's TIME,
	// truncated to microseconds; the local fallback's time.Now). 1 ms
	// covers the truncation many times over, and any slew of the wall
	// clock across a check's span.
	clockTol = time.Millisecond

	categoryHeader = "X-Category"
	categories     = 15
)

// fleetRules are the rules of the fleet's policy, one per algorithm and
// one with two limits, all active in every run. A request's path names
// its rule. Every rate is per fleetPer, so the same checks apply to all.
var fleetRules = []throttle.Rule{
	{Name: "gcra", Limits: []throttle.Limit{{Name: "gcra", Rate: 100, Per: fleetPer, Algorithm: throttle.GCRA}}},
	{Name: "fixed", Limits: []throttle.Limit{{Name: "fixed", Rate: 100, Per: fleetPer, Algorithm: throttle.FixedWindow}}},
	{Name: "sliding", Limits: []throttle.Limit{{Name: "sliding", Rate: 100, Per: fleetPer, Algorithm: throttle.SlidingWindow}}},
	{Name: "log", Limits: []throttle.Limit{{Name: "log", Rate: 100, Per: fleetPer, Algorithm: throttle.SlidingLog}}},
	// Per is the lease: far longer than a request is in flight
	// (fleetHold), so no lease can expire under a request that still
	// runs, and the vendor's count of requests in flight is bounded by
	// the slots.
	{Name: "conc", Limits: []throttle.Limit{{Name: "conc", Rate: 8, Per: 2 * time.Second, Algorithm: throttle.Concurrency}}},
	// The rule of the issue: 100/s for the API, 10/s per category.
	{Name: "two", Limits: []throttle.Limit{
		{Name: "all", Rate: 100, Per: fleetPer, Algorithm: throttle.SlidingLog},
		{Name: "category", Rate: 10, Per: fleetPer, Algorithm: throttle.SlidingLog, Key: throttle.KeyFromHeader(categoryHeader)},
	}},
}

// fleetPolicy is fleetRules on host "vendor.test", failing fast unless a
// request says otherwise, with the store-failure default (FailLocal),
// plus a rule "warm" that is not checked.
func fleetPolicy() throttle.Policy {
	p := throttle.Policy{Instances: fleetSize}
	for _, r := range fleetRules {
		r.Host, r.Path, r.Wait = "vendor.test", "/"+r.Name, waiters.FailFast()
		p.Rules = append(p.Rules, r)
	}
	p.Rules = append(p.Rules, throttle.Rule{Name: "warm", Host: "vendor.test", Path: "/warm",
		Limits: []throttle.Limit{{Name: "warm", Rate: 1_000_000, Per: fleetPer}}})
	return p
}

// A send is one request that reached the vendor: lo is when its caller
// called RoundTrip, hi when the base transport received it, both wall
// clock in Unix nanoseconds. Whatever decided it (Redis's script, or an
// instance's local share) did so at an instant in [lo, hi]: after the
// call began, and no later than the send. For a reservation (a waiter
// that waits) the instant decided for is later than the call, but the
// transport sleeps until it before it sends, so it is in [lo, hi] too.
type send struct{ lo, hi int64 }

// started carries lo from the caller to the base transport through the
// request's context (the transport clones the request, keeping it).
type started struct{ lo int64 }

type startedKey struct{}

// fleetVendor is the base RoundTripper of every instance: the vendor, in
// process. It records every request that reaches it, by rule and key, and
// counts the requests of the concurrency rule in flight (from arrival to
// the end of the response body, which the transport's lease outlives).
type fleetVendor struct {
	mu    sync.Mutex
	sends map[string]map[string][]send // rule, key

	inFlight, maxInFlight atomic.Int64
}

func newFleetVendor() *fleetVendor {
	return &fleetVendor{sends: map[string]map[string][]send{}}
}

func (v *fleetVendor) RoundTrip(req *http.Request) (*http.Response, error) {
	hi := time.Now().UnixNano()
	if req.Body != nil {
		_ = req.Body.Close()
	}
	rule := strings.TrimPrefix(req.URL.Path, "/")
	resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}
	if rule == "warm" {
		return resp, nil
	}
	st, _ := req.Context().Value(startedKey{}).(*started)
	if st == nil {
		return nil, errors.New("fleet vendor: request without its start")
	}
	v.mu.Lock()
	byKey := v.sends[rule]
	if byKey == nil {
		byKey = map[string][]send{}
		v.sends[rule] = byKey
	}
	key := req.Header.Get(categoryHeader)
	byKey[key] = append(byKey[key], send{lo: st.lo, hi: hi})
	v.mu.Unlock()
	if rule != "conc" {
		return resp, nil
	}
	n := v.inFlight.Add(1)
	for m := v.maxInFlight.Load(); n > m && !v.maxInFlight.CompareAndSwap(m, n); m = v.maxInFlight.Load() {
	}
	timer := time.NewTimer(fleetHold)
	select {
	case <-timer.C:
	case <-req.Context().Done():
		timer.Stop()
	}
	resp.Body = &inFlightBody{v: v, r: strings.NewReader("ok")}
	return resp, nil
}

// inFlightBody ends its request's time in flight at its end (EOF) or when
// closed, whichever is first: before the transport's lease body releases
// the slot in either case.
type inFlightBody struct {
	v    *fleetVendor
	r    *strings.Reader
	once sync.Once
}

func (b *inFlightBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err == io.EOF {
		b.done()
	}
	return n, err
}

func (b *inFlightBody) Close() error { b.done(); return nil }

func (b *inFlightBody) done() { b.once.Do(func() { b.v.inFlight.Add(-1) }) }

// sendsOf returns a copy of the sends of rule: by key, or all keys
// together for key "*".
func (v *fleetVendor) sendsOf(rule, key string) []send {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []send
	for k, ss := range v.sends[rule] {
		if key == "*" || k == key {
			out = append(out, ss...)
		}
	}
	return out
}

// keysOf returns the keys rule's requests were sent with.
func (v *fleetVendor) keysOf(rule string) []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var keys []string
	for k := range v.sends[rule] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fleetStats counts what the callers and the hooks of the fleet saw.
type fleetStats struct {
	offered, sent, limited, unavailable atomic.Int64
	local                               atomic.Int64 // decided by an instance's local share
	states                              atomic.Int64 // store state changes reported
	mu                                  sync.Mutex
	other                               []error // errors that are not a refusal
}

func (s *fleetStats) hooks() throttle.Hooks {
	return throttle.Hooks{
		OnDecision: func(ev throttle.DecisionEvent) {
			if ev.Fallback == throttle.FailLocal {
				s.local.Add(1)
			}
		},
		OnStoreState: func(throttle.StoreEvent) { s.states.Add(1) },
	}
}

// A fleet is fleetSize instances sending to one vendor through one Redis.
type fleet struct {
	vendor *fleetVendor
	trs    []*throttle.Transport
	stats  fleetStats

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// newFleet builds the fleet on the Redis at addr: for each instance a
// client with go-redis's default options, a store with the default
// options, and a transport with the default settings. Each instance
// sends one request of rule "warm", so that connections and scripts are
// in place before the traffic starts.
func newFleet(t *testing.T, addr string) *fleet {
	t.Helper()
	f := &fleet{vendor: newFleetVendor()}
	prefix := redistest.Prefix(t)
	quiet := slog.New(slog.DiscardHandler)
	for range fleetSize {
		client := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = client.Close() })
		store, err := redisstore.New(client, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		tr, err := throttle.NewTransport(f.vendor, fleetPolicy(),
			throttle.WithStore(store), throttle.WithHooks(f.stats.hooks()), throttle.WithLogger(quiet))
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet, "http://vendor.test/warm", nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, "warm-up")
		_ = resp.Body.Close()
		f.trs = append(f.trs, tr)
	}
	require.Zero(t, f.stats.local.Load(), "the store decided the warm-up")
	return f
}

// fleetWaiter is the waiter of worker w of an instance: most fail fast
// (the figure of the issue), two wait up to 300 ms and two block (until
// the traffic stops), so reservations are decided too.
func fleetWaiter(w int) throttle.Waiter {
	switch {
	case w >= fleetWorkers-2:
		return waiters.Block()
	case w >= fleetWorkers-4:
		return waiters.UpTo(300 * time.Millisecond)
	}
	return waiters.FailFast()
}

// start starts the workers: each sends to every rule in turn (category
// keys in turn for rule "two"), one request after the other, until stop.
func (f *fleet) start() {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for i, tr := range f.trs {
		for w := range fleetWorkers {
			f.wg.Go(func() { f.work(ctx, tr, i*fleetWorkers+w, fleetWaiter(w)) })
		}
	}
}

func (f *fleet) work(ctx context.Context, tr *throttle.Transport, id int, w throttle.Waiter) {
	ctx = throttle.WithWaiter(ctx, w)
	for n := id; ctx.Err() == nil; n++ {
		rule := fleetRules[n%len(fleetRules)].Name
		st := &started{}
		req, err := http.NewRequestWithContext(context.WithValue(ctx, startedKey{}, st), http.MethodGet, "http://vendor.test/"+rule, nil)
		if err != nil {
			f.stats.record(err)
			return
		}
		req.Header.Set(categoryHeader, "c"+strconv.Itoa(n/len(fleetRules)%categories))
		f.stats.offered.Add(1)
		st.lo = time.Now().UnixNano()
		resp, err := tr.RoundTrip(req)
		switch {
		case err == nil:
			f.stats.sent.Add(1)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		case errors.Is(err, throttle.ErrLimited):
			f.stats.limited.Add(1)
		case errors.Is(err, throttle.ErrStoreUnavailable):
			f.stats.unavailable.Add(1)
		case ctx.Err() == nil:
			f.stats.record(err)
		}
	}
}

func (s *fleetStats) record(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.other = append(s.other, err)
}

// stop ends the traffic and waits for every worker (a blocked one gives
// its reservation back when its context ends).
func (f *fleet) stop(t *testing.T) {
	t.Helper()
	f.cancel()
	waitOrFail(t, &f.wg, 30*time.Second)
	for _, tr := range f.trs {
		tr.CloseIdleConnections()
	}
}

// A verdict is the worst case a check found: got sends (or requests in
// flight) where the limit admits at most limit.
type verdict struct {
	got, limit int
	where      string
}

func (v verdict) ok() bool { return v.got <= v.limit }

func (v verdict) String() string {
	return fmt.Sprintf("%d (limit %d) %s", v.got, v.limit, v.where)
}

// worse returns the verdict with the larger excess over its limit; the
// zero verdict is no verdict yet.
func worse(a, b verdict) verdict {
	if a.where == "" || b.got-b.limit > a.got-a.limit {
		return b
	}
	return a
}

// bound is what a limit admits, for the fleet: the limit itself when the
// store decides everything; when the store is down, what it granted plus
// what every instance's local share grants (see [throttle.LocalShare]).
type bound struct {
	l    throttle.Limit
	down bool
}

// units returns how many units a set of sends may hold that lies in m
// windows (FixedWindow, SlidingWindow: m aligned windows; SlidingLog: m
// spans shorter than Per; Concurrency: m = 1, at one instant).
func (b bound) units(m int) int {
	n := m * b.l.Rate
	if b.down {
		// A share's window may be k of the limit's (LocalShare): m of
		// ours meet at most ceil(m/k)+1 of its.
		s := throttle.LocalShare(b.l, fleetSize)
		windows := m
		if k := int(s.Per / b.l.Per); k > 1 {
			windows = min(m, (m+k-1)/k+1)
		}
		n += fleetSize * windows * s.Rate
	}
	return n
}

// gcra returns how many units a set of sends may hold that lies in a span
// of d: Burst + d*Rate/Per ([throttle.GCRA]), for the store and for each
// local share when the store is down.
func (b bound) gcra(d time.Duration) int {
	f := func(l throttle.Limit) int {
		burst := cmp.Or(l.Burst, l.Rate)
		return burst + int(int64(d)*int64(l.Rate)/int64(l.Per))
	}
	n := f(b.l)
	if b.down {
		n += fleetSize * f(throttle.LocalShare(b.l, fleetSize))
	}
	return n
}

// check returns the worst cases of ss against b, by b's algorithm: the
// first is over spans of one window (SlidingLog, FixedWindow,
// SlidingWindow) or any span (GCRA), the second, if any, over longer
// spans. The soundness argument is in the doc of TestFleet.
func (b bound) check(ss []send) []verdict {
	switch b.l.Algorithm {
	case throttle.GCRA:
		return []verdict{b.checkGCRA(ss)}
	case throttle.SlidingLog:
		return []verdict{b.checkSpans(ss, 1), b.checkSpans(ss, 2)}
	}
	return []verdict{b.checkWindows(ss, 1, 1), b.checkWindows(ss, 2, 1<<30)} // FixedWindow, SlidingWindow
}

// noSends is the verdict of a check that found nothing to count.
func (b bound) noSends(m int) verdict {
	return verdict{limit: b.units(m), where: "(no sends)"}
}

// checkSpans: the sends sure to lie in a span shorter than m*Per: lo >= a
// and hi - a < m*Per - clockTol, for every a among the lo.
func (b bound) checkSpans(ss []send, m int) verdict {
	byLo := slices.Clone(ss)
	slices.SortFunc(byLo, func(x, y send) int { return cmp.Compare(x.lo, y.lo) })
	worst := verdict{}
	span := int64(m)*int64(b.l.Per) - int64(clockTol)
	for i, s := range byLo {
		n := 0
		for _, o := range byLo[i:] {
			if o.hi-s.lo < span {
				n++
			}
		}
		worst = worse(worst, verdict{got: n, limit: b.units(m),
			where: fmt.Sprintf("in a span of %v from %s", time.Duration(span), clock(s.lo))})
	}
	return cmp.Or(worst, b.noSends(m))
}

// checkGCRA: for every a among the lo and every e among the hi, the sends
// with lo >= a and hi <= e lie in a span of e-a, so at most
// gcra(e-a+clockTol) of them.
func (b bound) checkGCRA(ss []send) verdict {
	byLo := slices.Clone(ss)
	slices.SortFunc(byLo, func(x, y send) int { return cmp.Compare(x.lo, y.lo) })
	worst := verdict{}
	his := make([]int64, 0, len(ss))
	for i, s := range byLo {
		his = his[:0]
		for _, o := range byLo[i:] {
			his = append(his, o.hi)
		}
		slices.Sort(his)
		for j, e := range his {
			d := time.Duration(e-s.lo) + clockTol
			worst = worse(worst, verdict{got: j + 1, limit: b.gcra(d),
				where: fmt.Sprintf("in a span of %v from %s", d.Round(time.Millisecond), clock(s.lo))})
		}
	}
	return cmp.Or(worst, verdict{limit: b.gcra(0), where: "(no sends)"})
}

// checkWindows: the windows are aligned to the Unix epoch (window k covers
// [k*Per, (k+1)*Per) of the wall clock, in both Redis and the local
// store). A send is sure to lie in windows k..k2 when its lo-clockTol is
// in window k or later and its hi+clockTol in window k2 or earlier; a send
// that straddles a boundary counts for no range that splits it. It checks
// the runs of mMin to mMax windows.
func (b bound) checkWindows(ss []send, mMin, mMax int) verdict {
	p := int64(b.l.Per)
	win := func(ns int64) int64 { return quotamath.FloorDiv(ns, p) }
	worst := verdict{}
	first, last := int64(1<<62), int64(-1<<62)
	for _, s := range ss {
		first, last = min(first, win(s.lo-int64(clockTol))), max(last, win(s.hi+int64(clockTol)))
	}
	for k := first; k <= last; k++ {
		for k2 := k + int64(mMin) - 1; k2 <= last && k2-k < int64(mMax); k2++ {
			n := 0
			for _, s := range ss {
				if win(s.lo-int64(clockTol)) >= k && win(s.hi+int64(clockTol)) <= k2 {
					n++
				}
			}
			m := int(k2 - k + 1)
			worst = worse(worst, verdict{got: n, limit: b.units(m),
				where: fmt.Sprintf("in %d aligned window(s) from %s", m, clock(k*p))})
		}
	}
	return cmp.Or(worst, b.noSends(mMin))
}

// clock prints a wall-clock instant (Unix ns) as seconds and
// milliseconds, for messages.
func clock(ns int64) string {
	return time.Unix(0, ns).Format("05.000s")
}

// niceServer lowers the CPU priority of srv's process (nice 10, about a
// tenth of the weight of a normal process): on a saturated machine the
// host's other work mostly wins, and Redis answers, but late (at equal
// priority the scheduler is too fair for any call to be late). Raising a
// niceness needs no privilege; the server keeps it until it stops.
func niceServer(t *testing.T, srv *redistest.Server) {
	t.Helper()
	info, err := srv.Do("INFO", "server")
	require.NoError(t, err)
	s, _ := info.(string)
	var pid int
	for line := range strings.SplitSeq(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			pid, err = strconv.Atoi(v)
			require.NoError(t, err)
		}
	}
	require.Positive(t, pid, "INFO server names the process")
	require.NoError(t, syscall.Setpriority(syscall.PRIO_PROCESS, pid, 10))
}
