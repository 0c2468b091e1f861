package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
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
	if left >= p.Rate && p.Algorithm != quota.GCRA || p.Algorithm == quota.GCRA && left >= p.Burst {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	id := bucketID{scope, b.Limit.Name, b.Key}
	mb := s.buckets[id]
	if mb == nil || mb.alg != p.Algorithm {
		mb = &memBucket{alg: p.Algorithm}
		s.buckets[id] = mb
	}
	mb.expireAnchor(&p, now)
	if p.Anchored && !mb.phased {
		mb.setPhase(quotamath.FloorMod(now, p.Per)) // as a first charge would
	}
	mb.grid(&p)
	mb.prune(&p, now)
	mb.lower(p, now, quotamath.CeilMicros(within), left)
	s.ops++
	return nil
}

// lower makes b admit at most left more units from now until within
// has passed (see quota.Syncer).
func (b *memBucket) lower(p params, now, within, left int64) {
	switch p.Algorithm {
	case quota.GCRA:
		if tat := p.GCRASync(now, within, left); b.tat.Before(tat) {
			b.tat = tat
			b.expire = max(b.expire, tat.Ceil())
		}
	case quota.FixedWindow, quota.SlidingWindow:
		// The last window that starts before the reset holds at most left
		// more, those before it none (see quota.Syncer).
		first, last := p.SyncWindows(now, within)
		for k := first; k <= last; k++ {
			target, at := p.Rate, max(now, p.Start(k))
			if k == last {
				target = p.Rate - left
			}
			if c := b.count(k); c < target {
				b.add(k, target-c, at)
			}
			b.expireWindow(&p, k)
		}
	case quota.SlidingLog:
		if fill := p.Rate - left - quotamath.LogCost(b.log, now-p.Per, now); fill > 0 {
			b.log = quotamath.Insert(b.log, quotamath.LogEntry{At: now, Cost: fill})
			b.expire = max(b.expire, now+p.Per)
		}
	}
}
