package throttle

import (
	"context"
	"time"
)

// Hooks receive what a [Transport] decides, for metrics and logs. Nil
// fields are skipped, and a transport without hooks does no work for them.
// Hooks run synchronously on the request's goroutine (OnLease: also on a
// renewal timer's), so they must be fast
// and safe for concurrent use. They never receive keys, which may be
// derived from secrets.
type Hooks struct {
	// OnDecision is called once for every request that matched a rule,
	// when its fate is known: sent at once, sent after waiting, refused,
	// given up while waiting, or failed before a decision.
	OnDecision func(DecisionEvent)

	// OnPause is called when a response makes the transport pause a
	// rule's scope (see [Learning]).
	OnPause func(PauseEvent)

	// OnSync is called when a response makes the transport lower a
	// limit to the vendor's remaining quota (see [Learning.Sync]).
	OnSync func(SyncEvent)

	// OnStoreState is called when the store's state changes as the
	// transport sees it: it started failing, the breaker opened, it
	// answers again (see [Breaker] and [FailureMode]). It is called once
	// per change, not per request, on the goroutine of the request whose
	// store call caused the change.
	OnStoreState func(StoreEvent)

	// OnLease is called when something happens to the lease of a
	// request's [Concurrency] slot after it was granted: a renewal, a lost
	// lease, a body left unread, a failed release. See [LeaseEvent]. It
	// may run on a timer's goroutine.
	OnLease func(LeaseEvent)
}

// A PauseEvent describes a pause learned from a response.
type PauseEvent struct {
	// Rule is the name of the rule whose scope is paused.
	Rule string
	// Status is the response's status code.
	Status int
	// Pause is how long the scope is paused, jitter included.
	Pause time.Duration
	// Capped reports that the response asked for longer than the rule's
	// MaxPause and the pause was capped to it.
	Capped bool
	// Err is the store's error if recording the shared pause failed; the
	// transport's own copy of the pause holds regardless.
	Err error
}

// A SyncEvent describes a limit lowered to the vendor's remaining quota.
type SyncEvent struct {
	// Rule is the name of the rule; Limit the name of its Sync limit.
	Rule, Limit string
	// Remaining is what the vendor said is left; Reset is how long until
	// its quota resets.
	Remaining int64
	Reset     time.Duration
	// Err is the store's error, if the sync failed.
	Err error
}

// An Outcome is what happened to a request that matched a rule.
type Outcome int

const (
	// Allowed: sent at once.
	Allowed Outcome = iota
	// Waited: sent after waiting for a reserved slot.
	Waited
	// Refused: not sent, because a limit or pause refused it within the
	// waiter's budget; nothing was charged.
	Refused
	// GaveUp: not sent, because the request's context ended while it
	// waited; its reservation was given back.
	GaveUp
	// Failed: not sent, because no decision could be made (store error,
	// missing key, cost out of range).
	Failed
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
	// Context is the request's context, for tracing (e.g. to record the
	// decision on its active span); never nil when set by the Transport.
	Context context.Context
	// Rule is the name of the matched rule.
	Rule string
	// Outcome is what happened.
	Outcome Outcome
	// Limit names the limit that refused the request, if one did.
	Limit string
	// Wait is how long the request waited (Waited, GaveUp), or when
	// refused, how long until it could succeed (its RetryAfter).
	Wait time.Duration
	// Err is the error returned to the caller, if any.
	Err error
	// Fallback is the rule's failure mode when the store could not
	// decide and the mode did ([FailLocal], [FailOpen], [FailClosed]);
	// FailDefault (zero) when the store decided.
	Fallback FailureMode
	// StoreTime is how long the store's decision call took, measured only
	// when OnDecision is set; zero when no call was made (for example a
	// local pause refused the request first, or the breaker was open).
	StoreTime time.Duration
	// StoreErr is the error of the store's decision call, if it failed;
	// when the store itself was at fault (unreachable, too slow) the
	// rule's failure mode decided instead (see Fallback).
	StoreErr error
	// Shadow reports that the rule is in shadow mode ([Rule.Shadow]): the
	// request was sent at once whatever Outcome says, and Err was not
	// returned to the caller.
	Shadow bool
}

// WithHooks makes the transport report its decisions to h.
func WithHooks(h Hooks) Option {
	return func(lim *Limiter) { lim.hooks = h }
}

// A LeaseEventKind says what happened to the lease of a request's slot.
type LeaseEventKind int

const (
	// LeaseRenewed: the lease was extended while the request was in flight.
	LeaseRenewed LeaseEventKind = iota

	// LeaseRenewFailed: renewing failed with a store error; the transport
	// tries again a third of the lease time later.
	LeaseRenewFailed

	// LeaseLost: renewing found the lease gone (it expired before it was
	// renewed, a slow store, say), so another request may hold the slot
	// while this one is still in flight. Renewals stop.
	LeaseLost

	// LeaseAbandoned: the caller neither read nor closed the response body
	// for a whole lease time. Renewals stop, and the slot is reclaimed when
	// the lease expires, at most one lease time later. Close the body to
	// avoid this.
	LeaseAbandoned

	// LeaseReleaseFailed: releasing failed with a store error; the slot is
	// reclaimed when its lease expires.
	LeaseReleaseFailed
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
	// Rule is the name of the rule whose Concurrency limit granted the slot.
	Rule string
	// Kind is what happened.
	Kind LeaseEventKind
	// Err is the store's error, if any.
	Err error
}
