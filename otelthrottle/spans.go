package otelthrottle

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotakit/throttle"
)

// EventName is the name of the span event that records a decision.
const EventName = "throttle.decision"

// SpanHooks returns next with OnDecision wrapped to add an [EventName]
// event, with the decision's attributes (see the package doc), to the
// recording span in the request's context (the event's Context, see
// [throttle.DecisionEvent]) first; next's own functions (any may be nil)
// are still called.
// A request whose context holds no recording span costs a lookup. It
// starts no spans and needs no TracerProvider: the span is whichever the
// caller or an instrumented transport above the [throttle.Transport]
// started.
func SpanHooks(next throttle.Hooks) throttle.Hooks {
	h := next
	h.OnDecision = func(ev throttle.DecisionEvent) {
		addEvent(ev)
		if next.OnDecision != nil {
			next.OnDecision(ev)
		}
	}
	return h
}

// addEvent records ev on the span of its context, if that span records.
func addEvent(ev throttle.DecisionEvent) {
	if ev.Context == nil {
		return
	}
	span := trace.SpanFromContext(ev.Context)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, ruleKey.String(ev.Rule), outcomeKey.String(outcomeName(ev.Outcome)))
	if ev.Limit != "" {
		attrs = append(attrs, limitKey.String(ev.Limit))
	}
	if ev.Wait > 0 {
		attrs = append(attrs, waitKey.Float64(ev.Wait.Seconds()))
	}
	if ev.Fallback != throttle.FailDefault {
		attrs = append(attrs, fallbackKey.String(modeNames[ev.Fallback]))
	}
	if ev.Shadow {
		attrs = append(attrs, shadowKey.Bool(true))
	}
	if ev.Class != "" {
		attrs = append(attrs, classKey.String(ev.Class))
	}
	span.AddEvent(EventName, trace.WithAttributes(attrs...))
}
