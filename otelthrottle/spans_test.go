package otelthrottle_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/otelthrottle"
	"github.com/quotakit/throttle/waiters"
)

// spanEvents sends requests to paths through a transport built with
// SpanHooks, each under a span of its own, and returns each span's events
// as attribute maps (the wait, which depends on the clock, as "wait>0"),
// and each request's error.
func spanEvents(t *testing.T, policy throttle.Policy, paths []string, opts ...throttle.Option) ([][]map[string]string, []error) {
	t.Helper()
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { require.NoError(t, tp.Shutdown(context.Background())) }()
	var theirs atomic.Int64
	hooks := otelthrottle.SpanHooks(throttle.Hooks{OnDecision: func(throttle.DecisionEvent) { theirs.Add(1) }})
	tr, err := throttle.NewTransport(base, policy, append(opts, throttle.WithHooks(hooks))...)
	require.NoError(t, err)

	errs := make([]error, len(paths))
	for i, path := range paths {
		ctx, span := tp.Tracer("test").Start(context.Background(), path)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, vendor.URL+path, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
		errs[i] = err
		span.End()
	}

	ended := rec.Ended()
	require.Len(t, ended, len(paths))
	out := make([][]map[string]string, len(ended))
	var events int64
	for i, s := range ended {
		for _, e := range s.Events() {
			require.Equal(t, otelthrottle.EventName, e.Name)
			out[i] = append(out[i], eventAttrs(t, e.Attributes))
			events++
		}
	}
	assert.Equal(t, theirs.Load(), events, "one event per decision; the caller's own hook still runs")
	return out, errs
}

func eventAttrs(t *testing.T, kvs []attribute.KeyValue) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range kvs {
		if kv.Key == "throttle.wait" {
			require.Equal(t, attribute.FLOAT64, kv.Value.Type(), "the wait is in seconds, as a float")
			if kv.Value.AsFloat64() > 0 {
				m[string(kv.Key)] = ">0"
			}
			continue
		}
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func TestSpanHooksRecordTheDecisionOnTheRequestsSpan(t *testing.T) {
	policy := throttle.Policy{Rules: []throttle.Rule{
		{Name: "api", Path: "/api", Wait: waiters.FailFast(),
			Limits: []throttle.Limit{{Name: "per-minute", Rate: 1, Per: time.Minute}}},
		{Name: "slow", Path: "/slow", Wait: waiters.Block(),
			Limits: []throttle.Limit{{Name: "paced", Rate: 1, Per: 20 * time.Millisecond, Burst: 1}}},
		{Name: "new", Path: "/new", Wait: waiters.FailFast(), Shadow: true,
			Limits: []throttle.Limit{{Name: "tight", Rate: 1, Per: time.Minute}}},
	}}
	got, errs := spanEvents(t, policy, []string{"/api", "/api", "/slow", "/slow", "/new", "/new", "/other"})

	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], throttle.ErrLimited)
	for _, err := range errs[2:] {
		assert.NoError(t, err)
	}
	assert.Equal(t, [][]map[string]string{
		{{"throttle.rule": "api", "throttle.outcome": "allowed"}},
		{{"throttle.rule": "api", "throttle.outcome": "refused", "throttle.limit": "per-minute", "throttle.wait": ">0"}},
		{{"throttle.rule": "slow", "throttle.outcome": "allowed"}},
		{{"throttle.rule": "slow", "throttle.outcome": "waited", "throttle.wait": ">0"}},
		{{"throttle.rule": "new", "throttle.outcome": "allowed", "throttle.shadow": "true"}},
		{{"throttle.rule": "new", "throttle.outcome": "refused", "throttle.limit": "tight", "throttle.wait": ">0",
			"throttle.shadow": "true"}},
		nil, // no rule matched: no decision, no event
	}, got)
}

func TestSpanHooksRecordTheFallback(t *testing.T) {
	policy := throttle.Policy{Instances: 2, Rules: []throttle.Rule{{
		Name: "api", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "per-minute", Rate: 10, Per: time.Minute}},
	}}}
	got, errs := spanEvents(t, policy, []string{"/"}, throttle.WithStore(downStore{}))
	require.NoError(t, errs[0], "the local share decides")
	assert.Equal(t, [][]map[string]string{
		{{"throttle.rule": "api", "throttle.outcome": "allowed", "throttle.fallback": "local"}},
	}, got)
}

func TestSpanHooksWithoutARecordingSpan(t *testing.T) {
	var theirs int
	h := otelthrottle.SpanHooks(throttle.Hooks{OnDecision: func(throttle.DecisionEvent) { theirs++ }})
	nonRecording := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1},
	}))
	for _, ctx := range []context.Context{nil, context.Background(), nonRecording} {
		h.OnDecision(throttle.DecisionEvent{Context: ctx, Rule: "api", Outcome: throttle.Refused})
	}
	assert.Equal(t, 3, theirs, "nothing to record on, and next still runs")
	assert.Nil(t, otelthrottle.SpanHooks(throttle.Hooks{}).OnPause, "only OnDecision is wrapped")
}
