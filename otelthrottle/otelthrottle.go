// Package otelthrottle reports what a [throttle.Transport] does as
// OpenTelemetry signals: its decisions, learned pauses and store health as
// metrics ([Hooks]), the requests it holds as gauges ([Gauges]), and the decision on each request as an event on the
// request's span ([SpanHooks]). It depends on the OpenTelemetry APIs only;
// the application chooses the SDK and exporters (Prometheus, OTLP...)
// through the MeterProvider it passes and the TracerProvider that starts
// its spans.
//
//	hooks, err := otelthrottle.Hooks(otel.GetMeterProvider(), otelthrottle.SpanHooks(throttle.Hooks{}))
//	t, err := throttle.NewTransport(nil, policy, throttle.WithHooks(hooks))
//	reg, err := otelthrottle.Gauges(otel.GetMeterProvider(), t.Limiter()) // reg.Unregister() when t is retired
//	client := &http.Client{Transport: otelhttp.NewTransport(t)}
//
// # Metrics
//
// Units are UCUM, as OpenTelemetry's conventions ask:
//
//   - throttle.decisions (counter, {request}): every decision, by
//     throttle.rule, throttle.limit, throttle.outcome and throttle.shadow,
//     and throttle.class for a request of a class;
//   - throttle.tenant.decisions (counter, {request}): every decision on a
//     request of a tenant (throttle.Limit's Tenant), by throttle.rule,
//     throttle.tenant and throttle.outcome: one series per tenant;
//   - throttle.wait.duration (histogram, s): how long requests waited, by
//     throttle.rule and throttle.outcome (waited, gave_up), and
//     throttle.class for a request of a class;
//   - throttle.store.duration (histogram, s): the store's decision call,
//     by throttle.rule;
//   - throttle.store.errors (counter, {error}): decisions and pauses the
//     store could not make, by throttle.rule and throttle.store.operation;
//   - throttle.fallbacks (counter, {request}): decisions made by a rule's
//     failure mode because the store could not decide, by throttle.rule
//     and throttle.fallback;
//   - throttle.vendor.limited (counter, {response}): "slow down" answers
//     from vendors that paused a rule, by throttle.rule and
//     http.response.status_code;
//   - throttle.settlements (counter, {request}): charges corrected to the
//     cost the answer reported (throttle.Rule.Settle, Permit.Settle), by
//     throttle.rule and throttle.settlement;
//   - throttle.anchor.uncovered (counter, {request}): requests of a rule
//     with Learning.Anchor sent although the vendor may count them in a
//     window its log did not (throttle.DecisionEvent.Uncovered), by
//     throttle.rule;
//   - throttle.pauses.active (gauge, {pause}): rules whose learned pause
//     has not ended yet;
//   - throttle.store.status (updowncounter, {state}): the store's state as last
//     reported, one series per throttle.store.state (up, failing: fallback
//     active, down: breaker open), 1 for the current state and 0 for the
//     others, as OpenTelemetry's conventions write a state.
//
// [Gauges] adds two instruments observed from limiters' own counts (a
// Transport's is its Limiter), by throttle.rule:
//
//   - throttle.requests.pending (updowncounter, {request}): requests being
//     decided: waiting for their quota or for the store's answer;
//   - throttle.requests.in_flight (updowncounter, {request}): requests
//     holding a slot of a concurrency limit, for rules that have one.
//
// The meter is named [ScopeName] and carries the library's version (from
// the build information; "(devel)" when built in its own repository).
// Records use the request's context, so exemplars link to its trace.
//
// # Span events
//
// [SpanHooks] adds a "throttle.decision" event to the span in the context
// of every request that matched a rule, when its fate is known (after any
// wait), with throttle.rule, throttle.outcome, and when they apply
// throttle.limit, throttle.wait, throttle.fallback, throttle.shadow and
// throttle.class. It starts no spans. Under otelhttp's transport, as
// above, the event is on otelhttp's client span; otherwise it is on the
// caller's span.
//
// # Attributes
//
//   - throttle.rule: the name of the matched rule;
//   - throttle.limit: the name of the limit that refused the request;
//     absent when none did (a grant, or a refusal by a pause);
//   - throttle.outcome: allowed, waited, refused, gave_up or failed;
//   - throttle.class: the request's priority class (throttle.Class), only
//     when it has one (events too);
//   - throttle.tenant: the request's tenant, as the store knows it
//     (escaped; hashed if the policy hashes it), on
//     throttle.tenant.decisions only;
//   - throttle.shadow: the rule is in shadow mode, so the request was sent
//     whatever the outcome says (events: only when true);
//   - throttle.fallback: the failure mode that decided because the store
//     could not: local, open or closed;
//   - throttle.store.operation: the failed store call, take, pause or
//     settle;
//   - throttle.store.state: up, failing or down, on throttle.store.status;
//   - throttle.rule is the only attribute of the gauges;
//   - throttle.settlement: refund (the answer reported less than the
//     estimate charged), extra (more), exact, unreported (the answer said
//     nothing: the estimate stands) or failed (the store could not
//     settle, or the cost was below 1);
//   - throttle.wait (events only): seconds, as a float, the request waited
//     (waited, gave_up) or, when refused, until it could succeed;
//   - http.response.status_code: OpenTelemetry's own attribute.
//
// Attribute values are rule, limit and class names from the policy, never
// keys, so no request data (tokens, user ids) reaches a metric or a span;
// but for throttle.tenant, which per-tenant metrics need: a policy whose
// tenants are secrets hashes them (throttle.HashKey, "hash:" in a file).
package otelthrottle

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
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
	decisions, tenantDecisions, storeErrors, fallbacks, vendorLimited, settlements, uncovered metric.Int64Counter
	wait, storeTime                                                                           metric.Float64Histogram

	now    func() time.Time
	mu     sync.Mutex
	pauses map[string]time.Time // rule → end of its latest learned pause
	state  throttle.StoreState
}

