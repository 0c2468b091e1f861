package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"

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
			out = append(out, quota.LimitState{Key: id.key, Reset: micros(end - now)})
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
		if st := b.state(newParams(l, 1), now); st.Used > 0 {
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

// state computes Used, Remaining and Reset of b at now without changing
// b: the same arithmetic as the Redis store's inspection.
func (b *memBucket) state(p params, now int64) quota.LimitState {
	var st quota.LimitState
	switch p.alg {
	case quota.GCRA:
		T := ceilDiv(p.p, p.r)
		if b.tat > now {
			st.Used = min(ceilDiv(b.tat-now, T), p.b)
			st.Reset = micros(b.tat - now)
		}
		st.Remaining = p.b - st.Used
		return st
	case quota.FixedWindow:
		k := floorDiv(now, p.p)
		st.Used = b.count(k)
		if st.Used > 0 {
			st.Reset = micros((k+1)*p.p - now)
		}
	case quota.SlidingWindow:
		k := floorDiv(now, p.p)
		cur, prev, e := b.count(k), b.count(k-1), now-k*p.p
		st.Used = cur + ceilDiv(prev*(p.p-e), p.p)
		switch {
		case cur > 0:
			st.Reset = micros((k+2)*p.p - now)
		case prev > 0:
			st.Reset = micros((k+1)*p.p - now)
		}
	case quota.SlidingLog:
		var last int64
		for _, e := range b.log {
			if e.at > now-p.p {
				st.Used += e.cost
				last = max(last, e.at)
			}
		}
		if st.Used > 0 {
			st.Reset = micros(last + p.p - now)
		}
	case quota.Concurrency:
		var last int64
		for _, l := range b.leases {
			if l.expire > now {
				st.Used++
				last = max(last, l.expire)
			}
		}
		if st.Used > 0 {
			st.Reset = micros(last - now)
		}
	}
	st.Remaining = max(p.r-st.Used, 0)
	return st
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
