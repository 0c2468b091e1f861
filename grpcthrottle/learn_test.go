package grpcthrottle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/grpcthrottle/internal/quotaserver"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/waiters"
)

// A RESOURCE_EXHAUSTED answer with RetryInfo, got by instance A, pauses
// the rule for instance B too (same Redis): B refuses its calls for the
// server's delay without sending them.
func TestLearnedPauseIsShared(t *testing.T) {
	srv := startServer(t, quotaserver.Quota{Rate: 1, Per: 2 * time.Minute, Burst: 1})
	prefix := redistest.Prefix(t)
	rules := []throttle.Rule{{Name: checkRule, Limits: []throttle.Limit{perHour("checks", 100)}, Wait: waiters.FailFast()}}
	a := dial(t, srv.Addr(), newLimiter(t, rules, throttle.WithStore(newStore(t, prefix))))
	b := dial(t, srv.Addr(), newLimiter(t, rules, throttle.WithStore(newStore(t, prefix))))
	ctx := context.Background()

	require.NoError(t, check(ctx, a))
	err := check(ctx, a)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.NotErrorIs(t, err, throttle.ErrLimited, "the server's refusal")
	require.Equal(t, int64(1), srv.Refused())

	for _, hc := range []struct {
		name string
		c    func() error
	}{
		{"B", func() error { return check(ctx, b) }},
		{"A", func() error { return check(ctx, a) }},
	} {
		err := hc.c()
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), hc.name)
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le, hc.name)
		assert.Empty(t, le.Limit, "%s: a pause refused it, not a limit", hc.name)
		assert.InDelta(t, 2*time.Minute, le.RetryAfter, float64(5*time.Second), hc.name)
	}

	t.Run("waiting past the pause", func(t *testing.T) {
		// B may wait a minute for its quota: the pause is two minutes
		// away, so it is refused at once instead of sleeping until its
		// deadline (which had not passed when it was refused).
		dctx, cancel := context.WithTimeout(throttle.WithWaiter(ctx, waiters.UpTo(time.Minute)), time.Minute)
		defer cancel()
		err := check(dctx, b)
		assert.ErrorIs(t, err, throttle.ErrLimited)
		assert.NoError(t, dctx.Err(), "refused before its deadline, not after waiting for it")
	})
	assert.Equal(t, int64(1), srv.Admitted())
	assert.Equal(t, int64(1), srv.Refused(), "no call reached the server during the pause")
}

// A stream the server refuses teaches the same pause as a unary call.
func TestStreamLearnsPause(t *testing.T) {
	srv := startServer(t, quotaserver.Quota{Rate: 1, Per: time.Minute, Burst: 1})
	hc := dial(t, srv.Addr(), newLimiter(t, []throttle.Rule{{Name: watchRule, Limits: []throttle.Limit{perHour("watches", 100)}, Wait: waiters.FailFast()}}))
	ctx := context.Background()
	w, err := hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	require.NoError(t, err)
	drain(t, w)

	w, err = hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	require.NoError(t, err, "the stream opens; the server's refusal comes with the first message")
	_, err = w.Recv()
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	require.NotErrorIs(t, err, throttle.ErrLimited)

	_, err = hc.Watch(ctx, &grpc_health_v1.HealthCheckRequest{})
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le, "refused by the learned pause")
	assert.Empty(t, le.Limit)
	assert.InDelta(t, time.Minute, le.RetryAfter, float64(5*time.Second))
	assert.Equal(t, int64(1), srv.Refused(), "the third stream was not sent")
}
