package memstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// BenchmarkShareDecision measures what a class (a headroom) and a fair
// share (a tenant) cost an in-process decision, against a plain decision
// in the same run, serially: x_plain is ns/op as a multiple of "plain".
// The limit always admits, so every decision commits.
//
//	go test ./memstore -run '^$' -bench ShareDecision
func BenchmarkShareDecision(b *testing.B) {
	ctx := context.Background()
	limit := quota.Limit{Name: "l", Rate: 1 << 29, Per: time.Second} // near the most a limit may be: one unit a nanosecond
	var plain float64
	for _, tc := range []struct {
		name     string
		headroom int
		tenants  int // 0: none
	}{{"plain", 0, 0}, {"class", 1000, 0}, {"tenant", 0, 1}, {"16-tenants", 0, 16}, {"class+tenant", 1000, 1}} {
		b.Run(tc.name, func(b *testing.B) {
			s := memstore.New()
			demands := make([]*quota.Demand, max(tc.tenants, 1))
			for i := range demands {
				bk := quota.Bucket{Limit: limit, Key: "k", Headroom: tc.headroom}
				if tc.tenants > 0 {
					bk.Tenant = "t" + strconv.Itoa(i)
				}
				demands[i] = &quota.Demand{Scope: "bench", Limits: []quota.Bucket{bk}, Pauses: []string{""}, Cost: 1}
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				d, err := s.Take(ctx, demands[i%len(demands)])
				if err != nil || !d.OK {
					b.Fatal(d, err)
				}
				i++
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if tc.name == "plain" {
				plain = ns
			}
			if plain > 0 {
				b.ReportMetric(ns/plain, "x_plain")
			}
		})
	}
}
