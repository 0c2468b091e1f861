package grpcthrottle

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quotaheader"
)

// statusError is the error of a call the limiter did not let go: a gRPC
// status for status.FromError and status.Code, which unwraps to the
// limiter's own error for errors.Is and errors.As.
type statusError struct {
	st  *status.Status
	err error
}

func (e *statusError) Error() string { return e.st.Err().Error() }

func (e *statusError) GRPCStatus() *status.Status { return e.st }

func (e *statusError) Unwrap() error { return e.err }

// refusal returns the status error for err, an error of the limiter.
func refusal(err error) error {
	var le *throttle.LimitError
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return &statusError{st: status.FromContextError(err), err: err}
	case errors.As(err, &le):
		st := status.New(codes.ResourceExhausted, err.Error())
		if le.RetryAfter > 0 {
			if d, derr := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(le.RetryAfter)}); derr == nil {
				st = d
			}
		}
		return &statusError{st: st, err: err}
	case errors.Is(err, throttle.ErrStoreUnavailable):
		return &statusError{st: status.New(codes.Unavailable, err.Error()), err: err}
	}
	return &statusError{st: status.New(codes.Internal, err.Error()), err: err}
}

// learn reports to p the server's answer err, if it is
// RESOURCE_EXHAUSTED: a pause for the delay of its RetryInfo, if it has
// one. A refusal by a limiter further down the chain is not the server's
// and teaches nothing.
func learn(ctx context.Context, p *throttle.Permit, err error) {
	if err == nil || errors.Is(err, throttle.ErrLimited) {
		return
	}
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		return
	}
	fb := quotaheader.Feedback{Limit: -1, Remaining: -1, Used: -1}
	fb.RetryAfter, fb.HasRetryAfter = retryDelay(st)
	p.Report(ctx, true, fb)
}

// retryDelay returns the delay of st's errdetails.RetryInfo, rounded up
// to the microsecond (as the limiter counts), and whether st has a valid
// one (a negative delay is not).
func retryDelay(st *status.Status) (time.Duration, bool) {
	for _, d := range st.Details() {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok || ri.GetRetryDelay() == nil || ri.GetRetryDelay().CheckValid() != nil {
			continue
		}
		delay := ri.GetRetryDelay().AsDuration()
		if delay < 0 {
			continue
		}
		if r := delay % time.Microsecond; r != 0 {
			delay += time.Microsecond - r
		}
		return delay, true
	}
	return 0, false
}
