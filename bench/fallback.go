package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
)

// The fallback part's fleet and load: fbInstances transports, each with its
// own go-redis client and store, share a sliding log of fbRate per second,
// and are offered fbOffered requests per second in all.
const (
	fbInstances = 4
	fbRate      = 200
	fbOffered   = 5 * fbRate
	fbWarm      = time.Second // before the measured span: the first window fills
	fbFaultAt   = 1500 * time.Millisecond
	fbStopFor   = time.Second
	fbGuard     = 10 * time.Second // a request's context: a guard, never reached
)

// fbLimit is the fallback part's limit on key. A sliding log admits at
// most Rate in any window of Per, so the bound of [throttle.FailLocal],
// Rate + N*max(1, Rate/N) per window, applies to it as documented (for
// GCRA, Burst plus the rate takes Rate's place).
func fbLimit(key string) throttle.Limit {
	return throttle.Limit{Name: "limit", Rate: fbRate, Per: time.Second, Algorithm: throttle.SlidingLog, Key: throttle.ConstantKey(key)}
}

// fbBound is the most the fleet may admit in any window of the limit
// while instances decide on their local shares: Rate + N*max(1, Rate/N).
func fbBound(l throttle.Limit, instances int) int {
	return l.Rate + instances*throttle.LocalShare(l, instances).Rate
}

// fbReq is one request of the fallback part, as offsets from the start of
// its state's run.
type fbReq struct {
	due        time.Duration // when the open-loop schedule meant it to start
	start, end time.Duration // RoundTrip called and returned
	sent       time.Duration // the base transport got it; -1 if not sent
}

// fbFigures are what a state's requests show.
type fbFigures struct {
	offered   int           // requests due in the span
	admitted  int           // requests sent in whole windows from the rate's start
	perSecond float64       // admitted per second of those windows
	observed  int           // most sends in one closed 1 s window in the span
	certain   int           // most requests started and sent inside one
	p50, p99  time.Duration // RoundTrip time of the requests due in the span
}

// summarize reads reqs: the span is [span0, span1), and the requests of
// the span are those due in it (a loaded machine may start one late, but
// not count it twice or in another span); admitted per second
// counts the sends in [from, to), where to - from is the whole number of
// seconds (windows of the limit) that fit in [from, span1): a sliding log
// admits in bursts a window apart, so a part of a window would count one
// burst too many or too few.
func summarize(reqs []fbReq, span0, span1, from time.Duration) fbFigures {
	to := from + (span1 - from).Truncate(time.Second)
	var f fbFigures
	var sends, lat []time.Duration
	var spans []span
	for _, r := range reqs {
		if r.due >= span0 && r.due < span1 {
			f.offered++
			lat = append(lat, r.end-r.start)
		}
		if r.sent < 0 {
			continue
		}
		if r.sent >= from && r.sent < to {
			f.admitted++
		}
		if r.sent >= span0 && r.sent < span1 {
			sends = append(sends, r.sent)
		}
		if r.start >= span0 && r.sent < span1 {
			spans = append(spans, span{r.start, r.sent})
		}
	}
	if d := to - from; d > 0 {
		f.perSecond = float64(f.admitted) / d.Seconds()
	}
	slices.Sort(sends)
	slices.Sort(lat)
	slices.SortFunc(spans, func(a, b span) int { return int(a.start - b.start) })
	f.observed = maxIn(sends, time.Second)
	f.certain = maxCertain(spans, time.Second)
	f.p50, f.p99 = percentile(lat, 0.5), percentile(lat, 0.99)
	return f
}

// fbState is one state of the store that the fallback part measures.
type fbState struct {
	name, fault string
	setup       func() error  // before the warm-up
	events      []fbEvent     // during the run
	teardown    func() error  // after the run
	from        time.Duration // into the span: where admitted per second starts
}

// fbEvent is something done to the store at an offset from the start of
// the measured span.
type fbEvent struct {
	at time.Duration
	do func() error
}

