package throttle

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The store's clock is an hour ahead of the local one here: the least
// lag is read from the answers whatever the offset, a tenth of them
// delayed on the way back do not move it, nor does a call slow before
// the store decided, nor a stall; an idle spell keeps it; a store slow
// for good moves it within usualSpan; a clock that steps starts it again.
func TestStoreClock(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	const offset = -time.Hour // local less the store's
	// call returns a call's instants: asked at local, decided pre later,
	// answered post after that.
	call := func(local time.Time, pre, post time.Duration) (asked, answered, at time.Time) {
		return local, local.Add(pre + post), local.Add(pre - offset)
	}
	var c storeClock
	assert.Zero(t, c.least(t0), "no answer yet")

	// Cold: the greatest asked-At, at most the offset.
	c.observe(call(t0, 3*time.Millisecond, time.Millisecond))
	assert.Equal(t, offset-3*time.Millisecond, c.least(t0), "one answer: its start")
	c.observe(call(t0, 100*time.Microsecond, 300*time.Millisecond))
	assert.Equal(t, offset-100*time.Microsecond, c.least(t0), "the answer nearest the offset")

	for i := range 90 {
		c.observe(call(t0, time.Duration(50+i)*time.Microsecond, 200*time.Microsecond+time.Duration(i)*time.Microsecond))
	}
	for range 10 {
		c.observe(call(t0, 50*time.Microsecond, 250*time.Millisecond)) // late on the way back
	}
	for range 10 {
		c.observe(call(t0, 400*time.Millisecond, 200*time.Microsecond)) // slow before the store decided
	}
	assert.Equal(t, offset+200*time.Microsecond, c.least(t0), "warm: the least answered-At")

	// An idle spell of half a minute keeps it.
	idle := t0.Add(30 * time.Second)
	assert.Equal(t, offset+200*time.Microsecond, c.least(idle))

	// A stall of a second: a prompt answer, then every answer held, the
	// latest asked least: the prompt one still counts.
	stall := idle.Add(time.Second)
	c.observe(call(stall, time.Millisecond, 300*time.Microsecond))
	for i := range 2 * usualLast {
		c.observe(call(stall.Add(time.Duration(i)*time.Millisecond), time.Millisecond, time.Second-time.Duration(i)*time.Millisecond))
	}
	assert.Equal(t, offset+300*time.Microsecond, c.least(stall.Add(time.Second)), "a stall's answers against the one before")

	// Slow for good: the last usualLast answers, all 80 ms after their
	// charge, once the prompt ones are usualSpan old; one prompt answer
	// does not pin the least for longer.
	slow := stall.Add(usualSpan)
	for i := range usualLast {
		c.observe(call(slow.Add(time.Duration(i)*100*time.Millisecond), time.Millisecond, 80*time.Millisecond))
	}
	assert.Equal(t, offset+80*time.Millisecond, c.least(slow.Add(time.Second)), "slow for good, within usualSpan")

	// The store's clock steps back a second: the answers before no longer
	// hold, and the first after it is cold evidence.
	later := slow.Add(time.Minute)
	asked, answered, at := call(later, time.Millisecond, time.Millisecond)
	c.observe(asked, answered, at.Add(-time.Second))
	assert.Equal(t, offset+time.Second-time.Millisecond, c.least(later), "a stepped clock starts the evidence again")
}

// A store that does not say its clock: the call's start stands for At,
// so the least lag is the least call's latency, and a cold one is zero.
func TestStoreClockUnsaid(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var c storeClock
	c.observe(t0, t0.Add(5*time.Millisecond), time.Time{})
	assert.Zero(t, c.least(t0))
	for i := range usualMin {
		c.observe(t0, t0.Add(time.Duration(2+i)*time.Millisecond), time.Time{})
	}
	assert.Equal(t, 2*time.Millisecond, c.least(t0))
}

// refClock is storeClock as first written: every span computed from the
// answers kept, the whole ring each time. TestStoreClockMatchesRef holds
// storeClock's incremental span and its shortcut in least to it.
type refClock struct {
	n, end int
	ans    [clockAnswers]clockAnswer
}

