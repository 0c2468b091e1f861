package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
)

// The store's clock, as the grants teach it: each call bounds ours less
// the store's between its start and its answer, less the instant the
// store decided at; the bounds narrow to the fastest call, and one that
// contradicts them starts them again.
func TestObserveClock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		calls  [][3]int64 // decided (store), asked, answered (ours), µs
		lo, hi int64
	}{
		{"one call", [][3]int64{{1000, 5000, 5200}}, 3999, 4201},
		{"narrows to the fastest", [][3]int64{{1000, 5000, 5200}, {2000, 6100, 6110}}, 4099, 4111},
		{"a slow call says nothing new", [][3]int64{{2000, 6100, 6110}, {3000, 6000, 9000}}, 4099, 4111},
		{"contradicted: starts again", [][3]int64{{2000, 6100, 6110}, {3000, 9000, 9010}}, 5999, 6011},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p phase
			for _, c := range tc.calls {
				p.observeClock(c[0], c[1], c[2])
			}
			assert.Equal(t, tc.lo, p.oLo)
			assert.Equal(t, tc.hi, p.oHi)
		})
	}
}

// A grant's charge to an Anchor limit's log is read from its mark on the
// store's clock: as tight as the store's clock is known, never outside
// what the call alone allows.
func TestChargedAt(t *testing.T) {
	per := time.Second
	l := quota.Limit{Name: "search", Rate: 30, Per: per, Algorithm: quota.FixedWindow, Anchored: true}
	d := &demand{Demand: quota.Demand{Scope: "s", Limits: []quota.Bucket{{Limit: l, Key: "k"}}}}
	d.anchorLog()
	require.Len(t, d.Limits, 2)
	id := windowID{"s", "search", "k"}
	t0 := time.UnixMicro(1_700_000_000_000_000)
	var lr learner
	// A fast call teaches the clock: the store's is ours less 500 µs.
	fast := grantCall{asked: t0, answered: t0.Add(100 * time.Microsecond),
		dec: quota.Decision{OK: true, Reservation: &quota.Reservation{Marks: []int64{0, t0.UnixMicro() - 500 + 50}}}}
	lo, hi := lr.chargedAt(id, per, d, 0, fast)
	assert.Equal(t, t0, lo)
	assert.Equal(t, t0.Add(100*time.Microsecond), hi)
	// A slow call's grant, for 2 s later: charged 300 ms into the call.
	asked := t0.Add(time.Second)
	mark := asked.Add(300*time.Millisecond).UnixMicro() - 500 + (2 * time.Second).Microseconds()
	slow := grantCall{asked: asked, answered: asked.Add(400 * time.Millisecond),
		dec: quota.Decision{OK: true, Delay: 2 * time.Second, Reservation: &quota.Reservation{Marks: []int64{0, mark}}}}
	lo, hi = lr.chargedAt(id, per, d, 0, slow)
	want := asked.Add(300*time.Millisecond + 2*time.Second)
	assert.LessOrEqual(t, lo, want)
	assert.GreaterOrEqual(t, hi, want)
	assert.LessOrEqual(t, hi.Sub(lo), 102*time.Microsecond, "as tight as the fastest call")
	// A failure mode's grant: the call alone.
	slow.local = true
	lo, hi = lr.chargedAt(id, per, d, 0, slow)
	assert.Equal(t, asked.Add(2*time.Second), lo)
	assert.Equal(t, asked.Add(2*time.Second+400*time.Millisecond), hi)
}

