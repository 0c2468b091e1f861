package quota

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// A Limit is one quota as a store sees it: at most Rate units of cost per
// period Per, counted per key by Algorithm. Limits with the same Name in
// the same scope, charged to the same key, share one counter, and must
// agree on every field.
//
// The zero Algorithm is [GCRA].
type Limit struct {
	// Name identifies the limit in its scope; it is part of the store's
	// keys, so it uses only letters, digits and ._- (at most 64 bytes).
	Name string

	// Rate is how many units of cost are admitted per Per; for a
	// [Concurrency] limit, how many requests may be in flight at once. It
	// must be positive and at most [MaxRate]; a rate is at most one unit
	// per nanosecond of Per (10^9 a second), and a [SlidingLog]'s at most
	// [MaxSlidingLogRate].
	Rate int

	// Per is the period Rate is counted over. It must be at least one
	// microsecond and at most [MaxPer]; any length between works
	// (30*time.Minute, time.Hour, 24*time.Hour, 31 days). For a
	// [Concurrency] limit it is the lease time instead: how long a slot
	// stays held without renewal (at least [MinLease]).
	Per time.Duration

	// Burst is, for GCRA only, how much cost may be admitted at once after
	// an idle period. Zero means Rate. The window algorithms admit up to Rate
	// per window and reject a non-zero Burst that differs from Rate. It is
	// at most [MaxRate], and Burst units take at most [MaxPer] to
	// replenish (Burst*Per/Rate).
	Burst int

	// Algorithm selects how the limit counts. The zero value is GCRA.
	Algorithm Algorithm

	// Phase places the windows of a [FixedWindow] or [SlidingWindow]
	// limit: window k covers [Phase + k*Per, Phase + (k+1)*Per) of the
	// store's clock (time since the Unix epoch), in whole microseconds.
	// It must be in [0, Per); zero aligns windows to the epoch. Use it to
	// mirror a vendor whose windows start at a known offset (a daily quota
	// that resets at 08:00 UTC: Per 24h, Phase 8h). Other algorithms must
	// leave it zero.
	Phase time.Duration

	// Anchored makes the windows of a [FixedWindow] or [SlidingWindow]
	// limit follow the vendor's instead of a fixed grid: a counter with no
	// state starts its first window at its first charge, and
	// [Anchorer.Anchor] moves its windows to where the vendor says its
	// window ends. The phase in force is kept with the counter, so every
	// instance sharing the store counts on the same windows; it is
	// forgotten when the counter expires (no charge for a window). Phase
	// must be zero. Other algorithms must leave it false.
	Anchored bool
}

// Windowed reports whether l counts in windows: [FixedWindow] or
// [SlidingWindow], the algorithms that Phase and Anchored apply to.
func (l Limit) Windowed() bool {
	return l.Algorithm == FixedWindow || l.Algorithm == SlidingWindow
}

// BurstOrRate returns the GCRA burst, with its default (Rate) applied.
func (l Limit) BurstOrRate() int {
	if l.Burst == 0 {
		return l.Rate
	}
	return l.Burst
}

// Capacity is the largest cost one demand can ever be granted: Burst for
// GCRA, Rate for the window algorithms. A Concurrency limit takes one slot
// per demand whatever the cost, so it bounds no cost (math.MaxInt).
func (l Limit) Capacity() int {
	switch l.Algorithm {
	case GCRA:
		return l.BurstOrRate()
	case Concurrency:
		return math.MaxInt
	}
	return l.Rate
}

// An Algorithm selects how a [Limit] counts. Every store implements every
// algorithm with the same semantics; all arithmetic is in integers, on
// instants in whole microseconds of the store's clock, so decisions are
// exact and identical across stores. Nothing is rounded in a limit's
// favour or against it: any Rate and Per within the bounds of
// [Limit.Validate] (10^9 units per 31 days, 10^7 a second, 7 per 3
// seconds) lets every unit of the quota through, and never one more.
//
// In the descriptions, P is Per in microseconds, R is Rate, B is Burst, c is
// the cost of a demand and t the instant it is decided for.
type Algorithm int

