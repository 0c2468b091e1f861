package throttle

import (
	"context"
	"sync"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file starts a local share ([FailLocal], [LocalShare]) from what
// the store last told this instance of its limit. A share that starts
// full lets the fleet admit its whole quota again on top of what the store
// granted just before it failed: with 8 instances on a window of 80 that
// Redis had filled, 80 more. The store's last answers say what was left
// (Decision.Remaining, a refusal, a reservation's Delay), so at the first
// local decision of each outage, every share of a limit that answer
// covered is charged what the instance may not take: its capacity less
// its part (1/Instances) of what remained, with what a GCRA bucket has
// refilled since, until the charge's window or bucket would have reset.
// A share is only ever charged more, so the fleet admits less than it
// would unseeded, never more.
//
// What remained is this instance's evidence, as of its last answer: other
// instances may have taken more since, and Remaining is the least over
// the demand's limits other than Concurrency (less a class's headroom),
// so a limit's own can be larger. Limits shared among tenants and
// Concurrency limits are not seeded (their shares are fair shares and
// slots), nor anchored ones (their windows are the vendor's, learned anew
// by the local share).

// seedKey names one counter of the store: a scope's limit and key.
type seedKey struct{ scope, limit, key string }

// seedEvidence is what the store last said of a counter.
type seedEvidence struct {
	free  int64     // units free at at, at least (fleet-wide)
	at    time.Time // when free held
	until time.Time // when the charge stops counting: the counter is whole again
}

// seeds is a Limiter's record of the store's last answers, and of the
// local shares seeded from them in the current outage. Safe for
// concurrent use.
type seeds struct {
	mu     sync.Mutex
	seen   map[seedKey]seedEvidence
	notes  int              // since the last sweep of seen
	down   bool             // an outage began, and its recovery was not reported yet
	seeded map[seedKey]bool // counters seeded in this outage
}

// seedSweep is how many notes pass between sweeps of expired evidence,
// which bound the record by the counters recently used.
const seedSweep = 4096

// seedable reports whether the counter of b is seeded.
func seedable(b *quota.Bucket) bool {
	l := &b.Limit
	return b.Tenant == "" && l.Algorithm != Concurrency && !l.Anchored
}

// recovered ends the outage: the breaker reported the store up (Redis
// answered for Breaker.OpenFor after its last failure), so a flapping
// store's outage is one, its shares seeded once, not charged again at
// every failure after an answer.
func (s *seeds) recovered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = false
}

// note records what dec, the store's answer at now to d, says of d's
// counters. An answer that says nothing takes no lock: a refusal for a
// pause, or any answer to a demand of Concurrency limits alone.
func (s *seeds) note(d *demand, dec quota.Decision, now time.Time) {
	if !dec.OK && dec.Limit < 0 || d.SlotsOnly() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil {
		s.seen = map[seedKey]seedEvidence{}
	}
	for i := range d.Limits {
		b := &d.Limits[i]
		if !seedable(b) {
			continue
		}
		var e seedEvidence
		switch {
		case dec.OK && dec.Delay == 0:
			e = seedEvidence{free: dec.Remaining, at: now, until: now.Add(dec.ResetAfter)}
		case dec.OK:
			// A reservation: the counter is booked until its instant.
			e = seedEvidence{at: now.Add(dec.Delay), until: now.Add(max(dec.ResetAfter, dec.Delay))}
		case dec.Limit == i:
			// Refused for this limit: nothing free until the demand could go.
			e = seedEvidence{at: now.Add(dec.Delay), until: now.Add(dec.Delay)}
		default:
			continue // refused for another limit: nothing said of this one
		}
		if l := &b.Limit; l.Algorithm == GCRA {
			// A bucket refills: whole once its missing units have come back.
			ql := quotamath.Of(*l)
			e.until = e.at.Add(quotamath.Micros(ql.Emissions(max(int64(l.BurstOrRate())-e.free, 0)).Ceil()))
		}
		s.seen[seedKey{d.Scope, b.Limit.Name, b.Key}] = e
	}
	if s.notes++; s.notes >= seedSweep {
		s.notes = 0
		for k, e := range s.seen {
			if !now.Before(e.until) {
				delete(s.seen, k)
			}
		}
	}
}

// seed charges, at the first local decision of an outage on each of ld's
// counters, the local share what this instance may not take of it
// (above). ld is the demand on local, d's limits replaced by their
// shares; instances is Policy.Instances.
func (s *seeds) seed(ctx context.Context, local quota.Store, ld *quota.Demand, instances int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		s.down, s.seeded = true, map[seedKey]bool{}
	}
	n := int64(max(instances, 1))
	for i := range ld.Limits {
		b := &ld.Limits[i]
		if !seedable(b) {
			continue
		}
		k := seedKey{ld.Scope, b.Limit.Name, b.Key}
		if s.seeded[k] {
			continue
		}
		s.seeded[k] = true
		e, ok := s.seen[k]
		if !ok || !now.Before(e.until) {
			continue
		}
		free := e.free
		if l := &b.Limit; l.Algorithm == GCRA && now.After(e.at) {
			// The fleet's bucket refilled since at instances times the
			// share's pace.
			free += int64(float64(now.Sub(e.at)) * float64(n) * float64(l.Rate) / float64(l.Per))
		}
		capacity := int64(b.Limit.Capacity())
		charge := capacity - min(free/n, capacity)
		if charge <= 0 {
			continue
		}
		// A charge of the share alone: granted, as the share has room for
		// its capacity, unless this instance used it in an earlier
		// outage, which leaves less to take.
		_, _ = local.Take(ctx, &quota.Demand{Scope: ld.Scope, Limits: []quota.Bucket{{Limit: b.Limit, Key: b.Key}}, Cost: int(charge)})
	}
}
