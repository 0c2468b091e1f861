package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

// testRetime runs the retime cases when the stores are [quota.Retimer]s.
func (s *suite) testRetime(t *testing.T) {
	skipUnless[quota.Retimer](t, s)
	t.Run("Steps", func(t *testing.T) { s.runCases(t, retimeCases()) })
}

// retimeCases pin [quota.Retimer.Retime]: a charge moved to now keeps
// its place when the limits have room there, a refusal changes nothing,
// and all limits move or none.
func retimeCases() []stepCase {
	return []stepCase{{
		name:    "SlidingLog: the entry moves to now",
		buckets: on(slidingLog("l", 3, sec)),
		steps: []step{
			{ok: true},          // 1: at S
			{cost: 2, ok: true}, // 2: at S
			{advance: 500 * ms, op: opRetime, cancel: 1, ok: true}, // 3: now at S+0.5s
			{advance: 500 * ms, cost: 2, ok: true},                 // S+1s: S's entries left
			{delay: 500 * ms},                                      // S+0.5s's leaves at S+1.5s
			{op: opCancel, cancel: 3},                              // the retimed one gives back its own
			{ok: true},
		},
	}, {
		name:    "SlidingLog: no room at now, nothing changes",
		buckets: on(slidingLog("l", 2, sec)),
		steps: []step{
			{ok: true},                                        // 1: at S
			{advance: 600 * ms, ok: true},                     // 2: at S+0.6s
			{advance: 600 * ms, ok: true},                     // 3: at S+1.2s; S's has left
			{op: opRetime, cancel: 2, ok: true},               // 4: S+0.6s to S+1.2s: room
			{op: opRetime, cancel: 1},                         // S's is gone: logged at now, no room
			{delay: sec},                                      // S+1.2s's two leave at S+2.2s
			{advance: sec, op: opRetime, cancel: 4, ok: true}, // S+2.2s: both left, logged at now
		},
	}, {
		name:    "SlidingLog: not before a reservation it would crowd",
		buckets: on(slidingLog("l", 2, sec)),
		steps: []step{
			{cost: 2, ok: true},                                    // 1: at S
			{maxWait: hour, ok: true, delay: sec},                  // 2: reserved for S+1s
			{advance: 500 * ms, op: opRetime, cancel: 1},           // S+0.5s: (S, S+1s] would hold 3
			{advance: 500 * ms, op: opRetime, cancel: 2, ok: true}, // S+1s: in place
		},
	}, {
		name:    "FixedWindow: the cost moves to now's window",
		buckets: on(fixed("f", 2, sec)),
		steps: []step{
			{advance: 900 * ms, ok: true}, // 1: window 0
			{ok: true},                    // 2: window 0 full
			{advance: 200 * ms, op: opRetime, cancel: 1, ok: true}, // S+1.1s: to window 1
			{ok: true}, // window 1 full
			{delay: 900 * ms},
			{op: opRetime, cancel: 2}, // no room in window 1
			{op: opCancel, cancel: 3}, // the retimed one gives back window 1's
			{ok: true},
		},
	}, {
		name:    "FixedWindow: within the window charged nothing changes",
		buckets: on(fixed("f", 2, sec)),
		steps: []step{
			{ok: true},
			{ok: true},
			{advance: 500 * ms, op: opRetime, cancel: 1, ok: true},
			{delay: 500 * ms},
			{op: opRetime, cancel: 3, ok: true},
		},
	}, {
		name:    "FixedWindow: anchored windows",
		buckets: on(anchored(fixed("a", 3, sec))),
		steps: []step{
			{advance: 300 * ms, cost: 2, ok: true},                  // the first window starts at S+0.3s
			{ok: true},                                              // 2: window [S+0.3s, S+1.3s) full
			{maxWait: hour, ok: true, delay: sec},                   // reserved in the next
			{advance: 1100 * ms, op: opRetime, cancel: 2, ok: true}, // S+1.4s: to [S+1.3s, S+2.3s)
			{ok: true},
			{delay: 900 * ms},
		},
	}, {
		name:    "SlidingWindow: the cost moves to now's window",
		buckets: on(slidingWin("w", 2, sec)),
		steps: []step{
			{advance: 900 * ms, ok: true}, // 1: window 0
			{ok: true},                    // 2: window 0 full
			{advance: 1100 * ms, op: opRetime, cancel: 1, ok: true}, // S+2s: window 2, window 1 empty
			{ok: true},                // window 2 full
			{delay: 1500 * ms},        // window 3 weighs window 2's 2
			{op: opRetime, cancel: 2}, // no room in window 2
		},
	}, {
		// T = 100ms, B = 1: no later grant, so the charge is given back
		// and made again at now.
		name:    "GCRA: the latest charge moves to now",
		buckets: on(gcra("g", 10, sec, 1)),
		steps: []step{
			{ok: true}, // 1: TAT S+100ms
			{advance: 300 * ms, op: opRetime, cancel: 1, ok: true}, // TAT S+400ms
			{delay: 100 * ms},
		},
	}, {
		// T = 100ms, B = 10.
		name:    "GCRA: a backlogged charge stays, a drained one refuses",
		buckets: on(gcra("g", 10, sec, 10)),
		steps: []step{
			{cost: 5, ok: true}, // TAT S+0.5s
			{ok: true},          // 2: TAT S+0.6s, set from S+0.5s
			{ok: true},          // 3: TAT S+0.7s
			{advance: 400 * ms, op: opRetime, cancel: 2, ok: true}, // S+0.4s: S+0.5s is ahead
			{advance: 200 * ms, op: opRetime, cancel: 2},           // S+0.6s: drained to it, step 3 ahead
			{cost: 9, ok: true}, // nothing moved: TAT S+1.6s
			{delay: 100 * ms},
		},
	}, {
		name:    "GCRA: every charge drained, charged again at now",
		buckets: on(gcra("g", 10, sec, 10)),
		steps: []step{
			{ok: true}, // 1: TAT S+0.1s
			{ok: true}, // TAT S+0.2s
			{advance: sec, op: opRetime, cancel: 1, ok: true}, // TAT S+1.1s
			{cost: 9, ok: true},
			{delay: 100 * ms},
		},
	}, {
		name:    "a pause in force refuses",
		buckets: on(slidingLog("l", 5, sec)),
		steps: []step{
			{pauses: []string{"p"}, ok: true},
			{op: opPause, key: "p", d: sec},
			{advance: 100 * ms, op: opRetime, cancel: 1, pause: "p"},
		},
	}, {
		name:    "all limits or none",
		buckets: on(fixed("f", 2, sec), slidingLog("l", 5, sec)),
		steps: []step{
			{advance: 900 * ms, ok: true},                         // 1: both, the entry at S+0.9s
			{use: []int{0}, ok: true},                             // window 0 full
			{advance: 200 * ms, use: []int{0}, cost: 2, ok: true}, // window 1 full
			{op: opRetime, cancel: 1, limit: 0},                   // f has no room: the entry stays
			{advance: 850 * ms, use: []int{1}, cost: 5, ok: true}, // S+1.95s: S+0.9s's left
		},
	}, {
		name:    "all limits move",
		buckets: on(fixed("f", 2, sec), slidingLog("l", 5, sec)),
		steps: []step{
			{advance: 900 * ms, ok: true},                // 1: both, the entry at S+0.9s
			{use: []int{0}, ok: true},                    // window 0 full
			{advance: 200 * ms, use: []int{0}, ok: true}, // window 1: 1
			{op: opRetime, cancel: 1, ok: true},          // window 1: 2, the entry at S+1.1s
			{use: []int{0}, delay: 900 * ms},
			{advance: 850 * ms, use: []int{1}, cost: 5, delay: 150 * ms},
		},
	}, {
		name:    "an unclaimed reservation stays unclaimed",
		buckets: on(slidingLog("l", 1, sec), conc("c", 1, minute)),
		steps: []step{
			{ok: true}, // 1: holds the slot
			{op: opRelease, cancel: 1},
			{maxWait: hour, ok: true, delay: sec}, // 3: reserved for S+1s, unclaimed
			{advance: 1200 * ms, op: opRetime, cancel: 3, ok: true},
			{op: opClaim, cancel: 4, ok: true},
			{use: []int{0}, delay: sec}, // the entry is at S+1.2s
		},
	}}
}

