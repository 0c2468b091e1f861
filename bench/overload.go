package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
)

// The overload part's demand: fleet instances x callers goroutines, each
// wanting one request every fleet*callers/demand, together demand per
// second: 5 times the quota.
const (
	demand  = 5 * benchRate
	callers = 8
)

// An act admits one request by its library's waiting pattern and sends it
// to the server, stamped with want (when its caller wanted to send).
type act func(ctx context.Context, want time.Duration) error

// overloaded is what one contender of the overload part did in the steady
// window.
type overloaded struct {
	name     string
	local    bool
	admitted int             // requests the server received
	did      snapshot        // commands sent, and Redis's work
	waits    []time.Duration // of those requests: from want to arrival
	errs     int64           // failed admissions, over the whole run
	firstErr error
}

// vendor is the local HTTP server of the overload part: it records when
// each request arrived and how long its caller had waited.
type vendor struct {
	srv  *httptest.Server
	mu   sync.Mutex
	t0   time.Time
	arr  []time.Duration // arrival, since t0
	wait []time.Duration
}

// newVendor starts a vendor.
func newVendor() *vendor {
	v := &vendor{}
	v.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.mu.Lock()
		now := time.Since(v.t0)
		want, _ := strconv.ParseInt(r.Header.Get("X-Want"), 10, 64)
		v.arr = append(v.arr, now)
		v.wait = append(v.wait, now-time.Duration(want))
		v.mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	return v
}

// reset starts a new recording with t0 as its origin.
func (v *vendor) reset(t0 time.Time) {
	v.mu.Lock()
	v.t0, v.arr, v.wait = t0, nil, nil
	v.mu.Unlock()
}

// between returns the waits of the requests that arrived in [from, to).
func (v *vendor) between(from, to time.Duration) []time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	var ws []time.Duration
	for i, a := range v.arr {
		if a >= from && a < to {
			ws = append(ws, v.wait[i])
		}
	}
	return ws
}

