package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// TestTakeAllocations holds the in-process decision to what it allocates
// (the Reservation; its id is cut from a string of 64 ids formatted at
// once, which AllocsPerRun's whole-number average rounds away): the one measure of its cost a test can
// assert on a shared machine. The time it takes is BenchmarkDecision's
// (docs/benchmarks.md), against x/time/rate in the same run.
func TestTakeAllocations(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage counters change what is allocated")
	}
	ctx := context.Background()
	limit := func(name string) quota.Bucket {
		return quota.Bucket{Limit: quota.Limit{Name: name, Rate: 1 << 29, Per: time.Second}, Key: "k"}
	}
	for _, tc := range []struct {
		name string
		d    *quota.Demand
	}{
		{"one limit", &quota.Demand{Scope: "s", Pauses: []string{""}, Cost: 1, Limits: []quota.Bucket{limit("a")}}},
		{"two limits", &quota.Demand{Scope: "s", Pauses: []string{""}, Cost: 1, Limits: []quota.Bucket{limit("a"), limit("b")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memstore.New()
			var err error
			n := testing.AllocsPerRun(3000, func() {
				var dec quota.Decision
				if dec, err = s.Take(ctx, tc.d); err == nil && !dec.OK {
					t.Fatal("refused")
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if n > 1 {
				t.Errorf("a grant allocates %.2f objects, want at most 1 (the reservation)", n)
			}
		})
	}
}