// A request is held only when it may reach the vendor later than the
// log covers (sendLag and its margin after its charge) and one of the
// vendor's window ends may lie between its charge and its arrival; a
// request on time is never held, wherever the window ends.
func TestAnchorCrossing(t *testing.T) {
	per := time.Second
	id := windowID{"s", "search", "k"}
	t0 := time.UnixMicro(1_700_000_000_000_000)
	end := t0.Add(500 * time.Millisecond) // one of the vendor's ends, known to within 10 ms
	covered := sendLag(per) + logMargin(per)
	for _, tc := range []struct {
		name          string
		evidence      bool
		charged, sent time.Duration // after t0
		hold          bool
		until         time.Duration // after t0, when held
		scored        bool          // the log's entry has a quota.LogExpiry
		rtt           time.Duration // the longest send-to-answer time
		reach         time.Duration // the entry's reach; zero: the log's margin
		uncovered     bool          // sent, though it may arrive later than the log covers where no end is known
	}{
		{"on time across the end", true, 400 * time.Millisecond, 400*time.Millisecond + sendLag(per), false, 0, false, 0, 0, false},
		{"late, arrives before the end", true, 0, covered + 50*time.Millisecond, false, 0, false, 0, 0, false},
		{"late across the end", true, 300 * time.Millisecond, 300*time.Millisecond + covered + 50*time.Millisecond, true, 500*time.Millisecond + time.Microsecond, false, 0, 0, false},
		{"late, charged after the end", true, 510 * time.Millisecond, 510*time.Millisecond + covered + 50*time.Millisecond, false, 0, false, 0, 0, false},
		{"late, no evidence", false, 300 * time.Millisecond, 300*time.Millisecond + covered + 50*time.Millisecond, false, 0, false, 0, 0, true},
		{"late, the zone too wide with a stall's answers", true, 300 * time.Millisecond, 300*time.Millisecond + covered + 50*time.Millisecond, false, 0, false, 600 * time.Millisecond, 0, true},
		// An entry scored by the vendor's windows counts no longer than
		// the window that may hold its reach: a late request is held where
		// the zone is not known too, and decided again at once.
		{"scored, late across the end", true, 300 * time.Millisecond, 300*time.Millisecond + covered + 50*time.Millisecond, true, 500*time.Millisecond + time.Microsecond, true, 0, 0, false},
		{"scored, late, arrives before the end", true, 0, covered + 50*time.Millisecond, false, 0, true, 0, 0, false},
		{"scored, late, the zone too wide with a stall's answers", true, 300 * time.Millisecond, 300*time.Millisecond + covered + 50*time.Millisecond, true, 300*time.Millisecond + covered + 50*time.Millisecond, true, 600 * time.Millisecond, 0, false},
		// An entry whose reach is shorter than the log's margin covers
		// less: a request later than it is held where it may cross an end,
		// and, where the zone is not known, at once.
		{"short reach, on time for it", true, 300 * time.Millisecond, 300*time.Millisecond + sendLag(per) + 20*time.Millisecond, false, 0, false, 0, 30 * time.Millisecond, false},
		{"short reach, late across the end", true, 300 * time.Millisecond, 300*time.Millisecond + sendLag(per) + 40*time.Millisecond, true, 500*time.Millisecond + time.Microsecond, false, 0, 30 * time.Millisecond, false},
		{"short reach, late, arrives before the end", true, 0, sendLag(per) + 40*time.Millisecond, false, 0, false, 0, 30 * time.Millisecond, false},
		{"short reach, late, no evidence", false, 300 * time.Millisecond, 300*time.Millisecond + sendLag(per) + 40*time.Millisecond, true, 300*time.Millisecond + sendLag(per) + 40*time.Millisecond, false, 0, 30 * time.Millisecond, false},
		{"short reach, late, the zone too wide with a stall's answers", true, 300 * time.Millisecond, 300*time.Millisecond + sendLag(per) + 40*time.Millisecond, true, 300*time.Millisecond + sendLag(per) + 40*time.Millisecond, false, 600 * time.Millisecond, 30 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lr learner
			lr.mu.Lock()
			p := lr.phaseOf(id, per, t0)
			if tc.evidence {
				p.hasArc, p.aLo, p.aHi = true, end.Add(-10*time.Millisecond).UnixMicro(), end.UnixMicro()
			}
			p.hasStore, p.asked = true, t0.Add(tc.sent).UnixMicro() // asked just now: no store call
			p.rtt = tc.rtt.Microseconds()
			lr.mu.Unlock()
			reach := tc.reach
			if reach == 0 {
				reach = logMargin(per)
			}
			c := anchorCharge{id: id, per: per, lo: t0.Add(tc.charged), hi: t0.Add(tc.charged), reach: reach, scored: tc.scored}
			until, hold, ask, uncovered := lr.crossing(c, t0.Add(tc.sent))
			assert.False(t, ask)
			assert.Equal(t, tc.hold, hold)
			assert.Equal(t, tc.uncovered, uncovered, "uncovered")
			if tc.hold {
				assert.Equal(t, t0.Add(tc.until), until)
			}
		})
	}
}

// The log's expiry: under AnchorGrid, the vendor's window ends on the
// store's clock, widened by what is not known of it and sendLag earlier,
// with the log's margin as the reach, once the evidence is narrow, the store's clock
// known and the latest answer at most a window old; otherwise the entry
// counts for a window and its reach from its charge (the log's own rule
// when that is the log's margin).
func TestLogExpiry(t *testing.T) {
	per := time.Second
	id := windowID{"s", "search", "k"}
	t0 := time.UnixMicro(1_700_000_000_000_000) // whole seconds
	short := reachExpiry(per, reachFloor(per))
	for _, tc := range []struct {
		name  string
		grid  bool
		clock bool          // the store's clock known: ours less the store's in [-2ms, +3ms]
		last  time.Duration // the latest answer, before t0; zero: none
		width time.Duration // the evidence: an end in [t0+400ms, t0+400ms+width]
		rtt   time.Duration
		want  quota.LogExpiry
	}{
		// Scored by the vendor's windows, an entry's reach only says
		// which of them may hold it: the margin, which holds no request
		// that a shorter one would not.
		{"known", true, true, 100 * time.Millisecond, 10 * time.Millisecond, 0,
			quota.LogExpiry{Every: per, Phase: 397*time.Millisecond - sendLag(per), Spread: 15 * time.Millisecond, Reach: logMargin(per)}},
		{"known, no grid", false, true, 100 * time.Millisecond, 10 * time.Millisecond, 0, short},
		{"no grid, a slower answer", false, true, 100 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, reachExpiry(per, 40*time.Millisecond)},
		{"no clock", true, false, 100 * time.Millisecond, 10 * time.Millisecond, 0, short},
		{"no answer for a window", true, true, 1100 * time.Millisecond, 10 * time.Millisecond, 0, short},
		{"evidence of half a window", true, true, 100 * time.Millisecond, 500 * time.Millisecond, 0, short},
		{"a stall's answers", true, true, 100 * time.Millisecond, 10 * time.Millisecond, 600 * time.Millisecond, quota.LogExpiry{}},
		{"no answer yet", true, true, 0, 10 * time.Millisecond, 0, quota.LogExpiry{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var lr learner
			lr.mu.Lock()
			p := lr.phaseOf(id, per, t0)
			p.hasArc, p.aLo, p.aHi = true, t0.Add(400*time.Millisecond).UnixMicro(), t0.Add(400*time.Millisecond+tc.width).UnixMicro()
			p.hasClock, p.oLo, p.oHi = tc.clock, -2000, 3000
			if tc.last > 0 {
				p.last, p.answers = t0.Add(-tc.last).UnixMicro(), reachEvidence
			}
			p.rtt, p.slowCur = tc.rtt.Microseconds(), tc.rtt.Microseconds()
			lr.mu.Unlock()
			e := lr.logExpiry(id, per, t0, tc.grid)
			assert.Equal(t, tc.want, e)
			reach, scored := logReach(per, e)
			assert.Equal(t, e.Every == per, scored)
			if e.Every != per {
				assert.Equal(t, e, reachExpiry(per, reach), "logReach inverts reachExpiry")
			}
		})
	}
}

