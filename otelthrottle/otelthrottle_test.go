package otelthrottle_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/otelthrottle"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// meter returns a meter provider and the reader of its metrics, shut down
// when t ends.
func meter(t *testing.T) (*sdkmetric.ManualReader, *sdkmetric.MeterProvider) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	return reader, mp
}

// downStore is a shared store that cannot be reached.
type downStore struct{}

var errDown = errors.New("connection refused")

func (downStore) Take(context.Context, *quota.Demand) (quota.Decision, error) {
	return quota.Decision{}, errDown
}
func (downStore) Cancel(context.Context, *quota.Reservation) error           { return errDown }
func (downStore) Pause(context.Context, string, string, time.Duration) error { return errDown }

// collect reads every metric from reader, by name.
func collect(t *testing.T, reader *sdkmetric.ManualReader) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelthrottle.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sums returns a counter's points as "attr=value,..." → value.
func sums(t *testing.T, data metricdata.Aggregation) map[string]int64 {
	t.Helper()
	s, ok := data.(metricdata.Sum[int64])
	require.True(t, ok, "%T is not an int64 sum", data)
	out := map[string]int64{}
	for _, p := range s.DataPoints {
		out[attrs(p.Attributes)] = p.Value
	}
	return out
}

func gauge(t *testing.T, data metricdata.Aggregation) int64 {
	t.Helper()
	g, ok := data.(metricdata.Gauge[int64])
	require.True(t, ok, "%T is not an int64 gauge", data)
	require.Len(t, g.DataPoints, 1)
	return g.DataPoints[0].Value
}

func attrs(s attribute.Set) string {
	out := ""
	for _, kv := range s.ToSlice() {
		if out != "" {
			out += ","
		}
		out += string(kv.Key) + "=" + kv.Value.String()
	}
	return out
}

func TestMetricsOfAScriptedSequence(t *testing.T) {
	var calls atomic.Int64
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
		calls.Add(1)
	}))
	defer vendor.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	reader, mp := meter(t)
	var theirs atomic.Int64
	hooks, err := otelthrottle.Hooks(mp, throttle.Hooks{OnDecision: func(throttle.DecisionEvent) { theirs.Add(1) }})
	require.NoError(t, err)

	policy := throttle.Policy{Rules: []throttle.Rule{
		{Name: "api", Path: "/api", Wait: waiters.FailFast(),
			Limits: []throttle.Limit{{Name: "per-minute", Rate: 2, Per: time.Minute}}},
		{Name: "slow", Path: "/slow", Wait: waiters.Block(),
			Limits: []throttle.Limit{{Name: "paced", Rate: 1, Per: 50 * time.Millisecond, Burst: 1}}},
		{Name: "busy", Path: "/busy", Wait: waiters.FailFast(), Learn: throttle.Learning{Jitter: -1}},
		{Name: "new", Path: "/new", Wait: waiters.FailFast(), Shadow: true,
			Limits: []throttle.Limit{{Name: "tight", Rate: 1, Per: time.Minute}}},
	}}
	tr, err := throttle.NewTransport(base, policy, throttle.WithHooks(hooks))
	require.NoError(t, err)
	send := func(tr http.RoundTripper, path string) error {
		req, _ := http.NewRequest(http.MethodGet, vendor.URL+path, nil)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	// api: 2 allowed, 1 refused by its limit.
	require.NoError(t, send(tr, "/api"))
	require.NoError(t, send(tr, "/api"))
	require.ErrorIs(t, send(tr, "/api"), throttle.ErrLimited)
	// slow: 1 allowed, 1 waited for its slot.
	require.NoError(t, send(tr, "/slow"))
	require.NoError(t, send(tr, "/slow"))
	// busy: the vendor says 429, Retry-After 30: a pause; the next is refused by it.
	require.NoError(t, send(tr, "/busy"))
	require.ErrorIs(t, send(tr, "/busy"), throttle.ErrLimited)
	// new (shadow): 1 allowed, 1 refused but sent.
	require.NoError(t, send(tr, "/new"))
	require.NoError(t, send(tr, "/new"))

	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"throttle.outcome=allowed,throttle.rule=api,throttle.shadow=false":                           2,
		"throttle.limit=per-minute,throttle.outcome=refused,throttle.rule=api,throttle.shadow=false": 1,
		"throttle.outcome=allowed,throttle.rule=slow,throttle.shadow=false":                          1,
		"throttle.outcome=waited,throttle.rule=slow,throttle.shadow=false":                           1,
		"throttle.outcome=allowed,throttle.rule=busy,throttle.shadow=false":                          1,
		"throttle.outcome=refused,throttle.rule=busy,throttle.shadow=false":                          1, // by the pause: no limit
		"throttle.outcome=allowed,throttle.rule=new,throttle.shadow=true":                            1,
		"throttle.limit=tight,throttle.outcome=refused,throttle.rule=new,throttle.shadow=true":       1,
	}, sums(t, got["throttle.decisions"]))
	assert.Equal(t, map[string]int64{"http.response.status_code=429,throttle.rule=busy": 1}, sums(t, got["throttle.vendor.limited"]))
	assert.Equal(t, int64(1), gauge(t, got["throttle.pauses.active"]), "busy is paused")
	assert.Equal(t, map[string]int64{"throttle.store.state=up": 1, "throttle.store.state=failing": 0, "throttle.store.state=down": 0},
		sums(t, got["throttle.store.status"]))

	wait, ok := got["throttle.wait.duration"].(metricdata.Histogram[float64])
	require.True(t, ok)
	require.Len(t, wait.DataPoints, 1)
	assert.Equal(t, uint64(1), wait.DataPoints[0].Count, "one request waited")
	assert.Greater(t, wait.DataPoints[0].Sum, 0.0)
	assert.Equal(t, "throttle.outcome=waited,throttle.rule=slow", attrs(wait.DataPoints[0].Attributes))

	st, ok := got["throttle.store.duration"].(metricdata.Histogram[float64])
	require.True(t, ok)
	var n uint64
	for _, p := range st.DataPoints {
		n += p.Count
	}
	assert.Equal(t, uint64(8), n, "every decision but the one the local pause refused called the store")

	assert.Equal(t, int64(9), theirs.Load(), "the caller's own hook still runs")
	assert.Equal(t, int64(7), calls.Load(), "sent: api 2, slow 2, busy 1, new (shadow) 2")
}

