package otelthrottle

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/quotakit/throttle"
)

// Attribute keys, shared by the metrics and the span events. Ours are in
// the throttle namespace; the HTTP status is OpenTelemetry's own
// semantic-convention key.
const (
	ruleKey       = attribute.Key("throttle.rule")            // rule name
	limitKey      = attribute.Key("throttle.limit")           // name of the limit that refused
	outcomeKey    = attribute.Key("throttle.outcome")         // see outcomeNames
	shadowKey     = attribute.Key("throttle.shadow")          // rule in shadow mode
	fallbackKey   = attribute.Key("throttle.fallback")        // failure mode that decided, see modeNames
	operationKey  = attribute.Key("throttle.store.operation") // take, pause, settle
	settlementKey = attribute.Key("throttle.settlement")      // refund, extra, exact, unreported, failed
	waitKey       = attribute.Key("throttle.wait")            // seconds, span events only
	classKey      = attribute.Key("throttle.class")           // the request's class, when it has one
	tenantKey     = attribute.Key("throttle.tenant")          // the request's tenant: throttle.tenant.decisions only
	storeStateKey = attribute.Key("throttle.store.state")     // up, failing, down: throttle.store.status only
	statusKey     = attribute.Key("http.response.status_code")
)

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
