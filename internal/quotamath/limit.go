package quotamath

import (
	"time"

	"github.com/quotakit/throttle/quota"
)

// A Limit is a [quota.Limit]'s algorithm and numbers in store units. The
// zero value is not usable: Per and Rate must be positive, as
// [quota.Limit.Validate] ensures.
type Limit struct {
	Algorithm quota.Algorithm
	Per       int64 // P, in microseconds
	Rate      int64 // R
	Burst     int64 // B, for GCRA; Rate when the limit's Burst is zero

	// FullRate is the limit's own Rate when Rate holds less of it (a
	// headroom, [Limit.Less]); 0 means Rate. A sliding window's weight
	// steps are the limit's ([Limit.Steps]), whoever asks.
	FullRate int64
}

// Of returns l's algorithm and numbers in store units: Per in whole
// microseconds and Burst with its default applied.
func Of(l quota.Limit) Limit {
	return Limit{Algorithm: l.Algorithm, Per: l.Per.Microseconds(), Rate: int64(l.Rate), Burst: int64(l.BurstOrRate())}
}

// CeilDiv returns a/b rounded up, for a >= 0 and b > 0.
func CeilDiv(a, b int64) int64 { return (a + b - 1) / b }

// FloorDiv returns a/b rounded toward negative infinity, for b > 0, so
// that windows stay aligned for instants before the epoch too (Go's /
// rounds toward zero).
func FloorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// CeilMicros returns d in whole microseconds, rounded up: a pause or a
// sync window never ends early. A negative d rounds toward zero.
func CeilMicros(d time.Duration) int64 {
	us := d / time.Microsecond
	if d%time.Microsecond > 0 {
		us++
	}
	return int64(us)
}

// Micros returns us microseconds as a [time.Duration].
func Micros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