func TestMetricsOfAStoreOutage(t *testing.T) {
	reader, mp := meter(t)
	hooks, err := otelthrottle.Hooks(mp, throttle.Hooks{})
	require.NoError(t, err)
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := throttle.NewTransport(base, throttle.Policy{Instances: 2, Rules: []throttle.Rule{{
		Name: "api", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "per-minute", Rate: 10, Per: time.Minute}},
	}}}, throttle.WithStore(downStore{}), throttle.WithHooks(hooks))
	require.NoError(t, err)

	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, vendor.URL, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, "the local share decides")
		resp.Body.Close()
	}
	got := collect(t, reader)
	fallbacks := sums(t, got["throttle.fallbacks"])
	assert.Equal(t, int64(3), fallbacks["throttle.fallback=local,throttle.rule=api"])
	errs := sums(t, got["throttle.store.errors"])
	assert.Positive(t, errs["throttle.rule=api,throttle.store.operation=take"])
	assert.Equal(t, map[string]int64{"throttle.store.state=up": 0, "throttle.store.state=failing": 0, "throttle.store.state=down": 1},
		sums(t, got["throttle.store.status"]), "after 3 failures the breaker is open")
}

func TestInstrumentsCarryUnitsAndDescriptions(t *testing.T) {
	reader, mp := meter(t)
	h, err := otelthrottle.Hooks(mp, throttle.Hooks{})
	require.NoError(t, err)
	// One event of each kind, so that every instrument has a point.
	h.OnDecision(throttle.DecisionEvent{Context: context.Background(), Rule: "api", Outcome: throttle.Waited,
		Wait: time.Second, StoreTime: time.Millisecond, Fallback: throttle.FailLocal, StoreErr: errDown, Tenant: "acme", Uncovered: true})
	h.OnPause(throttle.PauseEvent{Rule: "api", Status: http.StatusTooManyRequests, Pause: time.Hour})
	h.OnSettle(throttle.SettleEvent{Rule: "api", Charged: 50, Cost: 7})

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	require.Len(t, rm.ScopeMetrics, 1)
	assert.NotEmpty(t, rm.ScopeMetrics[0].Scope.Version, "the meter carries the library's version")
	// No name is both an instrument's and an attribute's.
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, key := range []string{"throttle.rule", "throttle.limit", "throttle.outcome", "throttle.shadow", "throttle.fallback",
			"throttle.store.operation", "throttle.settlement", "throttle.wait", "throttle.class", "throttle.tenant", "throttle.store.state"} {
			assert.NotEqual(t, key, m.Name)
		}
	}
	units := map[string]string{}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		units[m.Name] = m.Unit
		assert.NotEmpty(t, m.Description, m.Name)
	}
	assert.Equal(t, map[string]string{
		"throttle.decisions":        "{request}",
		"throttle.tenant.decisions": "{request}",
		"throttle.wait.duration":    "s",
		"throttle.store.duration":   "s",
		"throttle.store.errors":     "{error}",
		"throttle.fallbacks":        "{request}",
		"throttle.vendor.limited":   "{response}",
		"throttle.settlements":      "{request}",
		"throttle.anchor.uncovered": "{request}",
		"throttle.pauses.active":    "{pause}",
		"throttle.store.status":     "{state}",
	}, units)
}

