// Command bench compares the Redis store of github.com/quotakit/throttle
// with its peers, against one redis-server that it starts itself on a free
// loopback port, and prints a markdown table.
//
//	cd bench && GOWORK=off go run .
//
// For each concurrency (1, 8 and 64 callers) it runs every contender for a
// fixed time (-d, split into -r rounds in which the contenders take turns,
// so that noise on a shared machine falls on all of them alike): plain PING
// and an EVALSHA of "return 1" (the physical baseline),
// go-redis/redis_rate v10 (GCRA), ulule/limiter v3 (fixed window), and
// throttle's redisstore with one and two limits. Throughput
// is reported as a multiple of the EVALSHA baseline measured in the same
// run at the same concurrency; Redis's own time per call comes from INFO
// commandstats; p50 is measured at concurrency 1.
//
// It lives in its own module so that the library does not depend on its
// peers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulule "github.com/ulule/limiter/v3/drivers/store/redis"
)

type contender struct {
	name string
	cmd  string // the command INFO commandstats counts for it
	op   func(ctx context.Context) error
}

// result is what one contender did at one concurrency, over all rounds.
type result struct {
	ops     int64
	elapsed time.Duration
	calls   int64 // script or command calls Redis counted
	usec    int64 // Redis's time for them
	lat     []time.Duration
}

func (r *result) add(o result) {
	r.ops += o.ops
	r.elapsed += o.elapsed
	r.calls += o.calls
	r.usec += o.usec
	r.lat = append(r.lat, o.lat...)
}

func (r *result) opsPerSec() float64 { return float64(r.ops) / r.elapsed.Seconds() }

func (r *result) redisUS() float64 {
	if r.calls == 0 {
		return 0
	}
	return float64(r.usec) / float64(r.calls)
}

func (r *result) p50() time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	slices.Sort(r.lat)
	return r.lat[len(r.lat)/2]
}

func main() {
	dur := flag.Duration("d", 2*time.Second, "how long each contender runs at each concurrency")
	concs := flag.String("c", "1,8,64", "concurrencies")
	rounds := flag.Int("r", 5, "rounds each cell is split into, the contenders taking turns")
	flag.Parse()
	if *rounds < 1 {
		*rounds = 1
	}
	if err := run(*dur, *concs, *rounds); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(dur time.Duration, concList string, rounds int) error {
	srv, stop := redistest.StartMain()
	defer stop()
	ctx := context.Background()
	newClient := func(o redis.Options) *redis.Client {
		o.Addr, o.PoolSize = srv.Addr(), 128
		return redis.NewClient(&o)
	}
	c := newClient(redis.Options{})
	defer c.Close()
	noRetry := newClient(redis.Options{MaxRetries: -1})
	defer noRetry.Close()

	const big = 1_000_000 // limits that always admit: every call commits
	one := redis.NewScript("return 1")
	rr := redis_rate.NewLimiter(c)
	rrLimit := redis_rate.PerSecond(big)
	ustore, err := ulule.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule", MaxRetry: 3})
	if err != nil {
		return err
	}
	ul := limiter.New(ustore, limiter.Rate{Period: time.Second, Limit: big})
	withIDs, err := redisstore.New(c, redisstore.WithReplay(redisstore.ReplayIDs))
	if err != nil {
		return err
	}
	noIDs, err := redisstore.New(noRetry, redisstore.WithReplay(redisstore.ReplayNoRetries))
	if err != nil {
		return err
	}
	tx, err := redisstore.New(noRetry, redisstore.WithMultiExec(), redisstore.WithReplay(redisstore.ReplayNoRetries))
	if err != nil {
		return err
	}
	lim := func(name string, a throttle.Algorithm) throttle.Bucket {
		return throttle.Bucket{Limit: throttle.Limit{Name: name, Rate: big, Per: time.Second, Algorithm: a}, Key: "k"}
	}
	take := func(s *redisstore.Store, bs ...throttle.Bucket) func(context.Context) error {
		d := &throttle.Demand{Scope: "bench", Limits: bs, Cost: 1}
		return func(ctx context.Context) error {
			dec, err := s.Take(ctx, d)
			if err == nil && !dec.OK {
				err = fmt.Errorf("refused")
			}
			return err
		}
	}
	contenders := []contender{
		{"PING", "ping", func(ctx context.Context) error { return c.Ping(ctx).Err() }},
		{"EVALSHA `return 1` (baseline)", "evalsha", func(ctx context.Context) error { return one.Run(ctx, c, nil).Err() }},
		{"redis_rate v10 GCRA", "evalsha", func(ctx context.Context) error {
			_, err := rr.Allow(ctx, "rr", rrLimit)
			return err
		}},
		{"ulule/limiter v3 fixed window", "evalsha", func(ctx context.Context) error {
			_, err := ul.Get(ctx, "ul")
			return err
		}},
		{"redisstore GCRA, 1 limit", "evalsha", take(noIDs, lim("g1", throttle.GCRA))},
		{"redisstore GCRA, 2 limits", "evalsha", take(noIDs, lim("g2a", throttle.GCRA), lim("g2b", throttle.GCRA))},
		{"redisstore fixed window, 1 limit", "evalsha", take(noIDs, lim("f1", throttle.FixedWindow))},
		{"redisstore sliding window, 1 limit", "evalsha", take(noIDs, lim("w1", throttle.SlidingWindow))},
		{"redisstore MULTI/EXEC fixed window, 1 limit", "exec", take(tx, lim("x1", throttle.FixedWindow))},
		{"redisstore GCRA, 1 limit, replay ids", "evalsha", take(withIDs, lim("g1i", throttle.GCRA))},
		{"redisstore GCRA, 2 limits, replay ids", "evalsha", take(withIDs, lim("g2c", throttle.GCRA), lim("g2d", throttle.GCRA))},
	}

	var concs []int
	for _, f := range strings.Split(concList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad concurrency %q", f)
		}
		concs = append(concs, n)
	}
	results := make([][]result, len(contenders))
	for i := range results {
		results[i] = make([]result, len(concs))
	}
	for _, ct := range contenders {
		if err := ct.op(ctx); err != nil { // warm up: scripts, connections
			return fmt.Errorf("%s: %w", ct.name, err)
		}
	}
	// Each cell runs in rounds slices, the contenders taking turns, so a
	// burst of noise on the shared machine hits every contender alike.
	slice := dur / time.Duration(rounds)
	for j, conc := range concs {
		for range rounds {
			for i, ct := range contenders {
				r, err := measure(ctx, c, ct, conc, slice)
				if err != nil {
					return fmt.Errorf("%s at concurrency %d: %w", ct.name, conc, err)
				}
				results[i][j].add(r)
			}
		}
	}
	print(os.Stdout, srv.Addr(), contenders, concs, results, dur, rounds)
	return nil
}

