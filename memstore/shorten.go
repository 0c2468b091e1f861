package memstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Shortener = (*Store)(nil)

// Shorten implements [quota.Shortener].
func (s *Store) Shorten(ctx context.Context, r *quota.Reservation, i int, within time.Duration) (*quota.Reservation, bool, error) {
	if err := ctx.Err(); err != nil {
		return r, false, fmt.Errorf("throttle: memory store: shorten: %w", err)
	}
	if err := r.CheckShorten(i); err != nil {
		return r, false, fmt.Errorf("memstore: %w", err)
	}
	d := r.Demand
	l := d.Limits[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	b := s.buckets[bucketID{d.Scope, l.Limit.Name, l.Key}]
	if b == nil || b.alg != quota.SlidingLog {
		return r, false, nil
	}
	to := now + quotamath.CeilMicros(within) - l.Limit.Per.Microseconds()
	mark := r.Marks[i]
	if to >= mark {
		return r, false, nil
	}
	cost := int64(d.CostOf(i))
	if st, ok := s.settled[r.ID]; ok && st.expire > now && len(st.costs) == len(d.Limits) {
		cost = st.costs[i] // what Settle moved the entry to
	}
	k := slices.Index(b.log, quotamath.LogEntry{At: mark, Cost: cost})
	if k < 0 {
		return r, false, nil // cancelled, or out of the log
	}
	b.log = slices.Delete(b.log, k, k+1)
	b.log = quotamath.Insert(b.log, quotamath.LogEntry{At: to, Cost: cost})
	s.ops++
	nr := *r
	nr.Marks = slices.Clone(r.Marks)
	nr.Marks[i] = to
	return &nr, true, nil
}
