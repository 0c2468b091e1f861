package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quotakit/throttle/quota"
)

var _ quota.Syncer = (*Store)(nil)

// Sync implements [quota.Syncer].
func (s *Store) Sync(ctx context.Context, scope string, b quota.Bucket, remaining int, within time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("throttle: memory store: sync: %w", err)
	}
	if err := b.Limit.Validate(); err != nil {
		return fmt.Errorf("memstore: sync: limit: %w", err)
	}
	if within <= 0 {
		return nil
	}
	p := newParams(b.Limit, 1)
	left := max(int64(remaining), 0)
	if left >= p.r && p.alg != quota.GCRA || p.alg == quota.GCRA && left >= p.b {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	id := bucketID{scope, b.Limit.Name, b.Key}
	mb := s.buckets[id]
	if mb == nil || mb.alg != p.alg {
		mb = &memBucket{alg: p.alg}
		s.buckets[id] = mb
	}
	mb.prune(p, now)
	mb.lower(p, now, ceilMicros(within), left)
	s.ops++
	return nil
}

// lower makes b admit at most left more units from now (see Syncer.Sync).
func (b *memBucket) lower(p params, now, within, left int64) {
	switch p.alg {
	case quota.GCRA:
		tat := now + within + (p.b-left)*ceilDiv(p.p, p.r)
		if tat > b.tat {
			b.tat = tat
			b.expire = max(b.expire, tat)
		}
	case quota.FixedWindow, quota.SlidingWindow:
		k := floorDiv(now, p.p)
		if c := b.count(k); c < p.r-left {
			b.add(k, p.r-left-c)
		}
		end := (k + 1) * p.p
		if p.alg == quota.SlidingWindow {
			end += p.p
		}
		b.expire = max(b.expire, end)
	case quota.SlidingLog:
		var sum int64
		for _, e := range b.log {
			if e.at > now-p.p && e.at <= now {
				sum += e.cost
			}
		}
		if fill := p.r - left - sum; fill > 0 {
			i, _ := slices.BinarySearchFunc(b.log, now+1, func(e logEntry, at int64) int { return cmpInt(e.at, at) })
			b.log = slices.Insert(b.log, i, logEntry{at: now, cost: fill})
			b.expire = max(b.expire, now+p.p)
		}
	}
}
