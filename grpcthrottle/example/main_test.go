package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The bar: 8 client instances sharing a Redis, demand far above
// the quota, no RESOURCE_EXHAUSTED answer, and at least 95% of the
// server's quota used.
func TestFleetUsesQuotaWithoutExhausting(t *testing.T) {
	srv := redistest.Start(t)
	cfg := config{instances: 8, callers: 16, duration: 4 * time.Second, quota: serverQuota, redisURL: "redis://" + srv.Addr()}
	sum, err := run(context.Background(), cfg, testWriter{t})
	require.NoError(t, err)
	assert.Zero(t, sum.refused, "RESOURCE_EXHAUSTED answers")
	assert.Zero(t, sum.exhausted, "RESOURCE_EXHAUSTED answers the clients saw")
	assert.GreaterOrEqual(t, sum.used(), 95.0, "quota used, %%")
	assert.LessOrEqual(t, sum.admitted, sum.capacity)
}

// Without Redis, the instances share one in-process store.
func TestRunInProcess(t *testing.T) {
	cfg := config{instances: 8, callers: 4, duration: 2 * time.Second, quota: serverQuota}
	sum, err := run(context.Background(), cfg, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, sum.refused, "RESOURCE_EXHAUSTED answers")
	assert.Positive(t, sum.admitted)
}

// testWriter logs what run prints.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
