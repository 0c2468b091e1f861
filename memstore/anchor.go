package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Anchorer = (*Store)(nil)

// Anchor implements [quota.Anchorer].
func (s *Store) Anchor(ctx context.Context, scope string, b quota.Bucket, within, tolerance time.Duration) (time.Duration, bool, error) {
	if err := ctx.Err(); err != nil {
		return 0, false, fmt.Errorf("throttle: memory store: anchor: %w", err)
	}
	if err := b.Limit.Validate(); err != nil {
		return 0, false, fmt.Errorf("memstore: anchor: limit: %w", err)
	}
	if !b.Limit.Anchored {
		return 0, false, fmt.Errorf("memstore: anchor: limit %s: %w: not Anchored", b.Limit.Name, quota.ErrInvalid)
	}
	p := newParams(b.Limit, 1)
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	id := bucketID{scope, b.Limit.Name, b.Key}
	mb := s.buckets[id]
	if mb == nil || mb.alg != p.Algorithm {
		mb = &memBucket{alg: p.Algorithm}
	}
	mb.expireAnchor(&p, now)
	mb.grid(&p)
	if within <= 0 {
		if !mb.phased {
			return 0, false, nil
		}
		return quotamath.Micros(p.Ends(now)), mb.learned, nil
	}
	end := now + quotamath.CeilMicros(within)
	moved := false
	switch {
	case !mb.phased && len(mb.windows) == 0:
		mb.setPhase(quotamath.FloorMod(end, p.Per))
		moved = true
	case !mb.learned || p.AnchorMoves(end, max(tolerance, 0).Microseconds()):
		mb.prune(&p, now)
		ws := make([]quotamath.WindowCount, len(mb.windows))
		for i, w := range mb.windows {
			ws[i] = quotamath.WindowCount{K: w.idx, Count: w.count, Last: w.last}
		}
		phase := quotamath.FloorMod(end, p.Per)
		mb.windows = mb.windows[:0]
		for _, w := range p.Reanchor(ws, phase, now) {
			mb.windows = append(mb.windows, window{idx: w.K, count: w.Count, last: w.Last})
		}
		mb.setPhase(phase)
		moved = true
	}
	mb.learned = true
	mb.grid(&p)
	if !moved {
		return quotamath.Micros(p.Ends(now)), false, nil
	}
	// The phase lives as long as the window of now, or a later window
	// that holds units.
	mb.expireWindow(&p, p.Window(now))
	for _, w := range mb.windows {
		mb.expireWindow(&p, w.idx)
	}
	s.buckets[id] = mb
	s.ops++
	return quotamath.Micros(p.Ends(now)), moved, nil
}