const (
	// GCRA (the generic cell rate algorithm, a token bucket kept as one
	// timestamp) admits a steady flow with bursts. Each unit of cost takes
	// an emission interval T = P/R microseconds, exactly: the state, the
	// theoretical arrival time TAT, is kept as whole microseconds plus a
	// remainder in units of 1/R µs, so T need not be a whole number of
	// microseconds (10^7 a second is T = 0.1 µs). A demand at t is
	// admitted when max(TAT, t) + c*T - t <= B*T, and sets TAT to
	// max(TAT, t) + c*T; so the earliest instant for c is max(now,
	// TAT + c*T - B*T), rounded up to the microsecond. Over any interval of
	// length d at most B + R*d/P units are admitted. Memory: one number
	// per key. Pick it by default: smooth, O(1), with bursts.
	GCRA Algorithm = iota

	// FixedWindow counts cost in windows of length P that start at the
	// limit's phase F (window k covers [F + k*P, F + (k+1)*P) of the
	// store's clock; F is [Limit.Phase], 0 by default, or for an
	// [Limit.Anchored] limit the phase kept with the counter); a demand is
	// admitted in a window while that window's count plus c is at most R.
	// A reservation charges the first window, current or later, with room.
	// Cheap (one counter per key and window), but up to 2R can pass in a
	// short time across a window boundary. Pick it to mirror a vendor that
	// resets its quota on fixed boundaries.
	FixedWindow

	// SlidingLog records every admitted demand with its instant and cost.
	// A demand at t is admitted when every window of length P that would
	// hold it, (x-P, x] for x in [t, t+P), holds at most R-c before it:
	// the log is a schedule, and a demand takes the earliest gap in it,
	// before reservations recorded for later when they leave it room (a
	// read is not queued behind writes reserved on a limit they share).
	// Exact: no interval of length P ever holds more than R. Memory grows with R (one entry per admitted
	// demand, up to R of them), so pick it for small R when exactness
	// matters; R is at most [MaxSlidingLogRate].
	SlidingLog

	// SlidingWindow approximates a sliding window with two fixed-window
	// counters (on the windows of FixedWindow, phase included): at t in
	// window k, with e = t - (F + k*P) microseconds elapsed, the
	// estimate is prev*(P-e)/P + cur, where prev and cur are the counts of
	// windows k-1 and k. The previous window's weight falls in steps of s
	// microseconds: with W = ceil(P/s) steps a window and j = floor(e/s)
	// of them elapsed, a demand is admitted when prev*(W-j) + (cur+c)*W <=
	// R*W (integer arithmetic). The step is 1 µs (W = P: the weight is
	// exact) while P*R <= 2^52: any rate per second, up to 75 million a
	// minute, 1.25 million an hour, 52,000 a day. Above, s is the least
	// step with W*R <= 2^52, about P*R/2^52 µs (20 µs for 10^6 a day, 0.6
	// s for 10^9 per 31 days); the weight is then rounded up to its step,
	// so the estimate is at most 2*prev/W units (2*R/W: 444 of 10^9) above
	// the exact one, never below. O(1) memory like FixedWindow without its
	// boundary burst; it assumes cost was spread evenly over the previous
	// window, so it can admit somewhat more or less than a true sliding
	// window.
	SlidingWindow

	// Concurrency bounds how many requests are in flight at once rather
	// than how many start per period: at most R demands hold a slot at any
	// instant. Every demand takes exactly one slot, whatever its cost, and
	// holds it as a lease with an id and an expiry: Per is the lease time,
	// P. A slot is taken when its request goes (one that must wait for its
	// rate quota holds none while it waits; see [LeaseStore.Claim]) and
	// expires P later unless it is renewed
	// ([LeaseStore.Renew], which the throttle Transport calls while a request is in
	// flight) or released earlier ([LeaseStore.Release], when the
	// response body is closed or fully read, or the round trip fails). So a
	// crashed instance's slots come back at most P after its last renewal,
	// with no heartbeat process. A demand is admitted only if a slot is
	// free now; it never reserves a slot for later, since a slot frees
	// when its holder releases it, at an instant no store can know (see
	// [Decision] for what Delay means then). Burst must be zero. Memory:
	// one entry per slot held. Pick it for vendors that limit concurrent
	// requests (GitHub: 100 in flight), next to a rate limit in the same
	// rule. The store must be a [LeaseStore].
	Concurrency
)

// MinLease is the shortest lease (Per) a [Concurrency] limit may have:
// the throttle Transport renews a lease every third of it, and a shorter lease would
// turn renewals into a stream of store calls.
const MinLease = 10 * time.Millisecond

// String returns the algorithm's name as used in policy files.
func (a Algorithm) String() string {
	switch a {
	case GCRA:
		return "gcra"
	case FixedWindow:
		return "fixed-window"
	case SlidingLog:
		return "sliding-log"
	case SlidingWindow:
		return "sliding-window"
	case Concurrency:
		return "concurrency"
	}
	return fmt.Sprintf("Algorithm(%d)", int(a))
}

// ParseAlgorithm returns the algorithm named s, as printed by
// [Algorithm.String]; an unknown name is an error wrapping
// [ErrInvalid].
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := GCRA; a <= Concurrency; a++ {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q", ErrInvalid, s)
}

// The bounds of a [Limit]'s numbers. Within them every product and sum
// the algorithms compute stays exact in Go's int64 and in the Redis
// store's Lua numbers (doubles, exact to 2^53); see [Algorithm].
const (
	// MaxRate is the largest Rate, and Burst: 10^12 units. A rate is
	// also at most one unit per nanosecond of Per (10^9 a second).
	MaxRate = 1_000_000_000_000

	// MaxPer is the longest Per: 100 years of 365 days. A GCRA burst
	// replenishes within it too (Burst*Per/Rate).
	MaxPer = 100 * 365 * 24 * time.Hour

	// MaxSlidingLogRate is the largest Rate of a [SlidingLog] limit. Its
	// log holds one entry per admitted demand of the last Per, up to Rate
	// of them, about 140 bytes each in Redis (MEMORY USAGE of a log of
	// 10^5): 10^6 entries are about 140 MB for one key. Above it, use
	// [SlidingWindow] (two counters).
	MaxSlidingLogRate = 1_000_000
)

