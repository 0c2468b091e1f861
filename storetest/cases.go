package storetest

import "github.com/quotakit/throttle/quota"

// The tables below pin the math of quota.Algorithm. Every case starts at
// Start, which every period used here divides unless the case says
// otherwise. In a step, a zero cost means 1, and a refused step without a
// pause wants Decision.Limit == limit (0 unless given).

func gcraCases() []stepCase {
	return []stepCase{{
		// T = 200ms, B = 5: TAT = now+1s after 5; the 6th waits TAT+T-B*T-now.
		name:    "burst equals rate",
		buckets: on(gcra("g", 5, sec, 0)),
		steps: steps(repeat(5, step{ok: true}), []step{
			{delay: 200 * ms},
			{advance: 200*ms - us, delay: us},
			{advance: us, ok: true},
			{delay: 200 * ms},
			{advance: sec, cost: 5, ok: true},
			{delay: 200 * ms},
		}),
	}, {
		// T = 500ms, B = 4.
		name:    "burst above rate",
		buckets: on(gcra("g", 2, sec, 4)),
		steps: steps(repeat(4, step{ok: true}), []step{
			{delay: 500 * ms},
			{advance: sec, ok: true},
			{ok: true},
			{delay: 500 * ms},
		}),
	}, {
		// T = 100ms, B = 2.
		name:    "burst below rate",
		buckets: on(gcra("g", 10, sec, 2)),
		steps: []step{
			{ok: true},
			{ok: true},
			{delay: 100 * ms},
			{advance: 100 * ms, ok: true},
			{delay: 100 * ms},
			{cost: 2, delay: 200 * ms},
		},
	}, {
		name:    "cost above one",
		buckets: on(gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 4, ok: true},
			{cost: 4, ok: true},
			{cost: 4, delay: 200 * ms},
			{cost: 2, ok: true},
			{delay: 100 * ms},
			{advance: 100*ms - us, delay: us},
			{advance: us, ok: true},
		},
	}, {
		name:    "idle time refills only up to the burst",
		buckets: on(gcra("g", 5, sec, 0)),
		steps: []step{
			{cost: 5, ok: true},
			{advance: 10 * sec, cost: 5, ok: true},
			{delay: 200 * ms},
		},
	}, {
		// T = 250ms, B = 1: one every 250ms, no burst.
		name:    "steady flow at the emission interval",
		buckets: on(gcra("g", 4, sec, 1)),
		steps: []step{
			{ok: true},
			{delay: 250 * ms},
			{advance: 250 * ms, ok: true},
			{advance: 250 * ms, ok: true},
			{advance: 100 * ms, delay: 150 * ms},
		},
	}}
}

func fixedWindowCases() []stepCase {
	return []stepCase{{
		name:    "counts per aligned window",
		buckets: on(fixed("f", 3, sec)),
		steps: steps(repeat(3, step{ok: true}), []step{
			{delay: sec},
			{advance: sec - us, delay: us},
			{advance: us, ok: true},
			{cost: 2, ok: true},
			{delay: sec},
		}),
	}, {
		name:    "boundary lets 2R pass in a short time",
		buckets: on(fixed("f", 3, sec)),
		steps: []step{
			{advance: 500 * ms, ok: true},
			{ok: true},
			{ok: true},
			{delay: 500 * ms},
			{advance: 500 * ms, ok: true},
			{ok: true},
			{ok: true},
			{delay: sec},
		},
	}, {
		// Start is 6s into a 7s window of the epoch, not at its start.
		name:    "windows are aligned to the epoch",
		buckets: on(fixed("f", 1, 7*sec)),
		steps: []step{
			{ok: true},
			{delay: sec},
			{advance: sec - us, delay: us},
			{advance: us, ok: true},
			{delay: 7 * sec},
		},
	}, {
		name:    "cost above one",
		buckets: on(fixed("f", 5, sec)),
		steps: []step{
			{cost: 3, ok: true},
			{cost: 3, delay: sec},
			{cost: 2, ok: true},
			{delay: sec},
		},
	}}
}

