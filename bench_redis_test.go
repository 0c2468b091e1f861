//go:build unix

package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

// BenchmarkTransportRedis measures what the Transport costs a service on
// top of its store's decision on Redis: 8 goroutines on one GCRA limit
// that always admits, each request either decided by the store's Take
// alone ("store-take", the baseline, measured first) or sent through the
// Transport to an in-memory base RoundTripper ("transport"). cpu-us/op is
// this process's CPU (user and system, getrusage) per request, which the
// Transport's breaker, learning and hooks add to; x-store-take is the
// transport's over the baseline's in the same run.
func BenchmarkTransportRedis(b *testing.B) {
	srv := redistest.Start(b)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rc.Close()
	store, err := redisstore.New(rc, redisstore.WithPrefix(redistest.Prefix(b)))
	if err != nil {
		b.Fatal(err)
	}
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	limit := throttle.Limit{Name: "all", Rate: 1 << 30, Per: time.Hour}
	tr, err := throttle.NewTransport(base, throttle.Policy{Instances: 1, Rules: []throttle.Rule{{
		Name: "bench", Host: "127.0.0.1", Limits: []throttle.Limit{limit},
	}}}, throttle.WithStore(store))
	if err != nil {
		b.Fatal(err)
	}
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, "http://127.0.0.1/x", nil)
	if err != nil {
		b.Fatal(err)
	}
	// The Transport's demand for the rule: its limit and its pause key.
	d := &quota.Demand{Scope: "bench", Pauses: []string{""}, Cost: 1, Limits: []quota.Bucket{{
		Limit: quota.Limit{Name: limit.Name, Rate: limit.Rate, Per: limit.Per},
	}}}
	var baseCPU float64
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"store-take", func() error {
			dec, err := store.Take(context.Background(), d)
			if err == nil && !dec.OK {
				err = errors.New("refused")
			}
			return err
		}},
		{"transport", func() error {
			resp, err := tr.RoundTrip(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(4) // 8 goroutines on 2 CPUs
			before := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := tc.op(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			cpu := float64(processCPU()-before) / 1e3 / float64(b.N)
			b.ReportMetric(cpu, "cpu-us/op")
			if tc.name == "store-take" {
				baseCPU = cpu
			} else if baseCPU > 0 {
				b.ReportMetric(cpu/baseCPU, "x-store-take")
			}
		})
	}
}

// processCPU is this process's user and system CPU time so far, in ns.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