// logReach tells reachExpiry's expiry from a vendor's grid by its reach
// (a window and more), not by its grid alone.
func TestLogReach(t *testing.T) {
	per := time.Second
	reach, scored := logReach(per, reachExpiry(per, 30*time.Millisecond))
	assert.Equal(t, 30*time.Millisecond, reach)
	assert.False(t, scored)
	reach, scored = logReach(per, quota.LogExpiry{Every: time.Microsecond, Reach: logMargin(per)})
	assert.Equal(t, logMargin(per), reach, "a grid of a microsecond reaching within a window is a vendor's")
	assert.True(t, scored)
	reach, scored = logReach(per, quota.LogExpiry{})
	assert.Equal(t, logMargin(per), reach)
	assert.False(t, scored)
}

// An entry's reach is twice the longest lateness of a send plus the
// longest send-to-answer time of the last reachSamples answers or up to
// twice as many, from reachFloor to the log's margin, which it is until
// reachEvidence answers came; the lateness of a held send counts.
func TestAnchorReach(t *testing.T) {
	per := time.Second
	id := windowID{"s", "search", "k"}
	t0 := time.UnixMicro(1_700_000_000_000_000)
	var lr learner
	reach := func() time.Duration {
		lr.mu.Lock()
		defer lr.mu.Unlock()
		return time.Duration(lr.phaseOf(id, per, t0).reach()) * time.Microsecond
	}
	at := t0
	answer := func(n int, rtt time.Duration) {
		for range n {
			// A reset a window wide says nothing of the phase.
			lr.observe(id, per, at, at.Add(rtt), quotaheader.Feedback{Reset: at.Add(2 * per), ResetResolution: per}, 0, logMargin(per))
			at = at.Add(10 * time.Millisecond)
		}
	}
	send := func(late time.Duration) bool {
		charged := at
		_, hold, _, _ := lr.crossing(anchorCharge{id: id, per: per, lo: charged, hi: charged, reach: reach()}, charged.Add(sendLag(per)+late))
		return hold
	}
	assert.Equal(t, logMargin(per), reach(), "no answer yet")
	answer(reachEvidence-1, 3*time.Millisecond)
	assert.Equal(t, logMargin(per), reach(), "too few answers")
	answer(1, 3*time.Millisecond)
	assert.Equal(t, reachFloor(per), reach(), "prompt answers")
	answer(1, 15*time.Millisecond)
	assert.Equal(t, 30*time.Millisecond, reach())
	// A send 5 ms late (within the reach: sent), then one 30 ms late
	// (beyond it, with no evidence of the vendor's ends: held at once).
	assert.False(t, send(5*time.Millisecond))
	assert.Equal(t, 40*time.Millisecond, reach())
	assert.True(t, send(30*time.Millisecond))
	assert.Equal(t, 90*time.Millisecond, reach(), "the held send's lateness counts")
	// A stall: held, and the reach is the margin, for which a send as
	// late is not held (the log's own rule: a vendor slower than the
	// margin would be held for good).
	assert.True(t, send(200*time.Millisecond))
	assert.Equal(t, logMargin(per), reach())
	assert.False(t, send(200*time.Millisecond))
	// Remembered until the reachSamples answers after the ones it came
	// with are in.
	answer(reachSamples-reachEvidence-1, 3*time.Millisecond) // the first reachSamples
	assert.Equal(t, logMargin(per), reach())
	answer(reachSamples-1, 3*time.Millisecond)
	assert.Equal(t, logMargin(per), reach())
	answer(1, 3*time.Millisecond)
	assert.Equal(t, reachFloor(per), reach())
}
