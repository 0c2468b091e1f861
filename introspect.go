package throttle

import (
	"slices"
	"sync/atomic"

	"github.com/quotakit/throttle/quota"
)

// This file holds what a Limiter tells about itself, for tools that show
// it (package quotaview): the policy it applies, its store, and what its
// requests hold now.

// Policy returns the policy the limiter applies, as it was given to
// [NewLimiter] (its Rules and Classes copied; the functions in them are
// the caller's own).
func (lim *Limiter) Policy() Policy {
	p := lim.given
	p.Rules = slices.Clone(p.Rules)
	for i := range p.Rules {
		p.Rules[i].Limits = slices.Clone(p.Rules[i].Limits)
	}
	p.Classes = slices.Clone(p.Classes)
	return p
}

// Store returns the store the limiter decides in: the one [WithStore]
// gave, or its private [memstore.Store].
func (lim *Limiter) Store() quota.Store { return lim.store }

// Limiter returns the [Limiter] that makes the transport's decisions.
func (t *Transport) Limiter() *Limiter { return t.lim }

// RuleStats is what the requests of one rule hold in one [Limiter] now.
type RuleStats struct {
	Rule string

	// Deciding is how many requests are being decided: waiting for their
	// quota (asleep until their reserved instant, in the rule's queue, in
	// line to ask again, or for a released slot) or asking the store.
	Deciding int

	// InFlight is how many requests hold [Concurrency] slots: granted
	// and not yet done (their response body not yet read or closed).
	InFlight int
}

// Stats returns what each rule's requests hold in this limiter now, in
// the policy's order. It is cheap (a few atomic loads per rule) and safe
// for concurrent use.
func (lim *Limiter) Stats() []RuleStats {
	out := make([]RuleStats, len(lim.policy.rules))
	for i := range lim.policy.rules {
		r := &lim.policy.rules[i]
		out[i] = RuleStats{Rule: r.id}
		if g := lim.gauges[r]; g != nil {
			out[i].Deciding = int(g.deciding.Load())
			out[i].InFlight = int(g.holding.Load())
		}
	}
	return out
}

// ruleGauge counts what one rule's requests hold now ([RuleStats]).
type ruleGauge struct {
	deciding atomic.Int64 // in admitDemand
	holding  atomic.Int64 // holds not yet released
}

// gauge returns r's gauge, or nil.
func (lim *Limiter) gauge(r *rule) *ruleGauge { return lim.gauges[r] }

func (g *ruleGauge) add(deciding, holding int64) {
	if g == nil {
		return
	}
	if deciding != 0 {
		g.deciding.Add(deciding)
	}
	if holding != 0 {
		g.holding.Add(holding)
	}
}
