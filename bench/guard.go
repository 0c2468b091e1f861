package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
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
	gOursTenant
	gOursWindowClass
	gOursSlots
	gOursBusy
)

// guardRows are the rows tracked: one limit and the same with the pause
// key throttle.Transport adds, against the 1-limit floor at c=1 and c=8
// (one call per decision at c=1; at c=8 demands batch); two limits
// against the 2-limit floor at c=1; one limit at c=64 against the
// EVALSHA baseline (batches); and a GCRA limit with a Concurrency limit
// (Take, then Release, which the next Take carries) against the 1-limit
// floor at c=1 and c=8.
var guardRows = []guardRow{
	{"gcra-1-limit", 1, gOurs1, gFloor1},
	{"gcra-1-limit", 8, gOurs1, gFloor1},
	{"gcra-pause-key", 1, gOursPause, gFloor1},
	{"gcra-pause-key", 8, gOursPause, gFloor1},
	{"gcra-2-limits", 1, gOurs2, gFloor2},
	{"gcra-1-limit-batched", 64, gOurs1, gEvalsha},
	{"gcra-slot", 1, gOursSlots, gFloor1},
	{"gcra-slot", 8, gOursSlots, gFloor1},
}

// guardInstrRows are rows whose instructions only are counted (callgrind,
// as the c=1 rows'), not their throughput, so that the guard takes only
// the callgrind run's few seconds more for them: a tenant's decision and
// a class's on a sliding window, both against our plain GCRA decision on
// one limit. (Issue 31 compares each with the plain decision on its own
// limit, redisstore/BENCHMARKS.md; the plain sliding window is no
// yardstick here: its count per decision came out at 71.5-72.4k in some
// runs of the guard and 74.3-74.8k in others, for the same code, while
// the class's and the GCRA decision's stayed within 1%.)
//
// gcra-busy is the plain decision on a bucket that stays busy (its arrival
// time ahead of Redis's clock, as while a limit binds), against the
// floor: the store's hints (redisstore's busyhint.go) have the script
// charge its key first, one INCRBY, and the row fails if they stop doing
// so (read first, the grant costs a GET more: 1.31x the floor against
// 1.15x).
var guardInstrRows = []guardRow{
	{"gcra-tenant", 1, gOursTenant, gOurs1},
	{"sliding-window-class", 1, gOursWindowClass, gOurs1},
	{"gcra-busy", 1, gOursBusy, gFloor1},
}

