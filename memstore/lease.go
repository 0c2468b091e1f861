package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file holds the in-process store's Concurrency limits: leases,
// their release and renewal, and the wake-ups of waiters.

var _ quota.LeaseStore = (*Store)(nil)

// lease is one slot of a Concurrency bucket.
type lease struct {
	id     string
	expire int64 // µs; the slot is free at and after it
}

// slotsFull reports whether a Concurrency limit of the demand has no free
// slot now (bs are pruned to now), and if so the refusal: the delay until
// max(t, the instant expiries alone free a slot).
func slotsFull(ps []params, bs []*memBucket, now, t int64) (quota.Decision, bool) {
	for i := range ps {
		p := &ps[i]
		if p.Algorithm != quota.Concurrency || bs[i] == nil || int64(len(bs[i].leases)) < p.Rate {
			continue // a free slot: nothing to sort
		}
		if at, full := p.SlotFreeAt(bs[i].expiries()); full {
			return quota.Decision{Delay: quotamath.Micros(max(t, at) - now), Limit: i}, true
		}
	}
	return quota.Decision{}, false
}

// expiries returns the expiries of b's leases, in a new slice.
func (b *memBucket) expiries() []int64 {
	exp := make([]int64, len(b.leases))
	for i, l := range b.leases {
		exp[i] = l.expire
	}
	return exp
}

// hold adds a lease id on one slot from now and returns its expiry. If b
// already holds a live lease id (a second Claim), it is extended instead,
// never shortened.
func (b *memBucket) hold(p params, now int64, id string) int64 {
	exp := now + p.Per
	if i := slices.IndexFunc(b.leases, func(l lease) bool { return l.id == id }); i >= 0 {
		exp = max(exp, b.leases[i].expire)
		b.leases[i].expire = exp
	} else {
		// A copy: an id shares its idBlock's string, which a lease held
		// long would keep whole.
		b.leases = append(b.leases, lease{id: strings.Clone(id), expire: exp})
	}
	b.expire = max(b.expire, exp)
	return exp
}

// Claim implements [quota.LeaseStore.Claim].
func (s *Store) Claim(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	if err := ctx.Err(); err != nil {
		return quota.Decision{}, fmt.Errorf("throttle: memory store: claim: %w", err)
	}
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) || r.ID == "" {
		return quota.Decision{}, fmt.Errorf("throttle: memory store: claim: malformed reservation")
	}
	if !r.Unclaimed {
		return quota.Decision{OK: true, Limit: -1, Reservation: r}, nil
	}
	d := r.Demand
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	ps := make([]params, len(d.Limits))
	bs := make([]*memBucket, len(d.Limits))
	for i, l := range d.Limits {
		if l.Limit.Algorithm != quota.Concurrency {
			continue // slotsFull skips it
		}
		ps[i] = newParams(l.Limit, 1)
		b := s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}]
		if b == nil || b.alg != quota.Concurrency {
			continue
		}
		b.prune(&ps[i], now)
		if !slices.ContainsFunc(b.leases, func(l lease) bool { return l.id == r.ID }) {
			bs[i] = b // a lease of r's is already held: no slot needed
		}
	}
	if dec, full := slotsFull(ps, bs, now, now); full {
		return dec, nil
	}
	c := newReservation(d)
	copy(c.Marks, r.Marks)
	c.ID = r.ID
	for i, l := range d.Limits {
		if l.Limit.Algorithm != quota.Concurrency {
			continue
		}
		bid := bucketID{d.Scope, l.Limit.Name, l.Key}
		b := s.buckets[bid]
		if b == nil || b.alg != quota.Concurrency {
			b = &memBucket{alg: quota.Concurrency}
			s.buckets[bid] = b
		}
		c.Marks[i] = b.hold(ps[i], now, r.ID)
	}
	s.ops++
	return quota.Decision{OK: true, Limit: -1, Reservation: c}, nil
}

// drop removes lease id from b, if b holds it, and wakes a waiter of the
// bucket. s.mu is held.
func (s *Store) drop(bid bucketID, b *memBucket, id string) {
	i := slices.IndexFunc(b.leases, func(l lease) bool { return l.id == id })
	if i < 0 {
		return
	}
	b.leases = slices.Delete(b.leases, i, i+1)
	if w := s.watch[bid]; w != nil {
		w.wakeOne()
	}
}

// leaseBuckets calls f for every Concurrency limit of r with its bucket,
// nil if it has none. s.mu is held.
func (s *Store) leaseBuckets(r *quota.Reservation, f func(bid bucketID, b *memBucket, p params)) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return fmt.Errorf("throttle: memory store: malformed reservation")
	}
	for _, l := range r.Demand.Limits {
		if l.Limit.Algorithm != quota.Concurrency {
			continue
		}
		bid := bucketID{r.Demand.Scope, l.Limit.Name, l.Key}
		b := s.buckets[bid]
		if b != nil && b.alg != quota.Concurrency {
			b = nil
		}
		f(bid, b, newParams(l.Limit, 1))
	}
	return nil
}

// Release implements [quota.LeaseStore.Release].
func (s *Store) Release(ctx context.Context, r *quota.Reservation) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leaseBuckets(r, func(bid bucketID, b *memBucket, _ params) {
		if b != nil {
			s.drop(bid, b, r.ID)
		}
	})
}

// Renew implements [quota.LeaseStore.Renew].
func (s *Store) Renew(ctx context.Context, r *quota.Reservation) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("throttle: memory store: renew: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	var lost string
	err := s.leaseBuckets(r, func(bid bucketID, b *memBucket, p params) {
		if b != nil {
			b.prune(&p, now)
			if i := slices.IndexFunc(b.leases, func(l lease) bool { return l.id == r.ID }); i >= 0 {
				exp := max(b.leases[i].expire, now+p.Per)
				b.leases[i].expire = exp
				b.expire = max(b.expire, exp)
				return
			}
		}
		if lost == "" {
			lost = bid.name
		}
	})
	if err != nil {
		return err
	}
	if lost != "" {
		return fmt.Errorf("throttle: memory store: renew: limit %s: %w", lost, quota.ErrLeaseLost)
	}
	return nil
}

// WatchRelease implements [quota.LeaseStore.WatchRelease]. Wake-ups come from
// Release and Cancel in this process; none is ever lost.
func (s *Store) WatchRelease(ctx context.Context, scope string, b quota.Bucket) (<-chan struct{}, func(), error) {
	bid := bucketID{scope, b.Limit.Name, b.Key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch == nil {
		s.watch = make(map[bucketID]*waitList)
	}
	w := s.watch[bid]
	if w == nil {
		w = &waitList{}
		s.watch[bid] = w
	}
	c := w.add()
	stop := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if w.remove(c) {
			delete(s.watch, bid)
		}
	}
	return c, stop, nil
}

// waitList is the waiters of one bucket, oldest first. Its user guards it.
type waitList struct {
	chans []chan struct{}
}

func (w *waitList) add() chan struct{} {
	c := make(chan struct{}, 1)
	w.chans = append(w.chans, c)
	return c
}

// remove drops c and reports whether the list is now empty.
func (w *waitList) remove(c chan struct{}) bool {
	if i := slices.Index(w.chans, c); i >= 0 {
		w.chans = slices.Delete(w.chans, i, i+1)
	}
	return len(w.chans) == 0
}

// wakeOne signals the oldest waiter that has no signal pending yet.
func (w *waitList) wakeOne() {
	for _, c := range w.chans {
		select {
		case c <- struct{}{}:
			return
		default:
		}
	}
}
