package throttle_test

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// baselineNs is the ns/op of the x/time/rate baseline, measured first in
// the same run; later sub-benchmarks report their cost as a multiple of it
// ("x-rate-Allow"), since machines here are noisy.
var baselineNs float64

func reportRatio(b *testing.B) {
	if baselineNs > 0 && b.N > 0 {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/baselineNs, "x-rate-Allow")
	}
}

// BenchmarkDecision compares the in-process decision path with
// golang.org/x/time/rate's Limiter.Allow, serially and with every CPU busy.
// A huge limit keeps every decision an admission, as Allow's is: 2^29 a
// second, near the most a limit may be (one unit a nanosecond; 2^30 is
// an invalid policy, which every decision would fail).
func BenchmarkDecision(b *testing.B) {
	ctx := context.Background()
	big := quota.Limit{Name: "global", Rate: 1 << 29, Per: time.Second}
	perKey := quota.Limit{Name: "category", Rate: 1 << 29, Per: time.Second}
	one := &quota.Demand{Scope: "bench", Limits: []quota.Bucket{{Limit: big}}, Pauses: []string{""}, Cost: 1}
	two := &quota.Demand{Scope: "bench", Limits: []quota.Bucket{{Limit: big}, {Limit: perKey, Key: "errors"}}, Pauses: []string{""}, Cost: 1}

	for _, parallel := range []bool{false, true} {
		mode := "serial"
		if parallel {
			mode = "parallel"
		}
		run := func(name string, op func() bool) {
			b.Run(mode+"/"+name, func(b *testing.B) {
				b.ReportAllocs()
				if parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							if !op() {
								b.Error("refused")
							}
						}
					})
				} else {
					for i := 0; i < b.N; i++ {
						if !op() {
							b.Fatal("refused")
						}
					}
				}
				if name == "x-time-rate-Allow" {
					baselineNs = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
				} else {
					reportRatio(b)
				}
			})
		}
		lim := rate.NewLimiter(rate.Limit(1<<30), 1<<30)
		run("x-time-rate-Allow", lim.Allow)
		s1 := memstore.New()
		run("memory-1-limit", func() bool {
			d, err := s1.Take(ctx, one)
			return err == nil && d.OK
		})
		s2 := memstore.New()
		run("memory-2-limits", func() bool {
			d, err := s2.Take(ctx, two)
			return err == nil && d.OK
		})
	}
}

// BenchmarkTransportOverhead measures what a matched request costs in the
// transport on top of the base RoundTripper (an in-memory one), with a
// 2-limit rule keyed by context.
func BenchmarkTransportOverhead(b *testing.B) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	})
	// "hooks" sets every hook to a no-op, to show what they cost; with
	// none set ("no-hooks") the hook machinery allocates nothing.
	for _, tc := range []struct {
		name string
		opts []throttle.Option
	}{
		{"no-hooks", nil},
		{"hooks", []throttle.Option{throttle.WithHooks(throttle.Hooks{
			OnDecision: func(throttle.DecisionEvent) {}, OnPause: func(throttle.PauseEvent) {},
		})}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tr, err := throttle.NewTransport(base, notifierPolicy(1<<20, 1<<20, nil), tc.opts...)
			if err != nil {
				b.Fatal(err)
			}
			reqs := make([]*http.Request, 8)
			for i := range reqs {
				ctx := throttle.WithKey(context.Background(), "category", "cat"+strconv.Itoa(i))
				reqs[i], _ = http.NewRequestWithContext(ctx, "POST", "http://127.0.0.1/hook", nil)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					resp, err := tr.RoundTrip(reqs[i%len(reqs)])
					if err != nil {
						b.Error(err)
						return
					}
					resp.Body.Close()
					i++
				}
			})
		})
	}
}
