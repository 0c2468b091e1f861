package throttle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// ErrStoreUnavailable is matched by the error a request fails with when
// the store could not decide it and its rule fails closed ([FailClosed]).
// The error also wraps the store's own error (or the breaker's, when calls
// to the store are suspended), so [errors.Is] sees go-redis's and the
// context's errors too.
var ErrStoreUnavailable = errors.New("throttle: store unavailable")

// A FailureMode says what a request does when the [quota.Store] cannot decide it:
// the store returned an error (Redis unreachable, timed out, busy), or the
// transport's circuit breaker suspended calls to it (see [Breaker]).
//
// The zero value, FailDefault, means "as the policy says" in a [Rule] and
// [FailLocal] in a [Policy].
type FailureMode int

const (
	// FailDefault takes the mode from the policy (in a Rule), or is
	// FailLocal (in a Policy).
	FailDefault FailureMode = iota

	// FailLocal decides the request with an in-process store that gives
	// this instance a share of every limit of the rule: Rate and Burst
	// divided by [Policy.Instances], rounded down but at least 1 (see
	// [LocalShare]). The fleet then stays near the quota in total while the
	// shared store is away. The request waits, is sent or is refused by
	// that share as usual ([LimitError]); pauses this instance learned
	// still hold. A request whose cost exceeds its share's capacity fails
	// with [ErrStoreUnavailable] and [ErrCostTooHigh]. This is the
	// default.
	//
	// The bound: a store that is slow but answers is waited for, never
	// decided locally (see [Breaker]), so the fleet is exact. While
	// instances decide locally, the fleet admits, in any span of one
	// window (Per), at most what the shared store granted in it (Rate, or
	// Burst plus the rate for GCRA) plus each such instance's share:
	// Rate + Instances * max(1, Rate/Instances), about twice the quota
	// when [Policy.Instances] is right. A Concurrency limit likewise holds
	// at most Rate + Instances * max(1, Rate/Instances) slots at once.
	FailLocal

	// FailOpen sends the request without a decision. Nothing limits the
	// fleet while the store is away, except pauses this instance learned.
	// Every such request is reported with DecisionEvent.Fallback set to
	// FailOpen.
	FailOpen

	// FailClosed refuses the request with an error matching
	// [ErrStoreUnavailable] and wrapping the cause. Nothing is sent while
	// the store is away.
	FailClosed
)

// String returns the mode's name as used in policy files: "default",
// "local", "open" or "closed".
func (m FailureMode) String() string {
	switch m {
	case FailDefault:
		return "default"
	case FailLocal:
		return "local"
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	}
	return fmt.Sprintf("FailureMode(%d)", int(m))
}

