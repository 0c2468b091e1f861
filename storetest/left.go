package storetest

import "github.com/quotakit/throttle/quota"

// limitCostCases pin Bucket.Cost: each limit of a demand charged its own
// cost, all or none, in one decision.
func limitCostCases() []stepCase {
	return []stepCase{{
		// Points 10 per second (T = 100ms) and writes 4 per second: a
		// write costs 5 points and 1 write.
		name:    "each limit charged its own cost",
		buckets: on(gcra("points", 10, sec, 0), fixed("writes", 4, sec)),
		steps: []step{
			{costs: []int{5, 1}, ok: true, left: &left{3, sec}},
			{use: []int{0}, ok: true, left: &left{4, 600 * ms}},
			{costs: []int{5, 1}, delay: 100 * ms},
			{use: []int{1}, ok: true, left: &left{2, sec}},
			{use: []int{0}, cost: 4, ok: true, left: &left{0, sec}},
			{costs: []int{5, 1}, delay: 500 * ms},
			{advance: 500 * ms, costs: []int{5, 1}, ok: true, left: &left{0, sec}},
			{use: []int{1}, ok: true, left: &left{0, 500 * ms}},
			{costs: []int{1, 1}, limit: 1, delay: 500 * ms},
		},
	}, {
		name:    "a zero limit cost means the demand's cost",
		buckets: on(fixed("a", 10, sec), fixed("b", 10, sec)),
		steps: []step{
			{cost: 3, costs: []int{0, 7}, ok: true, left: &left{3, sec}},
			{cost: 3, costs: []int{0, 7}, limit: 1, delay: sec},
			{cost: 3, costs: []int{0, 3}, ok: true, left: &left{0, sec}},
		},
	}, {
		name:    "a limit cost above its capacity is an error",
		buckets: on(fixed("a", 10, sec), gcra("g", 10, sec, 4)),
		steps: []step{
			{costs: []int{11, 1}, err: quota.ErrCostTooHigh},
			{costs: []int{1, 5}, err: quota.ErrCostTooHigh},
			{costs: []int{-1, 1}, err: quota.ErrInvalid},
			{costs: []int{10, 4}, ok: true, left: &left{0, sec}},
		},
	}, {
		// Remaining counts the window's room, not the free slots, which
		// count only in a demand of slots alone (leftCases).
		name:    "a Concurrency limit takes one slot whatever its cost",
		buckets: on(conc("c", 2, sec), fixed("f", 100, sec)),
		steps: []step{
			{costs: []int{50, 50}, ok: true, left: &left{50, sec}},
			{costs: []int{50, 50}, ok: true, left: &left{0, sec}},
			{costs: []int{1, 1}, limit: 1, delay: sec},
		},
	}}
}

// leftCases pin Decision.Remaining and ResetAfter.
func leftCases() []stepCase {
	return []stepCase{{
		// T = 100ms, B = 10.
		name:    "GCRA: what the burst has left, and until it is full",
		buckets: on(gcra("g", 10, sec, 0)),
		steps: []step{
			{cost: 3, ok: true, left: &left{7, 300 * ms}},
			{advance: 50 * ms, ok: true, left: &left{6, 350 * ms}},
			{cost: 6, ok: true, left: &left{0, 950 * ms}},
			{cost: 2, maxWait: sec, ok: true, delay: 150 * ms, left: &left{0, 1150 * ms}},
			{delay: 250 * ms},
		},
	}, {
		name:    "FixedWindow: the window's room, and until its end",
		buckets: on(fixed("f", 5, sec)),
		steps: []step{
			{advance: 400 * ms, cost: 2, ok: true, left: &left{3, 600 * ms}},
			{cost: 3, ok: true, left: &left{0, 600 * ms}},
			{maxWait: sec, ok: true, delay: 600 * ms, left: &left{0, 1600 * ms}},
		},
	}, {
		name:    "SlidingWindow: the weighted room, and until the next window ends",
		buckets: on(slidingWin("s", 10, sec)),
		steps: []step{
			{cost: 6, ok: true, left: &left{4, 2 * sec}},
			// 250ms into the next window: 6*750/1000 = 4.5 -> 5 used.
			{advance: 1250 * ms, cost: 2, ok: true, left: &left{3, 1750 * ms}},
		},
	}, {
		name:    "SlidingLog: the log's room, and Per after the entry",
		buckets: on(slidingLog("l", 4, sec)),
		steps: []step{
			{cost: 2, ok: true, left: &left{2, sec}},
			{advance: 300 * ms, ok: true, left: &left{1, sec}},
			{advance: 800 * ms, ok: true, left: &left{2, sec}},
		},
	}, {
		name:    "Concurrency: free slots, and no reset",
		buckets: on(conc("c", 3, sec)),
		steps: []step{
			{ok: true, left: &left{2, 0}},
			{ok: true, left: &left{1, 0}},
		},
	}, {
		// Slots free on release, not with time: beside a rate limit they
		// say nothing of the quota, so only the rate limits count, the
		// GCRA one (batched by redisstore) and the window (take.lua) alike.
		name:    "Concurrency beside rate limits: the rate limits' remaining only",
		buckets: on(conc("c", 2, sec), gcra("g", 10, sec, 0)),
		steps: []step{
			{ok: true, left: &left{9, 100 * ms}},
			{ok: true, left: &left{8, 200 * ms}},
			{limit: 0, delay: sec},
		},
	}, {
		name:    "Concurrency beside a window: the window's room only",
		buckets: on(fixed("f", 10, sec), conc("a", 3, sec), conc("b", 1, sec)),
		steps: []step{
			{cost: 4, ok: true, left: &left{6, sec}},
			{limit: 2, delay: sec},
		},
	}, {
		name:    "several limits: the least remaining and the longest reset",
		buckets: on(gcra("g", 10, sec, 0), fixed("f", 3, 10*sec), slidingLog("l", 100, 2*sec)),
		steps: []step{
			{ok: true, left: &left{2, 10 * sec}},
			{cost: 5, use: []int{0, 2}, ok: true, left: &left{4, 2 * sec}},
		},
	}, {
		name:    "a refusal reports nothing left",
		buckets: on(gcra("g", 10, sec, 2), fixed("f", 5, sec)),
		steps: []step{
			{cost: 2, ok: true, left: &left{0, sec}},
			{delay: 100 * ms, left: &left{0, 0}},
			{pauses: []string{"p"}, delay: 100 * ms, left: &left{0, 0}},
		},
	}}
}
