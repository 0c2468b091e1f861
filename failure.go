package throttle

import (
	"errors"
	"fmt"
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
