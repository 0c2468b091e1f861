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
// with headroom h, as a lower class sees it, the second without, of the
// class above it (Classed: the store notes it).
func classes(l quota.Limit, h int) []quota.Bucket {
	b := quota.Bucket{Limit: l, Key: "k"}
	high := b
	high.Classed = true
	return []quota.Bucket{headroom(b, h), high}
}

func headroomCases() []stepCase {
	low, high := []int{0}, []int{1}
	return []stepCase{{
		// T = 100ms, B = 10, headroom 2: the low class admits while
		// TAT + T - t <= 8T.
		name:    "GCRA: the headroom is the top of the burst",
		buckets: classes(gcra("g", 10, sec, 0), 2),
		steps: steps(
			[]step{{use: low, ok: true, left: &left{7, 100 * ms}}},
			repeat(6, step{use: low, ok: true}),
			[]step{
				{use: low, ok: true, left: &left{0, 800 * ms}},
				{use: low, delay: 100 * ms},
				{use: low, maxWait: sec, delay: 100 * ms}, // more than T/2 ahead
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
		// T = 100ms: a demand with a headroom (or a tenant) may reserve
		// at most T/2 ahead, and is refused beyond.
		name:    "a restricted demand is a reservation at most T/2 ahead",
		buckets: classes(gcra("g", 10, sec, 2), 1),
		steps: []step{
			{use: low, ok: true},
			{use: low, maxWait: sec, delay: 100 * ms},
			{advance: 50*ms - us, use: low, maxWait: sec, delay: 50*ms + us},
			{advance: us, use: low, maxWait: sec, ok: true, delay: 50 * ms},
			{use: low, maxWait: sec, delay: 150 * ms},
			{use: high, maxWait: sec, ok: true, delay: 50 * ms}, // the burst's top
		},
	}, {
		// T = 200ms. The headroom is held for T after the high class asks
		// (granted or not), lent otherwise; refused while it is held, the
		// low class is told to come back when it may be lent.
		name:    "FixedWindow: the headroom is held for T after a higher class asks",
		buckets: classes(fixed("f", 5, sec), 2),
		steps: []step{
			{use: high, ok: true, left: &left{4, sec}},
			{use: low, ok: true, left: &left{1, sec}},
			{use: low, ok: true, left: &left{0, sec}},
			{use: low, maxWait: 2 * sec, delay: 200 * ms}, // not before 1s with it; lent at 200ms
			{advance: 200 * ms, use: low, ok: true, left: &left{0, 800 * ms}},
			{use: high, ok: true, left: &left{0, 800 * ms}},
			{use: high, maxWait: 2 * sec, ok: true, delay: 800 * ms}, // the high class reserves
			{use: low, delay: 200 * ms},
			{advance: 200*ms - us, use: low, delay: us},
			{advance: us, use: low, delay: 600 * ms}, // lent, but the window is full
			{advance: 600 * ms, use: low, cost: 3, ok: true, left: &left{0, sec}},
			{use: low, cost: 4, err: quota.ErrCostTooHigh},
		},
	}, {
		// T = 250ms. Lent at 300ms; held at 600ms, when the low class
		// needs 0 out of the log (at 1s) or the note to be T old (850ms).
		name:    "SlidingLog: the headroom is held for T after a higher class asks",
		buckets: classes(slidingLog("s", 4, sec), 1),
		steps: []step{
			{use: high, ok: true},
			{advance: 300 * ms, use: low, ok: true},
			{advance: 300 * ms, use: high, ok: true, left: &left{1, sec}},
			{use: low, maxWait: sec, delay: 250 * ms},
			{advance: 250 * ms, use: low, ok: true, left: &left{0, sec}},
			{use: high, maxWait: sec, ok: true, delay: 150 * ms},
			{use: low, delay: 250 * ms},
		},
	}, {
		// T = 250ms. prev = 3 in the next window: the low class, the
		// headroom held, needs 3*(P-e) + 1*P <= 3*P, e >= P - floor(2P/3)
		// = 333334µs; the note is T old sooner.
		name:    "SlidingWindow: the headroom is held for T after a higher class asks",
		buckets: classes(slidingWin("w", 4, sec), 1),
		steps: []step{
			{use: high, cost: 3, ok: true, left: &left{1, 2 * sec}},
			{use: low, maxWait: 2 * sec, delay: 250 * ms},
			{advance: 250 * ms, use: low, ok: true, left: &left{0, 1750 * ms}},
			{use: high, delay: sec}, // refused, yet noted
			{use: low, delay: 250 * ms},
			{advance: 250 * ms, use: low, maxWait: 2 * sec, delay: 750 * ms}, // lent: 4*(P-e) + P <= 4P
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
		// No higher class asks: the fixed window lends its headroom, GCRA
		// holds its own always.
		name:    "each limit of a demand has its own headroom",
		buckets: []quota.Bucket{headroom(on(gcra("g", 10, sec, 0))[0], 5), headroom(on(fixed("f", 4, sec))[0], 1)},
		steps: []step{
			{ok: true, left: &left{2, sec}},
			{ok: true, left: &left{1, sec}},
			{ok: true, left: &left{0, sec}},
			{maxWait: 2 * sec, ok: true, left: &left{0, sec}},
			{use: []int{0}, ok: true, left: &left{0, 500 * ms}},
			{use: []int{0}, delay: 100 * ms},
			{maxWait: 2 * sec, limit: 1, delay: sec},
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
	a, b, c := []int{0}, []int{1}, []int{2}
	f := fixed("f", 10, sec) // T = 100ms, C*T = 1s
	return []stepCase{{
		// Alone, a's clock keeps pace with the limit: n = 1, a step of T.
		// Every demand with a tenant is restricted: a reservation at most
		// T/2 ahead, so the refusals below, until the next window, leave
		// claims for it.
		name:    "a tenant alone may use the whole limit; one further below its share goes first",
		buckets: []quota.Bucket{tenant(on(f)[0], "a"), tenant(on(f)[0], "b")},
		steps: steps(
			repeat(10, step{use: a, ok: true}),
			[]step{
				{use: a, maxWait: 2 * sec, delay: sec},       // a's claim at its place, 1s, until 1.1s
				{use: b, maxWait: 2 * sec, delay: sec},       // b's at 0
				{use: a, maxWait: 2 * sec, delay: 1100 * ms}, // held by b's
				{advance: sec, use: a, delay: 100 * ms},      // still
				{use: b, ok: true},                           // the claim dropped
				{use: a, ok: true},
			},
		),
	}, {
		// n grows to 3. A waiting tenant keeps its claim's place: b, who
		// claimed first (at 0), goes before c (at 10ms), and both before a
		// (at 1s). A claim not taken up lapses max(T, 250ms) after its
		// instant.
		name:    "claims at a lower place go first, and lapse 250ms after their instant",
		buckets: []quota.Bucket{tenant(on(f)[0], "a"), tenant(on(f)[0], "b"), tenant(on(f)[0], "c")},
		steps: steps(
			repeat(10, step{use: a, ok: true}),
			[]step{
				{use: b, maxWait: 2 * sec, delay: sec},                         // claim until 1.1s
				{advance: 10 * ms, use: c, maxWait: 2 * sec, delay: 1090 * ms}, // held by b's; claim until 1.2s
				{advance: 90 * ms, use: a, maxWait: 2 * sec, delay: 1100 * ms}, // held by both
				{advance: 900 * ms, use: c, delay: 100 * ms},                   // still behind b
				{use: b, ok: true}, // clock 1.3s
				{use: c, ok: true}, // its place kept: before a
				{use: a, ok: true},
			},
			repeat(7, step{use: a, ok: true}),
			[]step{
				{use: b, maxWait: 2 * sec, delay: sec},           // place 1.3s: a claim for 2s, until 2.25s
				{use: a, delay: 1100 * ms},                       // a's clock is further ahead: held until T after 2s
				{advance: 1250*ms - us, use: a, delay: 100 * ms}, // b is late: held until T from now
				{advance: us, use: a, ok: true},                  // b's claim has lapsed
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
