package grpcthrottle

import (
	"context"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/quotakit/throttle"
)

// A RuleFunc names the rule of the limiter that decides a call of the
// full method method ("/pkg.Service/Method"), and what the call costs
// against every limit of the rule (at least 1). It must be safe for
// concurrent use.
type RuleFunc func(ctx context.Context, method string) (rule string, cost int)

// DefaultRule is the [RuleFunc] used without [WithRule]: the rule named
// [MethodRule](method), at a cost of 1.
func DefaultRule(_ context.Context, method string) (string, int) {
	return MethodRule(method), 1
}

// MethodRule returns the rule name [DefaultRule] gives a full method:
// the method without its leading slash, its other slash a dot, as in
// "grpc.health.v1.Health.Check" for "/grpc.health.v1.Health/Check". (A
// rule name uses only letters, digits and ._-, at most 64 bytes; a
// method whose name does not fit goes to the fallback rule.)
func MethodRule(method string) string {
	return strings.ReplaceAll(strings.TrimPrefix(method, "/"), "/", ".")
}

// An Option configures an interceptor.
type Option func(*config)

type config struct {
	rule     RuleFunc
	fallback string
	keys     []mdKey
}

type mdKey struct{ name, header string }

func newConfig(opts []Option) config {
	c := config{rule: DefaultRule}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithRule makes the interceptor ask f which rule decides a call, and
// its cost, instead of [DefaultRule]. A nil f means DefaultRule.
func WithRule(f RuleFunc) Option {
	return func(c *config) {
		if f == nil {
			f = DefaultRule
		}
		c.rule = f
	}
}

// WithFallback names the rule that decides a call whose rule (as the
// [RuleFunc] names it) the limiter does not have. Without it, or if the
// limiter has no rule of that name either, such a call is sent unlimited.
// A fallback rule with no limits still honours pauses.
func WithFallback(rule string) Option {
	return func(c *config) { c.fallback = rule }
}

// WithMetadataKey keys limits by a value of the call's outgoing metadata:
// the first value of header (as set with metadata.AppendToOutgoingContext,
// say "tenant-id") becomes the key called name, for limits whose Key is
// [throttle.KeyFromContext](name), as [throttle.WithKey] would set it. A
// call without that header gets no value; a limit keyed by it then fails
// the call with [throttle.ErrMissingKey] (INTERNAL). Use
// [throttle.HashKey] on the limit's key when the value is a secret.
func WithMetadataKey(name, header string) Option {
	return func(c *config) { c.keys = append(c.keys, mdKey{name: name, header: header}) }
}

// keyed returns ctx with the keys of c.keys found in its outgoing
// metadata.
func (c *config) keyed(ctx context.Context) context.Context {
	if len(c.keys) == 0 {
		return ctx
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	for _, k := range c.keys {
		if v := md.Get(k.header); len(v) > 0 {
			ctx = throttle.WithKey(ctx, k.name, v[0])
		}
	}
	return ctx
}