func slidingLogCases() []stepCase {
	return []stepCase{{
		// An entry at s counts in (t-P, t], so it stops counting at s+P.
		name:    "entries expire one period after their instant",
		buckets: on(slidingLog("s", 3, sec)),
		steps: []step{
			{ok: true},
			{advance: 300 * ms, ok: true},
			{advance: 300 * ms, ok: true},
			{advance: 100 * ms, delay: 300 * ms},
			{advance: 300*ms - us, delay: us},
			{advance: us, ok: true},
			{delay: 300 * ms},
			{cost: 2, delay: 600 * ms},
			{advance: 600 * ms, cost: 2, ok: true},
			{delay: 400 * ms},
		},
	}, {
		name:    "cost is recorded with the entry",
		buckets: on(slidingLog("s", 5, sec)),
		steps: []step{
			{cost: 4, ok: true},
			{advance: 500 * ms, cost: 2, delay: 500 * ms},
			{ok: true},
			{delay: 500 * ms},
			{advance: 500 * ms, cost: 4, ok: true},
			{delay: 500 * ms},
		},
	}, {
		name:    "demands in the same microsecond are separate entries",
		buckets: on(slidingLog("s", 4, sec)),
		steps: []step{
			{ok: true},
			{ok: true},
			{cost: 2, ok: true},
			{delay: sec},
			{advance: sec, cost: 4, ok: true},
		},
	}, {
		// quota.LogExpiry, a grid of 1 s windows on whole seconds and a
		// reach of 300 ms: an entry decided at t counts until the end of
		// the grid's window that holds t+300ms (E), not P after t. Under
		// the log's own rule the third take waits 1.1 s, not 800 ms.
		name:    "an expiry counts an entry until the grid's window that may hold it ends",
		buckets: []quota.Bucket{{Limit: slidingLog("s", 2, 1100*ms), Key: "k", Expiry: quota.LogExpiry{Every: sec, Reach: 300 * ms}}},
		steps: []step{
			{advance: 200 * ms, ok: true, left: &left{remaining: 1, reset: 800 * ms}}, // E = 1 s
			{ok: true},
			{delay: 800 * ms},
			{advance: 800*ms - us, delay: us},
			{advance: us, ok: true},       // 1 s: E = 2 s
			{advance: 600 * ms, ok: true}, // 1.6 s: 1.9 s is in the window ending at 2 s
			{delay: 400 * ms},             // full until 2 s
			{advance: 200 * ms, delay: 200 * ms, maxWait: sec, ok: true}, // 1.8 s: 2.1 s is in the next window: the windows to 3 s must have room
			{advance: 200 * ms, ok: true},
			{delay: sec},
		},
	}, {
		// A grid of a microsecond (every instant an end) and a reach of
		// 1025 ms less 1µs: an entry counts for 1025 ms from the instant
		// it is decided for, less than the log's span (1.1 s), as an
		// Anchor limit's entries count for their window and their reach.
		name:    "an expiry on a grid of a microsecond counts an entry for its reach",
		buckets: []quota.Bucket{{Limit: slidingLog("s", 2, 1100*ms), Key: "k", Expiry: quota.LogExpiry{Every: us, Reach: 1025*ms - us}}},
		steps: []step{
			{advance: 200 * ms, ok: true},
			{ok: true},
			{delay: 1025 * ms},
			{advance: 1025*ms - us, delay: us},
			{advance: us, ok: true}, // 1.225 s
			{advance: 50 * ms, ok: true},
			{delay: 975 * ms},
		},
	}, {
		// The grid's windows end in [0, 500 ms] of a second: an entry whose
		// reach may fall on an end counts in both windows that may hold it.
		name:    "an expiry of an uncertain phase counts an entry in every window that may hold it",
		buckets: []quota.Bucket{{Limit: slidingLog("s", 2, 1100*ms), Key: "k", Expiry: quota.LogExpiry{Every: sec, Spread: 500 * ms, Reach: 300 * ms}}},
		steps: []step{
			{advance: 100 * ms, cost: 2, ok: true}, // 0.4 s may be an end: E = 1.4 s
			{advance: 900 * ms, delay: 400 * ms},
			{advance: 400 * ms, cost: 2, ok: true}, // 1.7 s is in a window ending by 2.5 s
			{advance: sec, delay: 100 * ms},
		},
	}}
}

