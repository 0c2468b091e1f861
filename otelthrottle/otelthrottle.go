// Package otelthrottle records a throttle [throttle.Transport]'s decisions,
// learned pauses and store health as OpenTelemetry metrics. It depends on
// the OpenTelemetry metric API only; the application chooses the SDK and
// exporter (Prometheus, OTLP...) through the MeterProvider it passes.
//
//	hooks, err := otelthrottle.Hooks(otel.GetMeterProvider(), throttle.Hooks{})
//	t, err := throttle.NewTransport(nil, policy, throttle.WithHooks(hooks))
//
// # Instruments
//
//   - throttle.decisions (counter): every decision, by rule, limit,
//     outcome (allowed, waited, refused, gave_up, failed) and shadow;
//   - throttle.wait (histogram, seconds): how long requests waited, by
//     rule and outcome (waited, gave_up);
//   - throttle.store.duration (histogram, seconds): the store's decision
//     call, by rule;
//   - throttle.store.errors (counter): decisions and pauses the store
//     could not make, by rule and operation (take, pause);
//   - throttle.fallback (counter): decisions made by a rule's failure
//     mode because the store could not decide, by rule and mode;
//   - throttle.vendor.limited (counter): "slow down" answers from vendors
//     that paused a rule, by rule and HTTP status;
//   - throttle.pauses.active (gauge): rules whose learned pause has not
//     ended yet;
//   - throttle.store.state (gauge): 0 up, 1 failing (fallback active),
//     2 down (breaker open), as last reported.
//
// Attribute values are rule and limit names from the policy, never keys,
// so no request data (tokens, user ids) reaches a metric.
package otelthrottle

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/quotakit/throttle"
)

// ScopeName is the instrumentation scope of the meter.
const ScopeName = "github.com/quotakit/throttle/otelthrottle"

// Histogram bucket boundaries, in seconds: waits from a millisecond to ten
// minutes (the default MaxPause), store calls from 50 µs to a second.
var (
	waitBounds  = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}
	storeBounds = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
)

// recorder holds the instruments and what the gauges report.
type recorder struct {
	decisions, storeErrors, fallbacks, vendorLimited metric.Int64Counter
	wait, storeTime                                  metric.Float64Histogram

	now    func() time.Time
	mu     sync.Mutex
	pauses map[string]time.Time // rule → end of its latest learned pause
	state  throttle.StoreState
}

// Hooks returns next with every hook wrapped to record metrics through
// mp's meter first; next's own functions (any may be nil) are still
// called. It fails only if mp cannot create the instruments.
func Hooks(mp metric.MeterProvider, next throttle.Hooks) (throttle.Hooks, error) {
	return hooks(mp, next, time.Now)
}

func hooks(mp metric.MeterProvider, next throttle.Hooks, now func() time.Time) (throttle.Hooks, error) {
	m := mp.Meter(ScopeName)
	r := &recorder{now: now, pauses: make(map[string]time.Time)}
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithDescription(desc))
		err = firstErr(err, e)
		return c
	}
	hist := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(bounds...))
		err = firstErr(err, e)
		return h
	}
	r.decisions = counter("throttle.decisions", "Decisions on matched requests, by rule, limit and outcome.")
	r.storeErrors = counter("throttle.store.errors", "Store calls that failed, by rule and operation.")
	r.fallbacks = counter("throttle.fallback", "Decisions made by a failure mode because the store could not decide.")
	r.vendorLimited = counter("throttle.vendor.limited", "Vendor answers that said slow down, by rule and status.")
	r.wait = hist("throttle.wait", "Time requests waited for their quota.", waitBounds)
	r.storeTime = hist("throttle.store.duration", "Time of the store's decision call.", storeBounds)
	_, e := m.Int64ObservableGauge("throttle.pauses.active",
		metric.WithDescription("Rules whose learned pause has not ended."),
		metric.WithInt64Callback(r.observePauses))
	err = firstErr(err, e)
	_, e = m.Int64ObservableGauge("throttle.store.state",
		metric.WithDescription("The store's state: 0 up, 1 failing (fallback active), 2 down (breaker open)."),
		metric.WithInt64Callback(r.observeState))
	err = firstErr(err, e)
	if err != nil {
		return throttle.Hooks{}, fmt.Errorf("otelthrottle: %w", err)
	}

	h := next
	h.OnDecision = func(ev throttle.DecisionEvent) {
		r.decision(ev)
		if next.OnDecision != nil {
			next.OnDecision(ev)
		}
	}
	h.OnPause = func(ev throttle.PauseEvent) {
		r.pause(ev)
		if next.OnPause != nil {
			next.OnPause(ev)
		}
	}
	h.OnStoreState = func(ev throttle.StoreEvent) {
		r.mu.Lock()
		r.state = ev.State
		r.mu.Unlock()
		if next.OnStoreState != nil {
			next.OnStoreState(ev)
		}
	}
	return h, nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// outcomeNames are the outcome attribute values, in Outcome order.
