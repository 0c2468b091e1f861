package quota

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched by every error about a limit or a demand that no
// store can decide as given: a bad field, a cost below 1, a counter named
// twice. The throttle package reports it as its ErrInvalidPolicy, which is
// the same value.
var ErrInvalid = errors.New("throttle: invalid policy")

// ErrCostTooHigh is wrapped when a demand costs more than a limit can ever
// admit (more than Burst for GCRA, more than Rate otherwise).
var ErrCostTooHigh = errors.New("throttle: cost exceeds what the limit can ever admit")

// ErrLeaseLost is wrapped by [LeaseStore.Renew] when a lease is no longer
// held: it expired before it was renewed, or was released.
var ErrLeaseLost = errors.New("throttle: lease lost")

// ErrStoreConfig is matched by a store error that a configuration mistake
// causes rather than an outage: a wrong password, missing permissions, a
// command the server does not know, a read-only replica, or a Cluster
// client pointed at a server that is not a Cluster (or the reverse). Such
// an error does not go away by waiting.
var ErrStoreConfig = errors.New("throttle: store misconfigured")

// A FieldError reports one field of a [Limit] or [Demand] that a store
// cannot accept, such as "Rate" or "Limits[1].Per". It matches
// [ErrInvalid].
type FieldError struct {
	// Field is the field at fault.
	Field string
	// Err says what is wrong.
	Err error
}

// Error describes the problem.
func (e *FieldError) Error() string {
	return fmt.Sprintf("throttle: invalid policy: %s: %v", e.Field, e.Err)
}

// Unwrap returns the underlying problem.
func (e *FieldError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrInvalid].
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }
