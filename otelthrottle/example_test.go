package otelthrottle_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/otelthrottle"
	"github.com/quotakit/throttle/waiters"
)

// Record a transport's decisions with the OpenTelemetry SDK. A real
// service passes its own MeterProvider, wired to an exporter such as
// go.opentelemetry.io/otel/exporters/prometheus.
func ExampleHooks() {
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	hooks, err := otelthrottle.Hooks(mp, throttle.Hooks{})
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name: "api", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "per-minute", Rate: 1, Per: time.Minute}},
	}}}, throttle.WithHooks(hooks))
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	for range 2 {
		if resp, err := client.Get(vendor.URL); err == nil {
			resp.Body.Close()
		}
	}

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name != "throttle.decisions" {
			continue
		}
		total := int64(0)
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			total += p.Value
		}
		fmt.Println(m.Name, total)
	}
	// Output: throttle.decisions 2
}

// Record each decision on the request's span. Here the caller starts the
// span; under otelhttp.NewTransport(t) the event goes on otelhttp's client
// span instead. A real service uses its own TracerProvider; this one keeps
// the spans in memory to print them.
func ExampleSpanHooks() {
	vendor := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer vendor.Close()

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())

	t, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name: "api", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "per-minute", Rate: 1, Per: time.Minute}},
	}}}, throttle.WithHooks(otelthrottle.SpanHooks(throttle.Hooks{})))
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	for range 2 {
		ctx, span := tp.Tracer("example").Start(context.Background(), "call vendor")
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, vendor.URL, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
		span.End()
	}

	for _, s := range spans.Ended() {
		for _, e := range s.Events() {
			fmt.Print(s.Name(), ": ", e.Name)
			for _, kv := range e.Attributes {
				if kv.Key == "throttle.wait" {
					fmt.Printf(" %s=%.0fs", kv.Key, kv.Value.AsFloat64())
					continue
				}
				fmt.Printf(" %s=%s", kv.Key, kv.Value.String())
			}
			fmt.Println()
		}
	}
	// Output:
	// call vendor: throttle.decision throttle.rule=api throttle.outcome=allowed
	// call vendor: throttle.decision throttle.rule=api throttle.outcome=refused throttle.limit=per-minute throttle.wait=60s
}

// Observe how many requests of a transport are being decided and how many
// hold concurrency slots. Here one upload holds its slot (its response
// body not yet closed) when the metrics are read.
func ExampleGauges() {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "uploaded") }))
	defer vendor.Close()

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())

	t, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "upload",
		Limits: []throttle.Limit{{Name: "slots", Rate: 4, Per: time.Minute, Algorithm: throttle.Concurrency}},
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	reg, err := otelthrottle.Gauges(mp, t.Limiter())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer reg.Unregister()

	resp, err := (&http.Client{Transport: t}).Get(vendor.URL)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer resp.Body.Close()

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
			rule, _ := p.Attributes.Value("throttle.rule")
			fmt.Println(m.Name, rule.AsString(), p.Value)
		}
	}
	// Output:
	// throttle.requests.pending upload 0
	// throttle.requests.in_flight upload 1
}
