package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
)

// big is the limit of the throughput part: so high that every decision is
// granted, so every decision writes.
const big = 1_000_000

// errRefused is a refusal where a grant was expected.
var errRefused = errors.New("refused")

// contender is one row of the throughput table.
type contender struct {
	name   string
	local  bool // decided in process: a refusal counts as a decision, not a failure
	decide decider
}

// cell is what one contender did at one concurrency, over all rounds.
type cell struct {
	ok, failed int64
	elapsed    time.Duration
	did        snapshot        // commands sent, and Redis's work
	lat        []time.Duration // of the successful decisions
	err        error           // the first failure

	// ratios are the contender's decisions per second in each of its
	// slices over the baseline's in the two slices around it
	// (bracketed); for the baseline itself, each of its slices over the
	// one before it: how much the machine moved in one slice's time.
	ratios []float64
}

// add adds o, one round, to c.
func (c *cell) add(o cell) {
	c.ok += o.ok
	c.failed += o.failed
	c.elapsed += o.elapsed
	c.did.sent += o.did.sent
	c.did.srv.cmds += o.did.srv.cmds
	c.did.srv.cpu += o.did.srv.cpu
	c.did.cpu += o.did.cpu
	c.did.allocs += o.did.allocs
	c.lat = append(c.lat, o.lat...)
	c.ratios = append(c.ratios, o.ratios...)
	if c.err == nil {
		c.err = o.err
	}
}

// opsPerSec returns the successful decisions per second.
func (c *cell) opsPerSec() float64 { return float64(c.ok) / c.elapsed.Seconds() }

// throughput runs the throughput part: every contender at every
// concurrency for cfg.dur, split into cfg.rounds slices. In each round the
// contenders take turns (in reverse order every other round), and the
// EVALSHA baseline runs before the first and after each of them
// (bracketed), so that every slice of a contender has a slice of the
// baseline just before and just after it. A contender's multiple of the
// baseline is the median over its slices of its decisions per second over
// the baseline's in the two slices around it: the machine's speed, which
// on a shared VM moves by half from one second to the next (at
// concurrency 1 most of all, with how fast an idle CPU wakes up), moves
// a slice and its neighbours alike, and the median leaves out the slices
// in which it moved during one. All share one client (go-redis defaults,
// a pool of 128), except the rows marked as using the client without
// retries.
func throughput(ctx context.Context, e *env, cfg config) error {
	cts, err := throughputContenders(e, cfg.variants)
	if err != nil {
		return err
	}
	if cfg.only != nil { // the baseline's index stays 1 (printThroughput)
		cts = slices.DeleteFunc(cts, func(ct contender) bool {
			return ct.name != cts[0].name && ct.name != cts[1].name && !cfg.only.MatchString(ct.name)
		})
	}
	for _, ct := range cts { // warm up: scripts, connections
		if ok, _, err := ct.decide(ctx); err != nil || !ok && !ct.local {
			return fmt.Errorf("%s: warm-up: ok=%v, %v", ct.name, ok, err)
		}
	}
	res := make([][]cell, len(cts))
	for i := range res {
		res[i] = make([]cell, len(cfg.concs))
	}
	slice := cfg.dur / time.Duration(cfg.rounds)
	var order []int // every contender but the baseline
	for i := range cts {
		if i != baseRow {
			order = append(order, i)
		}
	}
	for j, conc := range cfg.concs {
		run := func(i int) (cell, error) {
			c, err := measure(ctx, e, cts[i], conc, slice)
			if err != nil {
				return c, fmt.Errorf("%s at concurrency %d: %w", cts[i].name, conc, err)
			}
			return c, nil
		}
		for range cfg.rounds {
			// In reverse every other round: a contender that runs right
			// after another (whose goroutines, timers or garbage are still
			// about) is not always the same one.
			slices.Reverse(order)
			before, err := run(baseRow)
			if err != nil {
				return err
			}
			res[baseRow][j].add(before)
			for _, i := range order {
				c, err := run(i)
				if err != nil {
					return err
				}
				after, err := run(baseRow)
				if err != nil {
					return err
				}
				c.ratios = []float64{bracketed(c, before, after)}
				after.ratios = []float64{after.opsPerSec() / before.opsPerSec()}
				res[i][j].add(c)
				res[baseRow][j].add(after)
				before = after
			}
		}
	}
	printThroughput(cts, cfg, res)
	return nil
}

