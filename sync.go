package throttle

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// A Syncer is a [Store] that can lower a counter to what the vendor says
// is left, so that a quota the vendor shares with clients we do not
// control (another service using the same token) is respected. Both
// stores of this module implement it; [Learning.Sync] needs it.
type Syncer interface {
	// Sync records that at most remaining more units of b may be admitted
	// in the next within (the vendor's reset). It only ever lowers what
	// b admits, never raises it:
	//
	//   - GCRA: the arrival time becomes at least now + within +
	//     (Burst-remaining)*T, so from now until the reset at most
	//     remaining units pass, spread over the interval;
	//   - FixedWindow and SlidingWindow: the current window's count
	//     becomes at least Rate-remaining;
	//   - SlidingLog: an entry is added at now so that the cost recorded
	//     in the last Per is at least Rate-remaining.
	//
	// A negative remaining is treated as 0; remaining at or above what b
	// admits, or a non-positive within, changes nothing.
	Sync(ctx context.Context, scope string, b Bucket, remaining int, within time.Duration) error
}

var _ Syncer = (*MemoryStore)(nil)

// Sync implements [Syncer].
func (s *MemoryStore) Sync(ctx context.Context, scope string, b Bucket, remaining int, within time.Duration) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("throttle: memory store: sync: %w", err)
	}
	if field, err := b.Limit.validate(); err != nil {
		return &PolicyError{Field: "Limit." + field, Err: err}
	}
	if within <= 0 {
		return nil
	}
	p := newParams(b.Limit, 1)
	left := max(int64(remaining), 0)
	if left >= p.r && p.alg != GCRA || p.alg == GCRA && left >= p.b {
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
	case GCRA:
		tat := now + within + (p.b-left)*ceilDiv(p.p, p.r)
		if tat > b.tat {
			b.tat = tat
			b.expire = max(b.expire, tat)
		}
	case FixedWindow, SlidingWindow:
		k := floorDiv(now, p.p)
		if c := b.count(k); c < p.r-left {
			b.add(k, p.r-left-c)
		}
		end := (k + 1) * p.p
		if p.alg == SlidingWindow {
			end += p.p
		}
		b.expire = max(b.expire, end)
	case SlidingLog:
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
