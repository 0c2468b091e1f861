package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/quotakit/throttle/quota"
	"golang.org/x/time/rate"
)

// memory runs the memory part: each library makes one decision on a new
// key, with the quota of the other parts, and the keys that appeared are
// measured with MEMORY USAGE (SAMPLES 0: every element). The baseline is
// a plain string key holding a small integer.
func memory(ctx context.Context, e *env) error {
	c := e.instances(1)[0]
	const baseKey = "baseline:mem"
	if err := e.admin.Set(ctx, baseKey, 1, time.Minute).Err(); err != nil {
		return err
	}
	base, err := e.admin.MemoryUsage(ctx, baseKey, 0).Result()
	if err != nil {
		return err
	}
	libs := []library{
		ours(oursConfig{name: "ours: GCRA", buckets: one(quota.GCRA)}),
		ours(oursConfig{name: "ours: fixed window", buckets: one(quota.FixedWindow)}),
		ours(oursConfig{name: "ours: sliding window", buckets: one(quota.SlidingWindow)}),
		ours(oursConfig{name: "ours: sliding log", buckets: one(quota.SlidingLog)}),
		ours(oursConfig{name: "ours: concurrency (lease held)", buckets: one(quota.Concurrency)}),
		ours(oursConfig{name: "ours: GCRA, 2 limits (all + per key)", buckets: hierarchy}),
		ours(oursConfig{name: "ours: GCRA, replay ids", opts: replayIDs, buckets: func(key string, rate int) []quota.Bucket {
			return []quota.Bucket{bucket("ids", quota.GCRA, rate, key)} // a key of its own: the row above has "limit"
		}}),
		redisRate, ululeLimiter, throttledGCRA,
	}
	seen, err := e.keys(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("### Memory per key\n\nMEMORY USAGE (SAMPLES 0) of every key that appeared after one granted decision on a new key, limit %d per second; × is the multiple of a plain string key holding a small integer (`%s`, %d B), measured in the same run. TTL is the key's remaining time to live then. Ours runs on the same client as the peers (go-redis defaults), on which it keeps nothing per decision beyond its limit keys (ReplayDetect); with replay ids (the last row of ours) each decision also leaves its reply under a replay key, kept for 1 s.\n\n", benchRate, baseKey, base)
	t := table{head: []string{"contender", "bytes (×)", "keys: bytes, TTL"}}
	for _, l := range libs {
		d, err := l.new(c, "mem", benchRate)
		if err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		if ok, _, err := d(ctx); err != nil || !ok {
			return fmt.Errorf("%s: ok=%v, %v", l.name, ok, err)
		}
		now, err := e.keys(ctx)
		if err != nil {
			return err
		}
		var total int64
		var cells []string
		for _, k := range now {
			if _, found := slices.BinarySearch(seen, k); found {
				continue
			}
			n, err := e.admin.MemoryUsage(ctx, k, 0).Result()
			if err != nil {
				return err
			}
			ttl, err := e.admin.PTTL(ctx, k).Result()
			if err != nil {
				return err
			}
			total += n
			life := "no TTL"
			if ttl > 0 {
				life = "TTL " + ttl.String()
			}
			cells = append(cells, fmt.Sprintf("`%s`: %d B, %s", k, n, life))
		}
		seen = now
		t.row(l.name, fmt.Sprintf("%d (%s)", total, ratio(float64(total), float64(base))), strings.Join(cells, "; "))
	}
	t.row(xrate.name, "–", fmt.Sprintf("no key: a rate.Limiter is %d B in process", unsafe.Sizeof(rate.Limiter{})))
	t.write(os.Stdout)
	return nil
}

// keys returns every key of the database, sorted.
func (e *env) keys(ctx context.Context) ([]string, error) {
	var all []string
	it := e.admin.Scan(ctx, 0, "*", 1000).Iterator()
	for it.Next(ctx) {
		all = append(all, it.Val())
	}
	slices.Sort(all)
	return all, it.Err()
}