// measure runs ct from conc goroutines for dur.
func measure(ctx context.Context, c *redis.Client, ct contender, conc int, dur time.Duration) (result, error) {
	before, err := commandStats(ctx, c)
	if err != nil {
		return result{}, err
	}
	var (
		ops    atomic.Int64
		failed atomic.Pointer[error]
		lat    []time.Duration
		wg     sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(dur)
	for range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				t := time.Now()
				if err := ct.op(ctx); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if conc == 1 {
					lat = append(lat, time.Since(t))
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		return result{}, *err
	}
	after, err := commandStats(ctx, c)
	if err != nil {
		return result{}, err
	}
	return result{
		ops:     ops.Load(),
		elapsed: elapsed,
		calls:   after[ct.cmd].calls - before[ct.cmd].calls,
		usec:    after[ct.cmd].usec - before[ct.cmd].usec,
		lat:     lat,
	}, nil
}

type cmdStat struct{ calls, usec int64 }

func commandStats(ctx context.Context, c *redis.Client) (map[string]cmdStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var s cmdStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				s.calls = n
			case "usec":
				s.usec = n
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = s
	}
	return out, nil
}

func print(w *os.File, addr string, cts []contender, concs []int, res [][]result, dur time.Duration, rounds int) {
	base := 1 // the EVALSHA baseline's row
	fmt.Fprintf(w, "Redis %s on %s, %d CPUs, %s/%s, %v per cell in %d rounds.\n\n", redisVersion(addr), addr, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, dur, rounds)
	fmt.Fprint(w, "| contender |")
	for _, c := range concs {
		fmt.Fprintf(w, " c=%d ops/s (x EVALSHA) |", c)
	}
	fmt.Fprint(w, " Redis µs/call | p50 c=1 µs (x EVALSHA) |\n|---|")
	for range concs {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprint(w, "---:|---:|\n")
	for i, ct := range cts {
		fmt.Fprintf(w, "| %s |", ct.name)
		var us, n float64
		for j := range concs {
			r := &res[i][j]
			fmt.Fprintf(w, " %.0f (%.2f) |", r.opsPerSec(), r.opsPerSec()/res[base][j].opsPerSec())
			if u := r.redisUS(); u > 0 {
				us += u
				n++
			}
		}
		if n > 0 {
			fmt.Fprintf(w, " %.2f |", us/n)
		} else {
			fmt.Fprint(w, " – |")
		}
		if concs[0] == 1 {
			p, b := res[i][0].p50(), res[base][0].p50()
			fmt.Fprintf(w, " %.0f (%.2f) |\n", float64(p)/1e3, float64(p)/float64(b))
		} else {
			fmt.Fprint(w, " – |\n")
		}
	}
}

func redisVersion(addr string) string {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