func slidingWindowCases() []stepCase {
	return []stepCase{{
		// R = 10, P = 1s: admitted when prev*(P-e) + (cur+c)*P <= R*P.
		name:    "estimate weights the previous window",
		buckets: on(slidingWin("w", 10, sec)),
		steps: []step{
			{cost: 10, ok: true},
			{delay: 1100 * ms},
			{advance: sec, delay: 100 * ms},
			{advance: 100*ms - us, delay: us},
			{advance: us, ok: true},
			{delay: 100 * ms},
			{advance: 500 * ms, cost: 5, ok: true},
			{delay: 100 * ms},
		},
	}, {
		// prev = 3: e >= P - floor((R-c)*P/3): 333334µs for cost 1,
		// 666667µs for cost 2.
		name:    "integer arithmetic rounds the wait up",
		buckets: on(slidingWin("w", 3, sec)),
		steps: steps(repeat(3, step{ok: true}), []step{
			{advance: sec, delay: 333334 * us},
			{cost: 2, delay: 666667 * us},
			{advance: 666666 * us, cost: 2, delay: us},
			{advance: us, cost: 2, ok: true},
			// cur = 2, so the next window, where prev = 2 admits at once.
			{delay: 333333 * us},
		}),
	}, {
		name:    "an empty previous window admits the full rate",
		buckets: on(slidingWin("w", 4, sec)),
		steps: []step{
			{advance: 2500 * ms, cost: 4, ok: true},
			{delay: 750 * ms},
		},
	}, {
		name:    "a window older than the previous one does not count",
		buckets: on(slidingWin("w", 2, sec)),
		steps: []step{
			{cost: 2, ok: true},
			{advance: 2 * sec, cost: 2, ok: true},
			{delay: 1500 * ms},
		},
	}}
}

