package quotamath

import (
	"math/rand/v2"
	"testing"

	"github.com/quotakit/throttle/quota"
)

// bruteLogAdmits checks every window of length P that holds t, one
// microsecond at a time.
func bruteLogAdmits(l Limit, log []LogEntry, t, cost int64) bool {
	for y := t; y < t+l.Per; y++ {
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
