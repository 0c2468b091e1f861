package grpcthrottle

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"

	"github.com/quotakit/throttle"
)

// UnaryClientInterceptor returns an interceptor that holds every unary
// call to the limits of lim: it waits for the call's quota under the rule
// its [RuleFunc] names ([throttle.Limiter.WaitN]), sends the call, frees
// its in-flight slots when the answer is in, and reports a
// RESOURCE_EXHAUSTED answer to lim as a pause (see the package doc). A
// call lim refuses is not sent; its error is described under Refusals in
// the package doc. The interceptor is safe for concurrent use.
func UnaryClientInterceptor(lim *throttle.Limiter, opts ...Option) grpc.UnaryClientInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		ctx = c.keyed(ctx)
		p, err := c.admit(ctx, lim, method)
		if err != nil {
			return err
		}
		if p == nil {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		defer p.Done()
		err = invoker(ctx, method, req, reply, cc, callOpts...)
		learn(ctx, p, err)
		return err
	}
}

// StreamClientInterceptor returns an interceptor that holds every stream
// to the limits of lim. A stream is decided once, when it opens, as a
// unary call is (its cost is charged then, whatever it sends later); it
// holds its in-flight slots until it ends: RecvMsg returned io.EOF or
// another error, SendMsg or Header failed, its context ended or its
// connection closed. A stream that the caller abandons without any of
// these holds them, as gRPC itself holds the stream. A stream the server
// ends with RESOURCE_EXHAUSTED is reported to lim as a unary call is. The
// interceptor is safe for concurrent use.
func StreamClientInterceptor(lim *throttle.Limiter, opts ...Option) grpc.StreamClientInterceptor {
	c := newConfig(opts)
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, callOpts ...grpc.CallOption) (grpc.ClientStream, error) {
		ctx = c.keyed(ctx)
		p, err := c.admit(ctx, lim, method)
		if err != nil {
			return nil, err
		}
		if p == nil {
			return streamer(ctx, desc, cc, method, callOpts...)
		}
		var once sync.Once
		finish := func(err error) {
			once.Do(func() {
				learn(ctx, p, err)
				p.Done()
			})
		}
		callOpts = append(callOpts[:len(callOpts):len(callOpts)], grpc.OnFinish(finish))
		s, err := streamer(ctx, desc, cc, method, callOpts...)
		if err != nil {
			finish(err)
			return nil, err
		}
		return s, nil
	}
}

// admit decides a call of method: a permit, or nil and a nil error when
// neither its rule nor the fallback is a rule of lim (the call goes
// unlimited), or the refusal as a status error.
func (c *config) admit(ctx context.Context, lim *throttle.Limiter, method string) (*throttle.Permit, error) {
	rule, cost := c.rule(ctx, method)
	p, err := lim.WaitN(ctx, rule, cost)
	if errors.Is(err, throttle.ErrUnknownRule) && c.fallback != "" && c.fallback != rule {
		p, err = lim.WaitN(ctx, c.fallback, cost)
	}
	switch {
	case errors.Is(err, throttle.ErrUnknownRule):
		return nil, nil
	case err != nil:
		return nil, refusal(err)
	}
	return p, nil
}
