package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// This file holds the in-process store's [quota.Inspector] methods.

var _ quota.Inspector = (*Store)(nil)

// Inspect implements [quota.Inspector.Inspect]. It holds the store's lock while
// it walks the store's counters, so decisions wait for it: it is meant for
// an operator's occasional look, not for every request.
func (s *Store) Inspect(ctx context.Context, scope string, limits []quota.Limit) ([]quota.LimitState, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("throttle: memory store: inspect: %w", err)
	}
	type algName struct {
		alg  quota.Algorithm
		name string
	}
	byName := make(map[algName]quota.Limit, len(limits))
	for _, l := range limits {
		byName[algName{l.Algorithm, l.Name}] = l
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now().UnixMicro()
	var out []quota.LimitState
	for id, end := range s.pauses {
		if id.scope == scope && end > now {
			out = append(out, quota.LimitState{Key: id.key, Reset: quotamath.Micros(end - now)})
		}
	}
	for id, b := range s.buckets {
		if id.scope != scope {
			continue
		}
		l, ok := byName[algName{b.alg, id.name}]
		if !ok || l.Rate < 1 || l.Per.Microseconds() < 1 {
			continue
		}
		q := quotamath.Of(l)
		if b.phased { // an anchored counter's windows, whatever l says
			q = q.WithPhase(b.phase)
		}
		if st := q.State(b.counter(), now); st.Used > 0 {
			st.Limit, st.Algorithm, st.Key = l.Name, l.Algorithm, id.key
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b quota.LimitState) int {
		if c := strings.Compare(a.Limit, b.Limit); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out, nil
}

// ResetLimit implements [quota.Inspector.ResetLimit]. Callers waiting for a
// slot of a Concurrency limit are woken.
func (s *Store) ResetLimit(ctx context.Context, scope string, l quota.Limit, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("throttle: memory store: reset: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := bucketID{scope, l.Name, key}
	b := s.buckets[id]
	if b == nil || b.alg != l.Algorithm {
		return nil
	}
	delete(s.buckets, id)
	if w := s.watch[id]; w != nil {
		for range b.leases {
			w.wakeOne()
		}
	}
	return nil
}

// ClearPause implements [quota.Inspector.ClearPause].
func (s *Store) ClearPause(ctx context.Context, scope, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("throttle: memory store: clear pause: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pauses, pauseID{scope, key})
	return nil
}
