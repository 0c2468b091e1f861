package quotaserver

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bucket, step by step: 10 a second (one per 100 ms), bursts of 2.
func TestTake(t *testing.T) {
	var now time.Time
	epoch := time.Unix(1_700_000_000, 0)
	q := Quota{Rate: 10, Per: time.Second, Burst: 2}
	s := &Server{bucket: bucket{q: q}, now: func() time.Time { return now }}
	steps := []struct {
		at         time.Duration
		ok         bool
		retryAfter time.Duration
	}{
		{0, true, 0},
		{0, true, 0},
		{0, false, 100 * time.Millisecond},
		{100 * time.Millisecond, true, 0},
		{100 * time.Millisecond, false, 100 * time.Millisecond},
		{350 * time.Millisecond, true, 0},
		{350 * time.Millisecond, true, 0},
		{350 * time.Millisecond, false, 100 * time.Millisecond}, // full again: 2 at once, no more
		{time.Hour, true, 0},
		{time.Hour, true, 0},
		{time.Hour, false, 100 * time.Millisecond},
	}
	for i, st := range steps {
		now = epoch.Add(st.at)
		err := s.take(time.Time{})
		if st.ok {
			assert.NoError(t, err, "step %d", i)
			continue
		}
		require.Error(t, err, "step %d", i)
		got := status.Convert(err)
		assert.Equal(t, codes.ResourceExhausted, got.Code(), "step %d", i)
		require.Len(t, got.Details(), 1, "step %d", i)
		assert.Equal(t, st.retryAfter, got.Details()[0].(*errdetails.RetryInfo).GetRetryDelay().AsDuration(), "step %d", i)
	}
	assert.Equal(t, int64(7), s.Admitted())
	assert.Equal(t, int64(4), s.Refused())
	assert.Equal(t, time.Hour, s.Span())
	assert.Equal(t, int64(2+36000), q.Capacity(time.Hour))

	// Replayed in reverse order, the same instants make the same calls
	// over the quota.
	calls := s.Calls()
	require.Len(t, calls, len(steps))
	var arrived []time.Time
	for i, c := range calls {
		assert.Equal(t, epoch.Add(steps[i].at), c.Arrived, "call %d", i)
		assert.Equal(t, !steps[i].ok, c.Refused, "call %d", i)
		assert.True(t, c.Sent.IsZero(), "call %d was not stamped", i)
		arrived = append([]time.Time{c.Arrived}, arrived...)
	}
	assert.Equal(t, 4, q.Over(arrived))
	assert.Equal(t, 0, q.Over(arrived[:2]))
}

// Stamp tells the server when a call was sent.
func TestStamp(t *testing.T) {
	srv, err := Start(Quota{Rate: 10, Per: time.Second, Burst: 1}, nil)
	require.NoError(t, err)
	defer srv.Stop()
	conn, err := grpc.NewClient(srv.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(Stamp))
	require.NoError(t, err)
	defer conn.Close()
	before := time.Now()
	hc := grpc_health_v1.NewHealthClient(conn)
	_, err = hc.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = hc.Check(context.Background(), &grpc_health_v1.HealthCheckRequest{})
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	calls := srv.Calls()
	require.Len(t, calls, 2)
	for i, c := range calls {
		assert.False(t, c.Sent.Before(before), "call %d: sent %v, before the call %v", i, c.Sent, before)
		assert.False(t, c.Arrived.Before(c.Sent), "call %d arrived before it was sent", i)
		assert.Equal(t, i == 1, c.Refused, "call %d", i)
	}
}