// fbResult is what a state's run did.
type fbResult struct {
	state    fbState
	fig      fbFigures
	sent     int64                    // counted by the base transport
	outcomes [throttle.Failed + 1]int // from Hooks.OnDecision
	modes    [throttle.FailClosed + 1]int
	reported map[throttle.StoreState]int // Hooks.OnStoreState, by new state
	firstErr error                       // the first error of a request other than a limit's
}

// fbMark is the context key under which a request carries where the base
// transport writes when it got the request.
type fbMark struct{}

// fbBase is the fallback part's vendor: an in-process RoundTripper that
// counts what it is sent and notes when.
type fbBase struct {
	t0   time.Time
	sent atomic.Int64
}

// RoundTrip counts req, writes the instant to its mark and answers 200.
func (b *fbBase) RoundTrip(req *http.Request) (*http.Response, error) {
	b.sent.Add(1)
	if p, ok := req.Context().Value(fbMark{}).(*time.Duration); ok {
		*p = time.Since(b.t0)
	}
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
}

// fallback runs the fallback part: against a redis-server of its own,
// behind a delaying proxy, it runs a fleet through each store state in
// turn (up, slow, stopped, down; the last kills the server) and prints
// what the fleet admitted and how long its decisions took.
func fallback(ctx context.Context, cfg config) error {
	// After the kill the clients' pools log every failed dial; count the
	// lines instead. This is the last part, so no other part's logs are
	// lost.
	var lines fbLogCounter
	redis.SetLogger(&lines)
	srv, stop := redistest.StartMain()
	defer stop()
	px, err := newSlowProxy(srv.Addr())
	if err != nil {
		return err
	}
	defer px.close()
	span := cfg.fbSpan
	states := fbStates(srv, px)
	var rs []fbResult
	for i, st := range states {
		r, err := fbRun(ctx, px.addr(), fmt.Sprintf("fb%d", i), st, span)
		if err != nil {
			return fmt.Errorf("%s: %w", st.name, err)
		}
		rs = append(rs, r)
	}
	printFallback(rs, span, px.delayed.Load())
	fmt.Printf("- go-redis logged %d lines during the part (failed dials of the pools after the kill).\n\n", lines.n.Load())
	return nil
}

// fbLogCounter is a go-redis logger that counts lines and prints none.
type fbLogCounter struct{ n atomic.Int64 }

// Printf counts one line.
func (c *fbLogCounter) Printf(context.Context, string, ...any) { c.n.Add(1) }

// fbStates returns the states the fallback part measures, in order, with
// their faults on srv, reached through px. The last kills srv.
func fbStates(srv *redistest.Server, px *slowProxy) []fbState {
	return []fbState{
		{name: "up", fault: "none"},
		{
			name:     "up, slow",
			fault:    "10% of replies delayed 150-350 ms (the proxy)",
			setup:    func() error { px.setDelay(0.1, 150*time.Millisecond, 350*time.Millisecond); return nil },
			teardown: func() error { px.setDelay(0, 0, 0); return nil },
		},
		{
			name:   "stopped",
			fault:  fmt.Sprintf("SIGSTOP at %v, SIGCONT %v later", fbFaultAt, fbStopFor),
			events: []fbEvent{{fbFaultAt, srv.Pause}, {fbFaultAt + fbStopFor, srv.Resume}},
		},
		{
			name:  "down",
			fault: fmt.Sprintf("SIGKILL at %v", fbFaultAt),
			// The proxy stands for the network, not for a proxy in
			// production: it goes with the server, first, so that from
			// the kill on dials are refused and connections reset, as
			// they would be without it (were it left listening until
			// the kill returned, dials would be accepted and then
			// closed, a slower failure).
			events: []fbEvent{{fbFaultAt, func() error { px.close(); return srv.Kill() }}},
			from:   fbFaultAt,
		},
	}
}

