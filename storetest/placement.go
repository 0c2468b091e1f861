package storetest

// placementCases pin where a demand that waits is placed when limits
// are shared by demands that other limits delay (a write bound by its
// content limit, a read that only spends points): at the earliest
// instant every one of its limits admits it, not behind reservations it
// does not compete with, and never so that a window holding a
// reservation holds more than its rate.
func placementCases() []stepCase {
	write := func(st step) step { st.costs, st.maxWait = []int{5, 1}, 5*sec; return st }
	read := func(st step) step { st.use = []int{0}; return st }
	return []stepCase{{
		// Points 30 a second, shared; content 2 a second, writes only. A
		// write costs 5 points and 1 content. Six writes take content at
		// 0, 1s and 2s; reads spend the 20 points left at 0 at once, the
		// next is due at 1s (10 of 30 points there are writes'), not
		// after the last write at 2s.
		name:    "sliding log: reads take the points free before writes reserved on them",
		buckets: on(slidingLog("points", 30, sec), slidingLog("content", 2, sec)),
		steps: steps(
			repeat(2, write(step{ok: true})),
			repeat(2, write(step{ok: true, delay: sec})),
			repeat(2, write(step{ok: true, delay: 2 * sec})),
			repeat(20, read(step{maxWait: 5 * sec, ok: true})),
			[]step{
				read(step{maxWait: 5 * sec, ok: true, delay: sec}),
				read(step{delay: sec, limit: 0}),
				write(step{ok: true, delay: 3 * sec}),
			},
		),
	}, {
		// Points 10 a second; content 1. The write at 1s holds its 5
		// points: at 0.5s the window (0, 1s] holds it, so 5 reads fit
		// before it, and the sixth waits until 0.5s leaves the window
		// ending at 1s, at 1.5s.
		name:    "sliding log: a gap before a reservation never crowds it out",
		buckets: on(slidingLog("points", 10, sec), slidingLog("content", 1, sec)),
		steps: steps(
			[]step{write(step{ok: true}), write(step{ok: true, delay: sec})},
			repeat(1, read(step{advance: 500 * ms, ok: true})),
			repeat(4, read(step{ok: true})),
			[]step{
				read(step{delay: sec, limit: 0}),
				read(step{maxWait: sec, ok: true, delay: sec}),
			},
		),
	}, {
		// The same demands on a fixed window of points: a reservation
		// charges its own window, and earlier windows keep their room.
		name:    "fixed window: reads take the room of the current window",
		buckets: on(fixed("points", 30, sec), fixed("content", 2, sec)),
		steps: steps(
			repeat(2, write(step{ok: true})),
			repeat(2, write(step{ok: true, delay: sec})),
			repeat(20, read(step{maxWait: 5 * sec, ok: true})),
			[]step{read(step{maxWait: 5 * sec, ok: true, delay: sec})},
		),
	}, {
		// GCRA keeps one arrival time per counter: a reservation for 1s
		// moves it to 1.5s, and a read waits behind it (until 0.6s =
		// 1.5s + T - B*T) although 5 of the 10 points are free at 0. This
		// is the documented limit of GCRA (throttle.Limit's doc): use a
		// sliding log or window for a limit that demands another limit
		// delays share.
		name:    "GCRA: a read waits behind the writes reserved on its arrival time",
		buckets: on(gcra("points", 10, sec, 0), slidingLog("content", 1, sec)),
		steps: []step{
			write(step{ok: true}),
			write(step{ok: true, delay: sec}),
			read(step{delay: 600 * ms, limit: 0}),
		},
	}}
}
