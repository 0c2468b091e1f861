package throttle

import (
	"context"
	"fmt"
	"math"

	"github.com/quotakit/throttle/quota"
)

// A Class is a priority class ([Policy].Classes). A request of a class
// with a Headroom is admitted by a limit only while that part of it stays
// free after its cost, and never holds quota ahead of time: it waits in
// its instance, in line, for the instant the store names and asks again.
// So a class above it finds the headroom free at once, however long the
// backlog. docs/policy.md gives the details.
type Class struct {
	Name string // used by Rule.Class, WithClass and hooks; letters, digits and ._- only

	// Headroom is the part of every limit's capacity (burst, window, or
	// slots) the class leaves free, from 0 to below 1 (0.2: the last 20%),
	// rounded to whole units, at least 1 and below the capacity.
	Headroom float64
}

type classKey struct{}

// WithClass returns a copy of ctx whose requests are of the class called
// name rather than their rule's (a click is "interactive" under a rule of
// class "bulk"). A name the policy lacks fails them ([ErrInvalidPolicy]).
func WithClass(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, classKey{}, name)
}

// class is a validated Class.
type class struct {
	name     string
	headroom float64
}

// units returns the headroom of class c on limit l, in units of its
// capacity: round(Headroom*capacity), at least 1 and below the capacity.
// A nil c has none.
func (c *class) units(l quota.Limit) int {
	if c == nil || c.headroom == 0 {
		return 0
	}
	capacity := l.Capacity()
	if l.Algorithm == Concurrency {
		capacity = l.Rate
	}
	h := int(math.Round(c.headroom * float64(capacity)))
	return min(max(h, 1), capacity-1)
}

// compileClasses validates the policy's classes and returns them by name.
func compileClasses(cs []Class, bad func(rule, field, format string, args ...any)) map[string]*class {
	byName := make(map[string]*class, len(cs))
	for i, c := range cs {
		field := fmt.Sprintf("Classes[%d]", i)
		switch {
		case !quota.ValidName(c.Name):
			bad("", field+".Name", "%q must be letters, digits and ._- (at most 64 bytes)", c.Name)
		case byName[c.Name] != nil:
			bad("", field+".Name", "duplicate class name %q", c.Name)
		case !(c.Headroom >= 0 && c.Headroom < 1): // and not NaN
			bad("", field+".Headroom", "must be at least 0 and below 1, got %v", c.Headroom)
		default:
			byName[c.Name] = &class{name: c.Name, headroom: c.Headroom}
		}
	}
	return byName
}

// classOf returns the class of a request of rule r whose context is ctx:
// the one named by [WithClass], or the rule's; nil for none.
func (cp *compiledPolicy) classOf(ctx context.Context, r *rule) (*class, error) {
	name, ok := ctx.Value(classKey{}).(string)
	if !ok {
		return r.class, nil
	}
	c := cp.classes[name]
	if c == nil && name != "" {
		return nil, fmt.Errorf("throttle: rule %s: %w: no class %q in the policy", r.id, ErrInvalidPolicy, name)
	}
	return c, nil
}
