package storetest

import (
	"math/bits"
	"slices"
	"testing"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
)

// An admission is a granted charge: the instant it was granted for (the
// decision's time plus its Delay, in microseconds) and its cost.
type admission struct {
	at, cost int64

	// A sliding log's entry scored by a [quota.LogExpiry] (scored): its
	// instant in the log, logAt.
	scored bool
	logAt  int64
}

// logSpan returns the windows of a sliding log of period p that a's
// entry must count in, those ending in [from, to): from its grant (or
// its entry, if later) to p after its entry.
func (a admission) logSpan(p int64) (from, to int64) {
	if !a.scored {
		return a.at, a.at + p
	}
	return max(a.at, a.logAt), a.logAt + p
}

// checkAdmissions asserts that the admissions of one bucket never exceed
// what its limit allows. Sliding windows are only approximate, and an
// Anchored limit's windows move (reservations granted before a move keep
// their instants), so they are not checked here (the differential test
// pins their decisions instead).
func checkAdmissions(t *testing.T, what string, l quota.Limit, adm []admission) bool {
	t.Helper()
	adm = slices.Clone(adm)
	slices.SortStableFunc(adm, func(a, b admission) int { return int(a.at - b.at) })
	p, r := per(l), int64(l.Rate)
	switch l.Algorithm {
	case quota.FixedWindow:
		if l.Anchored {
			return true
		}
		f := l.Phase.Microseconds() // Start and every admission are after the epoch
		sum := map[int64]int64{}
		for _, a := range adm {
			k := (a.at - f) / p
			sum[k] += a.cost
			if !assert.LessOrEqual(t, sum[k], r, "%s: fixed window %d [%d, %d)µs admitted more than %d", what, k, k*p+f, (k+1)*p+f, r) {
				return false
			}
		}
	case quota.SlidingLog:
		// The window ending at y holds the entries that count in it
		// (logSpan: without an expiry, those granted in (y-P, y]); its
		// count is largest where an entry starts to count.
		for _, a := range adm {
			y, _ := a.logSpan(p)
			var sum int64
			for _, b := range adm {
				if from, to := b.logSpan(p); from <= y && y < to {
					sum += b.cost
				}
			}
			if !assert.LessOrEqual(t, sum, r, "%s: sliding log window (%d, %d]µs admitted more than %d", what, y-p, y, r) {
				return false
			}
		}
	case quota.GCRA:
		// Over [a, b], at most B + (b-a)*R/P units: (sum-B)*P <= (b-a)*R,
		// in 128 bits (10^9 per 31 days passes 2^63), with T = P/R exact;
		// written apart from package quotamath, whose arithmetic this
		// checks.
		B := burst(l)
		for i := range adm {
			if i > 0 && adm[i].at == adm[i-1].at {
				continue
			}
			var sum int64
			for j := i; j < len(adm); j++ {
				sum += adm[j].cost
				if j+1 < len(adm) && adm[j+1].at == adm[j].at {
					continue
				}
				if !assert.True(t, withinGCRA(sum-B, adm[j].at-adm[i].at, p, r), "%s: GCRA admitted %d in [%d, %d]µs, more than B + (b-a)*R/P with B=%d R=%d P=%dµs", what, sum, adm[i].at, adm[j].at, B, r, p) {
					return false
				}
			}
		}
	}
	return true
}

// withinGCRA reports whether over units beyond the burst fit in d µs at R
// per P: over*P <= d*R, in 128 bits.
func withinGCRA(over, d, p, r int64) bool {
	if over <= 0 {
		return true
	}
	oh, ol := bits.Mul64(uint64(over), uint64(p))
	dh, dl := bits.Mul64(uint64(d), uint64(r))
	return oh < dh || oh == dh && ol <= dl
}