// baseRow is the index of the EVALSHA baseline among the throughput
// contenders (throughputContenders).
const baseRow = 1

// bracketed returns c's decisions per second over the baseline's in the
// slices just before and just after it, both together.
func bracketed(c, before, after cell) float64 {
	base := float64(before.ok+after.ok) / (before.elapsed + after.elapsed).Seconds()
	if base == 0 {
		return 0
	}
	return c.opsPerSec() / base
}

// medianSpread returns the median of xs and its quartiles.
func medianSpread(xs []float64) (med, q1, q3 float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(q float64) float64 {
		pos := q * float64(len(s)-1)
		lo := int(pos)
		hi := min(lo+1, len(s)-1)
		return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
	}
	return at(0.5), at(0.25), at(0.75)
}

// throughputContenders returns the rows of the throughput table. The
// EVALSHA baseline is the second.
func throughputContenders(e *env, variants bool) ([]contender, error) {
	c := e.client(redis.Options{})
	noRetry := e.client(redis.Options{MaxRetries: -1})
	returnOne := redis.NewScript("return 1")
	noRetries := []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)}
	noBatching := []redisstore.Option{redisstore.WithBatching(0)}
	cts := []contender{
		{name: "PING", decide: func(ctx context.Context) (bool, time.Duration, error) { return true, 0, c.Ping(ctx).Err() }},
		{name: "EVALSHA `return 1` (baseline)", decide: func(ctx context.Context) (bool, time.Duration, error) {
			return true, 0, returnOne.Run(ctx, c, nil).Err()
		}},
		{name: "EVALSHA reading TIME only", decide: func(ctx context.Context) (bool, time.Duration, error) {
			return true, 0, readClock.Run(ctx, c, nil).Err()
		}},
	}
	type lib struct {
		l library
		c *redis.Client
	}
	libs := []lib{
		{redisRate, c}, {ululeLimiter, c}, {throttledGCRA, c}, {xrate, nil},
		{floorLibrary("floor (not a limiter): TIME, GET, INCRBY: GCRA, 1 limit, nothing else", 1), c},
		{floorLibrary("floor (not a limiter): GCRA, 2 limits, nothing else", 2), c},
		{ours(oursConfig{name: "ours: GCRA, 1 limit", buckets: one(quota.GCRA)}), c},
		{ours(oursConfig{name: "ours: GCRA, 2 limits (all + per key)", buckets: hierarchy}), c},
		{ours(oursConfig{name: "ours: GCRA + concurrency limit (Take, Release)", buckets: withSlots, release: true}), c},
		{ours(oursConfig{name: "ours: GCRA, 1 limit, with Transport's pause key", buckets: one(quota.GCRA), pauses: []string{""}}), c},
		{ours(oursConfig{name: "ours: GCRA, 1 limit, replay ids", opts: replayIDs, buckets: one(quota.GCRA)}), c},
		{ours(oursConfig{name: "ours: GCRA, 2 limits, replay ids", opts: replayIDs, buckets: hierarchy}), c},
		{ours(oursConfig{name: "ours: GCRA, 1 limit, client without retries", opts: noRetries, buckets: one(quota.GCRA)}), noRetry},
		{ours(oursConfig{name: "ours: GCRA, 1 limit, batching off", opts: noBatching, buckets: one(quota.GCRA)}), c},
		{ours(oursConfig{name: "ours: GCRA, 2 limits, batching off", opts: noBatching, buckets: hierarchy}), c},
	}
	if variants {
		libs = append(libs,
			lib{ours(oursConfig{name: "ours: fixed window, 1 limit", buckets: one(quota.FixedWindow)}), c},
			lib{ours(oursConfig{name: "ours: sliding window, 1 limit", buckets: one(quota.SlidingWindow)}), c},
			lib{ours(oursConfig{name: "ours: fixed window, 1 limit, replay ids", opts: replayIDs, buckets: one(quota.FixedWindow)}), c},
			lib{ours(oursConfig{name: "ours: sliding log, 1 limit (a log of about 1 s of decisions)", buckets: one(quota.SlidingLog)}), c},
			lib{ours(oursConfig{name: "ours: MULTI/EXEC fixed window, 1 limit, client without retries",
				opts: noRetries, multiExec: true, buckets: one(quota.FixedWindow)}), noRetry},
		)
	}
	for _, l := range libs {
		d, err := l.l.new(l.c, "k", big)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.l.name, err)
		}
		cts = append(cts, contender{name: l.l.name, local: l.l.local, decide: d})
	}
	return cts, nil
}