// fbRun runs one state: a new fleet on a new key, fbWarm of load, then the
// measured span with the state's events.
func fbRun(ctx context.Context, addr, key string, st fbState, span time.Duration) (fbResult, error) {
	r := fbResult{state: st}
	base := &fbBase{}
	var (
		mu       sync.Mutex
		reported = map[throttle.StoreState]int{}
		outcomes [throttle.Failed + 1]atomic.Int64
		modes    [throttle.FailClosed + 1]atomic.Int64
	)
	hooks := throttle.Hooks{
		OnDecision: func(ev throttle.DecisionEvent) {
			outcomes[ev.Outcome].Add(1)
			modes[ev.Fallback].Add(1)
		},
		OnStoreState: func(ev throttle.StoreEvent) {
			mu.Lock()
			reported[ev.State]++
			mu.Unlock()
		},
	}
	trs := make([]*throttle.Transport, fbInstances)
	for i := range trs {
		c := redis.NewClient(&redis.Options{
			Addr:                  addr,
			ContextTimeoutEnabled: true,
			DialTimeout:           time.Second,
			DialerRetries:         1,
			MinIdleConns:          8,
			MaxRetryBackoff:       64 * time.Millisecond,
		})
		defer c.Close()
		s, err := redisstore.New(c)
		if err != nil {
			return r, err
		}
		if err := s.Check(ctx); err != nil {
			return r, err
		}
		trs[i], err = throttle.NewTransport(base, throttle.Policy{Instances: fbInstances, Rules: []throttle.Rule{{
			Name:   "fallback",
			Limits: []throttle.Limit{fbLimit(key)},
			Wait:   waiters.FailFast(),
		}}}, throttle.WithStore(s), throttle.WithHooks(hooks), throttle.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return r, err
		}
	}
	if st.setup != nil {
		if err := st.setup(); err != nil {
			return r, err
		}
	}

	var (
		reqs     []fbReq
		firstErr error
		load     sync.WaitGroup // the generators
		inflight sync.WaitGroup // the requests
		events   sync.WaitGroup
		evErr    = make(chan error, len(st.events))
	)
	total := fbWarm + span
	interval := time.Second * fbInstances / fbOffered
	t0 := time.Now()
	base.t0 = t0
	for _, ev := range st.events {
		events.Go(func() {
			time.Sleep(time.Until(t0.Add(fbWarm + ev.at)))
			if err := ev.do(); err != nil {
				evErr <- err
			}
		})
	}
	for i, tr := range trs {
		load.Go(func() {
			// Open loop: request k starts at its time whatever the
			// earlier ones do; the instances are staggered.
			for k := 0; ; k++ {
				at := time.Duration(k)*interval + time.Duration(i)*interval/fbInstances
				if at >= total {
					return
				}
				time.Sleep(time.Until(t0.Add(at)))
				inflight.Go(func() {
					sent := time.Duration(-1)
					rctx, cancel := context.WithTimeout(context.WithValue(ctx, fbMark{}, &sent), fbGuard)
					defer cancel()
					req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://vendor.invalid/fallback", nil)
					due := at
					start := time.Since(t0)
					resp, err := tr.RoundTrip(req)
					end := time.Since(t0)
					if err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
					mu.Lock()
					reqs = append(reqs, fbReq{due: due, start: start, end: end, sent: sent})
					if err != nil && !errors.Is(err, throttle.ErrLimited) && firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				})
			}
		})
	}
	load.Wait()
	inflight.Wait()
	events.Wait()
	close(evErr)
	if st.teardown != nil {
		if err := st.teardown(); err != nil {
			return r, err
		}
	}
	if err := <-evErr; err != nil {
		return r, err
	}
	r.fig = summarize(reqs, fbWarm, total, fbWarm+st.from)
	r.sent = base.sent.Load()
	for i := range outcomes {
		r.outcomes[i] = int(outcomes[i].Load())
	}
	for i := range modes {
		r.modes[i] = int(modes[i].Load())
	}
	mu.Lock() // a call abandoned by its request may still report
	r.reported = maps.Clone(reported)
	r.firstErr = firstErr
	mu.Unlock()
	return r, nil
}

