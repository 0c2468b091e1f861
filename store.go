package throttle

import (
	"context"
	"time"
)

// A Store keeps the state of limits and pauses and makes every decision
// about them. [Transport] asks its Store once per matched request.
//
// The in-process store ([NewMemoryStore]) is the default; the redisstore
// package provides a Store shared by every instance of a service through
// Redis. Both pass the same conformance suite (package storetest), which is
// the precise statement of the semantics below.
//
// # Semantics
//
// Take decides all limits of a [Demand] in one atomic step. It computes the
// earliest instant t, not before the store's current time, at which every
// limit of the demand admits the demand's cost and no listed pause is in
// force. Then:
//
//   - if t is now, the demand is granted and charged: Decision.OK is true and
//     Decision.Delay is 0;
//   - if t is later but no more than Demand.MaxWait from now, the demand is
//     granted as a reservation: every limit is charged for instant t, so the
//     quota is held for the caller, who must wait Decision.Delay before it
//     acts;
//   - otherwise the demand is refused and NOTHING is charged: Decision.OK is
//     false, Decision.Delay is the time until t (the earliest instant a
//     retry can succeed, rounded up, never early), and Decision.Limit names
//     what bound it.
//
// All limits are charged or none is. Stores keep time in whole microseconds
// of their own clock (Redis's TIME for the Redis store); they receive
// durations, never instants, so clock skew between instances cannot matter.
//
// A demand whose cost exceeds what a limit can ever admit (more than Burst
// for GCRA, more than Rate for the window algorithms) is an error wrapping
// [ErrCostTooHigh]; it is never a wait without end.
//
// Implementations must be safe for concurrent use. An error from Take means
// the demand may or may not have been charged; callers treat it as not
// granted.
type Store interface {
	// Take decides d atomically: granted now, granted after a delay (a
	// reservation), or refused with nothing charged.
	Take(ctx context.Context, d *Demand) (Decision, error)

	// Cancel gives back what a granted decision charged, as far as that is
	// safe for others (see [Reservation]). Call it only when the action the
	// reservation was for will not happen.
	Cancel(ctx context.Context, r *Reservation) error

	// Pause records that scope's pause key must not act for the duration
	// d, counted from the store's current time. A pause never shortens an
	// existing one. A non-positive d is a no-op.
	Pause(ctx context.Context, scope, key string, d time.Duration) error
}

// A Demand is what one request asks of a [Store]: every limit it must pass,
// the cost it is charged, and how long it may wait.
type Demand struct {
	// Scope groups the counters and pauses of a decision. The Redis store
	// keeps all keys of one scope in one Cluster slot. Transport sets it to
	// the matched rule's scope ([Rule.Scope]).
	Scope string

	// Limits are decided together: all admit, or none is charged.
	Limits []Bucket

	// Pauses lists the pause keys of Scope that hold this demand back; a
	// pause set with [Store.Pause] on any of them delays the demand.
	Pauses []string

	// Cost is how much the demand takes from every limit. It must be at
	// least 1.
	Cost int

	// MaxWait is the longest the caller is willing to wait for its quota.
	// Zero means the demand is granted only if it can act now; a negative
	// value is treated as zero.
	MaxWait time.Duration
}

// A Bucket is one limit resolved for one request: the limit's parameters
// and the key of the counter it is charged to. Buckets with the same scope,
// limit name and key share one counter.
type Bucket struct {
	// Limit gives the name and parameters (Rate, Per, Burst, Algorithm).
	// Limit.Key is not used by stores.
	Limit Limit

	// Key identifies the counter within the limit. Transport passes keys
	// already escaped: they contain only the bytes [A-Za-z0-9._~%:@+=-] and
	// are at most 128 bytes long.
	Key string
}

// A Decision is a [Store]'s answer to a [Demand].
type Decision struct {
	// OK reports whether the demand was granted and charged.
	OK bool

	// Delay is, when OK, how long the caller must wait before it acts
	// (zero: act now). When not OK, it is the time until the earliest
	// instant at which the same demand could succeed, rounded up to the
	// microsecond.
	Delay time.Duration

	// Limit is, when not OK, the index in Demand.Limits of a limit that
	// bound the decision, or -1 when a pause bound it. When OK it is -1.
	Limit int

	// Pause is, when not OK and a pause bound the decision, the pause key
	// that did.
	Pause string

	// Reservation describes what was charged, for [Store.Cancel]. It is nil
	// when the decision was refused.
	Reservation *Reservation
}

// A Reservation records what a granted [Decision] charged, so that
// [Store.Cancel] can give it back. Its contents are the store's own.
//
// What Cancel gives back depends on the algorithm: a fixed-window,
// sliding-window or sliding-log charge is always returned in full; a GCRA
// charge is returned only if no later demand has been granted on the same
// bucket since (as with golang.org/x/time/rate's Reservation.Cancel, a later
// reservation sits on time this one made it skip).
type Reservation struct {
	// Demand is the demand that was granted.
	Demand *Demand

	// Marks hold, per limit of Demand, the store's record of the charge
	// (for example the GCRA theoretical arrival time it set, or the window
	// it charged), in the store's own units.
	Marks []int64

	// ID identifies the charge, where the store needs one (for example a
	// sliding-log member).
	ID string
}
