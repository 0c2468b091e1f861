package throttle

import "time"

// Pause leads.
//
// A request of a rule with an Anchor limit is sent no earlier than
// sendLag after its charge to that limit's log (anchor.go), so a pause
// that holds its decision until the pause ends sends it a lag later: a
// lag of every vendor window lost, against a vendor whose windows start
// at a first request (GitHub's), and bursts a lag late in a fixed grid's.
// A pause learned from an answer is about the sends: the vendor is not
// to get a request before it ends. So where every rule that a pause key
// holds back sends each request at least a lag after a charge, the
// pause may hold their decisions that lag less (Limiter.recordPause):
// they are still sent as it ends, at the earliest.
//
// A pause key holds back, in its scope: "" (the scope's pause) every
// rule; "NAME:KEY" the rules whose Learning.PauseBy limit is named NAME.
// A rule sends a lag after a charge when one of its limits is anchored
// (some rule's Learning.Anchor names it) and applies to every request
// (no Match): the longest such limit's sendLag. A pause that a caller
// records by hand (quota.Store.Pause) holds decisions until it ends.

// pauseLead returns how much sooner than a pause learned for pause key
// pk the decisions it holds back may be made: the shortest send lag of
// the rules it holds back (see above); zero when one of them has none.
func (r *rule) pauseLead(pk string) time.Duration {
	if pk == "" {
		return r.leadScope
	}
	return r.leadBy
}

// sendsLagged returns how long after its charge every request of r is
// sent, at the earliest: the longest sendLag of its anchored limits that
// apply to every request, or zero.
func (r *rule) sendsLagged() time.Duration {
	var lag time.Duration
	for j, l := range r.limits {
		if l.Anchored && r.Limits[j].Match == nil {
			lag = max(lag, sendLag(l.Per))
		}
	}
	return lag
}

// setPauseLeads sets the pause leads of every rule of cp, once their
// anchored limits are known.
func (cp *compiledPolicy) setPauseLeads() {
	lags := make([]time.Duration, len(cp.rules))
	for i := range cp.rules {
		lags[i] = cp.rules[i].sendsLagged()
	}
	for i := range cp.rules {
		r := &cp.rules[i]
		r.leadScope, r.leadBy = -1, -1
		for k := range cp.rules {
			o := &cp.rules[k]
			if o.scope != r.scope {
				continue
			}
			if r.leadScope < 0 || lags[k] < r.leadScope {
				r.leadScope = lags[k]
			}
			if r.pauseIdx >= 0 && o.pauseIdx >= 0 && o.Limits[o.pauseIdx].Name == r.Limits[r.pauseIdx].Name &&
				(r.leadBy < 0 || lags[k] < r.leadBy) {
				r.leadBy = lags[k]
			}
		}
		r.leadScope, r.leadBy = max(r.leadScope, 0), max(r.leadBy, 0)
	}
}