var outcomeNames = map[throttle.Outcome]string{
	throttle.Allowed: "allowed",
	throttle.Waited:  "waited",
	throttle.Refused: "refused",
	throttle.GaveUp:  "gave_up",
	throttle.Failed:  "failed",
}

func outcomeName(o throttle.Outcome) string {
	if n, ok := outcomeNames[o]; ok {
		return n
	}
	return "unknown"
}

// modeNames are the failure mode attribute values.
var modeNames = map[throttle.FailureMode]string{
	throttle.FailLocal:  "local",
	throttle.FailOpen:   "open",
	throttle.FailClosed: "closed",
}

func (r *recorder) decision(ev throttle.DecisionEvent) {
	ctx := context.Background()
	rule := attribute.String("rule", ev.Rule)
	outcome := attribute.String("outcome", outcomeName(ev.Outcome))
	r.decisions.Add(ctx, 1, metric.WithAttributes(rule, attribute.String("limit", ev.Limit), outcome,
		attribute.Bool("shadow", ev.Shadow)))
	if ev.Outcome == throttle.Waited || ev.Outcome == throttle.GaveUp {
		r.wait.Record(ctx, ev.Wait.Seconds(), metric.WithAttributes(rule, outcome))
	}
	if ev.StoreTime > 0 {
		r.storeTime.Record(ctx, ev.StoreTime.Seconds(), metric.WithAttributes(rule))
	}
	if ev.Fallback != throttle.FailDefault {
		r.fallbacks.Add(ctx, 1, metric.WithAttributes(rule, attribute.String("mode", modeNames[ev.Fallback])))
	}
	if ev.StoreErr != nil {
		r.storeErrors.Add(ctx, 1, metric.WithAttributes(rule, attribute.String("operation", "take")))
	}
}

func (r *recorder) pause(ev throttle.PauseEvent) {
	ctx := context.Background()
	rule := attribute.String("rule", ev.Rule)
	r.vendorLimited.Add(ctx, 1, metric.WithAttributes(rule, attribute.Int("status", ev.Status)))
	if ev.Err != nil {
		r.storeErrors.Add(ctx, 1, metric.WithAttributes(rule, attribute.String("operation", "pause")))
	}
	end := r.now().Add(ev.Pause)
	r.mu.Lock()
	if end.After(r.pauses[ev.Rule]) {
		r.pauses[ev.Rule] = end
	}
	r.mu.Unlock()
}

func (r *recorder) observePauses(_ context.Context, o metric.Int64Observer) error {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for rule, end := range r.pauses {
		if end.After(now) {
			n++
		} else {
			delete(r.pauses, rule)
		}
	}
	o.Observe(n)
	return nil
}

func (r *recorder) observeState(_ context.Context, o metric.Int64Observer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var v int64
	switch r.state {
	case throttle.StoreFailing:
		v = 1
	case throttle.StoreDown:
		v = 2
	}
	o.Observe(v)
	return nil
}
