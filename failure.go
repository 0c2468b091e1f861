package throttle

import (
	"errors"
	"fmt"
	"time"

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

	// FailLocal decides with an in-process store that gives this instance
	// its share of every limit, [LocalShare]: the instances' shares
	// together keep the quota's pace, so a window that holds the store's
	// last grants and the shares' first admits about twice the quota at
	// most (the store's Rate, and Rate more with each share's burst of at
	// least 1). Each share starts from what the store last told this
	// instance remained of its limit (its part of it: a share is charged
	// the rest at the outage's first local decision), so where the
	// instance knows, the fleet admits about what was left, not the quota
	// again. The default.
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
// decides alone ([FailLocal]): its share of the quota, so that the
// fleet's local shares together admit the quota's pace and not more.
//
//   - [GCRA]: Rate per instances times Per, the pace of Rate/instances per
//     Per exactly, however small Rate is against instances (shares of
//     Rate/instances rounded, at least 1, let 8 instances send 8 a second
//     on a limit of 1 a second, and use 96 of 100), and Burst divided by
//     instances, rounded down but at least 1.
//   - [FixedWindow], [SlidingWindow], [SlidingLog]: Rate divided by
//     instances, rounded down, per window; where Rate is less than
//     instances, 1 per ceil(instances/Rate) windows, so that the fleet
//     admits Rate per window on average and never more than instances.
//   - [Concurrency]: Rate (slots) divided by instances, rounded down but
//     at least 1.
//
// Where a share's longer window would pass [quota.MaxPer] (or leave the
// limit's bounds), it is Rate/instances per Per, at least 1, instead.
// With instances below 2, LocalShare returns l.
func LocalShare(l Limit, instances int) Limit {
	if instances < 2 {
		return l
	}
	s := l // the rounded share: Rate/instances per Per, at least 1
	s.Rate = max(l.Rate/instances, 1)
	s.Burst = 0
	if l.Algorithm == GCRA {
		s.Burst = max(l.Quota().BurstOrRate()/instances, 1)
	}
	stretch := 1 // how many of l's windows the share's window is
	switch l.Algorithm {
	case GCRA:
		stretch = instances
	case FixedWindow, SlidingWindow, SlidingLog:
		if l.Rate < instances {
			stretch = (instances + l.Rate - 1) / l.Rate
		}
	}
	if stretch == 1 || l.Per > quota.MaxPer/time.Duration(stretch) {
		return s
	}
	exact := s
	exact.Per = l.Per * time.Duration(stretch)
	if l.Algorithm == GCRA {
		exact.Rate = l.Rate
	}
	if exact.Quota().Validate() != nil {
		return s
	}
	return exact
}
