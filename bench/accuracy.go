package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// quota is the limit of the accuracy and overload parts: per second, with
// a burst of as much, for every library.
const benchRate = 100

// The fleet of the accuracy and overload parts.
const (
	fleet     = 8  // instances, each with its own go-redis client (or local limiter)
	perMember = 16 // accuracy: goroutines per instance
)

// claim is what a library promises about what it admits.
type claim int

// The claims the accuracy part checks.
const (
	noClaim   claim = iota
	logClaim        // sliding log: at most quota in any 1 s window
	gcraClaim       // GCRA: at most burst + rate·t in any interval t
)

// hammered is what one contender of the accuracy part admitted.
type hammered struct {
	name     string
	local    bool
	claim    claim
	spans    []span // admitted decisions, sorted by start
	attempts int64
	failed   int64 // decisions that returned an error
	firstErr error
	last     time.Duration // when the last call returned

	// redis holds, for ours' sliding log only, the instants Redis
	// recorded in the log for the grants (the reservations' marks), on
	// Redis's clock, sorted.
	redis []time.Duration
}

// accKey is the key every contender of the accuracy part is limited on.
const accKey = "acc"

// accuracy runs the accuracy part: for each contender, fleet instances x
// perMember goroutines ask for one unit of a limit of quota per second on
// one key as fast as they can (never waiting) for cfg.accRun, and every
// admission is recorded on the client's monotonic clock.
func accuracy(ctx context.Context, e *env, cfg config) error {
	cs := e.instances(fleet)
	var (
		mu     sync.Mutex
		logged []time.Duration // the log instants of ours' grants on accKey, Redis's clock
	)
	record := func(r *quota.Reservation) {
		if r.Demand.Limits[0].Key == accKey {
			mu.Lock()
			logged = append(logged, time.Duration(r.Marks[0])*time.Microsecond)
			mu.Unlock()
		}
	}
	libs := []struct {
		l library
		c claim
	}{
		{ours(oursConfig{name: "ours: sliding log", buckets: one(quota.SlidingLog), granted: record}), logClaim},
		{ours(oursConfig{name: "ours: GCRA", buckets: one(quota.GCRA)}), gcraClaim},
		{redisRate, gcraClaim},
		{ululeLimiter, noClaim},
		{throttledGCRA, gcraClaim},
		{xrate, noClaim},
	}
	var out []hammered
	for _, l := range libs {
		h, err := hammer(ctx, cs, l.l, cfg.accRun)
		if err != nil {
			return fmt.Errorf("%s: %w", l.l.name, err)
		}
		h.claim = l.c
		if l.c == logClaim {
			slices.Sort(logged)
			h.redis = logged
		}
		out = append(out, h)
	}
	printAccuracy(out, cfg.accRun)
	return nil
}