// printFallback prints the fallback part's table and notes.
func printFallback(rs []fbResult, span time.Duration, delayed int64) {
	l := fbLimit("")
	bound := fbBound(l, fbInstances)
	share := throttle.LocalShare(l, fbInstances).Rate
	fmt.Printf("### Fallback states\n\n"+
		"%d transports (each with its own go-redis client, with the options docs/when-redis-fails.md recommends, and its own redisstore.New; Policy.Instances %d; the default Breaker and failure mode, FailLocal; waiters.FailFast()) share a sliding log of %d per second on one key. They are offered %d requests per second in all (open loop: %d per instance, each request on its own goroutine whatever the earlier ones do); the base RoundTripper is in process and counts what it is sent. Redis is a redis-server of the part's own, reached through a loopback proxy in every state (it delays replies in the slow state; at the kill it closes, so that dials are refused as they would be without it). Each state runs a new fleet on a new key: %v of load, then a measured span of %v; faults come %v into the span, half a window after a burst of the sliding log (it admits each window's %d at the window's start, as offered 5 times over), so that a window holding the kill holds Redis's last burst and the local shares' first.\n\n"+
		"Bound: the most FailLocal lets the fleet admit in any 1 s, Rate + N·max(1, Rate/N) = %d + %d·%d = %d. Admitted/s: requests sent in the span's whole seconds ÷ their length (down: the %v from the kill on, every instance on its local share of %d). Most in any 1 s: \"observed\" from the instants the base got the requests; \"certain\" counts only requests whose RoundTrip began and reached the base inside the window (a lower bound, immune to client-side delays). Failure mode applied: DecisionEvent.Fallback of every decision of the state's run (Hooks.OnDecision). States reported: Hooks.OnStoreState, summed over the fleet. Allowed / refused / failed: DecisionEvent.Outcome (failed includes gave up). Latency: RoundTrip time of the requests due in the span (the decision: the base answers at once), p50 / p99, × those of the healthy state in the same run.\n\n",
		fbInstances, fbInstances, fbRate, fbOffered, fbOffered/fbInstances, fbWarm, span, fbFaultAt, fbRate,
		l.Rate, fbInstances, share, bound, (span - fbFaultAt).Truncate(time.Second), share)
	t := table{head: []string{"store state", "fault", "offered/s", "admitted/s (÷ Rate, ÷ bound)", "most in any 1 s: observed (certain) (÷ Rate, ÷ bound)", "failure mode applied: local / open / closed", "states reported", "allowed / refused / failed", "held", "decision p50 / p99 µs (× up)"}}
	up := rs[0].fig
	for _, r := range rs {
		f := r.fig
		t.row(r.state.name, r.state.fault,
			fmt.Sprintf("%.0f", float64(f.offered)/span.Seconds()),
			fmt.Sprintf("%.1f (%s, %s)", f.perSecond, ratio(f.perSecond, fbRate), ratio(f.perSecond, float64(bound))),
			fmt.Sprintf("%d (%d) (%s, %s)", f.observed, f.certain, ratio(float64(f.observed), fbRate), ratio(float64(f.observed), float64(bound))),
			fmt.Sprintf("%d / %d / %d", r.modes[throttle.FailLocal], r.modes[throttle.FailOpen], r.modes[throttle.FailClosed]),
			reportedLine(r.reported),
			fmt.Sprintf("%d / %d / %d", r.outcomes[throttle.Allowed]+r.outcomes[throttle.Waited], r.outcomes[throttle.Refused], r.outcomes[throttle.Failed]+r.outcomes[throttle.GaveUp]),
			held(r, bound),
			fmt.Sprintf("%s / %s (%s / %s)", micros(f.p50), micros(f.p99), ratio(float64(f.p50), float64(up.p50)), ratio(float64(f.p99), float64(up.p99))))
	}
	t.write(os.Stdout)
	fmt.Printf("- The proxy delayed %d replies in the slow state.\n", delayed)
	for _, r := range rs {
		if got, want := r.sent, int64(r.outcomes[throttle.Allowed]+r.outcomes[throttle.Waited]); got != want {
			fmt.Printf("- %s: the base got %d requests, the hooks report %d sent.\n", r.state.name, got, want)
		}
		if r.firstErr != nil {
			fmt.Printf("- %s: the first request that failed other than by a limit: %v\n", r.state.name, r.firstErr)
		}
	}
}

