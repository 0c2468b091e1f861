package otelthrottle

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/metric"

	"github.com/quotakit/throttle"
)

// Gauges registers, with mp's meter, two instruments observed from lims'
// [throttle.Limiter.Stats] at each collection, by throttle.rule:
//
//   - throttle.requests.pending (updowncounter, {request}): requests
//     being decided: waiting for their quota (asleep until their reserved
//     instant, in the rule's queue, for a released slot) or for the
//     store's answer;
//   - throttle.requests.in_flight (updowncounter, {request}): requests
//     holding a slot of a [throttle.Concurrency] limit, granted and not
//     yet done; only for rules that have one.
//
// Several limiters' requests of one rule name are summed; pass every
// limiter of the process that shares mp in one call (a Transport's is
// [throttle.Transport.Limiter]). Call Gauges once per set of limiters:
// the instruments are created once per meter, and each call adds a
// callback. Unregister the returned registration when the limiters are no
// longer used (shutting down mp's SDK also ends it). It fails only if mp
// cannot create the instruments or register the callback.
func Gauges(mp metric.MeterProvider, lims ...*throttle.Limiter) (metric.Registration, error) {
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(version()))
	pending, err := m.Int64ObservableUpDownCounter("throttle.requests.pending", metric.WithUnit("{request}"),
		metric.WithDescription("Requests being decided: waiting for their quota or for the store's answer, by rule."))
	if err != nil {
		return nil, fmt.Errorf("otelthrottle: %w", err)
	}
	inFlight, err := m.Int64ObservableUpDownCounter("throttle.requests.in_flight", metric.WithUnit("{request}"),
		metric.WithDescription("Requests holding a slot of a concurrency limit, granted and not yet done, by rule."))
	if err != nil {
		return nil, fmt.Errorf("otelthrottle: %w", err)
	}
	// The rules with a concurrency limit, and every rule name in the
	// order first seen: the policies do not change after NewLimiter.
	var names []string
	concurrent := map[string]bool{}
	for _, lim := range lims {
		for _, r := range lim.Policy().Rules {
			if _, seen := concurrent[r.Name]; !seen {
				names = append(names, r.Name)
				concurrent[r.Name] = false
			}
			for _, l := range r.Limits {
				if l.Algorithm == throttle.Concurrency {
					concurrent[r.Name] = true
				}
			}
		}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		sum := make(map[string]throttle.RuleStats, len(names))
		for _, lim := range lims {
			for _, s := range lim.Stats() {
				t := sum[s.Rule]
				t.Deciding += s.Deciding
				t.InFlight += s.InFlight
				sum[s.Rule] = t
			}
		}
		for _, name := range names {
			attrs := metric.WithAttributes(ruleKey.String(name))
			o.ObserveInt64(pending, int64(sum[name].Deciding), attrs)
			if concurrent[name] {
				o.ObserveInt64(inFlight, int64(sum[name].InFlight), attrs)
			}
		}
		return nil
	}, pending, inFlight)
	if err != nil {
		return nil, fmt.Errorf("otelthrottle: %w", err)
	}
	return reg, nil
}
