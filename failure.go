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

	// FailLocal decides with an in-process store that gives this instance
	// its share of every limit, [LocalShare]. While instances decide
	// locally the fleet admits at most Rate + Instances*max(1,
	// Rate/Instances) per window, about twice the quota. The default.
	FailLocal

	// FailOpen sends without a decision (reported in
	// DecisionEvent.Fallback); only learned pauses still hold.
	FailOpen

	// FailClosed refuses with an error matching [ErrStoreUnavailable]
	// that wraps the cause.
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

// LocalShare returns the part of l one of instances may use when it
// decides alone ([FailLocal]): Rate and Burst divided by instances,
// rounded down (so the fleet stays within the quota) but at least 1.
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