// held says whether r's most in any 1 s kept its claim: Rate when no
// request was decided by a failure mode (the store decided all: exact),
// the FailLocal bound otherwise. "yes" when even the observed count is
// within it, "yes, within jitter" when only the observed count is over,
// "NO" when the certain count is over.
func held(r fbResult, bound int) string {
	claim, name := fbRate, "≤ Rate"
	if r.modes[throttle.FailLocal]+r.modes[throttle.FailOpen]+r.modes[throttle.FailClosed] > 0 {
		claim, name = bound, "≤ bound"
	}
	switch {
	case r.fig.certain > claim:
		return name + ": **NO**"
	case r.fig.observed > claim:
		return name + ": yes, within jitter"
	}
	return name + ": yes"
}

// reportedLine lists the store states reported, "–" for none.
func reportedLine(m map[throttle.StoreState]int) string {
	var parts []string
	for _, s := range []throttle.StoreState{throttle.StoreFailing, throttle.StoreDown, throttle.StoreUp} {
		if n := m[s]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s ×%d", s, n))
		}
	}
	if len(parts) == 0 {
		return "–"
	}
	return strings.Join(parts, ", ")
}

// slowProxy is a loopback TCP proxy in front of redis-server that delays
// a random fraction of the chunks the server sends back. Chunks of one
// connection stay in order, so a delayed reply holds back the replies
// behind it on that connection, as a slow network would. A chunk is what
// one read returns: for a client that waits for each reply, one reply (or
// one pipeline's).
type slowProxy struct {
	target  string
	ln      net.Listener
	delay   atomic.Pointer[replyDelay]
	delayed atomic.Int64 // chunks delayed
	wg      sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// replyDelay delays a fraction of the chunks by a duration uniform in
// [lo, hi].
type replyDelay struct {
	fraction float64
	lo, hi   time.Duration
}

// draw returns the delay of one chunk: 0, or with probability fraction a
// duration uniform in [lo, hi].
func (d *replyDelay) draw() time.Duration {
	if d == nil || d.fraction <= 0 || rand.Float64() >= d.fraction {
		return 0
	}
	return d.lo + rand.N(d.hi-d.lo+1)
}

// newSlowProxy starts a proxy to target on a free loopback port.
func newSlowProxy(target string) (*slowProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &slowProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

// addr is where clients connect.
func (p *slowProxy) addr() string { return p.ln.Addr().String() }

// setDelay delays a fraction of the replies read from now on by a
// duration uniform in [lo, hi]; fraction 0 delays none.
func (p *slowProxy) setDelay(fraction float64, lo, hi time.Duration) {
	p.delay.Store(&replyDelay{fraction: fraction, lo: lo, hi: max(hi, lo)})
}

// close stops listening, so that dials are refused, resets every
// connection and waits for the proxy's goroutines. Closing twice does
// nothing more.
func (p *slowProxy) close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // RST, as from a dead host's kernel
		}
		_ = c.Close()
	}
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

// track registers c to be closed by close; false if the proxy is closed.
func (p *slowProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// untrack closes c and forgets it.
func (p *slowProxy) untrack(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// accept forwards every connection until the listener closes.
func (p *slowProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(c) })
	}
}

// forward connects client to the target and copies both ways, delaying
// replies, until either side closes.
func (p *slowProxy) forward(client net.Conn) {
	if !p.track(client) {
		_ = client.Close()
		return
	}
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		_ = server.Close()
		return
	}
	defer p.untrack(server)
	var both sync.WaitGroup
	both.Go(func() {
		_, _ = io.Copy(server, client)
		_ = server.Close()
		_ = client.Close()
	})
	both.Go(func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if d := p.delay.Load().draw(); d > 0 {
					p.delayed.Add(1)
					time.Sleep(d)
				}
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = server.Close()
		_ = client.Close()
	})
	both.Wait()
}
