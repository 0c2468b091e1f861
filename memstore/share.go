package memstore

import (
	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file holds the in-process store's fair shares: the active tenants,
// share clocks and claims of every counter shared among tenants
// (quota.Bucket.Tenant; quota.Store gives the semantics).

// shareState is the fair-share state of one counter.
type shareState struct {
	per    int64            // the limit's Per: how long a demand keeps its tenant active
	active map[string]int64 // tenant -> instant of its last demand
	oldest int64            // no instant in active is older
	clocks map[string]int64 // tenant -> share clock; absent when not after now
	claims map[string]int64 // tenant -> end of its claim; absent when not after now
}

// share is one shared limit of a demand being decided.
type share struct {
	limit   int             // index in the demand
	l       quotamath.Limit // its numbers, without the demand's headroom
	cost    int64           // the demand's cost on it
	st      *shareState
	tenant  string
	n       int64 // active tenants, this one included
	clock   int64
	over    bool  // the tenant is over its share
	heldEnd int64 // when over and claims are live: when they stop holding it back, or 0
}

// shares makes the tenants of d's shared limits active at now and
// returns those limits' state, appended to out. s.mu is held.
func (s *Store) shares(d *quota.Demand, now int64, out []share) []share {
	for i := range d.Limits {
		b := &d.Limits[i]
		if b.Tenant == "" {
			continue
		}
		id := bucketID{d.Scope, b.Limit.Name, b.Key}
		l := quotamath.Of(b.Limit)
		st := s.shared[id]
		if st == nil {
			st = &shareState{per: l.Per, active: map[string]int64{}, oldest: now, clocks: map[string]int64{}, claims: map[string]int64{}}
			s.shared[id] = st
		}
		st.prune(now)
		st.active[b.Tenant] = now
		sh := share{limit: i, l: l, cost: int64(d.CostOf(i)), st: st, tenant: b.Tenant, n: int64(len(st.active)), clock: st.clocks[b.Tenant]}
		sh.over = l.OverShare(sh.clock, now)
		if sh.over {
			// Held back until the last claim lapses or the tenant is
			// within its share again, whichever comes first.
			for _, end := range st.claims {
				sh.heldEnd = max(sh.heldEnd, end)
			}
			if sh.heldEnd > now {
				sh.heldEnd = min(sh.heldEnd, l.BackInShare(sh.clock))
			}
		}
		out = append(out, sh)
	}
	return out
}

// prune forgets the tenants inactive at now, and the clocks and claims
// that no longer matter.
func (st *shareState) prune(now int64) {
	if st.oldest > now-st.per {
		return
	}
	st.oldest = now
	for tenant, at := range st.active {
		if at <= now-st.per {
			delete(st.active, tenant)
		} else {
			st.oldest = min(st.oldest, at)
		}
	}
	for tenant, clock := range st.clocks {
		if clock <= now {
			delete(st.clocks, tenant)
		}
	}
	for tenant, end := range st.claims {
		if end <= now {
			delete(st.claims, tenant)
		}
	}
}

// empty reports whether st holds nothing that matters at now.
func (st *shareState) empty(now int64) bool {
	st.prune(now)
	return len(st.active) == 0 && len(st.clocks) == 0 && len(st.claims) == 0
}

// overShare reports whether the demand is over its share on any limit.
func overShare(sh []share) bool {
	for _, x := range sh {
		if x.over {
			return true
		}
	}
	return false
}

// heldBack returns, for a demand over its share on a limit whose counter
// has claims live at now, the instant until which they hold it back, the
// latest over such limits, and that limit (the first, on ties);
// otherwise -1.
func heldBack(sh []share, now int64) (end int64, limit int) {
	limit = -1
	for _, x := range sh {
		if x.heldEnd > now && x.heldEnd > end {
			end, limit = x.heldEnd, x.limit
		}
	}
	return end, limit
}

// claim gives the tenants within their share a claim until their demand,
// refused although it could wait, may come back at t.
func claim(sh []share, t int64) {
	for _, x := range sh {
		if !x.over {
			x.st.claims[x.tenant] = x.l.ClaimEnd(t)
		}
	}
}

// charged advances the share clocks of a demand granted for t and drops
// its claims.
func charged(sh []share, t int64) {
	for _, x := range sh {
		x.st.clocks[x.tenant] = x.l.ShareCharge(x.clock, t, x.cost, x.n)
		delete(x.st.claims, x.tenant)
	}
}
