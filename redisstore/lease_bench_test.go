package redisstore_test

import (
	"context"
	"fmt"
	"slices"
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
//	go test ./redisstore -run '^$' -bench 'Lease|ClusterDecision' -benchtime 20000x
//
// BenchmarkLease measures a Concurrency slot's acquire+release (a Take,
// then a Release, as a Transport makes them) against an EVALSHA of
// "return 1" measured in the same run at the same concurrency, and a plain
// GCRA decision (one call each, no batching) for comparison. A release
// queues its lease, and the next Take of the scope carries it
// (releases.go), so acquire+release is one script call when callers keep
// coming. Besides ns/op it reports x_evalsha (throughput as a multiple of
// the EVALSHA baseline's: 0.5 is what two bare round trips would give),
// redis_us/op (Redis's own time for the scripts of one operation,
// INFO commandstats, carried and separate releases included) and, at
// concurrency 1, p50_us and p50_x_evalsha. Rows without a suffix use a
// client with go-redis's default retries (ReplayDetect, the default);
// "-noids" rows a client without retries (ReplayNoRetries); "-ids" rows
// ReplayIDs.
func BenchmarkLease(b *testing.B) {
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
	detect := store(c)
	ids, noIDs := store(c, redisstore.WithReplay(redisstore.ReplayIDs)), store(noRetry, redisstore.WithReplay(redisstore.ReplayNoRetries))
	plain := store(c, redisstore.WithBatching(0))
	slots := quota.Bucket{Limit: quota.Limit{Name: "c", Rate: 1_000_000, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"}
	rate := quota.Bucket{Limit: quota.Limit{Name: "g", Rate: 1_000_000, Per: time.Second}, Key: "k"}
	acquireRelease := func(s *redisstore.Store, bs ...quota.Bucket) func() error {
		return func() error {
			d := &quota.Demand{Scope: "bench-lease", Limits: bs, Cost: 1}
			dec, err := s.Take(bg, d)
			if err != nil {
				return err
			}
			if !dec.OK {
				return fmt.Errorf("refused")
			}
			return s.Release(bg, dec.Reservation)
		}
	}
	take := func(s *redisstore.Store, bs ...quota.Bucket) func() error {
		return func() error {
			dec, err := s.Take(bg, &quota.Demand{Scope: "bench-lease", Limits: bs, Cost: 1})
			if err == nil && !dec.OK {
				err = fmt.Errorf("refused")
			}
			return err
		}
	}
	cases := []struct {
		name string
		op   func() error
	}{
		{"evalsha-return1", func() error { return returnOne.Run(bg, c, nil).Err() }},
		{"gcra-take", take(plain, rate)},
		{"gcra+slot-acquire+release", acquireRelease(detect, rate, slots)},
		{"gcra+slot-acquire+release-noids", acquireRelease(noIDs, rate, slots)},
		{"slot-acquire+release", acquireRelease(detect, slots)},
		{"slot-acquire+release-ids", acquireRelease(ids, slots)},
	}
	base := map[int][2]float64{} // ns/op and p50 of the baseline, by concurrency
	for _, conc := range []int{1, 8, 64} {
		for _, tc := range cases {
			b.Run(fmt.Sprintf("c=%d/%s", conc, tc.name), func(b *testing.B) {
				require.NoError(b, tc.op()) // warm up: load scripts, open a connection
				before, err := commandStats(bg, c)
				require.NoError(b, err)
				lat := run(b, conc, tc.op)
				for _, s := range []*redisstore.Store{detect, ids, noIDs} {
					require.NoError(b, s.Flush(bg)) // the last releases, counted
				}
				after, err := commandStats(bg, c)
				require.NoError(b, err)
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				usec := after["evalsha"].Usec - before["evalsha"].Usec + after["eval"].Usec - before["eval"].Usec
				b.ReportMetric(float64(usec)/float64(b.N), "redis_us/op")
				var p50 float64
				if lat != nil {
					slices.Sort(lat)
					p50 = float64(lat[len(lat)/2]) / 1e3
					b.ReportMetric(p50, "p50_us")
				}
				if tc.name == "evalsha-return1" {
					base[conc] = [2]float64{ns, p50}
				}
				if bl := base[conc]; bl[0] > 0 {
					b.ReportMetric(bl[0]/ns, "x_evalsha")
					if bl[1] > 0 && p50 > 0 {
						b.ReportMetric(p50/bl[1], "p50_x_evalsha")
					}
				}
			})
		}
	}
}

// BenchmarkClusterDecision measures what replay safety costs on a Redis
// Cluster client (one master, so INFO commandstats sees every call):
// EVALSHA "return 1" through the ClusterClient as the baseline, a GCRA
// decision under the default (ReplayDetect: calls marked, redirects
// followed and decided once) and under ReplayIDs (the former default),
// and GCRA + a Concurrency slot under the default. Metrics as
// BenchmarkLease's.
func BenchmarkClusterDecision(b *testing.B) {
	cl := redistest.StartCluster(b, 1, 0)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), PoolSize: 128})
	defer c.Close()
	node := redis.NewClient(&redis.Options{Addr: cl.Masters()[0].Addr()})
	defer node.Close()
	bg := context.Background()
	prefix := redistest.Prefix(b)
	store := func(opts ...redisstore.Option) *redisstore.Store {
		s, err := redisstore.New(c, append(opts, redisstore.WithPrefix(prefix), redisstore.WithBatching(0))...)
		require.NoError(b, err)
		return s
	}
	detect, ids := store(), store(redisstore.WithReplay(redisstore.ReplayIDs))
	require.Equal(b, "detect", redisstore.ReplayMode(detect))
	slots := quota.Bucket{Limit: quota.Limit{Name: "c", Rate: 1_000_000, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"}
	rate := quota.Bucket{Limit: quota.Limit{Name: "g", Rate: 1_000_000, Per: time.Second}, Key: "k"}
	op := func(s *redisstore.Store, bs ...quota.Bucket) func() error {
		return func() error {
			dec, err := s.Take(bg, &quota.Demand{Scope: "bench-cluster", Limits: bs, Cost: 1})
			if err == nil && !dec.OK {
				err = fmt.Errorf("refused")
			}
			if err == nil && dec.Reservation != nil && len(bs) > 1 {
				err = s.Release(bg, dec.Reservation)
			}
			return err
		}
	}
	cases := []struct {
		name string
		op   func() error
	}{
		{"evalsha-return1", func() error { return returnOne.Run(bg, c, []string{"{bench-cluster}"}).Err() }},
		{"gcra-take", op(detect, rate)},
		{"gcra-take-ids", op(ids, rate)},
		{"gcra+slot-acquire+release", op(detect, rate, slots)},
	}
	base := map[int]float64{}
	for _, conc := range []int{1, 8, 64} {
		for _, tc := range cases {
			b.Run(fmt.Sprintf("c=%d/%s", conc, tc.name), func(b *testing.B) {
				require.NoError(b, tc.op())
				before, err := commandStats(bg, node)
				require.NoError(b, err)
				run(b, conc, tc.op)
				require.NoError(b, detect.Flush(bg))
				after, err := commandStats(bg, node)
				require.NoError(b, err)
				ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				usec := after["evalsha"].Usec - before["evalsha"].Usec + after["eval"].Usec - before["eval"].Usec
				b.ReportMetric(float64(usec)/float64(b.N), "redis_us/op")
				if tc.name == "evalsha-return1" {
					base[conc] = ns
				}
				if bl := base[conc]; bl > 0 {
					b.ReportMetric(bl/ns, "x_evalsha")
				}
			})
		}
	}
}
