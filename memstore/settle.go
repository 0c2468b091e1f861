package memstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Settler = (*Store)(nil)

// settlement is what a reservation was settled to: the cost of each of
// its limits, and when none of its charges can be settled any more.
type settlement struct {
	costs  []int64
	expire int64 // µs
}

// Settle implements [quota.Settler].
func (s *Store) Settle(ctx context.Context, r *quota.Reservation, costs []int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("throttle: memory store: settle: %w", err)
	}
	if err := r.CheckCosts(costs); err != nil {
		return fmt.Errorf("memstore: %w", err)
	}
	if r.ID == "" {
		return errors.New("memstore: settle: the reservation has no id: it is not one of this store's")
	}
	d := r.Demand
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	prev, had := s.settled[r.ID]
	had = had && prev.expire > now && len(prev.costs) == len(costs)
	st := settlement{costs: make([]int64, len(costs))}
	for i, b := range d.Limits {
		p := newParams(b.Limit, d.CostOf(i))
		id := bucketID{d.Scope, b.Limit.Name, b.Key}
		if mb := s.buckets[id]; mb != nil && mb.alg == p.Algorithm {
			mb.expireAnchor(&p, now)
			mb.grid(&p)
		}
		old := p.cost
		if had {
			old = prev.costs[i]
		}
		st.costs[i] = old
		if costs[i] > 0 {
			st.costs[i] = int64(costs[i])
		}
		if p.Algorithm == quota.Concurrency {
			continue
		}
		end := p.SettleEnd(r.Marks[i])
		if end <= now {
			continue // the charge no longer counts, or (GCRA) is too old to correct
		}
		st.expire = max(st.expire, end)
		if delta := st.costs[i] - old; delta != 0 {
			mb := s.buckets[id]
			if mb == nil {
				if delta < 0 {
					continue // a fresh bucket: nothing to give back
				}
				mb = &memBucket{alg: p.Algorithm}
				s.buckets[id] = mb
			}
			if mb.alg == p.Algorithm {
				mb.settle(p, r.Marks[i], old, delta, now)
			}
		}
	}
	if st.expire > now {
		s.settled[strings.Clone(r.ID)] = st // not its idBlock's whole string (nextID)
	} else {
		delete(s.settled, r.ID)
	}
	s.ops++
	return nil
}

// settleAnchored moves by delta the charge of an anchored window whose
// start, mark, is on b's windows; after a move (mark on no boundary)
// only an extra charge is counted, in every window that may hold the
// request (sent between mark and now), as anchoring counts what it moves
// (quota.Anchorer), and a refund gives nothing back.
func (b *memBucket) settleAnchored(p params, mark, delta, now int64) {
	if !b.phased {
		return
	}
	at := max(now, mark)
	if quotamath.FloorMod(mark-p.Phase, p.Per) == 0 {
		k := p.Window(mark)
		b.add(k, delta, at)
		if delta > 0 {
			b.expireWindow(&p, k)
		}
		return
	}
	if delta <= 0 {
		return
	}
	for k := p.Window(mark); k <= p.Window(min(mark+p.Per-1, at)); k++ {
		b.add(k, delta, at)
		b.expireWindow(&p, k)
	}
}

// settle moves the charge recorded by mark, which cost old, by delta (see
// quota.Settler).
func (b *memBucket) settle(p params, mark, old, delta, now int64) {
	switch p.Algorithm {
	case quota.GCRA:
		b.tat = p.GCRASettle(b.tat, now, delta)
		b.expire = b.tat.Ceil()
	case quota.FixedWindow, quota.SlidingWindow:
		if p.Anchored {
			b.settleAnchored(p, mark, delta, now)
			return
		}
		b.add(mark, delta, now) // a count that falls to 0 is dropped
		if delta > 0 {
			b.expireWindow(&p, mark)
		}
	case quota.SlidingLog:
		// Entries alike in instant and cost count alike: settling any one
		// of them is settling this one.
		for i := range b.log {
			if b.log[i].At == mark && b.log[i].Cost == old {
				b.log[i].Cost = old + delta
				break
			}
		}
	}
}