// The model's retiming: a view is a quota.Retimer.

var _ quota.Retimer = view{}

// Retime implements quota.Retimer.
func (v view) Retime(_ context.Context, r *quota.Reservation) (quota.Decision, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	dec, _, err := v.m.retime(r, v.micros())
	return dec, err
}

// retime moves r's charges to now as quota.Retimer says, and returns the
// decision and, when refused by the limits, every limit that has no room
// at now (a store may name any of them).
func (m *model) retime(r *quota.Reservation, now int64) (quota.Decision, []int, error) {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return quota.Decision{}, nil, errors.New("storetest model: not a reservation of this store")
	}
	d := r.Demand
	if err := check(d); err != nil {
		return quota.Decision{}, nil, err
	}
	for _, p := range d.Pauses {
		if m.pauses[d.Scope+"\x00"+p] > now {
			return quota.Decision{Limit: -1, Pause: p}, nil, nil
		}
	}
	// Each limit on its own, from the state before (counters are
	// distinct), then all of them for good.
	var short []int
	for i := range d.Limits {
		before := m.snapshot(d)
		if _, ok := m.move(d, i, r.Marks[i], now); !ok {
			short = append(short, i)
		}
		m.restore(before)
	}
	if len(short) > 0 {
		return quota.Decision{Limit: short[0]}, short, nil
	}
	nr := &quota.Reservation{Demand: d, ID: r.ID, Unclaimed: r.Unclaimed, Marks: slices.Clone(r.Marks)}
	for i := range d.Limits {
		nr.Marks[i], _ = m.move(d, i, r.Marks[i], now)
	}
	_, reset := m.left(d, nr.Marks, now, now+1) // +1: a reservation's, which leaves Remaining alone
	return quota.Decision{OK: true, Limit: -1, Reservation: nr, ResetAfter: reset}, nil, nil
}

