package throttle

import (
	"context"
	"fmt"
	"log/slog"
	"slices"

	"github.com/quotakit/throttle/quota"
)

// This file holds the notes NewLimiter logs about a valid policy that
// will not do what its author may expect.

// notePlacement logs, at Info, each GCRA limit charged by waiting
// requests that another limit may delay while it has room: the requests
// of a rule that a Match limit applies to only in part, or the rules of
// a scope that share it with other limits. GCRA keeps one arrival time
// per counter, so a reservation moves it to the reserved instant and the
// requests no other limit delays queue behind it, whatever room there is
// now (docs/policy.md, "GCRA keeps one arrival time"); SlidingLog and
// FixedWindow take the gaps. The notes go to the limiter's logger, or
// slog.Default without one.
func (lim *Limiter) notePlacement() {
	log := lim.logger
	if log == nil {
		log = slog.Default()
	}
	// others returns the names of r's rate limits other than name, and
	// whether some of them apply to only some of r's requests.
	others := func(r *rule, name string) (names []string, partial bool) {
		for k, l := range r.limits {
			if l.Name == name || l.Algorithm == Concurrency {
				continue
			}
			names = append(names, l.Name)
			partial = partial || r.Limits[k].Match != nil
		}
		slices.Sort(names)
		return names, partial
	}
	rules := lim.policy.rules
	for i := range rules {
		r := &rules[i]
		if r.wait.MaxWait(context.Background()) <= 0 {
			continue
		}
		for _, g := range r.limits {
			if g.Algorithm != GCRA {
				continue
			}
			mine, partial := others(r, g.Name)
			why := ""
			if partial {
				why = "another limit of the rule applies to only some of its requests"
			}
			for j := range rules {
				o := &rules[j]
				if why != "" || j == i || o.scope != r.scope || !slices.ContainsFunc(o.limits, func(l quota.Limit) bool { return l.Name == g.Name }) {
					continue
				}
				if theirs, _ := others(o, g.Name); !slices.Equal(mine, theirs) {
					why = "rule " + o.id + " charges it with other limits"
				}
			}
			if why != "" {
				log.LogAttrs(context.Background(), slog.LevelInfo,
					"throttle: a GCRA limit keeps one arrival time: requests that other limits do not delay wait behind the reservations of those they do; SlidingLog or FixedWindow let them go in the gaps",
					slog.String("rule", r.id), slog.String("limit", g.Name), slog.String("because", why))
			}
		}
	}
}

// noteInstances logs, at Warn, once at construction, when a rule falls
// back to its local share ([FailLocal]) on a shared store while
// instances, [Policy].Instances, is not set: each instance would then take
// the whole quota during an outage.
func (lim *Limiter) noteInstances(instances int) {
	if instances > 0 || lim.inProcess() {
		return
	}
	for _, r := range lim.policy.rules {
		if r.failMode == FailLocal && len(r.Limits) > 0 {
			l := lim.logger
			if l == nil {
				l = slog.Default()
			}
			l.Warn("throttle: Policy.Instances is not set: while the shared store is down every instance takes a rule's whole quota (FailLocal); set it to the number of instances sharing the store (1 for one), or set OnStoreFailure",
				"rule", r.id, "store", fmt.Sprintf("%T", lim.store))
			return
		}
	}
}
