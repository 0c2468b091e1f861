package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

var _ quota.Inspector = (*Store)(nil)

// Inspect implements [quota.Inspector.Inspect]: it reports the live
// state of every counter and pause of scope whose limit is one of limits
// (a counter of another limit is skipped: its parameters are needed to
// read it). It lists the scope's keys with SCAN (on every master of a
// Cluster), reads Redis's clock once and each key once; it writes
// nothing, and runs no script. States come sorted by limit, then key;
// pauses first.
func (s *Store) Inspect(ctx context.Context, scope string, limits []quota.Limit) ([]quota.LimitState, error) {
	byName := make(map[string]quota.Limit, len(limits))
	for _, l := range limits {
		byName[algTag(&l)+l.Name] = l
	}
	ks := newKeys(s.prefix, scope)
	names, err := s.scopeKeys(ctx, ks)
	if err != nil {
		return nil, fmt.Errorf("redisstore: inspect: %w", s.configErr(err))
	}
	now, err := s.clockMicros(ctx)
	if err != nil {
		return nil, fmt.Errorf("redisstore: inspect: %w", s.configErr(err))
	}
	var out []quota.LimitState
	for _, name := range names {
		rest := strings.TrimPrefix(name, ks.base)
		if key, ok := strings.CutPrefix(rest, "p:"); ok {
			end, err := s.client.Get(ctx, name).Int64()
			if errors.Is(err, redis.Nil) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("redisstore: inspect: %w", s.configErr(err))
			}
			if end > now {
				out = append(out, quota.LimitState{Key: key, Reset: quotamath.Micros(end - now)})
			}
			continue
		}
		tag, after, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		lname, key, ok := strings.Cut(after, ":")
		if !ok {
			continue
		}
		l, ok := byName[tag+":"+lname]
		if !ok {
			continue // replies, MULTI/EXEC counters, limits not asked for
		}
		st, err := s.inspectLimit(ctx, name, l, key, now)
		if errors.Is(err, redis.Nil) {
			continue // expired since the scan
		}
		if err != nil {
			return nil, fmt.Errorf("redisstore: inspect: %w", s.configErr(err))
		}
		if st.Used > 0 { // else the same as a fresh counter, about to expire
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Limit != out[j].Limit {
			return out[i].Limit < out[j].Limit
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

// clockMicros is the instant the scripts would use: Redis's TIME, or the
// test clock of withNow.
func (s *Store) clockMicros(ctx context.Context) (int64, error) {
	if s.now != nil {
		return s.now().UnixMicro(), nil
	}
	tm, err := s.client.Time(ctx).Result()
	if err != nil {
		return 0, err
	}
	return tm.UnixMicro(), nil
}

// inspectLimit reads one limit key; the state is package quotamath's,
// as the in-process store's.
func (s *Store) inspectLimit(ctx context.Context, name string, l quota.Limit, key string, now int64) (quota.LimitState, error) {
	q := quotamath.Of(l)
	c, err := s.readCounter(ctx, name, &q, now)
	if err != nil {
		return quota.LimitState{}, err
	}
	st := q.State(c, now)
	st.Limit, st.Algorithm, st.Key = l.Name, l.Algorithm, key
	return st, nil
}

// readCounter reads the key of a counter of limit q; the windows of an
// anchored counter set q's phase to the counter's (take.lua).
func (s *Store) readCounter(ctx context.Context, name string, q *quotamath.Limit, now int64) (quotamath.Counter, error) {
	var c quotamath.Counter
	switch q.Algorithm {
	case quota.GCRA:
		v, err := s.client.Get(ctx, name).Result()
		if err != nil {
			return c, err
		}
		// "us" or "us:frac" (take_gcra.lua).
		if c.TAT.Micros, c.TAT.Frac, err = parseField(v); err != nil {
			return c, fmt.Errorf("GCRA arrival time %s: malformed value %q", name, v)
		}
		return c, nil
	case quota.FixedWindow, quota.SlidingWindow:
		h, err := s.client.HGetAll(ctx, name).Result()
		c.Count = func(k int64) int64 { return hashInt(h, k) }
		if a, ok := h["a"]; ok {
			phase, perr := strconv.ParseInt(a, 10, 64)
			if perr != nil {
				return c, fmt.Errorf("window counter %s: malformed phase %q", name, a)
			}
			*q = q.WithPhase(phase)
		}
		return c, err
	case quota.SlidingLog:
		// Members "instant:cost:id" in order of instant (take.lua).
		ms, err := s.client.ZRange(ctx, name, 0, -1).Result()
		if err != nil {
			return c, err
		}
		c.Log = make([]quotamath.LogEntry, len(ms))
		for i, m := range ms {
			at, cost, ok := logEntry(m)
			if !ok {
				return c, fmt.Errorf("sliding log %s: malformed member %q", name, m)
			}
			c.Log[i] = quotamath.LogEntry{At: at, Cost: cost}
		}
	case quota.Concurrency:
		zs, err := s.client.ZRangeByScoreWithScores(ctx, name, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"}).Result()
		if err != nil {
			return c, err
		}
		for _, z := range zs { // unexpired leases
			c.Expiries = append(c.Expiries, int64(z.Score))
		}
	}
	return c, nil
}

// logEntry reads the instant and cost of a sliding-log member,
// "instant:cost:id".
func logEntry(m string) (at, cost int64, ok bool) {
	a, rest, ok1 := strings.Cut(m, ":")
	c, _, ok2 := strings.Cut(rest, ":")
	at, err1 := strconv.ParseInt(a, 10, 64)
	cost, err2 := strconv.ParseInt(c, 10, 64)
	return at, cost, ok1 && ok2 && err1 == nil && err2 == nil
}

func hashInt(h map[string]string, k int64) int64 {
	n, _ := strconv.ParseInt(h[strconv.FormatInt(k, 10)], 10, 64)
	return n
}

// scopeKeys lists the keys of a scope, on whichever node holds its slot.
func (s *Store) scopeKeys(ctx context.Context, ks keys) ([]string, error) {
	match := escapeGlob(ks.base) + "*"
	scan := func(ctx context.Context, c *redis.Client) ([]string, error) {
		var out []string
		iter := c.Scan(ctx, 0, match, 1000).Iterator()
		for iter.Next(ctx) {
			out = append(out, iter.Val())
		}
		return out, iter.Err()
	}
	switch c := s.client.(type) {
	case *redis.Client:
		return scan(ctx, c)
	case *redis.ClusterClient:
		var (
			mu  sync.Mutex
			out []string
		)
		err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			names, err := scan(ctx, m)
			mu.Lock()
			out = append(out, names...)
			mu.Unlock()
			return err
		})
		return out, err
	}
	return nil, fmt.Errorf("inspecting needs a *redis.Client or *redis.ClusterClient, not %T", s.client)
}

// escapeGlob escapes the glob characters of SCAN's MATCH.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ResetLimit implements [quota.Inspector.ResetLimit]: it forgets
// everything charged to key of limit l in scope, so the next decision
// finds the limit full. It does not touch pauses. Callers waiting for a
// Concurrency slot notice at their next poll.
func (s *Store) ResetLimit(ctx context.Context, scope string, l quota.Limit, key string) error {
	ks := newKeys(s.prefix, scope)
	b := quota.Bucket{Limit: l, Key: key}
	if err := s.client.Del(ctx, ks.limit(&b)).Err(); err != nil {
		return fmt.Errorf("redisstore: reset: %w", s.configErr(err))
	}
	return nil
}

// ClearPause implements [quota.Inspector.ClearPause]: it ends the
// pause key of scope now (the empty key is the scope-wide pause).
// Instances that learned the pause themselves keep their local copy until
// it ends.
func (s *Store) ClearPause(ctx context.Context, scope, key string) error {
	ks := newKeys(s.prefix, scope)
	if err := s.client.Del(ctx, ks.pause(key)).Err(); err != nil {
		return fmt.Errorf("redisstore: clear pause: %w", s.configErr(err))
	}
	return nil
}
