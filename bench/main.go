// Command bench compares the Redis store of github.com/quotakit/throttle
// with its peers, against one redis-server that it starts itself on a free
// loopback port, and prints one markdown table per part.
//
//	cd bench && go run .
//
// The contenders are PING and an EVALSHA of "return 1" (the physical
// baselines), go-redis/redis_rate v10 (GCRA), ulule/limiter v3 (fixed
// window), throttled/throttled v2 (GCRA over its go-redis v9 store),
// golang.org/x/time/rate (in process only, nothing shared) and throttle
// itself. Every library gets the same limits, the same keys and the same
// go-redis client configuration. The parts (-parts) are:
//
//   - throughput (throughput.go): decisions per second and p50/p99
//     latency at concurrency 1, 8 and 64, as multiples of the EVALSHA
//     baseline measured in the same run;
//   - accuracy (accuracy.go): 8 instances x 16 goroutines hammer a limit
//     of 100 per second; what was admitted, in any window;
//   - overload (overload.go): 8 instances want 5 times the quota and wait
//     as each library lets them; the share of the quota achieved, the
//     Redis calls per admitted request, the waits;
//   - memory (memory.go): MEMORY USAGE of each library's keys after one
//     decision;
//   - fallback (fallback.go): ours only: a fleet of 4 transports, offered
//     5 times a limit of 200 per second, while Redis (a server of the
//     part's own, behind a delaying proxy) is up, slow, stopped for a
//     second and killed; what the fleet admitted against the limit and
//     against the FailLocal bound, the failure modes applied, and the
//     decision latency as a multiple of the healthy state's.
//
// With -guard it runs only the guard (guard.go), the short check CI
// runs: a few of our throughput rows against their yardsticks, compared
// with the ratios recorded in guard.txt.
//
// It lives in its own module so that the library does not depend on its
// peers.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
)

// config is the command line.
type config struct {
	parts    map[string]bool
	dur      time.Duration  // throughput: per contender and concurrency
	concs    []int          // throughput: concurrencies
	rounds   int            // throughput: rounds each cell is split into
	variants bool           // throughput: also our other algorithms and modes
	only     *regexp.Regexp // throughput: the rows run (the EVALSHA baseline always); nil: all
	accRun   time.Duration  // accuracy: how long each contender hammers
	warm     time.Duration  // overload: warm-up before the steady window
	steady   time.Duration  // overload: the steady window
	fbSpan   time.Duration  // fallback: the measured span of each state
	guard    bool           // run the guard (guard.go) instead of the parts
	gcfg     guardConfig
}

// allParts are the parts in the order they run and print.
var allParts = []string{"throughput", "accuracy", "overload", "memory", "fallback"}

// main reads the flags and runs the parts.
func main() {
	var cfg config
	parts := flag.String("parts", strings.Join(allParts, ","), "parts to run, comma-separated: "+strings.Join(allParts, ", "))
	concs := flag.String("c", "1,8,64", "throughput: concurrencies")
	flag.DurationVar(&cfg.dur, "d", time.Second, "throughput: how long each contender runs at each concurrency (the baseline runs as long again between each two)")
	flag.IntVar(&cfg.rounds, "r", 20, "throughput: rounds each cell is split into, the contenders taking turns with the baseline between each two")
	flag.BoolVar(&cfg.variants, "variants", false, "throughput: also our fixed window, sliding window, sliding log and MULTI/EXEC mode")
	only := flag.String("only", "", "throughput: run only the rows whose name matches this regular expression, and the EVALSHA baseline (for work on one row; the docs' tables come from full runs)")
	flag.DurationVar(&cfg.accRun, "acc-d", 3*time.Second, "accuracy: how long each contender hammers the limit")
	flag.DurationVar(&cfg.warm, "warm", 1500*time.Millisecond, "overload: warm-up before the steady window (a whole number of periods and a half, so the window's edges fall between fixed-window bursts)")
	flag.DurationVar(&cfg.steady, "steady", 4*time.Second, "overload: the steady window measured")
	flag.DurationVar(&cfg.fbSpan, "fb-d", 4*time.Second, "fallback: the measured span of each store state (faults come 1.5 s into it; at least 3 s)")
	flag.BoolVar(&cfg.guard, "guard", false, "run only the guard (guard.go): our tracked rows against their yardsticks, checked against -guard-file; exits 1 when a row is slower than recorded")
	flag.StringVar(&cfg.gcfg.file, "guard-file", "guard.txt", "guard: the recorded ratios and tolerance")
	flag.BoolVar(&cfg.gcfg.write, "guard-write", false, "guard: record the measured ratios in -guard-file instead of checking them")
	flag.IntVar(&cfg.gcfg.rounds, "guard-rounds", 20, "guard: rounds per concurrency")
	flag.DurationVar(&cfg.gcfg.slice, "guard-d", 200*time.Millisecond, "guard: each contender's time in a round")
	flag.Parse()
	cfg.gcfg.rounds = max(cfg.gcfg.rounds, 1)
	cfg.rounds = max(cfg.rounds, 1)
	cfg.fbSpan = max(cfg.fbSpan, fbFaultAt+fbStopFor+500*time.Millisecond)
	var err error
	if cfg.parts, err = parseParts(*parts); err == nil {
		cfg.concs, err = parseConcs(*concs)
	}
	if err == nil && *only != "" {
		cfg.only, err = regexp.Compile(*only)
	}
	if err == nil {
		err = run(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// parseParts reads -parts.
func parseParts(s string) (map[string]bool, error) {
	m := map[string]bool{}
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allParts, p) {
			return nil, fmt.Errorf("unknown part %q (have %s)", p, strings.Join(allParts, ", "))
		}
		m[p] = true
	}
	return m, nil
}

// parseConcs reads -c.
func parseConcs(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad concurrency %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// run starts redis-server, prints the header line and runs the parts.
func run(cfg config) error {
	srv, stop := redistest.StartMain()
	defer stop()
	e := newEnv(srv.Addr())
	defer e.close()
	ctx := context.Background()
	start := time.Now()
	fmt.Printf("Redis %s, %d CPUs, %s/%s, %s; flags: %s\n\n", e.redisVersion(ctx), runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version(), flagLine())
	if cfg.guard {
		err := guard(ctx, e, cfg.gcfg)
		fmt.Printf("The guard took %.0f s.\n", time.Since(start).Seconds())
		return err
	}
	for _, p := range allParts {
		if !cfg.parts[p] {
			continue
		}
		var err error
		switch p {
		case "throughput":
			err = throughput(ctx, e, cfg)
		case "accuracy":
			err = accuracy(ctx, e, cfg)
		case "overload":
			err = overload(ctx, e, cfg)
		case "memory":
			err = memory(ctx, e)
		case "fallback":
			err = fallback(ctx, cfg)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	fmt.Printf("All parts took %.0f s.\n", time.Since(start).Seconds())
	return nil
}

// flagLine returns every flag with its value, as it could be typed.
func flagLine() string {
	var b strings.Builder
	flag.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(&b, "-%s=%s ", f.Name, f.Value)
	})
	return strings.TrimSpace(b.String())
}