// measure runs ct from conc goroutines for dur. A failed decision is
// counted, not fatal; an error reading Redis's statistics is.
func measure(ctx context.Context, e *env, ct contender, conc int, dur time.Duration) (cell, error) {
	before, err := e.snap(ctx)
	if err != nil {
		return cell{}, err
	}
	var (
		ok, failed atomic.Int64
		firstErr   atomic.Pointer[error]
		mu         sync.Mutex
		lat        []time.Duration
		wg         sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	for range conc {
		wg.Go(func() {
			var mine []time.Duration
			for {
				t := time.Now()
				if !t.Before(deadline) {
					break
				}
				granted, _, err := ct.decide(ctx)
				if err == nil && !granted && !ct.local {
					err = errRefused
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				mine = append(mine, time.Since(t))
				ok.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	after, err := e.snap(ctx)
	if err != nil {
		return cell{}, err
	}
	c := cell{ok: ok.Load(), failed: failed.Load(), elapsed: elapsed, did: after.since(before), lat: lat}
	if p := firstErr.Load(); p != nil {
		c.err = *p
	}
	return c, nil
}

// printThroughput prints the throughput table and its notes.
func printThroughput(cts []contender, cfg config, res [][]cell) {
	const base = baseRow
	fmt.Printf("### Throughput and latency\n\n%v per contender and concurrency, in %d rounds of %v slices; in each round the contenders take turns and the EVALSHA `return 1` baseline runs before the first and after each of them. Ops/s: successful decisions per second over all slices. ×: the median over the contender's slices of its ops/s over the baseline's in the two slices around it, and (after it) the middle half of those ratios, their quartiles: the spread the machine's noise left; for the baseline, each slice over the one before it. Latency: percentiles over all slices, × the baseline's (> 1 is slower). Calls: commands the client sent per successful decision (a script call is one). Redis cmds: commands Redis executed per successful decision, those run inside scripts included (INFO commandstats). Redis CPU: redis-server's user+system CPU per successful decision (INFO cpu). Client CPU: this program's user+system CPU per successful decision (getrusage), the goroutines' loop included: what the library costs the service that calls it, and on this machine it shares the CPUs with Redis.\n\n", cfg.dur, cfg.rounds, cfg.dur/time.Duration(cfg.rounds))
	t := table{head: []string{"contender"}}
	for _, c := range cfg.concs {
		t.head = append(t.head, fmt.Sprintf("c=%d ops/s (×, its quartiles)", c), fmt.Sprintf("c=%d p50 / p99 µs (×)", c))
	}
	t.head = append(t.head, "calls", "Redis cmds", "Redis CPU µs", "client CPU µs", "failed (c="+joinInts(cfg.concs)+")")
	for i, ct := range cts {
		r := []string{ct.name}
		var total cell
		var fails []string
		for j := range cfg.concs {
			c, b := &res[i][j], &res[base][j]
			slices.Sort(c.lat)
			slices.Sort(b.lat)
			p50, p99 := percentile(c.lat, 0.5), percentile(c.lat, 0.99)
			b50, b99 := percentile(b.lat, 0.5), percentile(b.lat, 0.99)
			med, q1, q3 := medianSpread(c.ratios)
			if i == base {
				med = 1
			}
			r = append(r,
				fmt.Sprintf("%.0f (%.2f, %.2f–%.2f)", c.opsPerSec(), med, q1, q3),
				fmt.Sprintf("%s / %s (%s / %s)", micros(p50), micros(p99), ratio(float64(p50), float64(b50)), ratio(float64(p99), float64(b99))))
			total.add(*c)
			fails = append(fails, percent(float64(c.failed)/float64(max(c.ok+c.failed, 1))))
		}
		n := float64(max(total.ok, 1))
		if ct.local {
			r = append(r, "0", "0", "–")
		} else {
			r = append(r, fmt.Sprintf("%.2f", float64(total.did.sent)/n), fmt.Sprintf("%.2f", float64(total.did.srv.cmds)/n),
				fmt.Sprintf("%.1f", float64(total.did.srv.cpu)/1e3/n))
		}
		r = append(r, fmt.Sprintf("%.2f", float64(total.did.cpu)/1e3/n))
		r = append(r, strings.Join(fails, " / "))
		t.row(r...)
	}
	t.write(os.Stdout)
	for i, ct := range cts {
		var total cell
		for j := range cfg.concs {
			total.add(res[i][j])
		}
		if total.err != nil {
			fmt.Printf("- %s: %d of %d decisions failed; the first: %v\n", ct.name, total.failed, total.ok+total.failed, total.err)
		}
	}
	printPairs(cts, cfg, res)
	fmt.Println("- \"EVALSHA reading TIME only\" and the \"floor\" rows are yardsticks, not limiters: floor_gcra.lua reads Redis's clock, GETs each limit's arrival time and moves it with INCRBY, and does nothing else a limiter must (keys never expire; no pause, wait, retry time or guard against a call sent twice). No decision on Redis's clock in one script call can cost Redis less.")
	fmt.Println("- x/time/rate decides in process (one limiter shared by the goroutines): it makes no Redis call, and a refusal counts as a decision.")
	fmt.Printf("- ours: the store's Take (and Release), as throttle.Transport calls it; the rows without a note use the same client as the peers (go-redis defaults: MaxRetries 3), on which the store marks each call so that a call go-redis sends again is refused rather than decided twice (ReplayAuto: ReplayDetect, nothing kept in Redis); \"replay ids\" rows remember each decision's reply instead (ReplayIDs, the default for a Cluster client that follows redirects); the \"client without retries\" row uses MaxRetries -1 and ReplayNoRetries. GCRA demands of one scope go together in one call (a batch) only while %d calls of the scope are in flight (the default, redisstore.BatchInFlight; 1 for demands with a Concurrency limit), so not at c=1; \"batching off\" rows use WithBatching(0): one call per decision at every concurrency. The GCRA + concurrency row releases each slot at once after its Take: the release rides on a later Take of the scope (one call per decision).\n", redisstore.BatchInFlight)
	fmt.Println()
}

// joinInts formats ns separated by "/".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, "/")
}

// pairs are the comparisons the targets of issue 31 state between two
// rows (docs/benchmarks.md): the first row over the second.
var pairs = [][2]string{
	{"ours: GCRA, 1 limit", "floor (not a limiter): TIME, GET, INCRBY: GCRA, 1 limit, nothing else"},
	{"ours: GCRA, 1 limit", "ulule/limiter v3 (fixed window)"},
	{"ours: GCRA, 1 limit, with Transport's pause key", "ours: GCRA, 1 limit"},
}

// printPairs prints, for each of pairs whose rows ran, the first row's
// ratio to the baseline over the second's, round by round: each row's
// slice is bracketed by the baseline, and both slices of a round ran
// within one round's time, so the machine's drift over the run, which
// moves each row's median apart from the other's, cancels; the median
// and quartiles over the rounds.
func printPairs(cts []contender, cfg config, res [][]cell) {
	row := func(name string) int {
		return slices.IndexFunc(cts, func(ct contender) bool { return ct.name == name })
	}
	for _, p := range pairs {
		a, b := row(p[0]), row(p[1])
		if a < 0 || b < 0 {
			continue
		}
		var cells []string
		for j, c := range cfg.concs {
			ra, rb := res[a][j].ratios, res[b][j].ratios
			var xs []float64
			for k := range min(len(ra), len(rb)) {
				if rb[k] > 0 {
					xs = append(xs, ra[k]/rb[k])
				}
			}
			med, q1, q3 := medianSpread(xs)
			cells = append(cells, fmt.Sprintf("c=%d %.2f (%.2f–%.2f)", c, med, q1, q3))
		}
		fmt.Printf("- %s over %s, round by round: %s\n", p[0], p[1], strings.Join(cells, ", "))
	}
}
