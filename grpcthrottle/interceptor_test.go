package grpcthrottle_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/grpcthrottle"
	"github.com/quotakit/throttle/grpcthrottle/internal/quotaserver"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
)

const (
	checkRule = "grpc.health.v1.Health.Check"
	watchRule = "grpc.health.v1.Health.Watch"
)

// open is a quota no test reaches.
var open = quotaserver.Quota{Rate: 1000, Per: time.Millisecond, Burst: 1000}

func newLimiter(t testing.TB, rules []throttle.Rule, opts ...throttle.Option) *throttle.Limiter {
	t.Helper()
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: rules}, opts...)
	require.NoError(t, err)
	return lim
}

func perHour(name string, n int) throttle.Limit {
	return throttle.Limit{Name: name, Rate: n, Per: time.Hour}
}

func check(ctx context.Context, hc grpc_health_v1.HealthClient) error {
	_, err := hc.Check(ctx, &grpc_health_v1.HealthCheckRequest{})
	return err
}

func TestMethodRule(t *testing.T) {
	for in, want := range map[string]string{
		"/grpc.health.v1.Health/Check": checkRule,
		"/pkg.Service/Method":          "pkg.Service.Method",
		"":                             "",
	} {
		assert.Equal(t, want, grpcthrottle.MethodRule(in), in)
	}
}

// A call the limiter refuses is not sent and fails with
// RESOURCE_EXHAUSTED and RetryInfo, unwrapping to the *LimitError.
func TestUnaryRefusal(t *testing.T) {
	srv := startServer(t, open)
	lim := newLimiter(t, []throttle.Rule{{Name: checkRule, Limits: []throttle.Limit{perHour("checks", 2)}, Wait: waiters.FailFast()}})
	hc := dial(t, srv.Addr(), lim)
	ctx := context.Background()
	require.NoError(t, check(ctx, hc))
	require.NoError(t, check(ctx, hc))

	err := check(ctx, hc)
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok)
	assert.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.Len(t, st.Details(), 1)
	ri, ok := st.Details()[0].(*errdetails.RetryInfo)
	require.True(t, ok)
	assert.InDelta(t, 30*time.Minute, ri.GetRetryDelay().AsDuration(), float64(time.Second))
	assert.ErrorIs(t, err, throttle.ErrLimited)
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, checkRule, le.Rule)
	assert.Equal(t, "checks", le.Limit)
	assert.Equal(t, ri.GetRetryDelay().AsDuration(), le.RetryAfter)
	assert.Equal(t, int64(2), srv.Admitted(), "the refused call was not sent")
}

// The error codes of calls that did not go for other reasons than a limit.
func TestRefusalCodes(t *testing.T) {
	srv := startServer(t, open)
	rules := []throttle.Rule{
		{Name: checkRule, Limits: []throttle.Limit{perHour("checks", 1)}}, // waits (Block)
		{Name: "tenant", Limits: []throttle.Limit{{Name: "per-tenant", Rate: 1, Per: time.Hour, Key: throttle.KeyFromContext("tenant")}}, Wait: waiters.FailFast()},
		{Name: "costly", Limits: []throttle.Limit{perHour("small", 1)}},
	}
	lim := newLimiter(t, rules)
	byMethod := map[string]string{"/grpc.health.v1.Health/Check": checkRule, "/grpc.health.v1.Health/List": "tenant", "/grpc.health.v1.Health/Watch": "costly"}
	hc := dial(t, srv.Addr(), lim, grpcthrottle.WithMetadataKey("tenant", "tenant-id"),
		grpcthrottle.WithRule(func(_ context.Context, method string) (string, int) {
			if byMethod[method] == "costly" {
				return "costly", 2
			}
			return byMethod[method], 1
		}))
	ctx := context.Background()
	require.NoError(t, check(ctx, hc))

	t.Run("deadline while waiting", func(t *testing.T) {
		// The quota is an hour away: the wait would end after the
		// deadline, so the call fails at once with RESOURCE_EXHAUSTED.
		dctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err := check(dctx, hc)
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.ErrorIs(t, err, throttle.ErrLimited)
	})
	t.Run("canceled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		err := check(cctx, hc)
		assert.Equal(t, codes.Canceled, status.Code(err), "%v", err)
		assert.ErrorIs(t, err, context.Canceled)
	})
	t.Run("metadata keys", func(t *testing.T) {
		list := func(tenant string) error {
			mctx := ctx
			if tenant != "" {
				mctx = metadata.AppendToOutgoingContext(ctx, "tenant-id", tenant)
			}
			_, err := hc.List(mctx, &grpc_health_v1.HealthListRequest{})
			if status.Code(err) == codes.Unimplemented { // sent: the server has no List
				return nil
			}
			return err
		}
		assert.NoError(t, list("a"))
		assert.NoError(t, list("b"), "another tenant, another counter")
		assert.Equal(t, codes.ResourceExhausted, status.Code(list("a")))
		err := list("")
		assert.Equal(t, codes.Internal, status.Code(err))
		assert.ErrorIs(t, err, throttle.ErrMissingKey)
	})
	t.Run("cost too high", func(t *testing.T) {
		_, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
		assert.Equal(t, codes.Internal, status.Code(err))
		assert.ErrorIs(t, err, throttle.ErrCostTooHigh)
	})
	assert.Equal(t, int64(3), srv.Admitted(), "the first check and a list per tenant were sent")
}

