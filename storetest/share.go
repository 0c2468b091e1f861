package storetest

import "github.com/quotakit/throttle/quota"

// The model's fair shares (quota.Store, Fair shares), written out here
// apart from package quotamath's share arithmetic, which the stores use,
// so that the differential tests check it.

// tenants is the fair-share state of one counter.
type tenants struct {
	active map[string]int64 // tenant -> instant of its last demand
	clocks map[string]int64 // tenant -> share clock
	claims map[string]int64 // tenant -> end of its claim
}

// modelShare is one shared limit of a demand being decided.
type modelShare struct {
	limit int // index in the demand
	b     quota.Bucket
	cost  int64
	ts    *tenants
	n     int64 // active tenants, the demand's included
	clock int64
	over  bool
	held  int64 // when over and claims are live: until when they hold it back
}

// ahead is C*T: how far ahead of now a clock within its share may run.
func ahead(l quota.Limit) int64 {
	c := int64(l.Rate)
	if l.Algorithm == quota.GCRA {
		c = burst(l)
	}
	return c * emission(l)
}

// shares makes the tenants of d's shared limits active at now and
// returns their state.
func (m *model) shares(d *quota.Demand, now int64) []modelShare {
	var out []modelShare
	for i, b := range d.Limits {
		if b.Tenant == "" {
			continue
		}
		id := bucketID(d.Scope, b)
		ts := m.shared[id]
		if ts == nil {
			ts = &tenants{active: map[string]int64{}, clocks: map[string]int64{}, claims: map[string]int64{}}
			m.shared[id] = ts
		}
		ts.active[b.Tenant] = now
		x := modelShare{limit: i, b: b, cost: int64(d.CostOf(i)), ts: ts, clock: ts.clocks[b.Tenant]}
		for _, at := range ts.active {
			if at > now-per(b.Limit) {
				x.n++
			}
		}
		x.over = x.clock >= now+ahead(b.Limit)
		if x.over {
			// Held back until the last live claim lapses, or until the
			// clock is less than C*T ahead again, if that is sooner.
			for _, end := range ts.claims {
				if end > now {
					x.held = max(x.held, min(end, x.clock-ahead(b.Limit)+1))
				}
			}
		}
		out = append(out, x)
	}
	return out
}

// heldBack returns, for a demand over its share on a limit whose counter
// has live claims, the instant until which the claims hold it back (the
// latest over such limits) and the limits that hold it back until then;
// else nil.
func heldBack(sh []modelShare) (int64, []int) {
	var end int64
	var held []int
	for _, x := range sh {
		switch {
		case x.held == 0:
		case x.held > end:
			end, held = x.held, []int{x.limit}
		case x.held == end:
			held = append(held, x.limit)
		}
	}
	return end, held
}

// claim gives the demand's tenants within their share a claim until T
// after t.
func (m *model) claim(sh []modelShare, t int64) {
	for _, x := range sh {
		if !x.over {
			x.ts.claims[x.b.Tenant] = t + emission(x.b.Limit)
		}
	}
}

// charged advances the clocks of a demand granted for t, and drops its
// claims.
func (m *model) charged(sh []modelShare, t int64) {
	for _, x := range sh {
		step := min(x.cost*emission(x.b.Limit)*x.n, 1<<50)
		x.ts.clocks[x.b.Tenant] = min(max(x.clock, t), t+ahead(x.b.Limit)) + step
		delete(x.ts.claims, x.b.Tenant)
	}
}
