package storetest

import (
	"testing"

	"github.com/quotakit/throttle/quota"
)

// testSync runs the Sync cases when the stores are [quota.Syncer]s.
func (s *suite) testSync(t *testing.T) {
	skipUnless[quota.Syncer](t, s)
	s.runCases(t, syncCases())
}

// syncCases pin [quota.Syncer.Sync]: it lowers what a bucket admits to
// the vendor's remaining quota, never raises it.
func syncCases() []stepCase {
	return []stepCase{{
		// T = 1s, B = 60: the arrival time becomes now+30s+58s, so the two
		// units left come at 29s and 30s, at the limit's own pace.
		name:    "GCRA: what remains is admitted by the reset, no more",
		buckets: on(gcra("g", 60, minute, 0)),
		steps: []step{
			{op: opSync, remaining: 2, d: 30 * sec},
			{delay: 29 * sec, limit: 0},
			{advance: 29 * sec, ok: true},
			{delay: sec, limit: 0},
			{advance: sec, ok: true},
			{delay: sec, limit: 0},
		},
	}, {
		name:    "GCRA: sync never raises",
		buckets: on(gcra("g", 60, minute, 0)),
		steps: []step{
			{cost: 50, ok: true},
			{op: opSync, remaining: 40, d: 10 * sec},
			{cost: 10, ok: true},
			{delay: sec, limit: 0},
		},
	}, {
		name:    "GCRA: remaining at or above the burst changes nothing",
		buckets: on(gcra("g", 60, minute, 0)),
		steps: []step{
			{op: opSync, remaining: 60, d: 30 * sec},
			{op: opSync, remaining: 1000, d: 30 * sec},
			{cost: 60, ok: true},
		},
	}, {
		name:    "GCRA: a negative remaining counts as none; a non-positive within is a no-op",
		buckets: on(gcra("g", 60, minute, 0)),
		steps: []step{
			{op: opSync, remaining: 0, d: 0},
			{op: opSync, remaining: 0, d: -sec},
			{ok: true},
			{op: opSync, remaining: -5, d: 10 * sec},
			{delay: 11 * sec, limit: 0},
		},
	}, {
		name:    "FixedWindow: the window's count rises to Rate-remaining",
		buckets: on(fixed("f", 10, minute)),
		steps: []step{
			{cost: 2, ok: true},
			{op: opSync, remaining: 3, d: 30 * sec},
			{cost: 3, ok: true},
			{delay: minute, limit: 0},
			{advance: minute, cost: 10, ok: true},
		},
	}, {
		name:    "FixedWindow: sync never raises",
		buckets: on(fixed("f", 10, minute)),
		steps: []step{
			{cost: 8, ok: true},
			{op: opSync, remaining: 5, d: 30 * sec},
			{cost: 2, ok: true},
			{delay: minute, limit: 0},
		},
	}, {
		name:    "SlidingLog: a filler entry makes the last Per hold Rate-remaining",
		buckets: on(slidingLog("l", 10, minute)),
		steps: []step{
			{ok: true},
			{advance: 10 * sec, op: opSync, remaining: 4, d: 30 * sec},
			{cost: 4, ok: true},
			{delay: 50 * sec, limit: 0},
			{advance: 50 * sec, ok: true},
			{delay: 10 * sec, limit: 0},
			{advance: 10 * sec, cost: 9, ok: true},
		},
	}, {
		name:    "SlidingLog: sync never raises",
		buckets: on(slidingLog("l", 10, minute)),
		steps: []step{
			{cost: 9, ok: true},
			{op: opSync, remaining: 5, d: 30 * sec},
			{ok: true},
			{delay: minute, limit: 0},
		},
	}, {
		name:    "SlidingWindow: the current count rises to Rate-remaining",
		buckets: on(slidingWin("w", 10, minute)),
		steps: []step{
			{op: opSync, remaining: 4, d: 30 * sec},
			{cost: 4, ok: true},
			{delay: 66 * sec, limit: 0},
		},
	}, {
		// The reset at 1.7s falls in window [1s, 2s): it gets the 3
		// units left, and the window of now none.
		name:    "FixedWindow: the window of the reset gets what remains, those before it none",
		buckets: on(fixed("f", 10, sec)),
		steps: []step{
			{advance: 500 * ms, op: opSync, remaining: 3, d: 1200 * ms},
			{cost: 3, delay: 500 * ms, limit: 0},
			{advance: 500 * ms, cost: 3, ok: true},
			{delay: sec, limit: 0},
			{advance: sec, cost: 10, ok: true},
		},
	}, {
		name:    "FixedWindow: a reset at the window's end fills no later window",
		buckets: on(fixed("f", 10, sec)),
		steps: []step{
			{advance: 500 * ms, op: opSync, remaining: 0, d: 500 * ms},
			{delay: 500 * ms, limit: 0},
			{advance: 500 * ms, cost: 10, ok: true},
		},
	}, {
		// Windows [0, 1s) and [1s, 2s) fill; in [2s, 3s) the previous
		// window's 10 weigh until e >= 100ms.
		name:    "SlidingWindow: the windows before the reset fill",
		buckets: on(slidingWin("w", 10, sec)),
		steps: []step{
			{op: opSync, remaining: 0, d: 1500 * ms},
			{delay: 2100 * ms, limit: 0},
			{advance: 2100 * ms, ok: true},
		},
	}, {
		// A sync of a counter with no state starts its first window at
		// now, [300ms, 1.3s), as a first charge would; the reset at 2.3s
		// is the end of the next.
		name:    "FixedWindow, anchored: a sync starts the first window",
		buckets: on(anchored(fixed("f", 5, sec))),
		steps: []step{
			{advance: 300 * ms, op: opSync, remaining: 1, d: 2 * sec},
			{delay: sec, limit: 0},
			{advance: sec, ok: true},
			{delay: sec, limit: 0},
		},
	}, {
		name:    "sync touches only its bucket",
		buckets: []quota.Bucket{{Limit: gcra("g", 60, minute, 0), Key: "a"}, {Limit: gcra("g", 60, minute, 0), Key: "b"}},
		steps: []step{
			{op: opSync, use: []int{0}, remaining: 0, d: 30 * sec},
			{use: []int{1}, cost: 60, ok: true},
			{use: []int{0}, delay: 31 * sec, limit: 0},
			{use: []int{0}, scope: "other", ok: true},
		},
	}, {
		// Sync to 1 unit within 10 µs: TAT = now + 10 µs + (B-1)*T.
		name:    "GCRA: 3*10^6 a second, the arrival time keeps its fraction",
		buckets: on(gcra("g", 3_000_000, sec, 0)),
		steps: []step{
			{op: opSync, remaining: 1, d: 10 * us},
			{cost: 2, delay: 11 * us}, // ceil(10 + 1/3)
			{delay: 10 * us},
			{advance: 10 * us, ok: true},
			{delay: us},
		},
	}}
}
