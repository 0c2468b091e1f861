package quota

import (
	"context"
	"time"
)

// A LimitState is what an [Inspector] reports about one counter or pause
// of a scope, read without charging anything.
type LimitState struct {
	// Limit is the limit's name; empty for a pause.
	Limit string

	// Algorithm is the limit's algorithm (zero for a pause).
	Algorithm Algorithm

	// Key is the counter's key within the limit, or the pause key, as the
	// store keeps it: escaped, with secrets already hashed by the key
	// functions (see [Bucket]). The empty key is a limit's single counter
	// or the scope-wide pause.
	Key string

	// Used and Remaining are how much of the limit is taken and left now:
	// for GCRA, of its burst; for FixedWindow, of the current window; for
	// SlidingWindow, the weighted estimate of its Algorithm doc, rounded
	// up; for SlidingLog, the cost recorded in the last Per; for
	// Concurrency, slots held by unexpired leases. Zero for a pause.
	Used, Remaining int64

	// Reset is how long until the counter is back to full (nothing used,
	// if nothing more is charged), or until the pause ends.
	Reset time.Duration
}

// Pause reports whether s describes a pause.
func (s LimitState) Pause() bool { return s.Limit == "" }

// An Inspector is a [Store] that can show and edit its live state, for
// operators (the cmd/throttle command). Both stores of this module are
// Inspectors. It is optional: the Transport never uses it.
//
// Scopes, limit names and keys are those of [Demand] and [Bucket]: a
// rule's scope is throttle.Rule.Scope or its name, and keys are escaped as the
// transport escapes them.
type Inspector interface {
	Store

	// Inspect reports the live state of every counter and active pause of
	// scope whose limit is one of limits (matched by name and algorithm;
	// counters of other limits are skipped, since reading them needs
	// their parameters). Counters whose state equals a fresh counter's
	// (nothing used) are left out. States come sorted by limit name, then
	// key, pauses first. Inspect charges nothing and changes nothing.
	Inspect(ctx context.Context, scope string, limits []Limit) ([]LimitState, error)

	// ResetLimit forgets everything charged to key of limit l in scope:
	// the next decision finds the limit full (for Concurrency: every slot
	// free). It does not touch pauses.
	ResetLimit(ctx context.Context, scope string, l Limit, key string) error

	// ClearPause ends scope's pause key now (the empty key is the
	// scope-wide pause). Transports that learned the pause from a response
	// keep their own copy until it ends.
	ClearPause(ctx context.Context, scope, key string) error
}
