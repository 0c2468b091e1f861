package throttle

import (
	"context"
	"time"
)

// Hooks receive what a [Limiter] or [Transport] decides, for metrics and
// logs (package otelthrottle turns them into OpenTelemetry). Nil fields
// are skipped. Hooks run synchronously on the request's goroutine (OnLease
// also on a renewal timer's), so they must be fast and safe for concurrent
// use. They never receive keys, which may be derived from secrets, but
// for DecisionEvent.Tenant: hash a tenant that is a secret ([HashKey]).
type Hooks struct {
	// OnDecision is called once per request that matched a rule, when
	// its fate is known.
	OnDecision func(DecisionEvent)
	// OnPause is called when an answer pauses a rule's scope.
	OnPause func(PauseEvent)
	// OnSync is called when an answer lowers a limit ([Learning].Sync).
	OnSync func(SyncEvent)
	// OnAnchor is called when an answer's reset is taken to the store to
	// anchor a limit's windows ([Learning].Anchor): about once per window
	// and instance, and whenever the reset moves beyond the tolerance.
	OnAnchor func(AnchorEvent)
	// OnSettle is called when a request's charge is settled to the cost
	// its answer reported ([Rule].Settle, [Permit.Settle]), or the answer
	// reported none.
	OnSettle func(SettleEvent)
	// OnStoreState is called once per change of the store's state.
	OnStoreState func(StoreEvent)
	// OnLease is called when something happens to an in-flight slot's lease.
	OnLease func(LeaseEvent)
}

// A PauseEvent describes a pause learned from a response.
type PauseEvent struct {
	Context context.Context // the request's whose answer asked for it, for tracing and logs

	Rule   string        // the rule whose scope is paused
	Status int           // the response's HTTP status; 0 outside HTTP
	Pause  time.Duration // how long the vendor is not to be sent to, jitter included (decisions a send lag less on anchored rules: Transport.LearnedPause)
	Capped bool          // the answer asked for more than MaxPause
	Err    error         // the store's, if the shared pause failed (the local copy holds)
}

// A SyncEvent describes a limit lowered to the vendor's remaining quota.
type SyncEvent struct {
	Rule, Limit string        // the rule and its Sync limit
	Remaining   int64         // what the vendor said is left
	Reset       time.Duration // until the vendor's reset
	Err         error         // the store's, if the sync failed
}

// An AnchorEvent describes a vendor's window end taken to the store.
type AnchorEvent struct {
	Rule, Limit string        // the rule and its Anchor limit
	Reset       time.Duration // until the vendor's window ends, as the answer said
	Moved       bool          // the shared windows moved to it
	Err         error         // the store's, if the call failed
}

// A SettleEvent describes a request's charge corrected to the cost its
// answer reported ([Rule].Settle, [Permit.Settle]).
type SettleEvent struct {
	Context context.Context // the request's, for tracing and logs

	Rule    string
	Charged int   // what the request was charged when it was decided: its estimate
	Cost    int   // what the answer reported; 0 when it reported none, and the estimate stands
	Err     error // the store's, if the settlement failed; or why Cost was refused
}

// An Outcome is what happened to a request that matched a rule.
type Outcome int

const (
	Allowed Outcome = iota // sent at once
	Waited                 // sent after waiting for its reserved instant
	Refused                // not sent: a limit or pause; nothing charged
	GaveUp                 // not sent: its context ended while it waited
	Failed                 // not sent: no decision (store error, missing key, bad cost)
)

// String returns the outcome's name in lower case.
func (o Outcome) String() string {
	switch o {
	case Allowed:
		return "allowed"
	case Waited:
		return "waited"
	case Refused:
		return "refused"
	case GaveUp:
		return "gave-up"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// A DecisionEvent describes the decision on one request.
type DecisionEvent struct {
	Context   context.Context // the request's, for tracing
	Rule      string
	Outcome   Outcome
	Limit     string        // the limit that refused it, if one did
	Wait      time.Duration // waited (Waited, GaveUp), or until it could succeed (Refused)
	Err       error         // returned to the caller, if any
	Fallback  FailureMode   // the failure mode that decided, if the store could not
	StoreTime time.Duration // the store call's duration; zero when none was made
	StoreErr  error         // the store call's error, if it failed
	Shadow    bool          // the rule is in shadow mode: sent whatever Outcome says

	Remaining  int64         // what the rule's limits admit now after a grant (quota.Decision)
	ResetAfter time.Duration // until the grant's charge stops counting (quota.Decision)

	Class   string // the request's [Class], if it has one
	Tenant  string // the tenant of its first shared limit ([Limit].Tenant), escaped; a key, so hash secrets
	Tries   int    // store decisions made for it: more than 1 when it waited in line to ask again (lane.go)
	Late    int    // grants whose answer came too late to send on them: each retimed to the send, or given back and decided again (late.go)
	Retimed int    // of the late grants, those whose charge moved to the send instead (quota.Retimer)

	// Uncovered reports a request sent although it may reach the vendor
	// later after its charge than the log of its rule's Anchor limit
	// covers, while where the vendor's windows end is not known
	// (Learning.Anchor; docs/learning.md, "What anchoring cannot
	// promise"): its store call answered late, its charge's instant was
	// known less finely than the log's margin, or the vendor answers
	// slower than that. Such a request may be counted in a vendor window
	// the log did not count it in, and be one too many there.
	Uncovered bool
}

// WithHooks makes the transport report its decisions to h.
func WithHooks(h Hooks) Option {
	return func(lim *Limiter) { lim.hooks = h }
}

// A LeaseEventKind says what happened to the lease of a request's slot.
type LeaseEventKind int

const (
	LeaseRenewed       LeaseEventKind = iota // extended while in flight
	LeaseRenewFailed                         // a store error; tried again a third of the lease later
	LeaseLost                                // gone when renewed: another request may hold the slot
	LeaseAbandoned                           // the body was left unread for a lease time; renewals stop
	LeaseReleaseFailed                       // a store error; the slot frees when the lease expires
)

// String returns the kind's name in lower case.
func (k LeaseEventKind) String() string {
	switch k {
	case LeaseRenewed:
		return "renewed"
	case LeaseRenewFailed:
		return "renew-failed"
	case LeaseLost:
		return "lost"
	case LeaseAbandoned:
		return "abandoned"
	case LeaseReleaseFailed:
		return "release-failed"
	}
	return "unknown"
}

// A LeaseEvent describes something that happened to the lease of a
// request's [Concurrency] slot after it was granted; see [Hooks.OnLease].
type LeaseEvent struct {
	Rule string
	Kind LeaseEventKind
	Err  error // the store's, if any
}
