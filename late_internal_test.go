package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The usual latency is what most answers take: a tenth of them delayed,
// or a stall's few answers, do not move it; a store slow for good moves
// it within two periods; an idle spell keeps it.
func TestUsualLatency(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var u usualLatency
	_, ok := u.at(t0)
	assert.False(t, ok, "no answer yet")
	u.observe(2*time.Millisecond, t0)
	u.observe(300*time.Millisecond, t0)
	_, ok = u.at(t0)
	assert.False(t, ok, "too few answers")

	for i := range 90 {
		u.observe(time.Millisecond+time.Duration(i)*time.Microsecond, t0)
	}
	for range 10 {
		u.observe(250*time.Millisecond, t0)
	}
	got, ok := u.at(t0)
	assert.True(t, ok)
	assert.GreaterOrEqual(t, got, time.Millisecond)
	assert.LessOrEqual(t, got, 2*time.Millisecond, "a tenth delayed does not move it")

	// An idle spell of three periods keeps what the last answers took.
	idle := t0.Add(3 * usualPeriod)
	again, _ := u.at(idle)
	assert.Equal(t, got, again)

	// Slow for good: after two periods of 80 ms answers, 80 ms.
	for p := range 2 {
		at := idle.Add(time.Duration(p+1) * usualPeriod)
		for range 50 {
			u.observe(80*time.Millisecond, at)
		}
	}
	got, _ = u.at(idle.Add(2 * usualPeriod))
	assert.GreaterOrEqual(t, got, 80*time.Millisecond)
	assert.LessOrEqual(t, got, 100*time.Millisecond, "within a quarter octave")
}

// bucketOf and upperOf agree: every latency is at most its bucket's
// upper bound, and more than the bucket below's.
func TestLatencyBuckets(t *testing.T) {
	for _, d := range []time.Duration{0, time.Microsecond, 3 * time.Microsecond, 999 * time.Microsecond,
		time.Millisecond, 37 * time.Millisecond, 150 * time.Millisecond, time.Second, time.Hour, 1000 * time.Hour} {
		b := bucketOf(d)
		if b == latencyBuckets-1 {
			continue
		}
		assert.LessOrEqual(t, d, upperOf(b), "%v in bucket %d", d, b)
		if b > 0 {
			assert.Greater(t, d, upperOf(b-1)-time.Microsecond, "%v in bucket %d", d, b)
		}
	}
}