func oddPeriodCases() []stepCase {
	return []stepCase{{
		// T = 1e6/3 µs exactly, B*T = 1s: the n-th unit after the burst
		// comes at ceil(n*T), 333334µs, 666667µs, 1s.
		name:    "3 per second GCRA",
		buckets: on(gcra("g", 3, sec, 0)),
		steps: steps(repeat(3, step{ok: true}), []step{
			{delay: 333334 * us},
			{advance: 333333 * us, delay: us},
			{advance: us, ok: true},
			{delay: 333333 * us},
			{advance: 333333 * us, ok: true},
			{delay: 333333 * us},
			{advance: 333332 * us, delay: us},
			{advance: us, ok: true},
			{delay: 333334 * us},
		}),
	}, {
		name:    "3 per second sliding window",
		buckets: on(slidingWin("w", 3, sec)),
		steps: []step{
			{advance: 500 * ms, ok: true},
			{advance: 600 * ms, ok: true},
			// e = 100ms, prev = 1, cur = 1: e >= P - floor(1*P/1) = 0.
			{ok: true},
			// prev = 1, cur = 2: cur+1 = R, so e >= P - 0: next window,
			// where prev = 2: e >= P - floor(2*P/2) = 0.
			{delay: 900 * ms},
		},
	}, {
		// T = 18s.
		name:    "100 per 30 minutes GCRA",
		buckets: on(gcra("g", 100, 30*minute, 0)),
		steps: []step{
			{cost: 100, ok: true},
			{delay: 18 * sec},
			{advance: 18*sec - us, delay: us},
			{advance: us, ok: true},
			{advance: 30 * minute, cost: 100, ok: true},
			{delay: 18 * sec},
		},
	}, {
		name:    "100 per 30 minutes fixed window",
		buckets: on(fixed("f", 100, 30*minute)),
		steps: []step{
			{advance: 10 * minute, cost: 100, ok: true},
			{delay: 20 * minute},
			{advance: 20*minute - us, delay: us},
			{advance: us, cost: 100, ok: true},
		},
	}, {
		name:    "100 per 30 minutes sliding log",
		buckets: on(slidingLog("s", 100, 30*minute)),
		steps: []step{
			{cost: 60, ok: true},
			{advance: 10 * minute, cost: 40, ok: true},
			{delay: 20 * minute},
			{advance: 20 * minute, cost: 60, ok: true},
			{delay: 10 * minute},
		},
	}, {
		// T = 3.6e9/5000 = 720000µs.
		name:    "5000 per hour GCRA",
		buckets: on(gcra("g", 5000, hour, 0)),
		steps: []step{
			{cost: 5000, ok: true},
			{delay: 720 * ms},
			{cost: 5000, delay: hour},
			{advance: hour, cost: 5000, ok: true},
		},
	}, {
		name:    "5000 per hour sliding window",
		buckets: on(slidingWin("w", 5000, hour)),
		steps: []step{
			{cost: 5000, ok: true},
			{advance: hour, delay: 720 * ms},
			{advance: 720 * ms, ok: true},
			{delay: 720 * ms},
		},
	}, {
		name:    "5000 per hour fixed window",
		buckets: on(fixed("f", 5000, hour)),
		steps: []step{
			{advance: 59 * minute, cost: 5000, ok: true},
			{delay: minute},
		},
	}}
}

func multiLimitCases() []stepCase {
	return []stepCase{{
		name:    "refused by the second limit charges nothing on the first",
		buckets: on(gcra("a", 10, sec, 0), fixed("b", 2, sec)),
		steps: steps(
			repeat(2, step{ok: true}),
			repeat(5, step{delay: sec, limit: 1}),
			repeat(8, step{use: []int{0}, ok: true}),
			[]step{{use: []int{0}, delay: 100 * ms}},
		),
	}, {
		name:    "refused by the first limit charges nothing on the second",
		buckets: on(gcra("a", 2, sec, 0), fixed("b", 5, sec)),
		steps: steps(
			repeat(2, step{ok: true}),
			repeat(3, step{delay: 500 * ms, limit: 0}),
			repeat(3, step{use: []int{1}, ok: true}),
			[]step{{use: []int{1}, delay: sec}},
		),
	}, {
		name:    "the binding index follows the demand's order",
		buckets: on(gcra("fast", 10, sec, 1), gcra("slow", 1, sec, 1)),
		steps: []step{
			{ok: true},
			{delay: sec, limit: 1},
			{use: []int{1, 0}, delay: sec, limit: 0},
			{use: []int{0}, delay: 100 * ms},
		},
	}, {
		// At 0.8s, b's window 0 has room but window 1 is full. a alone
		// admits at 1.3s, where b does not; b admits at 2s, and so does a.
		// The decision is for 2s, and b is what bound it.
		name:    "the limit that sets the final instant binds",
		buckets: on(gcra("a", 2, sec, 1), fixed("b", 1, sec)),
		steps: []step{
			{advance: 800 * ms, use: []int{1}, ok: true},
			{use: []int{1}, maxWait: sec, ok: true, delay: 200 * ms},
			{op: opCancel, cancel: 1},
			{use: []int{0}, ok: true},
			{delay: 1200 * ms, limit: 1},
			{maxWait: 1200*ms - us, delay: 1200 * ms, limit: 1},
			{maxWait: 1200 * ms, ok: true, delay: 1200 * ms},
			{use: []int{1}, ok: true},
			{use: []int{1}, maxWait: 10 * sec, ok: true, delay: 2200 * ms},
			{use: []int{0}, maxWait: 10 * sec, ok: true, delay: 1700 * ms},
		},
	}, {
		name: "limits share a counter across demands",
		buckets: []quota.Bucket{
			{Limit: fixed("global", 3, sec)},
			{Limit: fixed("category", 2, sec), Key: "x"},
			{Limit: fixed("category", 2, sec), Key: "y"},
		},
		steps: []step{
			{use: []int{0, 1}, ok: true},
			{use: []int{0, 1}, ok: true},
			{use: []int{0, 1}, delay: sec, limit: 1},
			{use: []int{0, 2}, ok: true},
			{use: []int{0, 2}, delay: sec, limit: 0},
			{use: []int{2}, ok: true},
			{use: []int{0}, delay: sec},
		},
	}, {
		name: "keys, names and scopes are independent",
		buckets: []quota.Bucket{
			{Limit: fixed("n", 1, sec), Key: "k"},
			{Limit: fixed("n", 1, sec), Key: "k2"},
			{Limit: fixed("m", 1, sec), Key: "k"},
			{Limit: fixed("n", 1, sec), Key: ""},
		},
		steps: []step{
			{use: []int{0}, ok: true},
			{use: []int{0}, delay: sec},
			{use: []int{1}, ok: true},
			{use: []int{1}, delay: sec},
			{use: []int{2}, ok: true},
			{use: []int{2}, delay: sec},
			{use: []int{3}, ok: true},
			{use: []int{3}, delay: sec},
			{use: []int{0}, scope: "other", ok: true},
			{use: []int{0}, scope: "other", delay: sec},
		},
	}}
}

