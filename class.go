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
// So a class above it (a smaller Headroom, or a request of no class)
// never queues behind its backlog. On window and log limits the headroom
// is kept only while a class above has asked within the last emission
// interval (Per/Rate), and lent otherwise, so the whole quota is used; a
// class above that returns waits for the next unit the limit frees,
// about one emission interval. docs/policy.md gives the details and
// figures.
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

// bucket returns the bucket of limit l for a request of class c, without
// its key and tenant: the headroom (units), and Classed when the request
// has a class, so that the store holds the headroom of the classes below
// it while it asks (quota.Store, Lent headroom).
func (c *class) bucket(l quota.Limit) quota.Bucket {
	return quota.Bucket{Limit: l, Headroom: c.units(l), Classed: c != nil}
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

// unclassed returns the class of requests that name none, in a policy of
// classes cs: a class without a headroom, above every other, if any class
// has a headroom; else nil.
func unclassed(cs map[string]*class) *class {
	for _, c := range cs {
		if c.headroom > 0 {
			return &class{}
		}
	}
	return nil
}

// classOf returns the class of a request of rule r whose context is ctx:
// the one named by [WithClass], or the rule's; for none, the policy's
// unclassed.
func (cp *compiledPolicy) classOf(ctx context.Context, r *rule) (*class, error) {
	name, ok := ctx.Value(classKey{}).(string)
	c := r.class
	if ok {
		c = cp.classes[name]
		if c == nil && name != "" {
			return nil, fmt.Errorf("throttle: rule %s: %w: no class %q in the policy", r.id, ErrInvalidPolicy, name)
		}
	}
	if c == nil {
		return cp.unclassed, nil
	}
	return c, nil
}
