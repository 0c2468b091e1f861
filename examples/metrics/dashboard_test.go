package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/otelthrottle"
)

// The Grafana dashboard in docs/grafana queries only series that
// otelthrottle's metrics become through OpenTelemetry's Prometheus
// exporter, by labels those series have: every hook fires once here, and
// every metric and label of every panel's query is found in the scrape.
func TestGrafanaDashboardQueriesRealSeries(t *testing.T) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	require.NoError(t, err)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	h, err := otelthrottle.Hooks(mp, throttle.Hooks{})
	require.NoError(t, err)

	storeErr := errors.New("store down")
	h.OnDecision(throttle.DecisionEvent{Rule: "api", Outcome: throttle.Waited, Wait: time.Second, StoreTime: time.Millisecond, Tenant: "acme", Class: "bulk"})
	h.OnDecision(throttle.DecisionEvent{Rule: "api", Outcome: throttle.Refused, Limit: "per-second", StoreTime: time.Millisecond})
	h.OnDecision(throttle.DecisionEvent{Rule: "api", Outcome: throttle.Allowed, Fallback: throttle.FailLocal, StoreErr: storeErr})
	h.OnDecision(throttle.DecisionEvent{Rule: "api", Outcome: throttle.Allowed, Uncovered: true})
	h.OnPause(throttle.PauseEvent{Rule: "api", Status: http.StatusTooManyRequests, Pause: time.Minute})
	h.OnSettle(throttle.SettleEvent{Rule: "api", Charged: 10, Cost: 4})
	h.OnStoreState(throttle.StoreEvent{State: throttle.StoreFailing, Err: storeErr})
	// The gauges observe a limiter: one request holds a concurrency slot.
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{Name: "api",
		Limits: []throttle.Limit{{Name: "slots", Rate: 2, Per: time.Minute, Algorithm: throttle.Concurrency}}}}})
	require.NoError(t, err)
	reg, err := otelthrottle.Gauges(mp, lim)
	require.NoError(t, err)
	defer reg.Unregister()
	permit, err := lim.Allow(context.Background(), "api")
	require.NoError(t, err)
	defer permit.Done()

	srv := httptest.NewServer(promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	labels := map[string]map[string]bool{} // metric → its labels
	for _, line := range strings.Split(string(body), "\n") {
		m := regexp.MustCompile(`^(throttle_[a-z_]+)\{([^}]*)\}`).FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if labels[m[1]] == nil {
			labels[m[1]] = map[string]bool{}
		}
		for _, kv := range regexp.MustCompile(`(\w+)="`).FindAllStringSubmatch(m[2], -1) {
			labels[m[1]][kv[1]] = true
		}
	}

	raw, err := os.ReadFile("../../docs/grafana/throttle.json")
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			// Metric names, outside the label lists of "by (...)".
			bare := regexp.MustCompile(`by \([^)]*\)`).ReplaceAllString(tg.Expr, "")
			selectors := regexp.MustCompile(`(throttle_[a-z_]+)(\{[^}]*\})?`).FindAllStringSubmatch(bare, -1)
			require.NotEmpty(t, selectors, "%s: %s", p.Title, tg.Expr)
			for _, s := range selectors {
				have, ok := labels[s[1]]
				if !assert.True(t, ok, "%s: no series %s in the scrape", p.Title, s[1]) {
					continue
				}
				used[s[1]] = true
				var names []string
				for _, kv := range regexp.MustCompile(`(\w+)\s*=~?\s*"`).FindAllStringSubmatch(s[2], -1) {
					names = append(names, kv[1])
				}
				if by := regexp.MustCompile(`by \(([^)]*)\)`).FindStringSubmatch(tg.Expr); by != nil {
					for _, n := range strings.Split(by[1], ",") {
						names = append(names, strings.TrimSpace(n))
					}
				}
				for _, n := range names {
					assert.True(t, have[n], "%s: %s has no label %s (has %v)", p.Title, s[1], n, have)
				}
			}
		}
	}
	for _, m := range []string{"throttle_decisions_total", "throttle_wait_duration_seconds_bucket", "throttle_store_status", "throttle_pauses_active",
		"throttle_fallbacks_total", "throttle_store_errors_total", "throttle_tenant_decisions_total", "throttle_settlements_total", "throttle_vendor_limited_total",
		"throttle_requests_pending", "throttle_requests_in_flight", "throttle_anchor_uncovered_total"} {
		assert.True(t, used[m], "the dashboard shows %s", m)
	}
}
