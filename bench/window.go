package main

import (
	"math"
	"slices"
	"time"
)

// span is one call as its client saw it: when it started and when it
// returned, as offsets on the monotonic clock from the start of a run.
// Redis decided it at some instant in between.
type span struct{ start, end time.Duration }

// maxIn returns the most instants of ts (sorted) that lie in one closed
// window of length w.
func maxIn(ts []time.Duration, w time.Duration) int {
	best, i := 0, 0
	for j := range ts {
		for ts[j]-ts[i] > w {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// maxCertain returns the most spans of ss (sorted by start) that lie
// wholly in one closed window of length w: calls that were certainly
// decided inside that window, whatever the delays between client and
// server. It is a lower bound of the true most in any window, as maxIn of
// the return times is an estimate that jitter can push either way.
//
// A best window can start at a span's start: sliding a window right until
// its left edge meets the earliest start of the spans it holds keeps them
// all. So it tries those.
func maxCertain(ss []span, w time.Duration) int {
	best := 0
	for i := range ss {
		end, n := ss[i].start+w, 0
		for j := i; j < len(ss) && ss[j].start <= end; j++ {
			if ss[j].end <= end {
				n++
			}
		}
		best = max(best, n)
	}
	return best
}

// ends returns the return times of ss, sorted.
func ends(ss []span) []time.Duration {
	ts := make([]time.Duration, len(ss))
	for i, s := range ss {
		ts[i] = s.end
	}
	slices.Sort(ts)
	return ts
}

// percentile returns the q-quantile (0 < q <= 1) of sorted by the
// nearest-rank method, or 0 when it is empty.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
