package throttle_test

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
)

// TestAnchorShortenedFleet is the reproduction, saturated: 8
// instances of 16 callers on one in-process store, a vendor allowing 30
// requests per window that answers X-RateLimit-Remaining, a reset in
// epoch seconds and a whole-second Date, the fleet starting 700 ms into
// a second, without AnchorGrid. The vendor's windows are a grid (on the
// epoch's seconds as in the issue, or anywhere, its clock 300 ms off
// ours) or start at the first request after the last one ended
// (GitHub's). Each answered request's log entry is shortened to the end
// of the vendor window its reset names, which began before its first
// answer (shorten.go); a learned pause holds the decisions a send lag
// less than the sends (pauselead.go). So the fleet's bursts come a
// window and a round trip apart (a few milliseconds here), whatever the
// vendor's phase: the vendor rejects nothing, and the fleet uses at
// least 98% of the windows' quota (100% in every run measured). A log whose entries count for their span from
// their charge (the rule before) lets the bursts drift a reach (25 ms
// here) into the grid's windows at every window until one gets nothing:
// 870 of 900 in 30 windows of a second, and against the sticky vendor,
// whose windows start a reach later every time.
// Virtual time (synctest), seeded phases.
func TestAnchorShortenedFleet(t *testing.T) {
	const windows = 30
	rng := seeded(t)
	for _, per := range []time.Duration{time.Second, 2 * time.Second} {
		for _, kind := range []string{"epoch grid", "grid", "sticky"} {
			t.Run(fmt.Sprintf("%v %s", per, kind), func(t *testing.T) {
				for range 3 * repeats(t) {
					var phase, skew time.Duration
					if kind == "grid" {
						phase, skew = time.Duration(rng.Int64N(int64(per))), 300*time.Millisecond
					}
					synctest.Test(t, func(t *testing.T) {
						v := &coarseVendor{rate: 30, per: per, phase: phase, skew: skew, maxLatency: 2 * time.Millisecond,
							noGrid: true, sticky: kind == "sticky", accepted: map[int64]int{}}
						store := memstore.New()
						time.Sleep(700 * time.Millisecond)
						failed := searchFleet(t, windows*per, 0, v, 8, 16, true, func() quota.Store { return store }, throttle.Hooks{})
						assert.Zero(t, failed, "requests failed")
						accepted, rejected, _ := v.totals()
						quota := windows * v.rate
						t.Logf("phase %v: accepted %d in %d windows (%d%% of their quota; per window %v), rejected %d", phase, accepted, windows, 100*accepted/quota, v.perWindow(), rejected)
						assert.Zero(t, rejected, "the vendor rejected requests")
						assert.GreaterOrEqual(t, 100*accepted, 98*quota, "the fleet left quota idle")
					})
				}
			})
		}
	}
}

// perWindow returns what the vendor accepted in each window, in order.
func (v *coarseVendor) perWindow() []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []int
	for _, k := range slices.Sorted(maps.Keys(v.accepted)) {
		out = append(out, v.accepted[k])
	}
	return out
}
