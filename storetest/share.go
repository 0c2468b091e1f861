package storetest

import (
	"math/big"
	"slices"

	"github.com/quotakit/throttle/quota"
)

// The model's fair shares (quota.Store, Fair shares), written out here
// apart from package quotamath's share arithmetic, which the stores use,
// so that the differential tests check it.

// tenants is the class and fair-share state of one counter.
type tenants struct {
	notes  map[int64]int64     // headroom -> instant of its latest note
	active map[string]int64    // tenant -> instant of its last demand
	clocks map[string]int64    // tenant -> share clock
	claims map[string][2]int64 // tenant -> the instant of its claim, and its place
}

// modelShare is one limit of a demand being decided that is shared among
// tenants or has noted classes.
type modelShare struct {
	limit int // index in the demand
	b     quota.Bucket
	cost  int64
	ts    *tenants
	n     int64 // active tenants, the demand's included
	clock int64
	place int64
	held  int64 // when other tenants' live claims at a lower place hold it back: until when, else 0
	lend  int64 // when the headroom is held: when the notes holding it stop, else 0
}

// ahead is C*T, rounded up: how far ahead of now a clock within its
// share may run.
func ahead(l quota.Limit) int64 {
	c := int64(l.Rate)
	if l.Algorithm == quota.GCRA {
		c = burst(l)
	}
	return spanUp(l, c)
}

// spanUp is n*T = n*P/R µs rounded up, as share clocks count it, written
// here apart from package quotamath (in big integers).
func spanUp(l quota.Limit, n int64) int64 {
	num := new(big.Int).Mul(big.NewInt(n), big.NewInt(per(l)))
	r := big.NewInt(int64(l.Rate))
	num.Add(num, r).Sub(num, big.NewInt(1))
	return num.Div(num, r).Int64()
}

// noted reports whether a store notes b's class: a window or log limit
// with a headroom, or Classed.
func noted(b quota.Bucket) bool {
	w := b.Limit.Algorithm == quota.FixedWindow || b.Limit.Algorithm == quota.SlidingWindow || b.Limit.Algorithm == quota.SlidingLog
	return w && (b.Headroom > 0 || b.Classed)
}

// shares notes the classes and makes the tenants of d's limits active at
// now, and returns their state and the demand as the limits see it: a
// headroom no higher class holds is lent (0).
func (m *model) shares(d *quota.Demand, now int64) ([]modelShare, *quota.Demand) {
	var out []modelShare
	seen := *d
	seen.Limits = slices.Clone(d.Limits)
	for i, b := range d.Limits {
		if b.Tenant == "" && !noted(b) {
			continue
		}
		id := bucketID(d.Scope, b)
		ts := m.shared[id]
		if ts == nil {
			ts = &tenants{notes: map[int64]int64{}, active: map[string]int64{}, clocks: map[string]int64{}, claims: map[string][2]int64{}}
			m.shared[id] = ts
		}
		x := modelShare{limit: i, b: b, cost: int64(d.CostOf(i)), ts: ts}
		if noted(b) {
			t := spanUp(b.Limit, 1)
			for h, at := range ts.notes {
				if h < int64(b.Headroom) && at > now-t {
					x.lend = max(x.lend, at+t)
				}
			}
			switch {
			case b.Headroom == 0:
			case x.lend == 0:
				seen.Limits[i].Headroom = 0
				m.lent++
			default:
				m.kept++
			}
			ts.notes[int64(b.Headroom)] = now
		}
		if b.Tenant != "" {
			ts.active[b.Tenant] = now
			x.clock = ts.clocks[b.Tenant]
			for _, at := range ts.active {
				if at > now-per(b.Limit) {
					x.n++
				}
			}
			// A claim lives max(T, 250ms) past its instant; it holds back
			// until T after the latest instant, or after now.
			t := spanUp(b.Limit, 1)
			live := func(c [2]int64) bool { return c[0]+max(t, 250_000) > now }
			x.place = max(x.clock, now)
			if c, ok := ts.claims[b.Tenant]; ok && live(c) {
				x.place = c[1]
			}
			last := int64(-1)
			for tenant, c := range ts.claims {
				if tenant != b.Tenant && live(c) && c[1] < x.place {
					last = max(last, c[0])
				}
			}
			if last >= 0 {
				x.held = max(last, now) + t
			}
		}
		out = append(out, x)
	}
	return out, &seen
}

// heldBack returns, for a demand that other tenants' claims at a lower
// place hold back, the instant until which they do (the latest over its
// limits) and the limits that hold it back until then; else nil.
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

// lendAt returns the first instant at which a limit holding the demand's
// headroom may lend it, and the limits that may then (in order); or -1.
func lendAt(sh []modelShare) (int64, []int) {
	at := int64(-1)
	var lenders []int
	for _, x := range sh {
		switch {
		case x.lend == 0:
		case at < 0 || x.lend < at:
			at, lenders = x.lend, []int{x.limit}
		case x.lend == at:
			lenders = append(lenders, x.limit)
		}
	}
	return at, lenders
}

// claim gives the demand's tenants a claim at their place for t.
func (m *model) claim(sh []modelShare, t int64) {
	for _, x := range sh {
		if x.b.Tenant != "" {
			x.ts.claims[x.b.Tenant] = [2]int64{t, x.place}
		}
	}
}

// charged advances the clocks of a demand granted for t, and drops its
// claims.
func (m *model) charged(sh []modelShare, t int64) {
	for _, x := range sh {
		if x.b.Tenant == "" {
			continue
		}
		step := min(spanUp(x.b.Limit, x.cost)*x.n, 1<<50)
		x.ts.clocks[x.b.Tenant] = min(max(x.clock, t), t+ahead(x.b.Limit)) + step
		delete(x.ts.claims, x.b.Tenant)
	}
}
