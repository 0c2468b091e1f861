package storetest

import (
	"testing"

	"github.com/quotakit/throttle/quota"
)

// phaseCases pin [quota.Limit.Phase]: the windows of FixedWindow and
// SlidingWindow start at Phase + k*Per. Start is on every boundary of
// phase 0, so each case starts inside a window.
func phaseCases() []stepCase {
	return []stepCase{{
		// The window of Start is [Start-700ms, Start+300ms).
		name:    "FixedWindow: windows start at Phase",
		buckets: on(phased(fixed("f", 2, sec), 300*ms)),
		steps: []step{
			{ok: true},
			{ok: true},
			{delay: 300 * ms, limit: 0},
			{advance: 300*ms - us, delay: us, limit: 0},
			{advance: us, ok: true},
			{ok: true},
			{delay: sec, limit: 0},
		},
	}, {
		name:    "FixedWindow: a reservation starts the next window at its phase",
		buckets: on(phased(fixed("f", 1, 10*sec), 3*sec)),
		steps: []step{
			{ok: true},
			{maxWait: hour, ok: true, delay: 3 * sec},
			{maxWait: hour, ok: true, delay: 13 * sec},
		},
	}, {
		// The window of Start is [Start-500ms, Start+500ms); in the next
		// one, the previous window's 4 weigh 4*(1000-e)/1000, so one unit
		// fits once e >= 250ms.
		name:    "SlidingWindow: windows start at Phase",
		buckets: on(phased(slidingWin("w", 4, sec), 500*ms)),
		steps: []step{
			{cost: 4, ok: true},
			{delay: 750 * ms, limit: 0},
			{advance: 750*ms - us, delay: us, limit: 0},
			{advance: us, ok: true},
		},
	}, {
		name:    "one phase per limit: counters of other phases are their own",
		buckets: on(phased(fixed("a", 1, sec), 100*ms), phased(fixed("b", 1, sec), 600*ms)),
		steps: []step{
			{ok: true},
			{use: []int{0}, delay: 100 * ms, limit: 0},
			{use: []int{1}, delay: 600 * ms, limit: 0},
			{advance: 100 * ms, use: []int{0}, ok: true},
			{delay: sec, limit: 0},
		},
	}}
}

// testAnchor runs the anchoring cases when the stores are
// [quota.Anchorer]s.
func (s *suite) testAnchor(t *testing.T) {
	skipUnless[quota.Anchorer](t, s)
	s.runCases(t, anchorCases())
}

