// Package grpcthrottle holds gRPC client calls to the limits of a
// [throttle.Policy], fleet-wide, with client interceptors around a
// [throttle.Limiter]. It is a module of its own, so that the throttle
// library does not depend on gRPC.
//
//	lim, err := throttle.NewLimiter(policy, throttle.WithStore(store))
//	conn, err := grpc.NewClient(target,
//		grpc.WithUnaryInterceptor(grpcthrottle.UnaryClientInterceptor(lim)),
//		grpc.WithStreamInterceptor(grpcthrottle.StreamClientInterceptor(lim)))
//
// # Which rule
//
// A call is decided by the rule a [RuleFunc] names. The default,
// [DefaultRule], names the rule after the full method
// ([MethodRule]: "/pkg.Service/Method" becomes "pkg.Service.Method",
// since a rule name has no slash), at a cost of 1. A call whose rule the
// limiter does not have is decided by the fallback rule ([WithFallback]),
// or, without one, sent unlimited.
//
// # When a call goes
//
// A unary call waits for its quota with [throttle.Limiter.WaitN], as the
// rule's waiter and the call's context allow, then is sent. A stream is
// decided once, when it opens, and holds its in-flight slots (a
// [throttle.Concurrency] limit) until it ends however it ends: RecvMsg
// returns io.EOF or an error, the context ends, the connection closes.
// The stream interceptor learns of the end through [grpc.OnFinish].
//
// # Refusals
//
// A call the limiter refuses is not sent, and fails with an error whose
// gRPC status is RESOURCE_EXHAUSTED with an errdetails.RetryInfo giving
// the limiter's RetryAfter, as a server would have answered. So code that
// handles a server's refusal handles this one too, and status.Code sees
// it; the error also unwraps to the [*throttle.LimitError], so
// errors.Is(err, throttle.ErrLimited) tells a local refusal from a
// server's. A call given up while it waited fails with the context's code
// (CANCELED or DEADLINE_EXCEEDED); a store failure of a FailClosed rule
// with UNAVAILABLE; any other error of the limiter (a missing key, a cost
// no limit can admit) with INTERNAL. Every one unwraps to the limiter's
// error.
//
// # What is learned
//
// A call the server answers RESOURCE_EXHAUSTED is reported to the
// limiter ([throttle.Permit.Report]) as a "slow down" answer, with the
// delay of the status's RetryInfo when it has one: the rule's scope is
// then paused for that long for every instance sharing the store, which
// holds its calls back instead of sending them to be refused. Without a
// RetryInfo the pause is the rule's Learning default (exponential
// backoff). Other answers teach nothing.
package grpcthrottle