// move moves the charge of d's limit i whose mark is mark to now, and
// returns its new mark, or false when the limit has no room for it at
// now (the state may then have changed: restore it).
func (m *model) move(d *quota.Demand, i int, mark, now int64) (int64, bool) {
	b := d.Limits[i]
	id, c := bucketID(d.Scope, b), int64(d.CostOf(i))
	m.expire(id, b.Limit, now)
	switch b.Limit.Algorithm {
	case quota.Concurrency:
		return mark, true
	case quota.GCRA:
		q := quotamath.Of(b.Limit)
		switch {
		case q.Mark(m.tat[id]) == mark: // the latest charge: given back, made again at now
			m.tat[id] = q.GCRARefund(m.tat[id], c)
		case q.GCRAKeeps(mark, now, c): // counted where a request sent now is
			return mark, true
		case quotamath.At(now).Before(m.tat[id]): // later grants ahead of now sit on it
			return 0, false
		}
	case quota.FixedWindow, quota.SlidingWindow:
		q := m.grid(id, b.Limit)
		_, phased := m.phase[id]
		k, on := mark, !b.Limit.Anchored
		if b.Limit.Anchored {
			k, on = q.Window(mark), phased && quotamath.FloorMod(mark-q.Phase, q.Per) == 0
		}
		if on && k == q.Window(now) {
			return mark, true // still the window charged
		}
		m.refund(id, b.Limit, c, mark)
	case quota.SlidingLog:
		m.refund(id, b.Limit, c, mark)
	}
	if !m.admits(d.Scope, b, c, now) {
		return 0, false
	}
	return m.charge(id, b, c, now), true
}

// modelState is what move may change of a demand's counters.
type modelState struct {
	id       string
	tat      quotamath.Time
	win      map[int64]int64
	last     map[int64]int64
	phase    int64
	phased   bool
	expiry   int64
	expires  bool
	learn    bool
	log      []quotamath.LogEntry
	hadLog   bool
	hadWin   bool
	hadTAT   bool
	hadLearn bool
}

// snapshot returns the state of d's counters, for restore.
func (m *model) snapshot(d *quota.Demand) []modelState {
	var s []modelState
	for _, b := range d.Limits {
		id := bucketID(d.Scope, b)
		st := modelState{id: id, win: maps.Clone(m.win[id]), last: maps.Clone(m.last[id]), log: slices.Clone(m.log[id])}
		_, st.hadWin = m.win[id]
		_, st.hadLog = m.log[id]
		st.tat, st.hadTAT = m.tat[id]
		st.phase, st.phased = m.phase[id]
		st.expiry, st.expires = m.expiry[id]
		st.learn, st.hadLearn = m.learn[id]
		s = append(s, st)
	}
	return s
}

// restore puts back the state snapshot took.
func (m *model) restore(s []modelState) {
	for _, st := range s {
		id := st.id
		setOrDelete(m.win, id, st.win, st.hadWin)
		setOrDelete(m.last, id, st.last, st.hadWin)
		setOrDelete(m.log, id, st.log, st.hadLog)
		setOrDelete(m.tat, id, st.tat, st.hadTAT)
		setOrDelete(m.phase, id, st.phase, st.phased)
		setOrDelete(m.expiry, id, st.expiry, st.expires)
		setOrDelete(m.learn, id, st.learn, st.hadLearn)
	}
}

func setOrDelete[V any](m map[string]V, k string, v V, set bool) {
	if set {
		m[k] = v
	} else {
		delete(m, k)
	}
}
