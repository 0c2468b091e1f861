package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// The guard (-guard) is the short mode of the throughput part that CI
// runs (.ci/run): a few of our rows, each beside the yardstick it is
// tracked against, measured in interleaved rounds, and compared with the
// ratios recorded in guard.txt. It fails when a row's ratio falls more
// than the file's tolerance below the recorded one, so that a change
// that makes the plain decision slower fails the change's own CI run.
//
// Ratios, not times: the machine that runs CI is shared and its speed
// varies from minute to minute, which moves a row and its yardstick
// alike. Each round runs every contender of a concurrency for one short
// slice, in turn (in reverse order every other round), and the row's
// ratio is the median over rounds of its decisions per second to its
// yardstick's in the same round: a burst of load from elsewhere falls
// on a round or two, which the median leaves out.

// guardRow is one tracked row: contender row at concurrency conc, as a
// multiple of contender base.
type guardRow struct {
	id        string // its name in guard.txt
	conc      int
	row, base int // indexes in guardContenders
}

// guardContenders are the contenders the guard runs, by index.
const (
	gEvalsha = iota
	gFloor1
	gFloor2
	gOurs1
	gOursPause
	gOurs2
)

// guardRows are the rows tracked: one limit, the same with the pause key
// throttle.Transport adds, and two limits, each against the floor of as
// many limits at c=1 and c=8 (one call per decision); and one limit at
// c=64 against the EVALSHA baseline (batches).
var guardRows = []guardRow{
	{"gcra-1-limit", 1, gOurs1, gFloor1},
	{"gcra-1-limit", 8, gOurs1, gFloor1},
	{"gcra-pause-key", 1, gOursPause, gFloor1},
	{"gcra-pause-key", 8, gOursPause, gFloor1},
	{"gcra-2-limits", 1, gOurs2, gFloor2},
	{"gcra-2-limits", 8, gOurs2, gFloor2},
	{"gcra-1-limit-batched", 64, gOurs1, gEvalsha},
}

// guardContenders returns the contenders of the guard, in the order of
// the constants above.
func guardContenders(e *env) ([]contender, error) {
	c := e.client(redis.Options{})
	returnOne := redis.NewScript("return 1")
	cts := []contender{{name: "EVALSHA `return 1`", decide: func(ctx context.Context) (bool, time.Duration, error) {
		return true, 0, returnOne.Run(ctx, c, nil).Err()
	}}}
	for _, l := range []library{
		floorLibrary("floor, 1 limit", 1),
		floorLibrary("floor, 2 limits", 2),
		ours(oursConfig{name: "ours: GCRA, 1 limit", buckets: one(quota.GCRA)}),
		ours(oursConfig{name: "ours: GCRA, 1 limit, with Transport's pause key", buckets: one(quota.GCRA), pauses: []string{""}}),
		ours(oursConfig{name: "ours: GCRA, 2 limits (all + per key)", buckets: hierarchy}),
	} {
		d, err := l.new(c, "guard", big)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.name, err)
		}
		cts = append(cts, contender{name: l.name, decide: d})
	}
	return cts, nil
}

// guardConfig is the guard's part of the command line.
type guardConfig struct {
	file   string        // the recorded ratios
	write  bool          // record the measured ratios instead of checking
	rounds int           // rounds per concurrency
	slice  time.Duration // each contender's time in a round
}

// guardFile is guard.txt: the tolerances, and the ratios per row and
// concurrency.
type guardFile struct {
	tolerance     float64 // a row fails below (1 - tolerance) x its throughput ratio
	costTolerance float64 // and below (1 - costTolerance) x its cost ratio
	ratios        map[string]float64
}

// guardKey is a row's key in guardFile.ratios.
func guardKey(id string, conc int) string { return id + " c=" + strconv.Itoa(conc) }