// guardContenders returns the contenders of the guard on client c, in the
// order of the constants above.
func guardContenders(c *redis.Client) ([]contender, error) {
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
		ours(oursConfig{name: "ours: GCRA, 1 limit, a tenant", buckets: shared(one(quota.GCRA), "acme", 0)}),
		ours(oursConfig{name: "ours: sliding window, 1 limit, a class with a headroom", buckets: shared(one(quota.SlidingWindow), "", 200)}),
		ours(oursConfig{name: "ours: GCRA + concurrency limit (Take, Release)", buckets: withSlots, release: true}),
		ours(oursConfig{name: "ours: GCRA, 1 limit, a busy bucket", buckets: busyBucket}),
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

// guardFile is guard.txt: the tolerances and the recorded ratios.
type guardFile struct {
	// row and all are the tolerances of one row and of all rows: a row
	// fails below (1 - row[m]) x its recorded ratio of measure m
	// (guardMeasures), and the run fails when the geometric mean of
	// every row's ratio of m is below (1 - all[m]) x its recorded one.
	// The mean moves less with noise than any row, and a change to the
	// path every row takes moves them all.
	row, all [3]float64
	ratios   map[string]float64 // by "measure row", guardRatioKey

	// count is the tolerance of each of guardCounts: a row fails when
	// its measured count exceeds the recorded one by more than count[k]
	// per decision. counts holds the recorded ones, by "count row".
	count  [2]float64
	counts map[string]float64

	// instr is the tolerance of the instruction counts (callgrind.go): a
	// row fails when its instructions per decision over its yardstick's
	// exceed the recorded ratio by more than instr times it.
	instr float64

	// local is the tolerance of the in-process rows' ratios
	// (guard_local.go): a row fails below (1 - local) x its recorded
	// ratio, kept in ratios by "local row".
	local float64
}

// guardMeasures are the ratios the guard takes of each row: of
// decisions per second (tput); and the yardstick's time per decision
// over the row's, that Redis spent running the scripts (redis: INFO
// commandstats, which leaves out reading and writing the sockets) and
// this program's CPU (client). A script's instructions are too small a
// part of a decision's cost to show in throughput on a loaded machine;
// the script's own time shows them.
var guardMeasures = [3]string{"tput", "redis", "client"}

// guardCounts are what the guard counts per decision of each row that
// decides one demand per call (no batches: its concurrency is at most
// redisstore.BatchInFlight): the commands Redis ran (cmds: INFO
// commandstats, the script call and every command it ran), and the heap
// objects this program allocated (allocs: runtime/metrics, the bench's
// loop included, the same for every row). Unlike the ratios, load does
// not move them: a command more in a script, or an allocation more per
// call, shows whatever the machine is doing, and the tolerances are a
// small part of one.
var guardCounts = [2]string{"cmds", "allocs"}

// guardInstr names, in guard.txt, a row's instructions per decision in
// redis-server over its yardstick's (callgrind.go), for the rows at
// concurrency 1: a cost, so larger is slower.
const guardInstr = "instr"

// counted reports whether the guard counts r's commands and allocations.
func (r guardRow) counted() bool { return r.conc <= redisstore.BatchInFlight }

// guardAll is the name of the geometric mean of all rows in guard.txt.
const guardAll = "all"

// guardRowName is r's name in guard.txt.
func guardRowName(r guardRow) string { return r.id + "/c=" + strconv.Itoa(r.conc) }

// guardRatioKey is the key of a ratio in guardFile.ratios.
func guardRatioKey(measure, row string) string { return measure + " " + row }

// readGuardFile reads name: "#" comments, the lines "tolerance-row TPUT
// REDIS CLIENT" and "tolerance-all TPUT REDIS CLIENT", and a line
// "MEASURE ROW RATIO" per ratio (MEASURE one of guardMeasures; ROW a
// row's name or "all"), fields separated by white space.
func readGuardFile(name string) (guardFile, error) {
	g := guardFile{ratios: map[string]float64{}, counts: map[string]float64{}}
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
		switch fs[0] {
		case "tolerance-row", "tolerance-all":
			if len(fs) != 1+len(guardMeasures) {
				return g, fmt.Errorf("%s:%d: want a tolerance per measure (%s)", name, n, strings.Join(guardMeasures[:], ", "))
			}
			tol := &g.row
			if fs[0] == "tolerance-all" {
				tol = &g.all
			}
			for k := range tol {
				if tol[k], err = strconv.ParseFloat(fs[1+k], 64); err == nil && (tol[k] <= 0 || tol[k] >= 1) {
					err = errors.New("a tolerance not in (0, 1)")
				}
				if err != nil {
					return g, fmt.Errorf("%s:%d: %w", name, n, err)
				}
			}
		case "tolerance-count":
			if len(fs) != 1+len(guardCounts) {
				return g, fmt.Errorf("%s:%d: want a tolerance per count (%s)", name, n, strings.Join(guardCounts[:], ", "))
			}
			for k := range g.count {
				if g.count[k], err = strconv.ParseFloat(fs[1+k], 64); err == nil && g.count[k] <= 0 {
					err = errors.New("a tolerance not above 0")
				}
				if err != nil {
					return g, fmt.Errorf("%s:%d: %w", name, n, err)
				}
			}
		case "tolerance-instr", "tolerance-local":
			tol := &g.instr
			if fs[0] == "tolerance-local" {
				tol = &g.local
			}
			if len(fs) != 2 {
				return g, fmt.Errorf("%s:%d: want %s TOLERANCE", name, n, fs[0])
			}
			if *tol, err = strconv.ParseFloat(fs[1], 64); err == nil && (*tol <= 0 || *tol >= 1) {
				err = errors.New("a tolerance not in (0, 1)")
			}
			if err != nil {
				return g, fmt.Errorf("%s:%d: %w", name, n, err)
			}
		case guardCounts[0], guardCounts[1], guardInstr:
			if len(fs) != 3 {
				return g, fmt.Errorf("%s:%d: want COUNT ROW VALUE", name, n)
			}
			v, err := strconv.ParseFloat(fs[2], 64)
			if err != nil || v < 0 {
				return g, fmt.Errorf("%s:%d: bad count %q", name, n, fs[2])
			}
			g.counts[guardRatioKey(fs[0], fs[1])] = v
		case guardMeasures[0], guardMeasures[1], guardMeasures[2], guardLocal:
			if len(fs) != 3 {
				return g, fmt.Errorf("%s:%d: want MEASURE ROW RATIO", name, n)
			}
			r, err := strconv.ParseFloat(fs[2], 64)
			if err != nil || r <= 0 {
				return g, fmt.Errorf("%s:%d: bad ratio %q", name, n, fs[2])
			}
			g.ratios[guardRatioKey(fs[0], fs[1])] = r
		default:
			return g, fmt.Errorf("%s:%d: unknown line %q", name, n, fs[0])
		}
	}
	if err := sc.Err(); err != nil {
		return g, err
	}
	if g.row[0] == 0 || g.all[0] == 0 || g.count[0] == 0 {
		return g, fmt.Errorf("%s: a tolerance line is missing", name)
	}
	return g, nil
}

