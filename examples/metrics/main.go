// Command metrics shows throttle's OpenTelemetry metrics exported to
// Prometheus: it sends requests through a limited transport to a local
// fake vendor (which answers one 429), then scrapes its own /metrics
// endpoint and prints the throttle_* series.
//
//	go run ./examples/metrics               # prints the scrape and exits
//	go run ./examples/metrics -listen :9464 # and keeps serving /metrics
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/otelthrottle"
	"github.com/quotakit/throttle/waiters"
)

func main() {
	listen := flag.String("listen", "", "keep serving /metrics on this address")
	flag.Parse()
	if err := run(context.Background(), *listen, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, listen string, out io.Writer) error {
	// The wiring: a Prometheus registry, OTel's Prometheus exporter as the
	// MeterProvider's reader, and throttle's hooks on that provider.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(ctx)
	hooks, err := otelthrottle.Hooks(mp, throttle.Hooks{})
	if err != nil {
		return err
	}
	metrics := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer metrics.Close()

	// A vendor that answers its 8th request with 429, Retry-After: 1.
	var n atomic.Int64
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 8 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer vendor.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	t, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
		Name: "api", Wait: waiters.UpTo(150 * time.Millisecond),
		Limits: []throttle.Limit{{Name: "per-second", Rate: 10, Per: time.Second, Burst: 5}},
	}}}, throttle.WithHooks(hooks))
	if err != nil {
		return err
	}
	gauges, err := otelthrottle.Gauges(mp, t.Limiter()) // requests being decided, by rule
	if err != nil {
		return err
	}
	defer gauges.Unregister()
	client := &http.Client{Transport: t}
	for range 20 {
		resp, err := client.Get(vendor.URL + "/items")
		var le *throttle.LimitError
		switch {
		case err == nil:
			resp.Body.Close()
		case errors.As(err, &le):
		default:
			return err
		}
	}

	resp, err := http.Get(metrics.URL)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "throttle_") {
			fmt.Fprintln(out, line)
		}
	}
	if listen == "" {
		return nil
	}
	fmt.Fprintf(out, "serving /metrics on %s\n", listen)
	http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	return http.ListenAndServe(listen, nil)
}