// readGuardFile reads name: "#" comments, "tolerance TPUT COST", and
// "tput:ID C RATIO" and "cost:ID C RATIO" lines (fields separated by
// white space).
func readGuardFile(name string) (guardFile, error) {
	g := guardFile{ratios: map[string]float64{}}
	f, err := os.Open(name)
	if err != nil {
		return g, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fs := strings.Fields(line)
		switch {
		case len(fs) == 3 && fs[0] == "tolerance":
			g.tolerance, err = strconv.ParseFloat(fs[1], 64)
			if err == nil {
				g.costTolerance, err = strconv.ParseFloat(fs[2], 64)
			}
			if err == nil && (g.tolerance <= 0 || g.tolerance >= 1 || g.costTolerance <= 0 || g.costTolerance >= 1) {
				err = errors.New("tolerances not in (0, 1)")
			}
		case len(fs) == 3 && fs[0] != "tolerance":
			var c int
			var r float64
			if c, err = strconv.Atoi(fs[1]); err == nil {
				r, err = strconv.ParseFloat(fs[2], 64)
			}
			g.ratios[guardKey(fs[0], c)] = r
		default:
			err = errors.New("want \"tolerance TPUT COST\" or \"tput:ID CONCURRENCY RATIO\" or \"cost:ID CONCURRENCY RATIO\"")
		}
		if err != nil {
			return g, fmt.Errorf("%s:%d: %w", name, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return g, err
	}
	if g.tolerance == 0 {
		return g, fmt.Errorf("%s: no tolerance line", name)
	}
	return g, nil
}

// guard runs the guard: it measures every row of guardRows and checks it
// against cfg.guard.file, or with cfg.guard.write records the measured
// ratios there (keeping the file's tolerance).
func guard(ctx context.Context, e *env, cfg guardConfig) error {
	recorded, err := readGuardFile(cfg.file)
	if err != nil && !(cfg.write && errors.Is(err, os.ErrNotExist)) {
		return err
	}
	if recorded.tolerance == 0 {
		recorded.tolerance, recorded.costTolerance = 0.25, 0.15
	}
	cts, err := guardContenders(e)
	if err != nil {
		return err
	}
	for _, ct := range cts { // warm up: scripts, connections
		if ok, _, err := ct.decide(ctx); err != nil || !ok {
			return fmt.Errorf("%s: warm-up: ok=%v, %v", ct.name, ok, err)
		}
	}
	var concs []int
	for _, r := range guardRows {
		if !slices.Contains(concs, r.conc) {
			concs = append(concs, r.conc)
		}
	}
	// cells[conc][contender][round]: what the contender did in the round.
	cells := map[int]map[int][]cell{}
	for _, conc := range concs {
		var used []int
		for _, r := range guardRows {
			if r.conc != conc {
				continue
			}
			for _, i := range []int{r.base, r.row} {
				if !slices.Contains(used, i) {
					used = append(used, i)
				}
			}
		}
		cells[conc] = map[int][]cell{}
		for round := range cfg.rounds {
			order := slices.Clone(used)
			if round%2 == 1 {
				slices.Reverse(order)
			}
			for _, i := range order {
				c, err := measure(ctx, e, cts[i], conc, cfg.slice)
				if err != nil {
					return fmt.Errorf("%s at concurrency %d: %w", cts[i].name, conc, err)
				}
				if c.failed > 0 {
					return fmt.Errorf("%s at concurrency %d: %d decisions failed: %v", cts[i].name, conc, c.failed, c.err)
				}
				cells[conc][i] = append(cells[conc][i], c)
			}
		}
	}

	fmt.Printf("### Guard\n\n%d rounds of %v per contender and concurrency. Ratios are the medians over rounds of a row's figure to its yardstick's in the same round, so that larger is faster: decisions per second (tput), and CPU per decision, Redis's and this program's, yardstick's / row's (cost). A row fails below (1 - tolerance) x its recorded ratio (%s: tput %.2f, cost %.2f).\n\n", cfg.rounds, cfg.slice, cfg.file, recorded.tolerance, recorded.costTolerance)
	t := table{head: []string{"row", "c", "yardstick", "tput recorded", "tput measured (min–max)", "cost recorded", "cost measured (min–max)", ""}}
	var failed []string
	measured := map[string]float64{}
	for _, r := range guardRows {
		var tput, cost []float64
		for k, c := range cells[r.conc][r.row] {
			b := cells[r.conc][r.base][k]
			tput = append(tput, c.opsPerSec()/b.opsPerSec())
			cost = append(cost, cpuPerOp(b)/cpuPerOp(c))
		}
		verdict := "ok"
		var recs, meas [2]string
		for j, m := range []struct {
			name string
			xs   []float64
			tol  float64
		}{{"tput", tput, recorded.tolerance}, {"cost", cost, recorded.costTolerance}} {
			slices.Sort(m.xs)
			v := median(m.xs)
			key := guardKey(m.name+":"+r.id, r.conc)
			measured[key] = v
			meas[j] = fmt.Sprintf("%.3f (%.2f–%.2f)", v, m.xs[0], m.xs[len(m.xs)-1])
			rec, ok := recorded.ratios[key]
			recs[j] = "–"
			if !ok {
				verdict = "new"
				continue
			}
			b := rec * (1 - m.tol)
			recs[j] = fmt.Sprintf("%.3f (fails below %.3f)", rec, b)
			if v < b {
				verdict = "**FAIL**"
				failed = append(failed, fmt.Sprintf("%s at c=%d: %s %.3f x %s, below %.3f (recorded %.3f, tolerance %.2f)", r.id, r.conc, m.name, v, cts[r.base].name, b, rec, m.tol))
			}
		}
		t.row(r.id, strconv.Itoa(r.conc), cts[r.base].name, recs[0], meas[0], recs[1], meas[1], verdict)
	}
	t.write(os.Stdout)
	if cfg.write {
		return writeGuardFile(cfg.file, recorded.tolerance, recorded.costTolerance, measured)
	}
	if len(failed) > 0 {
		return fmt.Errorf("slower than recorded:\n  %s", strings.Join(failed, "\n  "))
	}
	fmt.Println("Guard: every row within its tolerance.")
	return nil
}

// median returns the median of sorted xs.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// cpuPerOp returns the CPU, Redis's and this program's, per successful
// decision of c.
func cpuPerOp(c cell) float64 {
	return float64(c.did.srv.cpu+c.did.cpu) / float64(max(c.ok, 1))
}

// writeGuardFile records the measured ratios in name.
func writeGuardFile(name string, tol, costTol float64, measured map[string]float64) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# The ratios the guard checks (bench -guard, run by .ci/run; guard.go):
# for each row and concurrency, its decisions per second (tput) and its
# yardstick's CPU per decision over its own (cost), both as the median
# over rounds of the ratios measured in the same round. A row fails when
# it measures below (1 - tolerance) x a ratio here; the tolerances are
# tput's and cost's. Written by -guard-write on %s;
# bench/README.md ("The guard") says how to record them again.
tolerance %.2f %.2f
`, time.Now().UTC().Format("2006-01-02"), tol, costTol)
	for _, m := range []string{"tput", "cost"} {
		for _, r := range guardRows {
			fmt.Fprintf(&b, "%s:%s %d %.3f\n", m, r.id, r.conc, measured[guardKey(m+":"+r.id, r.conc)])
		}
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}
