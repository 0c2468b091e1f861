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
// applies to it (Match), each with its own cost (Cost), all or none, in
// one decision. GitHub's secondary points, for example, charge a write 5
// and a read 1, while its content-creation limit counts writes only:
//
//	throttle.Limit{Name: "points", Rate: 900, Per: time.Minute,
//		Cost: throttle.CostByMethod(5, map[string]int{"GET": 1, "HEAD": 1})},
//	throttle.Limit{Name: "content", Rate: 80, Per: time.Minute,
//		Match: func(r *http.Request) bool { return r.Method == http.MethodPost }},
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

	// Burst is, for GCRA only, how much may go at once after an idle
	// period. Zero means Rate.
	Burst int

	// Algorithm selects how the limit counts. The zero value is GCRA.
	Algorithm Algorithm

	// Key derives the counter's key from the request ([KeyFromContext],
	// [KeyFromHeader], [KeyFromPath], ...). Nil means one counter.
	Key KeyFunc

	// Match, if set, must report true for the limit to apply to a request
	// of its rule; a request is decided on the limits that apply to it.
	// Nil: every request of the rule. It must not modify the request.
	Match func(*http.Request) bool

	// Cost, if set, is what a request is charged on this limit, in place
	// of the rule's cost (Rule.Cost, or a [Limiter] call's n). It must be
	// at least 1. A Concurrency limit takes one slot whatever the cost.
	Cost func(*http.Request) int
}

// Quota returns the limit as a store sees it: everything but Key.
func (l Limit) Quota() quota.Limit {
	return quota.Limit{Name: l.Name, Rate: l.Rate, Per: l.Per, Burst: l.Burst, Algorithm: l.Algorithm}
}

// An Algorithm selects how a [Limit] counts; [quota.Algorithm] describes
// each one's arithmetic. Every store implements every algorithm with the
// same semantics, in integer microseconds of the store's clock.
type Algorithm = quota.Algorithm

// The algorithms; [quota.Algorithm] gives each one's arithmetic.
const (
	GCRA          = quota.GCRA          // the default: a steady flow with bursts up to Burst
	FixedWindow   = quota.FixedWindow   // Rate per window of Per on the epoch grid
	SlidingLog    = quota.SlidingLog    // exact: every admission recorded
	SlidingWindow = quota.SlidingWindow // two weighted windows: O(1), approximate
	Concurrency   = quota.Concurrency   // requests in flight; Per is the lease time
)
