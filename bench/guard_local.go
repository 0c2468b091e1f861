package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// The guard's in-process rows: the embedded store (memstore, what a
// Transport uses when no store is given) deciding one limit and two, and
// a Transport on it passing a request to an in-memory RoundTripper, each
// against golang.org/x/time/rate's Allow, one goroutine each, in the same
// rounds. No Redis is involved, so nothing of the Redis rows measures
// them: a decision of the default store that became twice as slow went
// unseen for two days (docs/benchmarks.md, "In process").
//
// A row's ratio (guardLocal in guard.txt) is Allow's time per call over
// the row's, the median over rounds, so that larger is faster as in the
// other rows; its allocations per call are counted like the Redis rows'
// (allocs), and load does not move them.

// guardLocal names, in guard.txt, an in-process row's ratio to Allow.
const guardLocal = "local"

// localChunk is how many calls a slice makes between two readings of
// the clock.
const localChunk = 256

// A localRow is one in-process contender: call makes one decision and
// reports whether it was granted.
type localRow struct {
	id   string // its name in guard.txt
	call func() bool
}

// localRowName is r's name in guard.txt: one goroutine.
func localRowName(r localRow) string { return r.id + "/c=1" }

// localRows returns the yardstick (x/time/rate's Allow) and the tracked
// in-process rows. Every limit is 2^29 a second, near the most a limit
// may be, so that every decision is a grant, as Allow's are.
func localRows() (localRow, []localRow, error) {
	ctx := context.Background()
	huge := quota.Limit{Rate: 1 << 29, Per: time.Second}
	named := func(name string) quota.Limit { l := huge; l.Name = name; return l }
	one := &quota.Demand{Scope: "guard", Pauses: []string{""}, Cost: 1,
		Limits: []quota.Bucket{{Limit: named("global")}}}
	two := &quota.Demand{Scope: "guard", Pauses: []string{""}, Cost: 1,
		Limits: []quota.Bucket{{Limit: named("global")}, {Limit: named("category"), Key: "errors"}}}
	take := func(d *quota.Demand) func() bool {
		s := memstore.New()
		return func() bool {
			dec, err := s.Take(ctx, d)
			return err == nil && dec.OK
		}
	}

	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Request: r}, nil
	})
	tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
		Name: "notify", Host: "guard.example",
		Limits: []throttle.Limit{
			{Name: "global", Rate: huge.Rate, Per: huge.Per},
			{Name: "category", Rate: huge.Rate, Per: huge.Per, Key: throttle.KeyFromContext("category")},
		},
	}}})
	if err != nil {
		return localRow{}, nil, fmt.Errorf("guard: the in-process Transport: %w", err)
	}
	req, err := http.NewRequestWithContext(throttle.WithKey(ctx, "category", "errors"), http.MethodPost, "http://guard.example/notify", nil)
	if err != nil {
		return localRow{}, nil, err
	}
	roundTrip := func() bool {
		resp, err := tr.RoundTrip(req)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}

	allow := rate.NewLimiter(rate.Limit(1<<30), 1<<30)
	return localRow{"x-time-rate-allow", allow.Allow}, []localRow{
		{"memory-1-limit", take(one)},
		{"memory-2-limits", take(two)},
		{"memory-transport-2-limits", roundTrip},
	}, nil
}

// roundTripFunc is an http.RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

// RoundTrip implements http.RoundTripper.
func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// localCell is what one row did in one slice.
type localCell struct {
	calls   int64
	elapsed time.Duration
	allocs  int64 // heap objects allocated
}

// nsPerCall is the cell's time per call.
func (c localCell) nsPerCall() float64 { return float64(c.elapsed) / float64(max(c.calls, 1)) }

// measureLocal calls r.call for about d, in chunks of localChunk calls,
// and fails at the first refusal.
func measureLocal(r localRow, d time.Duration) (localCell, error) {
	allocs := heapAllocs()
	start := time.Now()
	var c localCell
	for {
		for range localChunk {
			if !r.call() {
				return c, fmt.Errorf("%s: a call was refused or failed", r.id)
			}
		}
		c.calls += localChunk
		if c.elapsed = time.Since(start); c.elapsed >= d {
			break
		}
	}
	c.allocs = heapAllocs() - allocs
	return c, nil
}

// localResult is what the guard measured of one in-process row.
type localResult struct {
	row     localRow
	ratios  []float64 // Allow's time per call over the row's, per round, sorted
	allocs  float64   // heap objects per call over all rounds
	nsPerOp float64   // the row's median time per call
}

// guardLocalRows measures the in-process rows in rounds interleaved with
// the yardstick (in reverse order every other round, as the Redis rows),
// and returns the yardstick's median time per call too.
func guardLocalRows(rounds int, slice time.Duration) (allowNs float64, res []localResult, err error) {
	yard, rows, err := localRows()
	if err != nil {
		return 0, nil, err
	}
	all := append([]localRow{yard}, rows...)
	for _, r := range all { // warm up
		if _, err := measureLocal(r, time.Millisecond); err != nil {
			return 0, nil, err
		}
	}
	cells := make([][]localCell, len(all))
	for round := range rounds {
		order := make([]int, len(all))
		for i := range order {
			order[i] = i
		}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, i := range order {
			c, err := measureLocal(all[i], slice)
			if err != nil {
				return 0, nil, err
			}
			cells[i] = append(cells[i], c)
		}
	}
	res = make([]localResult, len(rows))
	var allow []float64
	for _, c := range cells[0] {
		allow = append(allow, c.nsPerCall())
	}
	slices.Sort(allow)
	for k, r := range rows {
		var calls, allocs int64
		var ns []float64
		for round, c := range cells[k+1] {
			res[k].ratios = append(res[k].ratios, cells[0][round].nsPerCall()/c.nsPerCall())
			ns = append(ns, c.nsPerCall())
			calls += c.calls
			allocs += c.allocs
		}
		slices.Sort(res[k].ratios)
		slices.Sort(ns)
		res[k].row = r
		res[k].allocs = float64(allocs) / float64(max(calls, 1))
		res[k].nsPerOp = median(ns)
	}
	return median(allow), res, nil
}