// ParseFailureMode returns the mode named s, as printed by
// [FailureMode.String]; an unknown name is an error wrapping
// [ErrInvalidPolicy].
func ParseFailureMode(s string) (FailureMode, error) {
	for m := FailDefault; m <= FailClosed; m++ {
		if m.String() == s {
			return m, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown failure mode %q", ErrInvalidPolicy, s)
}

func (m FailureMode) valid() bool { return m >= FailDefault && m <= FailClosed }

// LocalShare returns the part of l that one of instances instances may use
// when it decides alone ([FailLocal]): Rate/instances and Burst/instances
// (GCRA), rounded down so that the fleet never admits more than the quota
// in total, but at least 1 so that every instance can still send; Per,
// Name, Algorithm and Key are unchanged. With instances < 2 it returns l.
//
// Rounding down means the fleet may get less than the quota while it
// decides locally (10 per minute over 3 instances is 3 each, 9 in all);
// the floor of 1 means it may get more when there are more instances than
// Rate (10 per minute over 20 instances is 1 each, 20 in all).
func LocalShare(l Limit, instances int) Limit {
	if instances < 2 {
		return l
	}
	s := l
	s.Rate = max(l.Rate/instances, 1)
	if l.Algorithm == GCRA {
		s.Burst = max(l.Quota().BurstOrRate()/instances, 1)
	} else {
		s.Burst = 0
	}
	return s
}

// localMark is the Reservation.ID of a reservation made by the local
// fallback store, so that Cancel goes back to it. The in-process store
// does not use IDs otherwise.
const localMark = "throttle:local-fallback"

// failover is the part of a Transport that deals with a failing store: the
// breaker in front of it and the local store that stands in for it. It is
// set up on first use.
type failover struct {
	settings Breaker
	once     sync.Once
	breaker  *breaker
	local    *memstore.Store
}

// failover returns the transport's failover state, set up on first use.
func (t *Transport) failover() *failover {
	f := &t.failure
	f.once.Do(func() {
		f.breaker = newBreaker(f.settings, t.now, t.reportStore)
		f.local = memstore.New(memstore.WithClock(t.now))
	})
	return f
}

// inProcess reports whether the transport's store is the in-process one,
// which cannot be unavailable; its calls skip the breaker.
func (t *Transport) inProcess() bool {
	_, ok := t.store.(*memstore.Store)
	return ok
}

// take asks the store to decide d, the demand of a request under rule r,
// through the breaker, and applies r's failure mode when the store cannot
// answer. Errors it returns are ready for the caller.
func (t *Transport) take(ctx context.Context, r *rule, d *demand, ev *DecisionEvent) (quota.Decision, error) {
	if t.hooks.OnDecision != nil {
		start := time.Now()
		defer func() { ev.StoreTime += time.Since(start) }()
	}
	if t.inProcess() {
		dec, err := t.store.Take(ctx, &d.Demand)
		if err != nil {
			ev.StoreErr = err
			return dec, fmt.Errorf("throttle: rule %s: store: %w", r.id, err)
		}
		return dec, nil
	}
	f := t.failover()
	var dec quota.Decision
	// The store reads a snapshot of d: a call the breaker stopped waiting
	// for may still run while the request goes on and changes d (its
	// MaxWait, when it waits for a slot).
	sd := d.Demand
	err := f.breaker.call(ctx, func(ctx context.Context) error {
		var err error
		dec, err = t.store.Take(ctx, &sd)
		return err
	}, func() {
		// The request moved on without this decision: give back what it
		// charged, so an abandoned call costs the fleet no quota.
		if dec.OK && dec.Reservation != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
			defer cancel()
			_ = t.store.Cancel(cctx, dec.Reservation)
		}
	})
	if err == nil {
		return dec, nil
	}
	ev.StoreErr = err
	if !storeFault(ctx, err) {
		return quota.Decision{}, fmt.Errorf("throttle: rule %s: store: %w", r.id, err)
	}
	ev.Fallback = r.failMode
	switch r.failMode {
	case FailOpen:
		return quota.Decision{OK: true, Limit: -1}, nil
	case FailClosed:
		return quota.Decision{}, fmt.Errorf("throttle: rule %s: %w: %w", r.id, ErrStoreUnavailable, err)
	}
	ld := d.Demand
	ld.Limits = make([]quota.Bucket, len(d.Limits))
	for i, b := range d.Limits {
		ld.Limits[i] = quota.Bucket{Limit: r.local[i], Key: b.Key}
	}
	// Not dec: an abandoned store call may still write it.
	ldec, lerr := f.local.Take(ctx, &ld)
	if lerr != nil {
		return quota.Decision{}, fmt.Errorf("throttle: rule %s: %w: local fallback: %w (store: %w)", r.id, ErrStoreUnavailable, lerr, err)
	}
	if ldec.Reservation != nil {
		// The mark, then the local store's own id (a Concurrency lease's).
		ldec.Reservation.ID = localMark + ldec.Reservation.ID
	}
	return ldec, nil
}

// storeFault reports whether err, from a store call made with ctx, means
// the store could not answer, as opposed to the caller's context ending or
// a demand no store can grant, or a lease that expired (an answer).
func storeFault(ctx context.Context, err error) bool {
	return ctx.Err() == nil && !errors.Is(err, ErrCostTooHigh) && !errors.Is(err, ErrInvalidPolicy) && !errors.Is(err, quota.ErrLeaseLost)
}

// cancel gives r back to the store that granted it: the local fallback
// store, or the shared store through the breaker.
func (t *Transport) cancel(ctx context.Context, r *quota.Reservation) error {
	if lr, ok := localReservation(r); ok { // lease.go
		return t.failover().local.Cancel(ctx, lr)
	}
	return t.guard(ctx, func(ctx context.Context) error { return t.store.Cancel(ctx, r) })
}

// pause records a pause in the store, through the breaker. The learner's
// local copy holds whether or not it succeeds.
func (t *Transport) pause(ctx context.Context, scope, key string, d time.Duration) error {
	return t.guard(ctx, func(ctx context.Context) error { return t.store.Pause(ctx, scope, key, d) })
}

// guard runs call, a store call made with ctx other than Take, through the
// breaker: it is not made while the breaker is open, and its outcome
// counts like a Take's.
func (t *Transport) guard(ctx context.Context, call func(context.Context) error) error {
	if t.inProcess() {
		return call(ctx)
	}
	return t.failover().breaker.call(ctx, call, nil)
}
