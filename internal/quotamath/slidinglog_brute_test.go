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

func TestSlidingLogEarliestBrute(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 20000 {
		l := Limit{Algorithm: quota.SlidingLog, Per: int64(1 + r.IntN(12)), Rate: int64(1 + r.IntN(5))}
		var log []LogEntry
		for range r.IntN(8) {
			c := int64(1 + r.IntN(int(l.Rate)))
			at := int64(r.IntN(40))
			if bruteLogAdmits(l, log, at, c) {
				log = Insert(log, LogEntry{At: at, Cost: c})
			}
		}
		t0 := int64(r.IntN(40))
		c := int64(1 + r.IntN(int(l.Rate)))
		want := t0
		for !bruteLogAdmits(l, log, want, c) {
			want++
		}
		if got := l.slidingLogEarliest(log, t0, c); got != want {
			t.Fatalf("case %d: %+v log %v from %d cost %d: got %d, want %d", n, l, log, t0, c, got, want)
		}
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
		var log []LogEntry
		for range r.IntN(8) {
			c := int64(1 + r.IntN(int(l.Rate)))
			at := int64(r.IntN(40))
			if bruteExpiryAdmits(l, log, at, c) {
				log = Insert(log, LogEntry{At: l.LogAt(at), Cost: c})
			}
		}
		t0 := int64(r.IntN(40))
		c := int64(1 + r.IntN(int(l.Rate)))
		want := t0
		for !bruteExpiryAdmits(l, log, want, c) {
			want++
		}
		if got := l.slidingLogEarliest(log, t0, c); got != want {
			t.Fatalf("case %d: %+v log %v from %d cost %d: got %d, want %d", n, l, log, t0, c, got, want)
		}
	}
}
