package storetest

import "github.com/quotakit/throttle/quota"

// The tables below pin Bucket.Headroom and Bucket.Tenant (quota.Store,
// Headroom and fair shares).

// headroom returns b with headroom h.
func headroom(b quota.Bucket, h int) quota.Bucket {
	b.Headroom = h
	return b
}

// tenant returns b for tenant name.
func tenant(b quota.Bucket, name string) quota.Bucket {
	b.Tenant = name
	return b
}

// classes returns two buckets of the counter of l (key "k"): the first
// with headroom h, as a lower class sees it, the second without.
func classes(l quota.Limit, h int) []quota.Bucket {
	b := quota.Bucket{Limit: l, Key: "k"}
	return []quota.Bucket{headroom(b, h), b}
}

func headroomCases() []stepCase {
	low, high := []int{0}, []int{1}
	return []stepCase{{
		// T = 100ms, B = 10, headroom 2: the low class admits while
		// TAT + T - t <= 8T.
		name:    "GCRA: the headroom is the top of the burst, and never a reservation",
		buckets: classes(gcra("g", 10, sec, 0), 2),
		steps: steps(
			[]step{{use: low, ok: true, left: &left{7, 100 * ms}}},
			repeat(6, step{use: low, ok: true}),
			[]step{
				{use: low, ok: true, left: &left{0, 800 * ms}},
				{use: low, delay: 100 * ms},
				{use: low, maxWait: sec, delay: 100 * ms},
				{use: high, ok: true, left: &left{1, 900 * ms}},
				{use: high, ok: true, left: &left{0, sec}},
				{use: high, delay: 100 * ms},
				{use: high, maxWait: sec, ok: true, delay: 100 * ms},
				{use: low, maxWait: hour, delay: 400 * ms},
				{advance: 400 * ms, use: low, ok: true, left: &left{0, 800 * ms}},
				{use: low, cost: 9, err: quota.ErrCostTooHigh},
				{use: low, cost: 8, maxWait: hour, delay: 800 * ms},
				{use: high, cost: 10, maxWait: hour, ok: true, delay: 800 * ms},
			},
		),
	}, {
		name:    "FixedWindow: the headroom is the last of each window",
		buckets: classes(fixed("f", 5, sec), 2),
		steps: []step{
			{use: low, ok: true, left: &left{2, sec}},
			{use: low, ok: true},
			{use: low, ok: true, left: &left{0, sec}},
			{use: low, delay: sec},
			{use: low, maxWait: 2 * sec, delay: sec},
			{use: high, ok: true, left: &left{1, sec}},
			{use: high, ok: true, left: &left{0, sec}},
			{use: high, delay: sec},
			{advance: sec, use: low, cost: 3, ok: true, left: &left{0, sec}},
			{use: low, cost: 4, err: quota.ErrCostTooHigh},
			{use: high, cost: 2, ok: true, left: &left{0, sec}},
		},
	}, {
		// Entries at 0, 300ms and 600ms; the low class admits while the
		// cost after t-P plus its own is at most 3.
		name:    "SlidingLog: the headroom counts against the log",
		buckets: classes(slidingLog("s", 4, sec), 1),
		steps: []step{
			{use: low, ok: true},
			{advance: 300 * ms, use: low, ok: true},
			{advance: 300 * ms, use: low, ok: true, left: &left{0, sec}},
			{use: low, maxWait: sec, delay: 400 * ms},
			{use: high, ok: true, left: &left{0, sec}},
			{use: high, delay: 400 * ms},
			{use: low, delay: 700 * ms},
		},
	}, {
		// prev = 3 in the next window: the low class needs
		// 3*(P-e) + 1*P <= 3*P, e >= P - floor(2P/3) = 333334µs.
		name:    "SlidingWindow: the headroom counts against the estimate",
		buckets: classes(slidingWin("w", 4, sec), 1),
		steps: []step{
			{use: low, cost: 3, ok: true, left: &left{0, 2 * sec}},
			{use: low, maxWait: 2 * sec, delay: 1333334 * us},
			{use: high, ok: true, left: &left{0, 2 * sec}},
			{use: high, delay: 1250 * ms},
		},
	}, {
		name:    "Concurrency: the headroom is free slots",
		buckets: classes(conc("c", 3, sec), 1),
		steps: []step{
			{use: low, ok: true, left: &left{1, 0}},
			{use: low, ok: true, left: &left{0, 0}},
			{use: low, maxWait: 2 * sec, delay: sec},
			{use: high, ok: true, left: &left{0, 0}},
			{use: high, delay: sec},
			{op: opRelease, cancel: 1},
			{use: low, delay: sec}, // one slot free: the headroom
			{use: high, ok: true, left: &left{0, 0}},
		},
	}, {
		name:    "each limit of a demand has its own headroom",
		buckets: []quota.Bucket{headroom(on(gcra("g", 10, sec, 0))[0], 5), headroom(on(fixed("f", 4, sec))[0], 1)},
		steps: []step{
			{ok: true, left: &left{2, sec}},
			{ok: true, left: &left{1, sec}},
			{ok: true, left: &left{0, sec}},
			{maxWait: 2 * sec, limit: 1, delay: sec},
			{use: []int{0}, ok: true, left: &left{1, 400 * ms}},
			{use: []int{0}, ok: true, left: &left{0, 500 * ms}},
			{use: []int{0}, delay: 100 * ms},
		},
	}, {
		name: "a headroom that leaves no room is an error",
		buckets: []quota.Bucket{
			headroom(on(gcra("g", 10, sec, 4))[0], 4),
			headroom(on(conc("c", 2, sec))[0], 2),
			headroom(on(fixed("f", 3, sec))[0], -1),
			headroom(on(fixed("f", 3, sec))[0], 2),
		},
		steps: []step{
			{use: []int{0}, err: quota.ErrCostTooHigh},
			{use: []int{1}, err: quota.ErrCostTooHigh},
			{use: []int{2}, err: quota.ErrInvalid},
			{use: []int{3}, cost: 2, err: quota.ErrCostTooHigh},
			{use: []int{3}, ok: true, left: &left{0, sec}},
		},
	}}
}

