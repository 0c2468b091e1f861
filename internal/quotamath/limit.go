package quotamath

import (
	"time"

	"github.com/quotakit/throttle/quota"
)

// A Limit is a [quota.Limit]'s algorithm and numbers in store units. The
// zero value is not usable: Per and Rate must be positive, as
// [quota.Limit.Validate] ensures. It is about 100 bytes: the methods that
// read it take a pointer, and only those that return a changed copy
// (WithExpiry, WithPhase, Less) take a value.
type Limit struct {
	Algorithm quota.Algorithm
	Per       int64 // P, in microseconds
	Rate      int64 // R
	Burst     int64 // B, for GCRA; Rate when the limit's Burst is zero
	Phase     int64 // F, in [0, P): where the windows start (window k at F + k*P)
	Anchored  bool  // quota.Limit.Anchored: F is the counter's, and a window's mark is its start

	// FullRate is the limit's own Rate when Rate holds less of it (a
	// headroom, [Limit.Less]); 0 means Rate. A sliding window's weight
	// steps are the limit's ([Limit.Steps]), whoever asks.
	FullRate int64

	// Expiry is, for a SlidingLog, the demand's [quota.LogExpiry]
	// ([Limit.WithExpiry]); zero: none.
	Expiry LogExpiry
}

// A LogExpiry is a [quota.LogExpiry] in microseconds.
type LogExpiry struct {
	Every, Phase, Spread, Reach int64
}

// WithExpiry returns l with the log expiry e of a demand's bucket.
func (l Limit) WithExpiry(e quota.LogExpiry) Limit {
	if e.Every <= 0 {
		l.Expiry = LogExpiry{}
		return l
	}
	l.Expiry = LogExpiry{Every: e.Every.Microseconds(), Phase: e.Phase.Microseconds(), Spread: e.Spread.Microseconds(), Reach: e.Reach.Microseconds()}
	return l
}

// Of returns l's algorithm and numbers in store units: Per and Phase in
// whole microseconds (Phase modulo Per), and Burst with its default
// applied. An Anchored limit's phase is the counter's, which the store
// sets on the result.
func Of(l quota.Limit) Limit {
	p := l.Per.Microseconds()
	return Limit{Algorithm: l.Algorithm, Per: p, Rate: int64(l.Rate), Burst: int64(l.BurstOrRate()), Phase: FloorMod(l.Phase.Microseconds(), p), Anchored: l.Anchored}
}

// WithPhase returns l with its windows starting at phase (modulo P).
func (l Limit) WithPhase(phase int64) Limit {
	l.Phase = FloorMod(phase, l.Per)
	return l
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

// FloorMod returns a modulo b in [0, b), for b > 0 (Go's % keeps the
// sign of a).
func FloorMod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
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
