package throttle

import (
	"time"

	"github.com/quotakit/throttle/quota"
)

// A Limit is one quota: at most Rate units of cost per period Per, counted
// per key. Limits with the same Name in the same scope, charged to the same
// key, share one counter, whichever rule uses them.
//
// The zero Algorithm is [GCRA]. For example, at most 100 per 30 minutes,
// per event category:
//
//	throttle.Limit{Name: "category", Rate: 100, Per: 30 * time.Minute,
//		Key: throttle.KeyFromContext("category")}
type Limit struct {
	// Name identifies the limit in its scope. It is reported in
	// [LimitError] and must be unique among the limits of a rule.
	Name string

	// Rate is how many units of cost are admitted per Per; for a
	// [Concurrency] limit, how many requests may be in flight at once. It
	// must be positive.
	Rate int

	// Per is the period Rate is counted over. It must be at least one
	// microsecond; any length works (30*time.Minute, time.Hour, 24*time.Hour).
	// For a [Concurrency] limit it is the lease time instead: how long a
	// slot stays held without renewal (at least [quota.MinLease]).
	Per time.Duration

	// Burst is, for GCRA only, how much cost may be admitted at once after
	// an idle period. Zero means Rate. The window algorithms admit up to Rate
	// per window and reject a non-zero Burst that differs from Rate.
	Burst int

	// Algorithm selects how the limit counts. The zero value is GCRA.
	Algorithm Algorithm

	// Key derives the counter's key from the request, e.g.
	// [KeyFromContext], [KeyFromHeader], [KeyFromPath]. Nil means one
	// counter for every request.
	Key KeyFunc
}

// Quota returns the limit as a store sees it: everything but Key.
func (l Limit) Quota() quota.Limit {
	return quota.Limit{Name: l.Name, Rate: l.Rate, Per: l.Per, Burst: l.Burst, Algorithm: l.Algorithm}
}

// An Algorithm selects how a [Limit] counts; [quota.Algorithm] describes
// each one's arithmetic. Every store implements every algorithm with the
// same semantics, in integer microseconds of the store's clock.
type Algorithm = quota.Algorithm

// The algorithms, as in package quota.
const (
	// GCRA (the default) admits a steady flow with bursts of up to Burst.
	GCRA = quota.GCRA
	// FixedWindow counts Rate per window of Per aligned to the epoch.
	FixedWindow = quota.FixedWindow
	// SlidingLog records every admission: exact, memory grows with Rate.
	SlidingLog = quota.SlidingLog
	// SlidingWindow weighs the previous window's count: O(1), approximate.
	SlidingWindow = quota.SlidingWindow
	// Concurrency bounds requests in flight; Per is the lease time.
	Concurrency = quota.Concurrency
)