// A call whose rule the limiter lacks goes to the fallback rule, or
// unlimited without one.
func TestFallback(t *testing.T) {
	srv := startServer(t, open)
	rules := []throttle.Rule{{Name: "other", Limits: []throttle.Limit{perHour("others", 1)}, Wait: waiters.FailFast()}}
	ctx := context.Background()

	unlimited := dial(t, srv.Addr(), newLimiter(t, rules))
	for range 3 {
		require.NoError(t, check(ctx, unlimited))
	}

	fallback := dial(t, srv.Addr(), newLimiter(t, rules), grpcthrottle.WithFallback("other"))
	require.NoError(t, check(ctx, fallback))
	err := check(ctx, fallback)
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "other", le.Rule)
	assert.Equal(t, int64(4), srv.Admitted())
}

// Unary calls and streams both go through the limiter, each once.
func TestUnaryAndStream(t *testing.T) {
	srv := startServer(t, open)
	shared := throttle.Limit{Name: "health", Rate: 3, Per: time.Hour}
	lim := newLimiter(t, []throttle.Rule{
		{Name: checkRule, Scope: "health", Limits: []throttle.Limit{shared}, Wait: waiters.FailFast()},
		{Name: watchRule, Scope: "health", Limits: []throttle.Limit{shared}, Wait: waiters.FailFast()},
	})
	hc := dial(t, srv.Addr(), lim)
	ctx := context.Background()
	require.NoError(t, check(ctx, hc))
	for range 2 {
		w, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
		require.NoError(t, err)
		drain(t, w)
	}
	_, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	assert.ErrorIs(t, err, throttle.ErrLimited)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.ErrorIs(t, check(ctx, hc), throttle.ErrLimited)
	assert.Equal(t, int64(3), srv.Admitted())
}

// drain reads w to its end, which must be io.EOF.
func drain(t *testing.T, w grpc_health_v1.Health_WatchClient) {
	t.Helper()
	for {
		_, err := w.Recv()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
	}
}

// A stream holds its in-flight slot until it ends, however it ends, and
// never after.
func TestStreamSlots(t *testing.T) {
	lim := newLimiter(t, []throttle.Rule{{Name: watchRule,
		Limits: []throttle.Limit{{Name: "streams", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency}},
		Wait:   waiters.FailFast()}})
	srv := startServer(t, open)
	hc := dial(t, srv.Addr(), lim)
	ctx := context.Background()
	hold := &grpc_health_v1.HealthCheckRequest{Service: quotaserver.HoldService}

	// free reports whether a stream can open now; it ends that stream.
	free := func() bool {
		w, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
		if err != nil {
			require.ErrorIs(t, err, throttle.ErrLimited)
			return false
		}
		drain(t, w)
		return true
	}
	eventuallyFree := func(t *testing.T) {
		t.Helper()
		// The slot is freed when gRPC finishes the stream, which for a
		// cancellation may come just after the caller sees the error.
		assert.Eventually(t, free, 5*time.Second, 5*time.Millisecond)
	}

	t.Run("EOF", func(t *testing.T) {
		for range 3 {
			require.True(t, free(), "each stream gives its slot back at io.EOF")
		}
	})
	t.Run("held, then canceled", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		w, err := hc.Watch(sctx, hold)
		require.NoError(t, err)
		_, err = w.Recv()
		require.NoError(t, err)
		assert.False(t, free(), "the open stream holds the slot")
		cancel()
		_, err = w.Recv()
		assert.Equal(t, codes.Canceled, status.Code(err))
		eventuallyFree(t)
	})
	t.Run("canceled without reading", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		_, err := hc.Watch(sctx, hold)
		require.NoError(t, err)
		cancel()
		eventuallyFree(t)
	})
	t.Run("refused by the server", func(t *testing.T) {
		tight := startServer(t, quotaserver.Quota{Rate: 1, Per: time.Hour, Burst: 1})
		hc := dial(t, tight.Addr(), newLimiter(t, []throttle.Rule{{Name: watchRule,
			Limits: []throttle.Limit{{Name: "streams", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency}},
			Wait:   waiters.FailFast(), Learn: throttle.Learning{Off: true}}}))
		for i := range 3 {
			w, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
			require.NoError(t, err, "call %d: the slot is free", i)
			_, err = w.Recv()
			if i == 0 {
				require.NoError(t, err)
				_, err = w.Recv()
				require.ErrorIs(t, err, io.EOF)
				continue
			}
			assert.Equal(t, codes.ResourceExhausted, status.Code(err), "call %d", i)
			assert.NotErrorIs(t, err, throttle.ErrLimited, "the server's answer, not ours")
		}
	})
	t.Run("connection closed", func(t *testing.T) {
		lim := newLimiter(t, []throttle.Rule{{Name: watchRule,
			Limits: []throttle.Limit{{Name: "streams", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency}},
			Wait:   waiters.FailFast()}}, throttle.WithStore(memstore.New()))
		other := startServer(t, open)
		conn := dialConn(t, other.Addr(), lim)
		w, err := grpc_health_v1.NewHealthClient(conn).Watch(ctx, hold)
		require.NoError(t, err)
		_, err = w.Recv()
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		hc := grpc_health_v1.NewHealthClient(dialConn(t, other.Addr(), lim))
		assert.Eventually(t, func() bool {
			w, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
			if err != nil {
				return false
			}
			drain(t, w)
			return true
		}, 5*time.Second, 5*time.Millisecond)
	})
}
