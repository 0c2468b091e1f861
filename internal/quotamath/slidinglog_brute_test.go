package quotamath

import (
	"math/rand/v2"
	"testing"

	"github.com/quotakit/throttle/quota"
)

// bruteLogAdmits checks every window of length P that holds t, one
// microsecond at a time.
func bruteLogAdmits(l Limit, log []LogEntry, t, cost int64) bool {
	return bruteAdmits(l, log, t, cost, t+l.Per)
}

// bruteAdmits checks every window of length P of the log ending in [t,
// end), one microsecond at a time.
func bruteAdmits(l Limit, log []LogEntry, t, cost, end int64) bool {
	for y := t; y < end; y++ {
		if LogCost(log, y-l.Per, y)+cost > l.Rate {
			return false
		}
	}
	return true
}

// checkEarliest fills a log of l (case n) with the entries admits lets
// in, at the instants entryAt gives, and checks that slidingLogEarliest
// from a random instant finds the first instant admits allows.
func checkEarliest(t *testing.T, r *rand.Rand, n int, l Limit, admits func(Limit, []LogEntry, int64, int64) bool, entryAt func(int64) int64) {
	t.Helper()
	var log []LogEntry
	for range r.IntN(8) {
		c := int64(1 + r.IntN(int(l.Rate)))
		at := int64(r.IntN(40))
		if admits(l, log, at, c) {
			log = Insert(log, LogEntry{At: entryAt(at), Cost: c})
		}
	}
	t0 := int64(r.IntN(40))
	c := int64(1 + r.IntN(int(l.Rate)))
	want := t0
	for !admits(l, log, want, c) {
		want++
	}
	if got := l.slidingLogEarliest(log, t0, c); got != want {
		t.Fatalf("case %d: %+v log %v from %d cost %d: got %d, want %d", n, l, log, t0, c, got, want)
	}
}

func TestSlidingLogEarliestBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 20000 {
		l := Limit{Algorithm: quota.SlidingLog, Per: int64(1 + r.IntN(12)), Rate: int64(1 + r.IntN(5))}
		checkEarliest(t, r, n, l, bruteLogAdmits, func(at int64) int64 { return at })
	}
}

// bruteLogEnd is the latest end of a window of the expiry's grid (ends
// at c + k*Every, c in [Phase, Phase+Spread]) that holds t+Reach, one
// phase at a time.
func bruteLogEnd(e LogExpiry, t int64) int64 {
	a, latest := t+e.Reach, int64(0)
	for c := e.Phase; c <= e.Phase+e.Spread; c++ {
		end := c + FloorDiv(a-c, e.Every)*e.Every + e.Every // the window [end-Every, end) holds a
		latest = max(latest, end)
	}
	return latest
}

// bruteExpiryAdmits checks every window of the log ending in [t,
// LogEnd(t)), one microsecond at a time.
func bruteExpiryAdmits(l Limit, log []LogEntry, t, cost int64) bool {
	return bruteAdmits(l, log, t, cost, l.LogEnd(t))
}

func TestSlidingLogExpiryBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for n := range 20000 {
		l := Limit{Algorithm: quota.SlidingLog, Per: int64(2 + r.IntN(12)), Rate: int64(1 + r.IntN(5))}
		every := int64(1 + r.IntN(int(l.Per)))
		l.Expiry = LogExpiry{Every: every, Phase: int64(r.IntN(int(every))), Spread: int64(r.IntN(int(every))), Reach: int64(r.IntN(int(l.Per) + 1))}
		for x := int64(0); x < 30; x++ {
			if got, want := l.LogEnd(x), bruteLogEnd(l.Expiry, x); got != want {
				t.Fatalf("case %d: %+v: LogEnd(%d) = %d, want %d", n, l.Expiry, x, got, want)
			}
		}
		checkEarliest(t, r, n, l, bruteExpiryAdmits, l.LogAt)
	}
}