// send sends one request to v through c, stamped with want.
func (v *vendor) send(ctx context.Context, c *http.Client, want time.Duration) error {
	req, err := http.NewRequestWithContext(ctx, "GET", v.srv.URL+"/work", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Want", strconv.FormatInt(int64(want), 10))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}

// overload runs the overload part: for each contender, fleet instances
// want demand requests per second of a quota of quota per second (burst
// quota), each waiting as its library lets it. After cfg.warm, which the
// startup burst falls in, it measures a steady window of cfg.steady.
func overload(ctx context.Context, e *env, cfg config) error {
	v := newVendor()
	defer v.srv.Close()
	cs := e.instances(fleet)
	contenders := []struct {
		name  string
		local bool
		new   func(i int, hc *http.Client) (act, error)
	}{
		{"ours: Transport, GCRA, waiters.Block()", false, func(i int, hc *http.Client) (act, error) { return oursAct(cs[i], hc, v) }},
		{redisRate.name, false, retryAct(redisRate, cs, v)},
		{ululeLimiter.name, false, retryAct(ululeLimiter, cs, v)},
		{throttledGCRA.name, false, retryAct(throttledGCRA, cs, v)},
		{xrate.name, true, func(_ int, hc *http.Client) (act, error) {
			l := newXrate(benchRate)
			return func(ctx context.Context, want time.Duration) error {
				if err := l.Wait(ctx); err != nil {
					return err
				}
				return v.send(ctx, hc, want)
			}, nil
		}},
	}
	var out []overloaded
	for _, ct := range contenders {
		acts := make([]act, fleet)
		for i := range acts {
			base := &http.Transport{MaxIdleConnsPerHost: 2 * callers}
			defer base.CloseIdleConnections()
			var err error
			if acts[i], err = ct.new(i, &http.Client{Transport: base}); err != nil {
				return fmt.Errorf("%s: %w", ct.name, err)
			}
		}
		if !ct.local {
			warmPools(ctx, cs, callers)
		}
		o, err := flood(ctx, e, v, acts, cfg)
		if err != nil {
			return fmt.Errorf("%s: %w", ct.name, err)
		}
		o.name, o.local = ct.name, ct.local
		out = append(out, o)
	}
	printOverload(out, cfg)
	return nil
}

// oursAct returns an act that sends through a throttle.Transport whose
// rule has the quota as a GCRA limit and blocks until its reservation
// (waiters.Block), over a redisstore.Store on client c: one instance.
func oursAct(c *redis.Client, hc *http.Client, v *vendor) (act, error) {
	s, err := redisstore.New(c)
	if err != nil {
		return nil, err
	}
	t, err := throttle.NewTransport(hc.Transport, throttle.Policy{Instances: fleet, Rules: []throttle.Rule{{
		Name:   "overload",
		Limits: []throttle.Limit{{Name: "limit", Rate: benchRate, Per: time.Second, Key: throttle.ConstantKey("ovl")}},
		Wait:   waiters.Block(),
	}}}, throttle.WithStore(s))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: t}
	return func(ctx context.Context, want time.Duration) error { return v.send(ctx, client, want) }, nil
}

// retryAct returns the constructor of a peer's acts: ask, and when
// refused sleep for the retry-after the library returned, then ask again;
// when granted, send.
func retryAct(l library, cs []*redis.Client, v *vendor) func(i int, hc *http.Client) (act, error) {
	return func(i int, hc *http.Client) (act, error) {
		d, err := l.new(cs[i], "ovl", benchRate)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context, want time.Duration) error {
			for {
				ok, retry, err := d(ctx)
				if err != nil {
					return err
				}
				if ok {
					return v.send(ctx, hc, want)
				}
				if err := sleep(ctx, retry); err != nil {
					return err
				}
			}
		}, nil
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// flood runs acts, callers goroutines each, for cfg.warm + cfg.steady and
// returns what happened in the steady window. A failed act is counted and
// its caller moves on to its next request.
func flood(ctx context.Context, e *env, v *vendor, acts []act, cfg config) (overloaded, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(acts) * callers
	interval := time.Duration(n) * time.Second / demand
	t0 := time.Now()
	v.reset(t0)
	var (
		o        overloaded
		errs     atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	for i, a := range acts {
		for j := range callers {
			k := i*callers + j
			wg.Go(func() {
				next := time.Duration(k) * interval / time.Duration(n) // spread the starts
				for sleep(ctx, next-time.Since(t0)) == nil {
					want := time.Since(t0)
					if err := a(ctx, want); err != nil && ctx.Err() == nil {
						errs.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					}
					next = want + interval
				}
			})
		}
	}
	var before, after snapshot
	err := sleep(ctx, cfg.warm-time.Since(t0))
	if err == nil {
		before, err = e.snap(ctx)
	}
	if err == nil {
		err = sleep(ctx, cfg.warm+cfg.steady-time.Since(t0))
	}
	if err == nil {
		after, err = e.snap(ctx)
	}
	cancel()
	wg.Wait()
	if err != nil && !errors.Is(err, context.Canceled) {
		return o, err
	}
	o.waits = v.between(cfg.warm, cfg.warm+cfg.steady)
	o.admitted = len(o.waits)
	o.did = after.since(before)
	o.errs = errs.Load()
	if p := firstErr.Load(); p != nil {
		o.firstErr = *p
	}
	return o, nil
}

// printOverload prints the overload table and its notes.
func printOverload(res []overloaded, cfg config) {
	fmt.Printf("### Overload with waiting\n\nA quota of %d per second (burst %d) on one key; %d instances x %d callers, each wanting one request every %v (%d per second in all, %d× the quota), each instance with its own go-redis client (x/time/rate: its own limiter) and HTTP transport, in front of a local httptest server. Ours: a throttle.Transport whose rule blocks (waiters.Block()) until its reserved slot. Peers: ask; when refused, sleep for the retry-after the library returned, ask again; when granted, send. x/time/rate: Limiter.Wait. Measured over a steady window of %v after a warm-up of %v: the startup burst falls in the warm-up, and the window's edges fall half a period after whole seconds from the start, between the bursts of a fixed window, which open its windows at whole seconds after the first request (with edges at whole seconds, one burst more or less would land inside by chance). admitted/s = requests the server received in the window ÷ %v; calls = commands the clients sent in the window ÷ those requests; Redis cmds = commands Redis executed (scripts' included) ÷ those requests; wait = from when the caller wanted to send to when the server received the request, for those requests.\n\n",
		benchRate, benchRate, fleet, callers, time.Duration(fleet*callers)*time.Second/demand, demand, demand/benchRate, cfg.steady, cfg.warm, cfg.steady)
	t := table{head: []string{"contender", "admitted/s (× quota)", "calls per admitted", "Redis cmds per admitted", "wait p50 / p99 / max ms", "failed admissions"}}
	for _, o := range res {
		rate := float64(o.admitted) / cfg.steady.Seconds()
		slices.Sort(o.waits)
		calls, cmds := "0", "0"
		if !o.local {
			calls = fmt.Sprintf("%.2f", float64(o.did.sent)/float64(max(o.admitted, 1)))
			cmds = fmt.Sprintf("%.2f", float64(o.did.srv.cmds)/float64(max(o.admitted, 1)))
		}
		t.row(o.name, fmt.Sprintf("%.1f (%s)", rate, ratio(rate, benchRate)), calls, cmds,
			fmt.Sprintf("%s / %s / %s", millis(percentile(o.waits, 0.5)), millis(percentile(o.waits, 0.99)), millis(percentile(o.waits, 1))),
			fmt.Sprint(o.errs))
	}
	t.write(os.Stdout)
	for _, o := range res {
		if o.firstErr != nil {
			fmt.Printf("- %s: the first failed admission: %v\n", o.name, o.firstErr)
		}
	}
	fmt.Printf("- ulule/limiter reports when to retry only as Reset, the window's end in whole Unix seconds; the wait computed from it is often 0, and its callers then ask again at once.\n")
	fmt.Printf("- x/time/rate: %d separate limiters share nothing; each admits up to %d per second, so the fleet's demand passes unlimited.\n\n", fleet, benchRate)
}
