package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Run with:
//
//	go test ./redisstore -run '^$' -bench ShareDecision -benchtime 2s
//
// BenchmarkShareDecision measures what a class (a headroom) and a fair
// share (a tenant) cost a decision, against a plain decision on the same
// redis-server in the same run, at 1 and 8 concurrent callers: a GCRA
// limit that always admits, so every call commits. Besides ns/op it
// reports redis_us/call (Redis's time per call, INFO commandstats),
// redis_us/op (per decision: a batch decides several in a call) and
// x_plain (ns/op as a multiple of "plain" at the same concurrency).
// "plain-take.lua" is the plain decision run by take.lua, the script a
// shared limit needs, so that the share's own cost shows apart from the
// script's. The window cases are a sliding window that always admits:
// plain (take_window.lua) and by take.lua, a class above another
// (Classed: noted), a class with a headroom (noted, lent while no class
// above asks) and a tenant. The "-batched" cases batch (WithBatching's
// default): at 8 callers demands of the scope go together, plain ones
// in take_batch.lua, those with a tenant in take_share_batch.lua.
func BenchmarkShareDecision(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer c.Close()
	bg := context.Background()
	prefix := redistest.Prefix(b)
	store := func(opts ...redisstore.Option) *redisstore.Store {
		s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithBatching(0)}, opts...)...)
		require.NoError(b, err)
		return s
	}
	fast, generic := store(), store(redisstore.WithGenericTake())
	batched := store(redisstore.WithBatching(redisstore.DefaultBatchMax))
	bucket := func(name string) quota.Bucket {
		return quota.Bucket{Limit: quota.Limit{Name: name, Rate: 1_000_000, Per: time.Second, Burst: 1000}, Key: "k"}
	}
	window := func(name string) quota.Bucket {
		return quota.Bucket{Limit: quota.Limit{Name: name, Rate: 1_000_000, Per: time.Second, Algorithm: quota.SlidingWindow}, Key: "k"}
	}
	with := func(b quota.Bucket, headroom int, tenant string) quota.Bucket {
		b.Headroom, b.Tenant = headroom, tenant
		return b
	}
	top := func(b quota.Bucket) quota.Bucket {
		b.Classed = true
		return b
	}
	take := func(s *redisstore.Store, next func() quota.Bucket) func() error {
		return func() error {
			d := &quota.Demand{Scope: "bench", Limits: []quota.Bucket{next()}, Cost: 1, Pauses: []string{""}, MaxWait: time.Second}
			dec, err := s.Take(bg, d)
			if err == nil && !dec.OK {
				err = fmt.Errorf("refused: %+v", dec)
			}
			return err
		}
	}
	one := func(b quota.Bucket) func() quota.Bucket { return func() quota.Bucket { return b } }
	tenants := func(b quota.Bucket, n int) func() quota.Bucket {
		var i atomic.Int64
		return func() quota.Bucket { return with(b, 0, "t"+strconv.Itoa(int(i.Add(1))%n)) }
	}
	cases := []struct {
		name string
		op   func() error
	}{
		{"plain", take(fast, one(bucket("p")))},
		{"plain-take.lua", take(generic, one(bucket("pg")))},
		{"class", take(fast, one(with(bucket("h"), 200, "")))},
		{"tenant", take(fast, one(with(bucket("t1"), 0, "acme")))},
		{"16-tenants", take(fast, tenants(bucket("t16"), 16))},
		{"class+tenant", take(fast, one(with(bucket("ht"), 200, "acme")))},
		{"plain-batched", take(batched, one(bucket("pb")))},
		{"tenant-batched", take(batched, one(with(bucket("tb"), 0, "acme")))},
		{"16-tenants-batched", take(batched, tenants(bucket("t16b"), 16))},
		{"window", take(fast, one(window("w")))},
		{"window-take.lua", take(generic, one(window("wg")))},
		{"window-top-class", take(fast, one(top(window("wt"))))},
		{"window-class", take(fast, one(with(window("wh"), 200, "")))},
		{"window-tenant", take(fast, one(with(window("wn"), 0, "acme")))},
	}
	plain := map[int]float64{}
	for _, conc := range []int{1, 8} {
		for _, tc := range cases {
			b.Run(fmt.Sprintf("c=%d/%s", conc, tc.name), func(b *testing.B) {
				require.NoError(b, tc.op())
				before, err := commandStats(bg, c)
				require.NoError(b, err)
				run(b, conc, tc.op)
				after, err := commandStats(bg, c)
				require.NoError(b, err)
				if calls := after["evalsha"].Calls - before["evalsha"].Calls; calls > 0 {
					usec := float64(after["evalsha"].Usec - before["evalsha"].Usec)
					b.ReportMetric(usec/float64(calls), "redis_us/call")
					b.ReportMetric(usec/float64(b.N), "redis_us/op")
				}
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				if tc.name == "plain" {
					plain[conc] = ns
				}
				if base := plain[conc]; base > 0 {
					b.ReportMetric(ns/base, "x_plain")
				}
			})
		}
	}
}
