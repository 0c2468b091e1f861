package redisstore

import (
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
)

// TestBusyHints checks the guesses take_gcra.lua's order is taken from: a
// key is charged first only while the decisions noted on it say its
// bucket is busy and the demand would be granted within its MaxWait.
func TestBusyHints(t *testing.T) {
	h := newBusyHints()
	k := h.hash("k")
	now := time.Unix(1_800_000_000, 0)
	redis := now.Add(-3 * time.Second) // Redis's clock: any offset from the local one
	grant := func(ahead time.Duration) quota.Decision {
		tat := redis.Add(ahead)
		return quota.Decision{OK: true, At: redis, Reservation: &quota.Reservation{Marks: []int64{tat.UnixNano()}}}
	}
	const allowance = 400 * time.Millisecond

	assert.False(t, h.chargeFirst(k, now, allowance, time.Second), "a key never noted")

	h.note(k, now, grant(time.Second), allowance) // busy until now + 1 s
	assert.True(t, h.chargeFirst(k, now, allowance, time.Second), "busy, granted after 600 ms")
	assert.True(t, h.chargeFirst(k, now.Add(600*time.Millisecond), allowance, 0), "busy, granted at once")
	assert.False(t, h.chargeFirst(k, now, allowance, 599*time.Millisecond), "busy, refused: 600 ms over a MaxWait of 599")
	assert.False(t, h.chargeFirst(k, now.Add(time.Second), allowance, time.Second), "idle again")
	assert.False(t, h.chargeFirst(h.hash("other"), now, allowance, time.Second), "another key")

	h.note(k, now, grant(-time.Millisecond), allowance) // a TAT behind Redis's clock: idle
	assert.False(t, h.chargeFirst(k, now, allowance, time.Second), "idle")

	h.note(k, now, quota.Decision{Limit: 0, Delay: 2 * time.Second}, allowance) // refused: TAT = now + 2.4 s
	assert.True(t, h.chargeFirst(k, now.Add(2*time.Second), allowance, 0), "busy after a refusal, granted at once then")
	assert.False(t, h.chargeFirst(k, now.Add(time.Second), allowance, 999*time.Millisecond), "busy after a refusal, refused again")

	h.note(k, now, quota.Decision{Limit: -1, Delay: time.Hour}, allowance) // a pause: says nothing of the bucket
	assert.True(t, h.chargeFirst(k, now.Add(2*time.Second), allowance, 0), "a pause's refusal changes no hint")
}