func reservationCases() []stepCase {
	return []stepCase{{
		name:    "GCRA holds the next slot",
		buckets: on(gcra("g", 1, sec, 1)),
		steps: []step{
			{ok: true},
			{maxWait: 2 * sec, ok: true, delay: sec},
			{maxWait: 3 * sec, ok: true, delay: 2 * sec},
			{maxWait: 2500 * ms, delay: 3 * sec},
			{maxWait: -sec, delay: 3 * sec},
			{maxWait: 3 * sec, ok: true, delay: 3 * sec},
			{advance: 3 * sec, delay: sec},
		},
	}, {
		name:    "fixed window charges the first window with room",
		buckets: on(fixed("f", 2, sec)),
		steps: []step{
			{advance: 250 * ms, ok: true},
			{ok: true},
			{maxWait: sec, ok: true, delay: 750 * ms},
			{maxWait: sec, ok: true, delay: 750 * ms},
			{maxWait: sec, delay: 1750 * ms},
			{maxWait: 2 * sec, ok: true, delay: 1750 * ms},
			{advance: 750 * ms, delay: sec},
			{maxWait: sec, ok: true, delay: sec},
			{maxWait: 2*sec - us, delay: 2 * sec},
		},
	}, {
		// A demand never overtakes a recorded reservation.
		name:    "sliding log records the reserved instant",
		buckets: on(slidingLog("s", 2, sec)),
		steps: []step{
			{ok: true},
			{ok: true},
			{maxWait: sec, ok: true, delay: sec},
			{maxWait: sec, ok: true, delay: sec},
			{maxWait: 5 * sec, ok: true, delay: 2 * sec},
			{advance: 500 * ms, delay: 1500 * ms},
			{maxWait: 1500 * ms, ok: true, delay: 1500 * ms},
			{delay: 2500 * ms},
		},
	}, {
		name:    "sliding window charges the window of the reserved instant",
		buckets: on(slidingWin("w", 2, sec)),
		steps: []step{
			{ok: true},
			{ok: true},
			{maxWait: 2 * sec, ok: true, delay: 1500 * ms},
			{maxWait: 2 * sec, ok: true, delay: 2 * sec},
			{delay: 3 * sec},
		},
	}, {
		// a alone admits at 1s; b's window [0, 1.5s) is full, so 1.5s.
		name:    "multi-limit reservation at the latest earliest instant",
		buckets: on(gcra("a", 1, sec, 1), fixed("b", 1, 1500*ms)),
		steps: []step{
			{use: []int{0}, ok: true},
			{use: []int{1}, ok: true},
			{maxWait: sec, delay: 1500 * ms, limit: 1},
			{maxWait: 5 * sec, ok: true, delay: 1500 * ms},
			{use: []int{0}, maxWait: 5 * sec, ok: true, delay: 2500 * ms},
			{use: []int{1}, maxWait: 5 * sec, ok: true, delay: 3 * sec},
		},
	}}
}