// Validate checks the limit's fields. A problem is a [*FieldError]
// naming the field ("Rate", "Per", ...), matching [ErrInvalid].
func (l Limit) Validate() error {
	if field, err := l.check(); err != nil {
		return &FieldError{Field: field, Err: err}
	}
	return nil
}

func (l Limit) check() (field string, err error) {
	switch {
	case l.Name == "":
		return "Name", errors.New("must not be empty")
	case !ValidName(l.Name):
		return "Name", fmt.Errorf("%q must use only letters, digits and ._-", l.Name)
	case l.Rate <= 0:
		return "Rate", fmt.Errorf("must be positive, got %d", l.Rate)
	case l.Per < time.Microsecond:
		return "Per", fmt.Errorf("must be at least 1µs, got %v", l.Per)
	case l.Burst < 0:
		return "Burst", fmt.Errorf("must not be negative, got %d", l.Burst)
	case l.Algorithm < GCRA || l.Algorithm > Concurrency:
		return "Algorithm", fmt.Errorf("unknown algorithm %v", l.Algorithm)
	case l.Algorithm == Concurrency && l.Burst != 0:
		return "Burst", errors.New("a concurrency limit has no burst: Rate is the number of slots")
	case l.Algorithm == Concurrency && l.Per < MinLease:
		return "Per", fmt.Errorf("is the lease time of a concurrency limit and must be at least %v, got %v", MinLease, l.Per)
	case l.Algorithm != GCRA && l.Burst != 0 && l.Burst != l.Rate:
		return "Burst", fmt.Errorf("only GCRA has a burst; %v admits Rate per window", l.Algorithm)
	case l.Phase != 0 && !l.Windowed():
		return "Phase", fmt.Errorf("places windows, and %v has none", l.Algorithm)
	case l.Phase < 0 || l.Phase >= l.Per:
		return "Phase", fmt.Errorf("must be in [0, Per) = [0, %v), got %v", l.Per, l.Phase)
	case l.Anchored && !l.Windowed():
		return "Anchored", fmt.Errorf("moves windows, and %v has none", l.Algorithm)
	case l.Anchored && l.Phase != 0:
		return "Phase", errors.New("must be zero for an anchored limit: its windows start at its first charge, then where the vendor's do")
	}
	return l.checkBounds()
}

// checkBounds checks the limit against MaxRate, MaxPer,
// MaxSlidingLogRate and one unit per nanosecond.
func (l Limit) checkBounds() (field string, err error) {
	switch {
	case l.Per > MaxPer:
		return "Per", fmt.Errorf("must be at most %v (quota.MaxPer), got %v", MaxPer, l.Per)
	case int64(l.Rate) > MaxRate:
		return "Rate", fmt.Errorf("must be at most %d (quota.MaxRate), got %d", int64(MaxRate), l.Rate)
	case int64(l.Burst) > MaxRate:
		return "Burst", fmt.Errorf("must be at most %d (quota.MaxRate), got %d", int64(MaxRate), l.Burst)
	case l.Algorithm == Concurrency:
		return "", nil
	case int64(l.Rate) > l.Per.Nanoseconds():
		return "Rate", fmt.Errorf("%d per %v is more than one unit per nanosecond", l.Rate, l.Per)
	case l.Algorithm == SlidingLog && l.Rate > MaxSlidingLogRate:
		return "Rate", fmt.Errorf("a sliding log keeps one entry per admitted demand: at most %d (quota.MaxSlidingLogRate), got %d; use %v for more", MaxSlidingLogRate, l.Rate, SlidingWindow)
	}
	if !l.replenishedWithin(int64(l.BurstOrRate())) {
		return "Burst", fmt.Errorf("%d units of %d per %v take longer than %v (quota.MaxPer) to replenish", l.Burst, l.Rate, l.Per, MaxPer)
	}
	return "", nil
}

// replenishedWithin reports whether n units take at most MaxPer at the
// limit's rate: n*P/R <= MaxPer, in 128 bits (n*P <= MaxPer*R). Rate must
// be positive.
func (l Limit) replenishedWithin(n int64) bool {
	nh, nl := bits.Mul64(uint64(n), uint64(l.Per.Microseconds()))
	mh, ml := bits.Mul64(uint64(MaxPer.Microseconds()), uint64(l.Rate))
	return nh < mh || nh == mh && nl <= ml
}

// ValidName reports whether s is a usable limit, rule or scope name: it
// ends up in store keys, so it is kept to letters, digits and ._- (at most
// 64 bytes).
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
