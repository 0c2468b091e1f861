package quotamath

import (
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
)

// GCRAKeeps is true only when the arrival time before the charge is
// surely at or after now: the mark is rounded up to the nanosecond, so
// an arrival time exactly at now, or less than a nanosecond after it,
// does not keep the charge.
func TestGCRAKeeps(t *testing.T) {
	const now = 1_700_000_000_000_000                                      // µs
	third := Of(quota.Limit{Name: "l", Rate: 3_000_000, Per: time.Second}) // T = 1/3 µs: Frac counts 1/R µs
	tenth := Of(quota.Limit{Name: "l", Rate: 10, Per: time.Second})        // T = 100 ms
	for _, c := range []struct {
		name   string
		l      Limit
		before Time // the arrival time before the charge of one unit
		keeps  bool
	}{
		{"T 1/3 µs, before now + 1/3 µs", third, Time{Micros: now, Frac: 1_000_000}, true},
		{"T 1/3 µs, before at now", third, Time{Micros: now}, false},
		{"T 1/3 µs, before now - 1/3 µs", third, Time{Micros: now - 1, Frac: 2_000_000}, false},
		{"T 100 ms, before 1 µs after now", tenth, Time{Micros: now + 1}, true},
		{"T 100 ms, before at now", tenth, Time{Micros: now}, false},
		{"T 100 ms, drained a second ago", tenth, Time{Micros: now - 1_000_000}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			mark := c.l.Mark(c.l.GCRACharge(c.before, c.before.Ceil()-1, 1))
			assert.Equal(t, c.keeps, c.l.GCRAKeeps(mark, now, 1))
		})
	}
}
