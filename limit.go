package throttle

import (
	"net/http"
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
//
// Limits stack: a request is charged to every limit of its rule that
// applies to it (Match), each its own Cost, all or none, in one decision
// (ExampleLimit_stacked: GitHub's).
type Limit struct {
	// Name identifies the limit (and its counter) in its scope; it must be
	// unique among the limits of a rule.
	Name string

	// Rate is how many units of cost are admitted per Per; for a
	// [Concurrency] limit, how many requests may be in flight at once.
	Rate int

	// Per is the period Rate is counted over, any length from 1 µs; for a
	// [Concurrency] limit, the lease time (at least [quota.MinLease]).
	Per time.Duration

	Burst     int       // GCRA only: how much may go at once after an idle period; zero means Rate
	Algorithm Algorithm // how the limit counts; the zero value is GCRA

	// Phase places the windows of a [FixedWindow] or [SlidingWindow]
	// limit: they start at Phase + k*Per since the Unix epoch, on the
	// store's clock, so Phase is in [0, Per). Zero aligns them to the
	// epoch (a minute's windows start on the minute). For a vendor whose
	// windows start where only its reset header says, name the limit in
	// [Learning].Anchor instead (and leave Phase zero).
	Phase time.Duration

	// Key derives the counter's key from the request ([KeyFromContext],
	// [KeyFromHeader], [KeyFromPath], ...). Nil means one counter.
	Key KeyFunc

	// Match, if set, must report true for the limit to apply to a request
	// of its rule (nil: every request). It must not modify the request,
	// but may read its body if it puts back an equivalent (as [KeyFromBody]).
	Match func(*http.Request) bool

	// Cost, if set, is what a request is charged on this limit, in place
	// of the rule's cost (Rule.Cost, or a [Limiter] call's n). It must be
	// at least 1. A Concurrency limit takes one slot whatever the cost.
	Cost func(*http.Request) int

	// Tenant, if set, shares the counter fairly among the tenants it names
	// (a customer id): none gets more than its share while another is held
	// back, one alone may use it all ([quota.Store], Fair shares).
	Tenant KeyFunc
}

// Quota returns the limit as a store sees it: everything but Key. A
// limit that a rule's [Learning].Anchor names is also Anchored in every
// rule that uses it; Quota alone cannot know that.
func (l Limit) Quota() quota.Limit {
	return quota.Limit{Name: l.Name, Rate: l.Rate, Per: l.Per, Burst: l.Burst, Algorithm: l.Algorithm, Phase: l.Phase}
}

// An Algorithm selects how a [Limit] counts; [quota.Algorithm] describes
// each one's arithmetic. Every store implements every algorithm with the
// same semantics, in integers on microseconds of the store's clock, with
// nothing lost to rounding (quota.Limit.Validate gives the bounds:
// 10^12 units, one a nanosecond, 100 years).
type Algorithm = quota.Algorithm

// The algorithms; [quota.Algorithm] gives each one's arithmetic.
const (
	GCRA          = quota.GCRA          // the default: a steady flow with bursts up to Burst
	FixedWindow   = quota.FixedWindow   // Rate per window of Per, on the epoch grid, at a Phase, or anchored to the vendor's
	SlidingLog    = quota.SlidingLog    // exact: every admission recorded
	SlidingWindow = quota.SlidingWindow // two weighted windows: O(1), approximate
	Concurrency   = quota.Concurrency   // requests in flight; Per is the lease time
)
