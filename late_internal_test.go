package throttle

import (
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
