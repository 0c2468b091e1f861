package quotaserver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bucket, step by step: 10 a second (one per 100 ms), bursts of 2.
func TestTake(t *testing.T) {
	var now time.Time
	epoch := time.Unix(1_700_000_000, 0)
	s := &Server{q: Quota{Rate: 10, Per: time.Second, Burst: 2}, now: func() time.Time { return now }}
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
		err := s.take()
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
	assert.Equal(t, int64(2+36000), s.q.Capacity(time.Hour))
}
