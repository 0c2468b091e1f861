package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
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
//	go test ./redisstore -run '^$' -bench . -benchtime 2s
//
// BenchmarkDecision measures, against the same redis-server in the same
// run, PING and an EVALSHA of "return 1" (the physical baseline) and our
// decisions, at 1, 8 and 64 concurrent callers. Besides ns/op it reports
// x_evalsha (throughput as a multiple of the EVALSHA baseline at the same
// concurrency), redis_us/call (Redis's own time per call, from INFO
// commandstats) and, at concurrency 1, p50_us and p50_x_evalsha.

var returnOne = redis.NewScript("return 1")

// baseline holds the EVALSHA baseline of this run, by concurrency.
var baseline struct {
	sync.Mutex
	nsPerOp map[int]float64
	p50     map[int]float64
}

func BenchmarkDecision(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 128})
	defer c.Close()
	noRetry := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 128, MaxRetries: -1})
	defer noRetry.Close()
	bg := context.Background()
	prefix := redistest.Prefix(b)
	store := func(c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
		s, err := redisstore.New(c, append(opts, redisstore.WithPrefix(prefix))...)
		require.NoError(b, err)
		return s
	}
	// The default on a client that retries: calls marked, nothing kept;
	// batches from BatchInFlight calls of a scope in flight on.
	detect := store(c)
	ids, noIDs := store(c, redisstore.WithReplay(redisstore.ReplayIDs)), store(noRetry, redisstore.WithReplay(redisstore.ReplayNoRetries))
	unbatched := store(c, redisstore.WithBatching(0))
	// No per-call timeout: what the context.WithTimeout of every call costs.
	noTimer := store(noRetry, redisstore.WithReplay(redisstore.ReplayNoRetries), redisstore.WithTimeout(0))
	// Limits that always admit, so every call commits: the costly path.
	lim := func(name string, a quota.Algorithm) quota.Bucket {
		return quota.Bucket{Limit: quota.Limit{Name: name, Rate: 1_000_000, Per: time.Second, Algorithm: a}, Key: "k"}
	}
	tenant := func(b quota.Bucket, name string) quota.Bucket {
		b.Tenant = name
		return b
	}
	class := func(b quota.Bucket, headroom int) quota.Bucket {
		b.Headroom, b.Classed = headroom, true
		return b
	}
	demand := func(bs ...quota.Bucket) *quota.Demand {
		return &quota.Demand{Scope: "bench", Limits: bs, Cost: 1}
	}
	take := func(s *redisstore.Store, d *quota.Demand) func() error {
		return func() error {
			dec, err := s.Take(bg, d)
			if err == nil && !dec.OK {
				err = fmt.Errorf("refused")
			}
			return err
		}
	}
	cases := []struct {
		name string
		cmd  string // the command counted in INFO commandstats
		op   func() error
	}{
		{"ping", "ping", func() error { return c.Ping(bg).Err() }},
		{"evalsha-return1", "evalsha", func() error { return returnOne.Run(bg, c, nil).Err() }},
		{"gcra", "evalsha", take(detect, demand(lim("g1", quota.GCRA)))},
		{"gcra-ids", "evalsha", take(ids, demand(lim("g1i", quota.GCRA)))},
		{"gcra-noids", "evalsha", take(noIDs, demand(lim("g1n", quota.GCRA)))},
		{"gcra-noids-notimeout", "evalsha", take(noTimer, demand(lim("g1t", quota.GCRA)))},
		{"gcra-nobatching", "evalsha", take(unbatched, demand(lim("g1b", quota.GCRA)))},
		{"gcra+gcra", "evalsha", take(detect, demand(lim("g2a", quota.GCRA), lim("g2b", quota.GCRA)))},
		{"gcra+gcra-nobatching", "evalsha", take(unbatched, demand(lim("g2g", quota.GCRA), lim("g2h", quota.GCRA)))},
		{"gcra+gcra-ids", "evalsha", take(ids, demand(lim("g2e", quota.GCRA), lim("g2f", quota.GCRA)))},
		{"gcra+gcra-noids", "evalsha", take(noIDs, demand(lim("g2c", quota.GCRA), lim("g2d", quota.GCRA)))},
		// T = 1/3 µs: an arrival time with a fraction (a G: key, "us:frac").
		{"gcra-fraction", "evalsha", take(detect, demand(quota.Bucket{Limit: quota.Limit{Name: "g1f", Rate: 3_000_000, Per: time.Second}, Key: "k"}))},
		{"fixed-window", "evalsha", take(detect, demand(lim("f1", quota.FixedWindow)))},
		{"fixed-window-ids", "evalsha", take(ids, demand(lim("f1i", quota.FixedWindow)))},
		{"sliding-window", "evalsha", take(detect, demand(lim("w1", quota.SlidingWindow)))},
		// Shared limits (issue 31): a tenant (take_share.lua), and classes
		// noted on a window (take_window.lua with class_note.lua), a top
		// class and one with a headroom lent while no top class is active.
		{"gcra-tenant", "evalsha", take(detect, demand(tenant(lim("g1s", quota.GCRA), "acme")))},
		{"fixed-window-class", "evalsha", take(detect, demand(class(lim("f1c", quota.FixedWindow), 200)))},
		{"sliding-window-class", "evalsha", take(detect, demand(class(lim("w1c", quota.SlidingWindow), 200)))},
		{"sliding-window-top-class", "evalsha", take(detect, demand(class(lim("w1t", quota.SlidingWindow), 0)))},
	}
	baseline.nsPerOp, baseline.p50 = map[int]float64{}, map[int]float64{}
	for _, conc := range []int{1, 8, 64} {
		for _, tc := range cases {
			b.Run(fmt.Sprintf("c=%d/%s", conc, tc.name), func(b *testing.B) {
				require.NoError(b, tc.op()) // warm up: load scripts, open a connection
				before, err := commandStats(bg, c)
				require.NoError(b, err)
				lat := run(b, conc, tc.op)
				after, err := commandStats(bg, c)
				require.NoError(b, err)
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				if calls := after[tc.cmd].Calls - before[tc.cmd].Calls; calls > 0 {
					b.ReportMetric(float64(after[tc.cmd].Usec-before[tc.cmd].Usec)/float64(calls), "redis_us/call")
				}
				var p50 float64
				if lat != nil {
					slices.Sort(lat)
					p50 = float64(lat[len(lat)/2]) / 1e3
					b.ReportMetric(p50, "p50_us")
				}
				baseline.Lock()
				defer baseline.Unlock()
				if tc.name == "evalsha-return1" {
					baseline.nsPerOp[conc], baseline.p50[conc] = ns, p50
				}
				if base := baseline.nsPerOp[conc]; base > 0 {
					b.ReportMetric(base/ns, "x_evalsha")
				}
				if base := baseline.p50[conc]; base > 0 && p50 > 0 {
					b.ReportMetric(p50/base, "p50_x_evalsha")
				}
			})
		}
	}
}