func TestMetricsOfSettlements(t *testing.T) {
	reader, mp := meter(t)
	var theirs atomic.Int64
	h, err := otelthrottle.Hooks(mp, throttle.Hooks{OnSettle: func(throttle.SettleEvent) { theirs.Add(1) }})
	require.NoError(t, err)
	for _, ev := range []throttle.SettleEvent{
		{Rule: "graphql", Charged: 50, Cost: 7},
		{Rule: "graphql", Charged: 50, Cost: 12},
		{Rule: "graphql", Charged: 50, Cost: 50},
		{Rule: "graphql", Charged: 50, Cost: 61},
		{Rule: "graphql", Charged: 50},
		{Rule: "graphql", Charged: 50, Cost: 7, Err: errDown},
		{Rule: "graphql", Charged: 50, Err: fmt.Errorf("%w: a settled cost must be at least 1", throttle.ErrInvalidPolicy)},
	} {
		h.OnSettle(ev)
	}
	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"throttle.rule=graphql,throttle.settlement=refund":     2,
		"throttle.rule=graphql,throttle.settlement=exact":      1,
		"throttle.rule=graphql,throttle.settlement=extra":      1,
		"throttle.rule=graphql,throttle.settlement=unreported": 1,
		"throttle.rule=graphql,throttle.settlement=failed":     2,
	}, sums(t, got["throttle.settlements"]))
	assert.Equal(t, map[string]int64{"throttle.rule=graphql,throttle.store.operation=settle": 1}, sums(t, got["throttle.store.errors"]),
		"a store error is a store error; a bad cost is not")
	assert.Equal(t, int64(7), theirs.Load(), "the caller's own hook still runs")
}

// TestMetricsOfUncoveredSends: a request an Anchor rule sent uncovered
// (DecisionEvent.Uncovered) is counted by rule; others are not.
func TestMetricsOfUncoveredSends(t *testing.T) {
	reader, mp := meter(t)
	h, err := otelthrottle.Hooks(mp, throttle.Hooks{})
	require.NoError(t, err)
	for _, ev := range []throttle.DecisionEvent{
		{Rule: "search", Outcome: throttle.Waited, Uncovered: true},
		{Rule: "search", Outcome: throttle.Allowed, Uncovered: true},
		{Rule: "search", Outcome: throttle.Allowed},
		{Rule: "core", Outcome: throttle.Allowed},
	} {
		h.OnDecision(ev)
	}
	got := collect(t, reader)
	assert.Equal(t, map[string]int64{"throttle.rule=search": 2}, sums(t, got["throttle.anchor.uncovered"]))
}

// TestMetricsByClassAndTenant: decisions and waits carry the request's
// class, and a request of a tenant is counted by tenant too, on a
// Limiter whose bulk class stops at its headroom (2 of 10) and whose
// limit is shared among tenants.
func TestMetricsByClassAndTenant(t *testing.T) {
	reader, mp := meter(t)
	hooks, err := otelthrottle.Hooks(mp, throttle.Hooks{})
	require.NoError(t, err)
	lim, err := throttle.NewLimiter(throttle.Policy{
		Classes: []throttle.Class{{Name: "interactive"}, {Name: "bulk", Headroom: 0.2}},
		Rules: []throttle.Rule{{Name: "sync", Class: "bulk", Wait: waiters.FailFast(),
			Limits: []throttle.Limit{{Name: "calls", Rate: 10, Per: time.Hour, Tenant: throttle.KeyFromContext("customer")}}}},
	}, throttle.WithHooks(hooks))
	require.NoError(t, err)
	acme := throttle.WithKey(context.Background(), "customer", "acme")
	for range 9 {
		_, _ = lim.Allow(acme, "sync")
	}
	_, err = lim.Allow(throttle.WithClass(acme, "interactive"), "sync")
	require.NoError(t, err)

	m := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"throttle.class=bulk,throttle.outcome=allowed,throttle.rule=sync,throttle.shadow=false":                      8,
		"throttle.class=bulk,throttle.limit=calls,throttle.outcome=refused,throttle.rule=sync,throttle.shadow=false": 1,
		"throttle.class=interactive,throttle.outcome=allowed,throttle.rule=sync,throttle.shadow=false":               1,
	}, sums(t, m["throttle.decisions"]))
	assert.Equal(t, map[string]int64{
		"throttle.outcome=allowed,throttle.rule=sync,throttle.tenant=acme": 9,
		"throttle.outcome=refused,throttle.rule=sync,throttle.tenant=acme": 1,
	}, sums(t, m["throttle.tenant.decisions"]))
}