// Hooks returns next with every hook wrapped to record metrics through
// mp's meter first; next's own functions (any may be nil) are still
// called. It fails only if mp cannot create the instruments. To record
// decisions on spans as well, pass [SpanHooks] as next.
func Hooks(mp metric.MeterProvider, next throttle.Hooks) (throttle.Hooks, error) {
	return hooks(mp, next, time.Now)
}

func hooks(mp metric.MeterProvider, next throttle.Hooks, now func() time.Time) (throttle.Hooks, error) {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(version()))
	r := &recorder{now: now, pauses: make(map[string]time.Time)}
	var err error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		err = firstErr(err, e)
		return c
	}
	hist := func(name, desc string, bounds []float64) metric.Float64Histogram {
		h, e := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(bounds...))
		err = firstErr(err, e)
		return h
	}
	r.decisions = counter("throttle.decisions", "{request}",
		"Decisions on requests that matched a rule, by rule, limit, outcome and shadow.")
	r.tenantDecisions = counter("throttle.tenant.decisions", "{request}",
		"Decisions on requests of a tenant, by rule, tenant and outcome.")
	r.storeErrors = counter("throttle.store.errors", "{error}",
		"Store calls that failed, by rule and operation.")
	r.fallbacks = counter("throttle.fallbacks", "{request}",
		"Decisions made by a rule's failure mode because the store could not decide, by rule and mode.")
	r.vendorLimited = counter("throttle.vendor.limited", "{response}",
		"Vendor answers that said slow down and paused a rule, by rule and HTTP status.")
	r.settlements = counter("throttle.settlements", "{request}",
		"Charges corrected to the cost the vendor's answer reported, by rule and settlement.")
	r.uncovered = counter("throttle.anchor.uncovered", "{request}",
		"Requests of an Anchor rule sent although the vendor may count them in a window the rule's log did not, by rule.")
	r.wait = hist("throttle.wait.duration", "Time requests waited for their quota, by rule and outcome.", waitBounds)
	r.storeTime = hist("throttle.store.duration", "Time of the store's decision call, by rule.", storeBounds)
	_, e := m.Int64ObservableGauge("throttle.pauses.active", metric.WithUnit("{pause}"),
		metric.WithDescription("Rules whose learned pause has not ended."),
		metric.WithInt64Callback(r.observePauses))
	err = firstErr(err, e)
	_, e = m.Int64ObservableUpDownCounter("throttle.store.status", metric.WithUnit("{state}"),
		metric.WithDescription("The store's state as last reported: 1 for the current throttle.store.state (up, failing, down), 0 for the others."),
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
	h.OnSettle = func(ev throttle.SettleEvent) {
		r.settle(ev)
		if next.OnSettle != nil {
			next.OnSettle(ev)
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

func (r *recorder) decision(ev throttle.DecisionEvent) {
	ctx := eventContext(ev.Context)
	rule := ruleKey.String(ev.Rule)
	outcome := outcomeKey.String(outcomeName(ev.Outcome))
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, rule, outcome, shadowKey.Bool(ev.Shadow))
	if ev.Limit != "" {
		attrs = append(attrs, limitKey.String(ev.Limit))
	}
	if ev.Class != "" {
		attrs = append(attrs, classKey.String(ev.Class))
	}
	r.decisions.Add(ctx, 1, metric.WithAttributes(attrs...))
	if ev.Tenant != "" {
		r.tenantDecisions.Add(ctx, 1, metric.WithAttributes(rule, tenantKey.String(ev.Tenant), outcome))
	}
	if ev.Outcome == throttle.Waited || ev.Outcome == throttle.GaveUp {
		if ev.Class == "" {
			r.wait.Record(ctx, ev.Wait.Seconds(), metric.WithAttributes(rule, outcome))
		} else {
			r.wait.Record(ctx, ev.Wait.Seconds(), metric.WithAttributes(rule, outcome, classKey.String(ev.Class)))
		}
	}
	if ev.StoreTime > 0 {
		r.storeTime.Record(ctx, ev.StoreTime.Seconds(), metric.WithAttributes(rule))
	}
	if ev.Fallback != throttle.FailDefault {
		r.fallbacks.Add(ctx, 1, metric.WithAttributes(rule, fallbackKey.String(modeNames[ev.Fallback])))
	}
	if ev.StoreErr != nil {
		r.storeErrors.Add(ctx, 1, metric.WithAttributes(rule, operationKey.String("take")))
	}
	if ev.Uncovered {
		r.uncovered.Add(ctx, 1, metric.WithAttributes(rule))
	}
}

func (r *recorder) pause(ev throttle.PauseEvent) {
	ctx := eventContext(ev.Context)
	rule := ruleKey.String(ev.Rule)
	r.vendorLimited.Add(ctx, 1, metric.WithAttributes(rule, statusKey.Int(ev.Status)))
	if ev.Err != nil {
		r.storeErrors.Add(ctx, 1, metric.WithAttributes(rule, operationKey.String("pause")))
	}
	end := r.now().Add(ev.Pause)
	r.mu.Lock()
	if end.After(r.pauses[ev.Rule]) {
		r.pauses[ev.Rule] = end
	}
	r.mu.Unlock()
}

func (r *recorder) settle(ev throttle.SettleEvent) {
	ctx := eventContext(ev.Context)
	rule := ruleKey.String(ev.Rule)
	kind := "exact"
	switch {
	case ev.Err != nil:
		kind = "failed"
		if !errors.Is(ev.Err, throttle.ErrInvalidPolicy) {
			r.storeErrors.Add(ctx, 1, metric.WithAttributes(rule, operationKey.String("settle")))
		}
	case ev.Cost == 0:
		kind = "unreported"
	case ev.Cost < ev.Charged:
		kind = "refund"
	case ev.Cost > ev.Charged:
		kind = "extra"
	}
	r.settlements.Add(ctx, 1, metric.WithAttributes(rule, settlementKey.String(kind)))
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
	state := r.state
	r.mu.Unlock()
	for _, s := range []throttle.StoreState{throttle.StoreUp, throttle.StoreFailing, throttle.StoreDown} {
		var v int64
		if s == state {
			v = 1
		}
		o.Observe(v, metric.WithAttributes(storeStateKey.String(s.String())))
	}
	return nil
}

// eventContext is an event's context for a record: the request's, or
// Background.
func eventContext(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// version is the library's module version as the build records it.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == module {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == module {
			if d.Replace != nil && d.Replace.Version != "" {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "(devel)"
}

// module is the path of the library's module.
const module = "github.com/quotakit/throttle"