func cancelCases() []stepCase {
	return []stepCase{{
		name:    "fixed window refunds in full",
		buckets: on(fixed("f", 2, sec)),
		steps: []step{
			{ok: true},
			{ok: true},
			{delay: sec},
			{op: opCancel, cancel: 1},
			{ok: true},
			{delay: sec},
			{maxWait: sec, ok: true, delay: sec},
			{maxWait: sec, ok: true, delay: sec},
			{op: opCancel, cancel: 7},
			{maxWait: sec, ok: true, delay: sec},
			{maxWait: sec, delay: 2 * sec},
		},
	}, {
		name:    "sliding log refunds in full",
		buckets: on(slidingLog("s", 2, sec)),
		steps: []step{
			{ok: true},
			{advance: 500 * ms, ok: true},
			{delay: 500 * ms},
			{op: opCancel, cancel: 1},
			{ok: true},
			{delay: sec},
			{maxWait: sec, ok: true, delay: sec},
			{maxWait: sec, ok: true, delay: sec},
			{op: opCancel, cancel: 8},
			{maxWait: sec, ok: true, delay: sec},
			{maxWait: sec, delay: 2 * sec},
		},
	}, {
		// At 0.5s the window ending at the reservation (1s) would hold 2:
		// the earliest is when the reservation's window has moved past
		// 0.5s... until the reservation is cancelled.
		name:    "sliding log forgets a cancelled reservation's instant",
		buckets: on(slidingLog("s", 1, sec)),
		steps: []step{
			{ok: true},
			{maxWait: 2 * sec, ok: true, delay: sec},
			{op: opCancel, cancel: 1},
			{advance: 500 * ms, delay: 1500 * ms},
			{op: opCancel, cancel: 2},
			{ok: true},
		},
	}, {
		// With both entries at 0 cancelled, a demand at 0.5s goes before
		// the reservation at 1s: every window holding it holds at most 2.
		// The next would make (0, 1s] hold 3: it goes when 0.5s leaves.
		name:    "a demand goes before a sliding log reservation that leaves it room",
		buckets: on(slidingLog("s", 2, sec)),
		steps: []step{
			{ok: true},
			{ok: true},
			{maxWait: 2 * sec, ok: true, delay: sec},
			{op: opCancel, cancel: 1},
			{op: opCancel, cancel: 2},
			{advance: 500 * ms, ok: true},
			{delay: sec},
			{maxWait: sec, ok: true, delay: sec},
			{delay: 1500 * ms},
		},
	}, {
		name:    "sliding window refunds in full, also from the previous window",
		buckets: on(slidingWin("w", 2, sec)),
		steps: []step{
			{ok: true},
			{ok: true},
			{delay: 1500 * ms},
			{op: opCancel, cancel: 1},
			{ok: true},
			{delay: 1500 * ms},
			{advance: sec, delay: 500 * ms},
			{op: opCancel, cancel: 2},
			{ok: true},
			{delay: sec},
		},
	}, {
		name:    "GCRA refunds only the latest grant",
		buckets: on(gcra("g", 1, sec, 1)),
		steps: []step{
			{ok: true},
			{maxWait: 5 * sec, ok: true, delay: sec},
			{maxWait: 5 * sec, ok: true, delay: 2 * sec},
			{op: opCancel, cancel: 3},
			{maxWait: 5 * sec, ok: true, delay: 2 * sec},
			{op: opCancel, cancel: 2}, // not the latest: nothing given back
			{maxWait: 5 * sec, ok: true, delay: 3 * sec},
			{op: opCancel, cancel: 7},
			{delay: 3 * sec},
		},
	}, {
		name:    "GCRA refunds an immediate grant",
		buckets: on(gcra("g", 2, sec, 0)),
		steps: []step{
			{ok: true},
			{ok: true},
			{delay: 500 * ms},
			{op: opCancel, cancel: 2},
			{ok: true},
			{delay: 500 * ms},
		},
	}, {
		name:    "each limit of a demand refunds by its own rule",
		buckets: on(gcra("a", 2, sec, 0), fixed("b", 1, sec)),
		steps: []step{
			{ok: true},
			{use: []int{0}, ok: true},
			{op: opCancel, cancel: 1},
			{use: []int{1}, ok: true},
			{use: []int{0}, delay: 500 * ms},
		},
	}}
}

