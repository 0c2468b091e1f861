package policyfile

import (
	"fmt"
	"strings"

	"github.com/quotakit/throttle"
)

// An Error reports one problem in a policy file, in the file's own terms:
//
//	policy.yaml:12: rule "a": limits[0].rate: must be positive, got 0
//
// It matches [throttle.ErrInvalidPolicy] with errors.Is, and unwraps to
// the underlying problem (a *throttle.PolicyError for what validation
// found).
type Error struct {
	// File is the file's name as given to Load.
	File string
	// Line is the 1-based line of the problem, or 0 when unknown.
	Line int
	// Rule is the rule's name (or "#N", its index, when it has none);
	// empty for policy-wide problems.
	Rule string
	// Field is the field at fault as the file names it, e.g.
	// "limits[1].per"; empty for a problem with the file as a whole.
	Field string
	// Err says what is wrong.
	Err error
}

// Error describes the problem as file:line: rule "name": field: what,
// each part once.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	switch {
	case e.Rule == "":
	case strings.HasPrefix(e.Rule, "#"):
		fmt.Fprintf(&b, ": rule %s", e.Rule)
	default:
		fmt.Fprintf(&b, ": rule %q", e.Rule)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	what := e.Err
	if pe, ok := what.(*throttle.PolicyError); ok && pe.Err != nil {
		what = pe.Err // its rule and field are said above, in the file's terms
	}
	fmt.Fprintf(&b, ": %v", what)
	return b.String()
}

// Unwrap returns the underlying problem.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is [throttle.ErrInvalidPolicy].
func (e *Error) Is(target error) bool { return target == throttle.ErrInvalidPolicy }