// run calls op b.N times from conc goroutines. At concurrency 1 it returns
// every call's latency in ns.
func run(b *testing.B, conc int, op func() error) []int64 {
	var lat []int64
	if conc == 1 {
		lat = make([]int64, 0, b.N)
	}
	var (
		next   atomic.Int64
		failed atomic.Pointer[error]
		wg     sync.WaitGroup
	)
	b.ResetTimer()
	for range conc {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				start := time.Now()
				if err := op(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				if lat != nil {
					lat = append(lat, int64(time.Since(start)))
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return lat
}

// BenchmarkKeyMemory reports MEMORY USAGE of one limit key per algorithm
// (key "throttle:v1:{mem}:g:l:user-123456" and alike, so the name is
// counted too), after one decision (sliding log: after Rate decisions).
func BenchmarkKeyMemory(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	bg := context.Background()
	prefix := redisstore.DefaultPrefix // realistic key names; the server is this binary's own
	s, err := redisstore.New(c)
	require.NoError(b, err)
	for _, tc := range []struct {
		alg   quota.Algorithm
		rate  int
		takes int
	}{{quota.GCRA, 100, 1}, {quota.FixedWindow, 100, 1}, {quota.SlidingWindow, 100, 1}, {quota.SlidingLog, 10, 10}} {
		b.Run(tc.alg.String(), func(b *testing.B) {
			d := &quota.Demand{Scope: "mem", Cost: 1, Limits: []quota.Bucket{{
				Limit: quota.Limit{Name: "l", Rate: tc.rate, Per: time.Hour, Algorithm: tc.alg}, Key: "user-123456"}}}
			for range tc.takes {
				_, err := s.Take(bg, d)
				require.NoError(b, err)
			}
			var n int64
			for b.Loop() {
				n, err = c.MemoryUsage(bg, memKey(prefix, tc.alg)).Result()
				require.NoError(b, err)
			}
			b.ReportMetric(float64(n), "bytes/key")
			if tc.alg == quota.SlidingLog {
				b.ReportMetric(float64(n)/float64(tc.takes), "bytes/entry")
			}
		})
	}
}

func memKey(prefix string, a quota.Algorithm) string {
	tag := map[quota.Algorithm]string{quota.GCRA: "g", quota.FixedWindow: "f", quota.SlidingWindow: "w", quota.SlidingLog: "l"}[a]
	return prefix + "v1:{mem}:" + tag + ":l:user-123456"
}