func pauseCases() []stepCase {
	none := []int{}
	p := []string{"p"}
	return []stepCase{{
		name:    "a pause holds back only demands that list it",
		buckets: on(gcra("g", 100, sec, 0)),
		steps: []step{
			{op: opPause, key: "p", d: 10 * sec},
			{use: none, pauses: p, delay: 10 * sec, pause: "p"},
			{use: none, pauses: []string{"q"}, ok: true},
			{use: none, ok: true},
			{pauses: []string{"q", "p"}, delay: 10 * sec, pause: "p"},
			{pauses: []string{"q"}, ok: true},
			{ok: true},
			{use: none, pauses: p, scope: "other", ok: true},
			{advance: 10*sec - us, use: none, pauses: p, delay: us, pause: "p"},
			{advance: us, use: none, pauses: p, ok: true},
		},
	}, {
		name:    "a pause never shortens",
		buckets: nil,
		steps: []step{
			{op: opPause, key: "p", d: 10 * sec},
			{op: opPause, key: "p", d: 5 * sec},
			{pauses: p, delay: 10 * sec, pause: "p"},
			{advance: 3 * sec, op: opPause, key: "p", d: 2 * sec},
			{pauses: p, delay: 7 * sec, pause: "p"},
			{op: opPause, key: "p", d: 20 * sec},
			{pauses: p, delay: 20 * sec, pause: "p"},
		},
	}, {
		name:    "a non-positive pause is a no-op",
		buckets: nil,
		steps: []step{
			{op: opPause, key: "p", d: 0},
			{op: opPause, key: "p", d: -sec},
			{pauses: p, ok: true},
		},
	}, {
		name:    "a demand refused by a pause charges nothing",
		buckets: on(gcra("g", 1, sec, 1)),
		steps: []step{
			{op: opPause, key: "p", d: 500 * ms},
			{pauses: p, delay: 500 * ms, pause: "p"},
			{pauses: p, delay: 500 * ms, pause: "p"},
			{pauses: p, maxWait: 400 * ms, delay: 500 * ms, pause: "p"},
			{advance: 500 * ms, pauses: p, ok: true},
		},
	}, {
		name:    "a reservation past a pause is charged at the pause's end",
		buckets: on(gcra("g", 1, sec, 1)),
		steps: []step{
			{op: opPause, key: "p", d: 2 * sec},
			{pauses: p, maxWait: 3 * sec, ok: true, delay: 2 * sec},
			{pauses: p, delay: 3 * sec, limit: 0},
			{delay: 3 * sec, limit: 0},
		},
	}, {
		name:    "the longer of a pause and a limit binds",
		buckets: on(gcra("g", 1, sec, 1)),
		steps: []step{
			{ok: true},
			{op: opPause, key: "p", d: 500 * ms},
			{pauses: p, delay: sec, limit: 0},
			{op: opPause, key: "p", d: 3 * sec},
			{pauses: p, delay: 3 * sec, pause: "p"},
			{delay: sec, limit: 0},
		},
	}}
}

