package otelthrottle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/otelthrottle"
)

// TestGauges: throttle.requests.pending and throttle.requests.in_flight
// report what two limiters' requests hold, summed by rule, while they are
// held: three slots of a concurrency limit of two per limiter held, one
// request waiting for a slot; then the waiter granted a released slot;
// then everything done. Unregistering ends the observations.
func TestGauges(t *testing.T) {
	reader, mp := meter(t)
	policy := throttle.Policy{Rules: []throttle.Rule{
		{Name: "upload", Limits: []throttle.Limit{{Name: "slots", Rate: 2, Per: time.Minute, Algorithm: throttle.Concurrency}}},
		{Name: "api", Limits: []throttle.Limit{{Name: "rate", Rate: 100, Per: time.Second}}},
	}}
	a, err := throttle.NewLimiter(policy)
	require.NoError(t, err)
	b, err := throttle.NewLimiter(policy)
	require.NoError(t, err)
	reg, err := otelthrottle.Gauges(mp, a, b)
	require.NoError(t, err)

	ctx := context.Background()
	allow := func(lim *throttle.Limiter) *throttle.Permit {
		p, err := lim.Allow(ctx, "upload")
		require.NoError(t, err)
		return p
	}
	a1, a2, b1 := allow(a), allow(a), allow(b)
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	waited := make(chan *throttle.Permit)
	go func() {
		p, err := a.Wait(throttle.WithWaiter(waitCtx, throttle.WaiterFunc(func(context.Context) time.Duration { return time.Minute })), "upload")
		assert.NoError(t, err)
		waited <- p
	}()
	require.Eventually(t, func() bool { return a.Stats()[0].Deciding == 1 }, 10*time.Second, time.Millisecond, "the fourth request waits for a slot")

	m := collect(t, reader)
	assert.Equal(t, map[string]int64{"throttle.rule=upload": 1, "throttle.rule=api": 0}, sums(t, m["throttle.requests.pending"]))
	assert.Equal(t, map[string]int64{"throttle.rule=upload": 3}, sums(t, m["throttle.requests.in_flight"]), "only rules with a concurrency limit")
	assertUpDown(t, m["throttle.requests.pending"])
	assertUpDown(t, m["throttle.requests.in_flight"])

	a1.Done() // the waiter takes the slot
	a3 := <-waited
	m = collect(t, reader)
	assert.Equal(t, map[string]int64{"throttle.rule=upload": 0, "throttle.rule=api": 0}, sums(t, m["throttle.requests.pending"]))
	assert.Equal(t, map[string]int64{"throttle.rule=upload": 3}, sums(t, m["throttle.requests.in_flight"]))

	a2.Done()
	a3.Done()
	b1.Done()
	m = collect(t, reader)
	assert.Equal(t, map[string]int64{"throttle.rule=upload": 0}, sums(t, m["throttle.requests.in_flight"]))

	require.NoError(t, reg.Unregister())
	m = collect(t, reader)
	for _, name := range []string{"throttle.requests.pending", "throttle.requests.in_flight"} {
		if data, ok := m[name]; ok {
			assert.Empty(t, sums(t, data), "%s after Unregister", name)
		}
	}
}

// assertUpDown checks that data is a cumulative non-monotonic sum: an
// UpDownCounter, as OpenTelemetry's conventions write a count that goes
// up and down.
func assertUpDown(t *testing.T, data metricdata.Aggregation) {
	t.Helper()
	s, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "%T", data)
	assert.False(t, s.IsMonotonic)
	assert.Equal(t, metricdata.CumulativeTemporality, s.Temporality)
}

// TestGaugesUnitsAndDescriptions: the gauges carry UCUM units and
// descriptions, and a meter version, like the other instruments.
func TestGaugesUnitsAndDescriptions(t *testing.T) {
	reader, mp := meter(t)
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{
		{Name: "upload", Limits: []throttle.Limit{{Name: "slots", Rate: 2, Per: time.Minute, Algorithm: throttle.Concurrency}}},
	}})
	require.NoError(t, err)
	_, err = otelthrottle.Gauges(mp, lim)
	require.NoError(t, err)
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.NotEmpty(t, rm.ScopeMetrics[0].Scope.Version)
	units := map[string]string{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		units[m.Name] = m.Unit
		assert.NotEmpty(t, m.Description, m.Name)
	}
	assert.Equal(t, map[string]string{"throttle.requests.pending": "{request}", "throttle.requests.in_flight": "{request}"}, units)
}
