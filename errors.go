package throttle

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/quotakit/throttle/quota"
)

// ErrLimited is matched by every error that refuses a request because of a
// limit or a pause. Use [errors.As] with a [*LimitError] for the details.
var ErrLimited = errors.New("throttle: rate limited")

// ErrInvalidPolicy is wrapped by every error that [Policy.Validate] returns,
// and by a store's refusal of a limit or demand ([quota.ErrInvalid], the
// same value).
var ErrInvalidPolicy = quota.ErrInvalid

// ErrCostTooHigh is wrapped when a request costs more than a limit can
// ever admit (more than Burst for GCRA, more than Rate otherwise).
var ErrCostTooHigh = quota.ErrCostTooHigh

// ErrNoRule is returned for a request that matches no rule when
// [Policy.RefuseUnmatched] is set.
var ErrNoRule = errors.New("throttle: no rule matches the request")

// ErrMissingKey is wrapped when a [KeyFunc] finds no key in the request,
// for example a [KeyFromContext] name that [WithKey] never set.
var ErrMissingKey = errors.New("throttle: request has no value for the limit's key")

// ErrStoreConfig is matched by a store error that a configuration mistake
// causes rather than an outage (a wrong password, a read-only replica); it
// is [quota.ErrStoreConfig], logged at Error.
var ErrStoreConfig = quota.ErrStoreConfig

// A LimitError reports that a request was not sent because of a limit or a
// pause. It matches [ErrLimited] with [errors.Is]. It never holds a key,
// since a key may be derived from a secret.
type LimitError struct {
	Rule  string // the matched rule
	Limit string // the limit that refused it; empty when a pause did
	// Pause is the pause that refused it: "" for the rule's scope, or the
	// name of the [Learning].PauseBy limit, never its key.
	Pause      string
	RetryAfter time.Duration // the earliest it could succeed; zero after giving up
	Err        error         // the context's error when it gave up waiting

	// Fallback is [FailLocal] when the shared store could not decide and
	// this instance's local share ([LocalShare]) refused the request: the
	// limit may well have quota left fleet-wide. It is the zero
	// FailDefault when the store decided. A fallback refusal also matches
	// [ErrStoreUnavailable] with [errors.Is].
	Fallback FailureMode
	// StoreErr is the store's error that made the fallback decide (a
	// go-redis error, a timeout, [ErrStoreConfig] for a wrong password);
	// nil when the store decided. [errors.Is] sees it.
	StoreErr error
}

// Error describes the refusal.
func (e *LimitError) Error() string {
	var what string
	switch {
	case e.Limit != "":
		what = "limit " + e.Limit
	case e.Err == nil && e.Pause == "":
		what = "paused"
	case e.Err == nil:
		what = "paused (" + e.Pause + ")"
	default:
		what = "gave up waiting for quota"
	}
	msg := fmt.Sprintf("throttle: rule %s: %s", e.Rule, what)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(": retry after %v", e.RetryAfter)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Fallback != FailDefault {
		msg += fmt.Sprintf(" (decided by failure mode %q: store unavailable: %v)", e.Fallback, e.StoreErr)
	}
	return msg
}

// Unwrap returns the underlying causes: the context's error when it gave
// up waiting, and the store's error when a fallback decided.
func (e *LimitError) Unwrap() []error {
	var errs []error
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	if e.StoreErr != nil {
		errs = append(errs, e.StoreErr)
	}
	return errs
}

// Is reports whether target is [ErrLimited], or [ErrStoreUnavailable] when
// a fallback decided (Fallback is set).
func (e *LimitError) Is(target error) bool {
	return target == ErrLimited || (target == ErrStoreUnavailable && e.Fallback != FailDefault)
}

// A PolicyError reports one problem with a [Policy]: which rule, which
// field, and what is wrong. It matches [ErrInvalidPolicy].
type PolicyError struct {
	// Rule is the name of the rule at fault, or its index as "#N" when it
	// has no name; empty for policy-wide problems.
	Rule string
	// Field is the field at fault, e.g. "Path" or "Limits[1].Rate".
	Field string
	// Err says what is wrong.
	Err error
}

// Error describes the problem.
func (e *PolicyError) Error() string {
	if e.Rule == "" {
		return fmt.Sprintf("throttle: invalid policy: %s: %v", e.Field, e.Err)
	}
	return fmt.Sprintf("throttle: invalid policy: rule %s: %s: %v", e.Rule, e.Field, e.Err)
}

// Unwrap returns the underlying problem.
func (e *PolicyError) Unwrap() error { return e.Err }

// Is reports whether target is [ErrInvalidPolicy].
func (e *PolicyError) Is(target error) bool { return target == ErrInvalidPolicy }

// onePrefix returns err with a message that says "throttle: " once, at
// its start: the sentinels it wraps (ErrStoreUnavailable, ErrMissingKey,
// ErrInvalidPolicy...) keep their own prefix for when they stand alone.
// A *LimitError is returned as it is, for callers that assert its type.
func onePrefix(err error) error {
	if _, ok := err.(*LimitError); ok {
		return err
	}
	msg := err.Error()
	rest, ok := strings.CutPrefix(msg, "throttle: ")
	if !ok || !strings.Contains(rest, "throttle: ") {
		return err
	}
	return &prefixError{msg: "throttle: " + strings.ReplaceAll(rest, "throttle: ", ""), err: err}
}

// A prefixError is an error whose message says its package prefix once;
// it unwraps to the error it rewords.
type prefixError struct {
	msg string
	err error
}

func (e *prefixError) Error() string { return e.msg }
func (e *prefixError) Unwrap() error { return e.err }

// policyError places a store's refusal of a limit or demand in rule id, its
// field under prefix (such as "Limits[1].").
func policyError(id, prefix string, err error) error {
	var fe *quota.FieldError
	if errors.As(err, &fe) {
		return &PolicyError{Rule: id, Field: prefix + fe.Field, Err: fe.Err}
	}
	return &PolicyError{Rule: id, Field: strings.TrimSuffix(prefix, "."), Err: err}
}
