package memstore

import (
	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file holds the in-process store's lent headrooms and fair shares
// (quota.Store gives the semantics): the class notes of every counter
// with noted classes (quota.Bucket.Noted), and the active tenants, share
// clocks and claims of every counter shared among tenants
// (quota.Bucket.Tenant).

// shareState is the class and fair-share state of one counter.
type shareState struct {
	per    int64            // the limit's Per: how long a demand keeps its tenant active
	t      int64            // T, rounded up: how long a note keeps its class active
	notes  map[int64]int64  // headroom -> instant of its latest note
	active map[string]int64 // tenant -> instant of its last demand
	oldest int64            // no instant in active is older
	clocks map[string]int64 // tenant -> share clock; absent when not after now
	claims map[string]claim // tenant -> its claim; absent when it has lapsed
}

// A claim is a waiting tenant's: the instant it was refused until, and
// its place.
type claim struct{ at, place int64 }

// share is one limit of a demand being decided that is shared among
// tenants or has noted classes.
type share struct {
	limit   int             // index in the demand
	l       quotamath.Limit // its numbers, without the demand's headroom
	cost    int64           // the demand's cost on it
	st      *shareState
	tenant  string // "" when not shared among tenants
	n       int64  // active tenants, this one included
	clock   int64
	place   int64
	heldEnd int64 // when other tenants' live claims at a lower place hold it back: until when, else 0
	noteEnd int64 // when the headroom is held: when the notes holding it stop, else 0
}

// shares notes the classes and makes the tenants of d's limits active at
// now, lends the headroom of a limit that no higher class holds (ps[i]
// then has the whole limit), and returns those limits' state, appended
// to out. s.mu is held.
func (s *Store) shares(d *quota.Demand, now int64, ps []params, out []share) []share {
	for i := range d.Limits {
		b := &d.Limits[i]
		if b.Tenant == "" && !b.Noted() {
			continue
		}
		id := bucketID{d.Scope, b.Limit.Name, b.Key}
		l := quotamath.Of(b.Limit)
		st := s.shared[id]
		if st == nil {
			st = &shareState{per: l.Per, t: l.ShareUnit(1), notes: map[int64]int64{}, active: map[string]int64{}, oldest: now, clocks: map[string]int64{}, claims: map[string]claim{}}
			s.shared[id] = st
		}
		st.prune(now)
		sh := share{limit: i, l: l, cost: int64(d.CostOf(i)), st: st, tenant: b.Tenant}
		if b.Noted() {
			h := int64(b.Headroom)
			for other, at := range st.notes {
				if other < h && l.NoteActive(at, now) {
					sh.noteEnd = max(sh.noteEnd, l.NoteEnd(at))
				}
			}
			if h > 0 && sh.noteEnd == 0 {
				ps[i].Limit = l // lent
			}
			st.notes[h] = now
		}
		if b.Tenant != "" {
			st.active[b.Tenant] = now
			sh.n, sh.clock = int64(len(st.active)), st.clocks[b.Tenant]
			sh.place = quotamath.SharePlace(sh.clock, now)
			if c, ok := st.claims[b.Tenant]; ok && l.ClaimEnd(c.at) > now {
				sh.place = c.place // a waiting tenant keeps its place
			}
			last, held := int64(0), false
			for tenant, c := range st.claims {
				if tenant != b.Tenant && l.ClaimEnd(c.at) > now && c.place < sh.place {
					last, held = max(last, c.at), true
				}
			}
			if held {
				sh.heldEnd = l.HeldUntil(last, now)
			}
		}
		out = append(out, sh)
	}
	return out
}

// prune forgets the tenants inactive at now, and the notes, clocks and
// claims that no longer matter.
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
	for h, at := range st.notes {
		if at <= now-st.t {
			delete(st.notes, h)
		} else {
			st.oldest = min(st.oldest, at)
		}
	}
	for tenant, clock := range st.clocks {
		if clock <= now {
			delete(st.clocks, tenant)
		}
	}
	for tenant, c := range st.claims {
		if c.at+max(st.t, quotamath.ClaimGrace) <= now {
			delete(st.claims, tenant)
		}
	}
}

// empty reports whether st holds nothing that matters at now.
func (st *shareState) empty(now int64) bool {
	st.prune(now)
	return len(st.active) == 0 && len(st.notes) == 0 && len(st.clocks) == 0 && len(st.claims) == 0
}

// heldBack returns, for a demand that other tenants' claims at a lower
// place hold back, the instant until which they do, the latest over its
// limits, and that limit (the first, on ties); otherwise -1.
func heldBack(sh []share) (end int64, limit int) {
	limit = -1
	for _, x := range sh {
		if x.heldEnd > end {
			end, limit = x.heldEnd, x.limit
		}
	}
	return end, limit
}

// lendAt returns the first instant at which a limit holding the demand's
// headroom may lend it, and that limit (the first, on ties); or -1, -1.
func lendAt(sh []share) (at int64, limit int) {
	at, limit = -1, -1
	for _, x := range sh {
		if x.noteEnd > 0 && (at < 0 || x.noteEnd < at) {
			at, limit = x.noteEnd, x.limit
		}
	}
	return at, limit
}

// claimAll gives the demand's tenants a claim, at their place, for t,
// the instant it was refused until: it will come back then.
func claimAll(sh []share, t int64) {
	for _, x := range sh {
		if x.tenant != "" {
			x.st.claims[x.tenant] = claim{at: t, place: x.place}
		}
	}
}

// charged advances the share clocks of a demand granted at t and drops
// its claims.
func charged(sh []share, t int64) {
	for _, x := range sh {
		if x.tenant != "" {
			x.st.clocks[x.tenant] = x.l.ShareCharge(x.clock, t, x.cost, x.n)
			delete(x.st.claims, x.tenant)
		}
	}
}