// anchorCases pin [quota.Limit.Anchored] and [quota.Anchorer.Anchor]: the
// first charge starts the first window, a move counts every unit in each
// new window it may lie in, a reservation keeps its instant, and the
// phase ends with the counter.
func anchorCases() []stepCase {
	return []stepCase{{
		name:    "the first charge starts the first window",
		buckets: on(anchored(fixed("f", 2, sec))),
		steps: []step{
			{advance: 400 * ms, ok: true},
			{ok: true},
			{delay: sec, limit: 0},
			{advance: sec - us, delay: us, limit: 0},
			{advance: us, ok: true},
		},
	}, {
		name:    "SlidingWindow: the first charge starts the first window",
		buckets: on(anchored(slidingWin("w", 4, sec))),
		steps: []step{
			{advance: 250 * ms, cost: 4, ok: true},
			{delay: 1250 * ms, limit: 0},
			{advance: 1250*ms - us, delay: us, limit: 0},
			{advance: us, ok: true},
		},
	}, {
		// The first window is [100ms, 1.1s); at 1.6s the counter has
		// expired, so the charge at 1.6s starts a new first window.
		name:    "the phase ends with the counter",
		buckets: on(anchored(fixed("f", 1, sec))),
		steps: []step{
			{advance: 100 * ms, ok: true},
			{advance: 1500 * ms, ok: true},
			{delay: sec, limit: 0},
		},
	}, {
		name:    "a counter with no state takes the vendor's phase at once",
		buckets: on(anchored(fixed("f", 1, sec))),
		steps: []step{
			{op: opAnchor, d: 300 * ms, tolerance: 100 * ms, moved: true, ends: 300 * ms},
			{ok: true},
			{delay: 300 * ms, limit: 0},
			{op: opAnchor, d: 250 * ms, tolerance: 100 * ms, ends: 300 * ms},
			{advance: 300 * ms, ok: true},
		},
	}, {
		// The first window is [0, 1s); at 200ms the vendor's ends at
		// 700ms. The 6 units, granted in [0, 200ms], are all in the new
		// window [-300ms, 700ms).
		name:    "a move counts the units in the new window of their instants",
		buckets: on(anchored(fixed("f", 10, sec))),
		steps: []step{
			{cost: 6, ok: true},
			{advance: 200 * ms, op: opAnchor, d: 500 * ms, moved: true, ends: 500 * ms},
			{cost: 4, ok: true},
			{delay: 500 * ms, limit: 0},
			{advance: 500 * ms, cost: 10, ok: true},
		},
	}, {
		// At 900ms the vendor's window ends at 1.4s: the 6 units of [0,
		// 900ms] may lie before or after the new boundary 400ms, so the
		// new window [400ms, 1.4s) counts them.
		name:    "units that may lie before the new boundary count after it too",
		buckets: on(anchored(fixed("f", 10, sec))),
		steps: []step{
			{cost: 6, ok: true},
			{advance: 900 * ms, op: opAnchor, d: 500 * ms, moved: true, ends: 500 * ms},
			{cost: 4, ok: true},
			{delay: 500 * ms, limit: 0},
			{advance: 500 * ms, cost: 10, ok: true},
		},
	}, {
		// The first charge put a window end at 1s: the vendor's at 1.05s
		// moves it, tolerance or not. From then on, one at 0.98s or
		// 3.05s is within 100ms of 1.05s.
		name:    "the tolerance holds once the phase is the vendor's",
		buckets: on(anchored(fixed("f", 2, sec))),
		steps: []step{
			{ok: true},
			{advance: 200 * ms, op: opAnchor, d: 850 * ms, tolerance: 100 * ms, moved: true, ends: 850 * ms},
			{op: opAnchor, d: 780 * ms, tolerance: 100 * ms, ends: 850 * ms},
			{op: opAnchor, d: 2850 * ms, tolerance: 100 * ms, ends: 850 * ms},
			{ok: true},
			{delay: 850 * ms, limit: 0},
			{op: opAnchor, d: 700 * ms, tolerance: 99 * ms, moved: true, ends: 700 * ms},
			{delay: 700 * ms, limit: 0},
		},
	}, {
		// Reservations for 1s (two) and 2s (one), window starts, land in
		// the new windows [500ms, 1.5s) and [1.5s, 2.5s) of the vendor's
		// phase 500ms.
		name:    "reservations keep their instants and count where they fall",
		buckets: on(anchored(fixed("f", 2, sec))),
		steps: []step{
			{cost: 2, ok: true},
			{maxWait: hour, ok: true, delay: sec},
			{maxWait: hour, ok: true, delay: sec},
			{maxWait: hour, ok: true, delay: 2 * sec},
			{advance: 100 * ms, op: opAnchor, d: 400 * ms, moved: true, ends: 400 * ms},
			{maxWait: hour, ok: true, delay: 1400 * ms},
			{maxWait: hour, ok: true, delay: 2400 * ms},
			{maxWait: hour, ok: true, delay: 2400 * ms},
			{maxWait: hour, ok: true, delay: 3400 * ms},
		},
	}, {
		name:    "a cancel while the windows stay gives back",
		buckets: on(anchored(fixed("f", 1, sec))),
		steps: []step{
			{ok: true},
			{maxWait: hour, ok: true, delay: sec},
			{op: opCancel, cancel: 2},
			{maxWait: hour, ok: true, delay: sec},
		},
	}, {
		// The reservation for 1s counts in the new window [500ms, 1.5s)
		// and stays counted after its cancel: its window moved.
		name:    "a cancel after the windows moved gives nothing back",
		buckets: on(anchored(fixed("f", 1, sec))),
		steps: []step{
			{ok: true},
			{maxWait: hour, ok: true, delay: sec},
			{op: opAnchor, d: 500 * ms, moved: true, ends: 500 * ms},
			{op: opCancel, cancel: 2},
			{maxWait: hour, ok: true, delay: 1500 * ms},
		},
	}, {
		name:    "SlidingWindow: a move keeps the previous window's weight",
		buckets: on(anchored(slidingWin("w", 4, sec))),
		steps: []step{
			{cost: 4, ok: true},
			// The new window [-500ms, 500ms) holds the 4 units; in the
			// next they weigh until e >= 250ms.
			{advance: 100 * ms, op: opAnchor, d: 400 * ms, moved: true, ends: 400 * ms},
			{delay: 650 * ms, limit: 0},
			{advance: 650 * ms, ok: true},
		},
	}, {
		name:    "an anchor touches only its bucket",
		buckets: []quota.Bucket{{Limit: anchored(fixed("f", 1, sec)), Key: "a"}, {Limit: anchored(fixed("f", 1, sec)), Key: "b"}},
		steps: []step{
			{op: opAnchor, use: []int{0}, d: 300 * ms, moved: true, ends: 300 * ms},
			{use: []int{0}, ok: true},
			{use: []int{1}, ok: true},
			{use: []int{0}, delay: 300 * ms, limit: 0},
			{use: []int{1}, delay: sec, limit: 0},
		},
	}, {
		name:    "a non-positive within moves nothing",
		buckets: on(anchored(fixed("f", 1, sec))),
		steps: []step{
			{op: opAnchor, d: 0},
			{op: opAnchor, d: -sec},
			{advance: 100 * ms, ok: true},
			{op: opAnchor, d: 0, ends: sec},
			{delay: sec, limit: 0},
		},
	}, {
		name:    "a limit that is not Anchored cannot be anchored",
		buckets: on(fixed("f", 1, sec)),
		steps:   []step{{op: opAnchor, d: 300 * ms, err: quota.ErrInvalid}},
	}}
}

// phaseErrorCases pin the validation of Phase and Anchored.
func phaseErrorCases() []stepCase {
	inv := quota.ErrInvalid
	return []stepCase{{
		name:    "Phase at or beyond Per",
		buckets: on(phased(fixed("f", 1, sec), sec)),
		steps:   []step{{err: inv}},
	}, {
		name:    "negative Phase",
		buckets: on(phased(fixed("f", 1, sec), -ms)),
		steps:   []step{{err: inv}},
	}, {
		name:    "Phase of an algorithm without windows",
		buckets: on(phased(gcra("g", 1, sec, 0), ms)),
		steps:   []step{{err: inv}},
	}, {
		name:    "Anchored of an algorithm without windows",
		buckets: on(anchored(slidingLog("l", 1, sec))),
		steps:   []step{{err: inv}},
	}, {
		name:    "Anchored with a Phase",
		buckets: on(anchored(phased(fixed("f", 1, sec), ms))),
		steps:   []step{{err: inv}},
	}}
}