func (c *refClock) span() (s clockSpan) {
	for k := range c.n {
		a := c.ans[(c.end-1-k+clockAnswers)%clockAnswers]
		s.add(a.lo, a.hi)
	}
	return s
}

func (c *refClock) observe(asked, answered, at time.Time) {
	if at.IsZero() {
		at = asked
	}
	lo, hi := asked.Sub(at), answered.Sub(at)
	if all := c.span(); c.n > 0 && (lo > all.hi+clockSlack || hi < all.lo-clockSlack) {
		c.n = 0
	}
	if c.n > 0 {
		if prev := c.ans[(c.end-1+clockAnswers)%clockAnswers].answered; prev.After(answered) {
			answered = prev
		}
	}
	c.ans[c.end] = clockAnswer{answered: answered, lo: lo, hi: hi}
	c.end = (c.end + 1) % clockAnswers
	c.n = min(c.n+1, clockAnswers)
}

// least takes, as storeClock.least's rule says, the last usualLast
// answers and every one no older than usualSpan, each on its own: not in
// one walk that stops at the first old one, which is right only while
// the answers kept are in order of age.
func (c *refClock) least(now time.Time) time.Duration {
	var recent clockSpan
	for k := range c.n {
		if a := c.ans[(c.end-1-k+clockAnswers)%clockAnswers]; k < usualLast || now.Sub(a.answered) <= usualSpan {
			recent.add(a.lo, a.hi)
		}
	}
	if recent.n < usualMin {
		return recent.lo
	}
	return recent.hi
}

// storeClock keeps the span of its answers as they come and go, and
// least takes it whole when every answer kept counts: the same as
// computing both from the answers each time (refClock), over random
// answers, out of order, slow, idle, with the store's clock stepping.
func TestStoreClockMatchesRef(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 31))
		var c storeClock
		var ref refClock
		now := time.Unix(1_700_000_000, 0)
		offset := time.Duration(rng.Int64N(int64(time.Hour))) - 30*time.Minute
		for i := range 5000 {
			switch r := rng.IntN(1000); {
			case r < 3:
				offset += time.Duration(rng.Int64N(int64(time.Second))) - 500*time.Millisecond // a step
			case r < 10:
				now = now.Add(time.Duration(rng.Int64N(int64(4 * usualSpan)))) // idle
			default:
				now = now.Add(time.Duration(rng.Int64N(int64(3 * time.Millisecond))))
			}
			// A call's lags, now and then a slow one; answered a little
			// before the latest (callers observe in any order).
			pre, post := time.Duration(rng.Int64N(300))*time.Microsecond, time.Duration(rng.Int64N(500))*time.Microsecond
			if rng.IntN(10) == 0 {
				post += time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
			}
			answered := now.Add(-time.Duration(rng.Int64N(int64(time.Millisecond))))
			asked := answered.Add(-pre - post)
			at := asked.Add(pre - offset)
			if rng.IntN(50) == 0 {
				at = time.Time{} // a store that does not say its clock
			}
			c.observe(asked, answered, at)
			ref.observe(asked, answered, at)
			if all := ref.span(); c.all.lo != all.lo || c.all.hi != all.hi || c.all.n != all.n {
				t.Fatalf("seed %d, answer %d: span %+v, want %+v", seed, i, c.all, all)
			}
			// Instants around the ages at which the oldest kept answer,
			// and the one usualLast from the latest, stop counting.
			oldest := ref.ans[(ref.end-ref.n+clockAnswers)%clockAnswers].answered
			last := ref.ans[(ref.end-min(ref.n, usualLast+1)+clockAnswers)%clockAnswers].answered
			for _, at := range []time.Time{now, now.Add(time.Duration(rng.Int64N(int64(4 * usualSpan)))),
				oldest.Add(usualSpan), oldest.Add(usualSpan + 1), last.Add(usualSpan), last.Add(usualSpan + 1)} {
				if got, want := c.least(at), ref.least(at); got != want {
					t.Fatalf("seed %d, answer %d, at %v: least %v, want %v", seed, i, at.Sub(now), got, want)
				}
			}
		}
	}
}