func shareCases() []stepCase {
	a, b := []int{0}, []int{1}
	g := gcra("g", 10, sec, 0) // T = 100ms, C*T = 1s
	return []stepCase{{
		// Alone, a's clock keeps pace with the limit: n = 1, a step of T.
		name:    "a tenant alone may use the whole limit",
		buckets: []quota.Bucket{tenant(on(g)[0], "a"), tenant(on(g)[0], "b")},
		steps: steps(
			repeat(10, step{use: a, ok: true}),
			[]step{
				// Over its share (clock 1s ahead): never a reservation.
				{use: a, maxWait: sec, delay: 100 * ms},
				{advance: 100 * ms, use: a, ok: true},
				// b, within its share, may reserve.
				{use: b, maxWait: sec, ok: true, delay: 100 * ms},
				{use: a, maxWait: sec, delay: 200 * ms},
				{advance: 200 * ms, use: a, ok: true},
			},
		),
	}, {
		// Both with a headroom of 1: admitted while TAT + T - t <= 9T. n
		// = 2 once both are active, so a's clock moves 200ms a unit and
		// is 1s ahead (over) after its fifth.
		name:    "over its share, a tenant waits for the claims of those within",
		buckets: []quota.Bucket{headroom(tenant(on(g)[0], "a"), 1), headroom(tenant(on(g)[0], "b"), 1)},
		steps: steps(
			[]step{{use: b, ok: true}},
			repeat(5, step{use: a, ok: true}),
			[]step{
				{use: a, ok: true}, // over, but nobody is held back
				{use: b, ok: true},
				{use: b, ok: true},
				// b is refused only because it may not reserve: it claims
				// the limit until its instant (100ms) plus T.
				{use: b, maxWait: sec, delay: 100 * ms},
				{use: a, maxWait: sec, delay: 200 * ms},
				{advance: 100 * ms, use: a, maxWait: sec, delay: 100 * ms},
				{use: b, ok: true}, // b comes back: served, claim dropped
				{use: a, maxWait: sec, delay: 100 * ms},
				{advance: 100 * ms, use: a, ok: true},
				// A claim that is not taken up lapses T after its instant.
				{use: b, maxWait: sec, delay: 100 * ms},
				{advance: 200*ms - us, use: a, delay: us},
				{advance: us, use: a, ok: true},
			},
		),
	}, {
		// n = 2: a's clock is 1s ahead after its fifth unit. A claim of b
		// holds it back only until a is within its share again.
		name:    "a claim holds back a tenant over its share only while it is over",
		buckets: []quota.Bucket{tenant(on(g)[0], "a"), headroom(tenant(on(g)[0], "b"), 1)},
		steps: steps(
			[]step{{use: b, ok: true}},
			repeat(8, step{use: a, ok: true}),
			[]step{
				// a's clock: 200ms, ..., 1s at the fifth (over), then
				// capped: 1.2s after every grant. TAT 900ms.
				{use: b, maxWait: sec, delay: 100 * ms}, // claim until 200ms
				// a is within its share again at 200ms + 1µs, but the
				// claim ends at 200ms.
				{use: a, maxWait: sec, delay: 200 * ms},
				{advance: 200 * ms, use: a, ok: true},
			},
		),
	}, {
		name: "a concurrency limit cannot be shared",
		buckets: []quota.Bucket{
			tenant(on(conc("c", 2, sec))[0], "a"),
			tenant(on(fixed("f", 2, sec))[0], "a"),
		},
		steps: []step{
			{use: a, err: quota.ErrInvalid},
			{use: b, ok: true},
		},
	}}
}