// hammer runs one contender of the accuracy part.
func hammer(ctx context.Context, cs []*redis.Client, l library, run time.Duration) (hammered, error) {
	ds := make([]decider, len(cs))
	for i, c := range cs {
		if l.local {
			c = nil
		}
		var err error
		if ds[i], err = l.new(c, accKey, benchRate); err != nil {
			return hammered{}, err
		}
		warm, err := l.new(c, "acc-warm", benchRate) // load scripts on another key
		if err != nil {
			return hammered{}, err
		}
		if _, _, err := warm(ctx); err != nil {
			return hammered{}, err
		}
	}
	if !l.local {
		warmPools(ctx, cs, perMember)
	}
	h := hammered{name: l.name, local: l.local}
	var (
		attempts, failed atomic.Int64
		firstErr         atomic.Pointer[error]
		mu               sync.Mutex
		wg               sync.WaitGroup
	)
	t0 := time.Now()
	for _, d := range ds {
		for range perMember {
			wg.Go(func() {
				var mine []span
				for time.Since(t0) < run {
					s := time.Since(t0)
					ok, _, err := d(ctx)
					en := time.Since(t0)
					attempts.Add(1)
					switch {
					case err != nil:
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					case ok:
						mine = append(mine, span{s, en})
					}
				}
				mu.Lock()
				h.spans = append(h.spans, mine...)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	slices.SortFunc(h.spans, func(a, b span) int { return int(a.start - b.start) })
	for _, s := range h.spans {
		h.last = max(h.last, s.end)
	}
	h.attempts, h.failed = attempts.Load(), failed.Load()
	if p := firstErr.Load(); p != nil {
		h.firstErr = *p
	}
	return h, nil
}

// printAccuracy prints the accuracy table, the claims table and notes.
func printAccuracy(hs []hammered, run time.Duration) {
	ideal := float64(benchRate)*run.Seconds() + benchRate
	fmt.Printf("### Accuracy under contention\n\nA limit of %d per second (burst %d) on one key; %d instances x %d goroutines ask for one unit each as fast as they can, for %v, never waiting. Redis libraries: %d separate go-redis clients; x/time/rate: %d separate limiters (it cannot share a limit). Each admission is recorded on the client's monotonic clock: \"observed\" counts the instants the calls returned; \"certain\" counts only calls that started and returned inside the window, so Redis certainly decided them inside it (a lower bound, immune to client-side delays). Ideal: rate × %v + burst = %.0f.\n\n",
		benchRate, benchRate, fleet, perMember, run, fleet, fleet, run, ideal)
	t := table{head: []string{"contender", "admitted (× ideal)", "most in any 100 ms: observed (certain)", "most in any 1 s: observed (certain) (× limit)", "failed decisions"}}
	for _, h := range hs {
		ts := ends(h.spans)
		o1 := maxIn(ts, time.Second)
		t.row(h.name,
			fmt.Sprintf("%d (%s)", len(h.spans), ratio(float64(len(h.spans)), ideal)),
			fmt.Sprintf("%d (%d)", maxIn(ts, 100*time.Millisecond), maxCertain(h.spans, 100*time.Millisecond)),
			fmt.Sprintf("%d (%d) (%s)", o1, maxCertain(h.spans, time.Second), ratio(float64(o1), benchRate)),
			fmt.Sprintf("%d of %d (%s)", h.failed, h.attempts, percent(float64(h.failed)/float64(max(h.attempts, 1)))))
	}
	t.write(os.Stdout)

	fmt.Printf("Claims. Sliding log: at most %d in any 1 s window. GCRA (ours, and the same bound for the other GCRA libraries with the same parameters): at most burst + rate·t over any interval of length t, i.e. ⌊%d + %d·t/1 s⌋. Ours' sliding log is also checked on Redis's clock, exactly: the log instants its grants returned, in microseconds (a grant needs room in (t−1 s, t]). Held: \"yes\" when even the observed count is within the bound; \"yes, within jitter\" when only the observed count is over and the certain count is not; \"NO\" when the certain count is over.\n\n", benchRate, benchRate, benchRate)
	c := table{head: []string{"contender", "interval t", "bound", "observed", "certain", "held"}}
	for _, h := range hs {
		ts := ends(h.spans)
		check := func(label string, bound, obs, cert int) {
			held := "yes"
			switch {
			case cert > bound:
				held = "**NO**"
			case obs > bound:
				held = "yes, within jitter"
			}
			c.row(h.name, label, fmt.Sprint(bound), fmt.Sprint(obs), fmt.Sprint(cert), held)
		}
		switch h.claim {
		case logClaim:
			check(time.Second.String(), benchRate, maxIn(ts, time.Second), maxCertain(h.spans, time.Second))
			if h.redis != nil {
				// The log admits when (t-1s, t] holds room: a closed
				// window of 1s-1µs in whole microseconds.
				n := maxIn(h.redis, time.Second-time.Microsecond)
				check("1s on Redis's clock (log instants)", benchRate, n, n)
			}
		case gcraClaim:
			for _, w := range []time.Duration{10 * time.Millisecond, 100 * time.Millisecond, time.Second} {
				check(w.String(), gcraBound(w), maxIn(ts, w), maxCertain(h.spans, w))
			}
			check(fmt.Sprintf("whole run (%.2f s)", h.last.Seconds()), gcraBound(h.last), len(h.spans), len(h.spans))
		}
	}
	c.write(os.Stdout)
	for _, h := range hs {
		if h.firstErr != nil {
			fmt.Printf("- %s: the first failed decision: %v\n", h.name, h.firstErr)
		}
	}
	fmt.Printf("- x/time/rate: %d separate limiters, each admitting its own %d per second: %d× the limit by construction, since nothing is shared.\n\n", fleet, benchRate, fleet)
}

// gcraBound is the most GCRA may admit over an interval of length t:
// burst + rate·t.
func gcraBound(t time.Duration) int {
	return benchRate + int(benchRate*t/time.Second)
}