// guard runs the guard: it measures every row of guardRows and checks it
// against cfg.file, or with cfg.write records the measured ratios there
// (keeping the file's tolerances).
func guard(ctx context.Context, e *env, cfg guardConfig) error {
	recorded, err := readGuardFile(cfg.file)
	if err != nil && !(cfg.write && errors.Is(err, os.ErrNotExist)) {
		return err
	}
	if recorded.row[0] == 0 {
		recorded.row, recorded.all = [3]float64{0.45, 0.45, 0.35}, [3]float64{0.25, 0.20, 0.15}
	}
	if recorded.count[0] == 0 {
		recorded.count = [2]float64{0.1, 0.5}
	}
	if recorded.instr == 0 {
		recorded.instr = 0.03
	}
	if recorded.local == 0 {
		recorded.local = 0.30
	}
	cts, err := guardContenders(e.client(redis.Options{}))
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

	fmt.Printf("### Guard\n\n%d rounds of %v per contender and concurrency. A row's ratio is the median over rounds of its figure to its yardstick's in the same round, so that larger is faster: of decisions per second (tput), and of time per decision, the yardstick's over the row's, that Redis spent running the scripts (redis: INFO commandstats) and this program's CPU (client); \"all\" is the geometric mean of the rows'. A ratio fails below (1 - tolerance) x its recorded value (%s: a row's %.2f / %.2f / %.2f, all rows' %.2f / %.2f / %.2f).\n\n",
		cfg.rounds, cfg.slice, cfg.file, recorded.row[0], recorded.row[1], recorded.row[2], recorded.all[0], recorded.all[1], recorded.all[2])
	t := table{head: []string{"row", "yardstick"}}
	for _, m := range guardMeasures {
		t.head = append(t.head, m+" recorded", m+" measured (rounds' min–max)")
	}
	t.head = append(t.head, "")
	var failed []string
	measured := map[string]float64{}
	var logSum [3]float64
	// check records v, measure's ratio of row, and checks it against the
	// recorded one: rec is what the table shows of that.
	check := func(measure, row string, v float64, tol float64) (rec string, ok bool) {
		key := guardRatioKey(measure, row)
		measured[key] = v
		r, have := recorded.ratios[key]
		if !have {
			return "–", true
		}
		bound := r * (1 - tol)
		if v < bound {
			failed = append(failed, fmt.Sprintf("%s: %s %.3f, below %.3f (recorded %.3f, tolerance %.2f)", row, measure, v, bound, r, tol))
			return fmt.Sprintf("%.3f (fails below %.3f)", r, bound), false
		}
		return fmt.Sprintf("%.3f (fails below %.3f)", r, bound), true
	}
	// checkCount records got, count k (guardCounts) per decision of row,
	// and checks it against the recorded one.
	checkCount := func(k int, row string, got float64) (rec string, ok bool) {
		key := guardRatioKey(guardCounts[k], row)
		measured[key] = got
		v, have := recorded.counts[key]
		if !have {
			return "–", true
		}
		rec = fmt.Sprintf("%.2f (fails above %.2f)", v, v+recorded.count[k])
		if got > v+recorded.count[k] {
			failed = append(failed, fmt.Sprintf("%s: %s %.2f per decision, above %.2f (recorded %.2f, tolerance %.2f)", row, guardCounts[k], got, v+recorded.count[k], v, recorded.count[k]))
			return rec, false
		}
		return rec, true
	}
	for _, r := range guardRows {
		var xs [3][]float64
		for k, c := range cells[r.conc][r.row] {
			b := cells[r.conc][r.base][k]
			xs[0] = append(xs[0], c.opsPerSec()/b.opsPerSec())
			xs[1] = append(xs[1], perOp(b, b.did.srv.scripts)/perOp(c, c.did.srv.scripts))
			xs[2] = append(xs[2], perOp(b, b.did.cpu)/perOp(c, c.did.cpu))
		}
		cellsOut := []string{guardRowName(r), cts[r.base].name}
		verdict := "ok"
		for m := range guardMeasures {
			slices.Sort(xs[m])
			v := median(xs[m])
			logSum[m] += math.Log(v)
			rec, ok := check(guardMeasures[m], guardRowName(r), v, recorded.row[m])
			if !ok {
				verdict = "**FAIL**"
			}
			cellsOut = append(cellsOut, rec, fmt.Sprintf("%.3f (%.2f–%.2f)", v, xs[m][0], xs[m][len(xs[m])-1]))
		}
		t.row(append(cellsOut, verdict)...)
	}
	cellsOut := []string{guardAll + " (geometric mean)", ""}
	verdict := "ok"
	for m := range guardMeasures {
		v := math.Exp(logSum[m] / float64(len(guardRows)))
		rec, ok := check(guardMeasures[m], guardAll, v, recorded.all[m])
		if !ok {
			verdict = "**FAIL**"
		}
		cellsOut = append(cellsOut, rec, fmt.Sprintf("%.3f", v))
	}
	t.row(append(cellsOut, verdict)...)
	t.write(os.Stdout)

	fmt.Printf("\nCounts per decision, over all rounds, of the rows that decide one demand per call: commands Redis ran (cmds: the script call and every command it ran) and heap objects this program allocated (allocs: runtime/metrics, the loop included). Load does not move them; a count fails above its recorded value plus %.2f (cmds) / %.2f (allocs).\n\n", recorded.count[0], recorded.count[1])
	ct := table{head: []string{"row"}}
	for _, k := range guardCounts {
		ct.head = append(ct.head, k+" recorded", k+" measured")
	}
	ct.head = append(ct.head, "")
	for _, r := range guardRows {
		if !r.counted() {
			continue
		}
		var total cell
		for _, c := range cells[r.conc][r.row] {
			total.add(c)
		}
		n := float64(max(total.ok, 1))
		got := [2]float64{float64(total.did.srv.cmds) / n, float64(total.did.allocs) / n}
		out := []string{guardRowName(r)}
		verdict := "ok"
		for k := range guardCounts {
			rec, ok := checkCount(k, guardRowName(r), got[k])
			if !ok {
				verdict = "**FAIL**"
			}
			out = append(out, rec, fmt.Sprintf("%.2f", got[k]))
		}
		ct.row(append(out, verdict)...)
	}
	ct.write(os.Stdout)

	allowNs, local, err := guardLocalRows(cfg.rounds, cfg.slice/2)
	if err != nil {
		return err
	}
	fmt.Printf("\nIn process, no Redis: the embedded store's decision and a Transport's request on it, one goroutine, against x/time/rate's Allow (%.0f ns a call, the median) in the same %d rounds of %v. A row's ratio (local) is the median over rounds of Allow's time per call over its own (larger is faster); it fails below (1 - %.2f) x its recorded value. Allocations per call are counted over all rounds and fail above the recorded value plus %.2f.\n\n", allowNs, cfg.rounds, cfg.slice/2, recorded.local, recorded.count[1])
	lt := table{head: []string{"row", "ns per call (median)", "ratio recorded", "ratio measured (rounds' min–max)", "allocs recorded", "allocs measured", ""}}
	for _, r := range local {
		name, verdict := localRowName(r.row), "ok"
		v := median(r.ratios)
		rec, ok := check(guardLocal, name, v, recorded.local)
		arec, aok := checkCount(1, name, r.allocs)
		if !ok || !aok {
			verdict = "**FAIL**"
		}
		lt.row(name, fmt.Sprintf("%.0f", r.nsPerOp), rec,
			fmt.Sprintf("%.3f (%.2f–%.2f)", v, r.ratios[0], r.ratios[len(r.ratios)-1]), arec, fmt.Sprintf("%.2f", r.allocs), verdict)
	}
	lt.write(os.Stdout)

	if !haveCallgrind() {
		fmt.Println("\nInstructions: not counted (valgrind and callgrind_control are not installed).")
	} else {
		var use []int
		for _, r := range slices.Concat(guardRows, guardInstrRows) {
			if r.conc == 1 {
				for _, i := range []int{r.base, r.row} {
					if !slices.Contains(use, i) {
						use = append(use, i)
					}
				}
			}
		}
		instr, err := countInstructions(ctx, guardContenders, use)
		if err != nil {
			return fmt.Errorf("counting instructions: %w", err)
		}
		fmt.Printf("\nInstructions redis-server ran per decision (callgrind, %d decisions one at a time, the event loop, parsing and reply included), and a row's over its yardstick's: load does not move them; a ratio fails above its recorded value times %.2f.\n\n", callgrindCalls, 1+recorded.instr)
		it := table{head: []string{"row", "instructions", "yardstick", "instructions", "ratio recorded", "ratio measured", ""}}
		for _, r := range slices.Concat(guardRows, guardInstrRows) {
			if r.conc != 1 {
				continue
			}
			key := guardRatioKey(guardInstr, r.id)
			v := instr[r.row] / instr[r.base]
			measured[key] = v
			rec, verdict := "–", "ok"
			if want, have := recorded.counts[key]; have {
				bound := want * (1 + recorded.instr)
				rec = fmt.Sprintf("%.3f (fails above %.3f)", want, bound)
				if v > bound {
					verdict = "**FAIL**"
					failed = append(failed, fmt.Sprintf("%s: instructions %.3f x its yardstick's, above %.3f (recorded %.3f, tolerance %.2f)", r.id, v, bound, want, recorded.instr))
				}
			}
			it.row(r.id, fmt.Sprintf("%.0f", instr[r.row]), cts[r.base].name, fmt.Sprintf("%.0f", instr[r.base]), rec, fmt.Sprintf("%.3f", v), verdict)
		}
		it.write(os.Stdout)
	}
	if cfg.write {
		return writeGuardFile(cfg.file, recorded, measured, local)
	}
	if len(failed) > 0 {
		return fmt.Errorf("slower than recorded:\n  %s", strings.Join(failed, "\n  "))
	}
	fmt.Println("Guard: every ratio within its tolerance.")
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

// perOp returns cpu, a CPU time of cell c, per successful decision.
func perOp(c cell, cpu time.Duration) float64 {
	return float64(cpu) / float64(max(c.ok, 1))
}

// writeGuardFile records the measured ratios in name, with g's
// tolerances.
func writeGuardFile(name string, g guardFile, measured map[string]float64, local []localResult) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# What the guard checks (bench -guard, run by .ci/run; guard.go).
# tput, redis, client: for each row, its decisions per second (tput) and
# its yardstick's time per decision over its own, Redis's running the
# scripts (redis) and the bench's CPU (client), each the median over
# rounds of the ratios measured in the same round; "all" is the
# geometric mean of the rows'. A ratio fails when it measures below
# (1 - tolerance) x its value here: tolerance-row gives one row's (tput,
# redis, client), tolerance-all the mean's. Written by -guard-write on
# %s; bench/README.md ("The guard") says when and how to record them
# again.
tolerance-row %.2f %.2f %.2f
tolerance-all %.2f %.2f %.2f
# Counts per decision (cmds, allocs) of the rows that decide one demand
# per call; one fails above its value here plus tolerance-count's. instr:
# a row's instructions in redis-server per decision over its
# yardstick's (callgrind); one fails above its value here times
# 1 + tolerance-instr. local: an in-process row's ratio of x/time/rate's
# Allow's time per call to its own; one fails below (1 -
# tolerance-local) x its value here.
tolerance-count %.2f %.2f
tolerance-instr %.2f
tolerance-local %.2f
`, time.Now().UTC().Format("2006-01-02"), g.row[0], g.row[1], g.row[2], g.all[0], g.all[1], g.all[2], g.count[0], g.count[1], g.instr, g.local)
	for _, r := range slices.Concat(guardRows, guardInstrRows) {
		if key := guardRatioKey(guardInstr, r.id); r.conc == 1 && measured[key] > 0 {
			fmt.Fprintf(&b, "%s %s %.3f\n", guardInstr, r.id, measured[key])
		}
	}
	for _, k := range guardCounts {
		for _, r := range guardRows {
			if r.counted() {
				fmt.Fprintf(&b, "%s %s %.2f\n", k, guardRowName(r), measured[guardRatioKey(k, guardRowName(r))])
			}
		}
	}
	for _, r := range local {
		key := guardRatioKey(guardCounts[1], localRowName(r.row))
		fmt.Fprintf(&b, "%s %.2f\n", key, measured[key])
	}
	for _, r := range local {
		key := guardRatioKey(guardLocal, localRowName(r.row))
		fmt.Fprintf(&b, "%s %.3f\n", key, measured[key])
	}
	for m := range guardMeasures {
		for _, r := range guardRows {
			fmt.Fprintf(&b, "%s %s %.3f\n", guardMeasures[m], guardRowName(r), measured[guardRatioKey(guardMeasures[m], guardRowName(r))])
		}
		fmt.Fprintf(&b, "%s %s %.3f\n", guardMeasures[m], guardAll, measured[guardRatioKey(guardMeasures[m], guardAll)])
	}
	return os.WriteFile(name, []byte(b.String()), 0o644)
}
