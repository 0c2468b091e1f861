package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Retimer = (*Store)(nil)

// Retime implements [quota.Retimer]. Each limit's move is made on a copy
// of its counter, and the copies replace the counters only when every
// limit admits the moved charge: all or none.
func (s *Store) Retime(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	if err := ctx.Err(); err != nil {
		return quota.Decision{}, fmt.Errorf("throttle: memory store: retime: %w", err)
	}
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return quota.Decision{}, fmt.Errorf("throttle: memory store: retime: malformed reservation")
	}
	d := r.Demand
	if err := d.Validate(); err != nil {
		return quota.Decision{}, fmt.Errorf("memstore: retime: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	for _, k := range d.Pauses {
		if s.pauses[pauseID{d.Scope, k}] > now {
			return quota.Decision{Limit: -1, Pause: k}, nil
		}
	}
	moved := make([]*memBucket, len(d.Limits))
	marks := slices.Clone(r.Marks)
	end := now
	for i, l := range d.Limits {
		if l.Limit.Algorithm == quota.Concurrency {
			continue
		}
		p := demandParams(d, i)
		b := &memBucket{alg: p.Algorithm}
		if old := s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}]; old != nil && old.alg == p.Algorithm {
			b = old.clone()
		}
		b.expireAnchor(&p, now)
		b.grid(&p)
		b.prune(&p, now)
		mark, ok := b.retime(p, r.Marks[i], now)
		if !ok {
			return quota.Decision{Limit: i}, nil
		}
		moved[i], marks[i] = b, mark
		end = max(end, p.ChargeEnd(mark))
	}
	for i, l := range d.Limits {
		if moved[i] != nil {
			s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}] = moved[i]
		}
	}
	s.ops++
	nr := newReservation(d)
	copy(nr.Marks, marks)
	nr.ID, nr.Unclaimed = r.ID, r.Unclaimed
	return quota.Decision{OK: true, Limit: -1, Reservation: nr, ResetAfter: quotamath.Micros(end - now), At: time.UnixMicro(now)}, nil
}

// clone returns a copy of b whose windows and log may change without
// changing b's.
func (b *memBucket) clone() *memBucket {
	c := *b
	c.windows = slices.Clone(b.windows)
	c.log = slices.Clone(b.log)
	return &c
}

// retime moves the charge of p.cost whose mark is mark to now, on b
// pruned to now (quota.Retimer), and returns its new mark, or false when
// b has no room for it at now; b may then have changed, and is dropped.
func (b *memBucket) retime(p params, mark, now int64) (int64, bool) {
	switch p.Algorithm {
	case quota.GCRA:
		switch {
		case p.Mark(b.tat) == mark: // no later grant: give back, charge at now
			b.tat = p.GCRARefund(b.tat, p.cost)
		case p.GCRAKeeps(mark, now, p.cost):
			return mark, true
		case quotamath.At(now).Before(b.tat):
			return 0, false // later grants ahead of now sit on it
		}
	case quota.FixedWindow, quota.SlidingWindow:
		k, on := mark, true
		if p.Anchored {
			// mark is the start of the window charged: on b's windows
			// still, unless they moved since (or b's state ended).
			on = b.phased && quotamath.FloorMod(mark-p.Phase, p.Per) == 0
			k = p.Window(mark)
		}
		if on && k == p.Window(now) {
			return mark, true
		}
		if on {
			b.add(k, -p.cost, 0)
		}
	case quota.SlidingLog:
		if i := slices.Index(b.log, quotamath.LogEntry{At: mark, Cost: p.cost}); i >= 0 {
			b.log = slices.Delete(b.log, i, i+1)
		}
	}
	if !p.Admits(b.counter(), now, p.cost) {
		return 0, false
	}
	if p.Anchored && !b.phased {
		b.setPhase(quotamath.FloorMod(now, p.Per)) // as Take's first charge
		b.grid(&p)
	}
	return b.commit(&p, now), true
}