func errorCases() []stepCase {
	high := quota.ErrCostTooHigh
	return []stepCase{{
		name:    "cost above GCRA burst",
		buckets: on(gcra("g", 10, sec, 2)),
		steps: []step{
			{cost: 3, err: high},
			{cost: 3, maxWait: hour, err: high},
			{cost: 2, ok: true},
			{delay: 100 * ms},
		},
	}, {
		name:    "cost above GCRA default burst",
		buckets: on(gcra("g", 5, sec, 0)),
		steps:   []step{{cost: 6, maxWait: hour, err: high}, {cost: 5, ok: true}},
	}, {
		name:    "cost up to a GCRA burst above rate",
		buckets: on(gcra("g", 2, sec, 4)),
		steps:   []step{{cost: 5, maxWait: hour, err: high}, {cost: 4, ok: true}},
	}, {
		name:    "cost above fixed window rate",
		buckets: on(fixed("f", 3, sec)),
		steps:   []step{{cost: 4, maxWait: hour, err: high}, {cost: 3, ok: true}},
	}, {
		name:    "cost above sliding log rate",
		buckets: on(slidingLog("s", 3, sec)),
		steps:   []step{{cost: 4, maxWait: hour, err: high}, {cost: 3, ok: true}},
	}, {
		name:    "cost above sliding window rate",
		buckets: on(slidingWin("w", 3, sec)),
		steps:   []step{{cost: 4, maxWait: hour, err: high}, {cost: 3, ok: true}},
	}, {
		name:    "cost too high for a second limit charges nothing",
		buckets: on(gcra("a", 10, sec, 0), fixed("b", 2, sec)),
		steps:   []step{{cost: 3, err: high}, {use: []int{0}, cost: 10, ok: true}},
	}, {
		name:    "one counter twice in a demand is an error",
		buckets: on(gcra("g", 10, sec, 0), fixed("f", 3, sec), gcra("g", 10, sec, 0)),
		steps: []step{
			{maxWait: hour, err: quota.ErrInvalid},
			{use: []int{0, 1}, cost: 3, ok: true},
		},
	}, {
		name:    "cost below one",
		buckets: on(gcra("g", 1, sec, 1)),
		steps: []step{
			{cost: costZero, err: errAny},
			{cost: -1, err: errAny},
			{ok: true},
		},
	}, {
		// quota.Limit's bounds: every store refuses a limit it could not
		// count exactly.
		name: "limits out of bounds",
		buckets: on(gcra("ns", 2_000_000_000, sec, 0), slidingLog("log", quota.MaxSlidingLogRate+1, hour),
			fixed("rate", quota.MaxRate+1, 100*day), gcra("per", 1, quota.MaxPer+sec, 0),
			gcra("burst", 1, 30*day, 1300*12), gcra("ok", 1_000_000_000, month31, 0)),
		steps: []step{
			{use: []int{0}, err: quota.ErrInvalid}, // more than one a nanosecond
			{use: []int{1}, err: quota.ErrInvalid},
			{use: []int{2}, err: quota.ErrInvalid},
			{use: []int{3}, err: quota.ErrInvalid},
			{use: []int{4}, err: quota.ErrInvalid}, // a burst of 1300 years
			{use: []int{5, 0}, err: quota.ErrInvalid},
			{use: []int{5}, ok: true},
		},
	}, {
		name:    "no limits and no pauses is granted now",
		buckets: nil,
		steps:   []step{{ok: true}, {cost: 1000, maxWait: hour, ok: true}},
	}}
}
