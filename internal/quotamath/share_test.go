package quotamath

import (
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
)

// TestRestrictedWait: half the least emission interval of a demand's
// limits other than Concurrency, each rounded up; 0 without one.
func TestRestrictedWait(t *testing.T) {
	l := func(rate int, per time.Duration, alg quota.Algorithm) quota.Bucket {
		return quota.Bucket{Limit: quota.Limit{Name: "l", Rate: rate, Per: per, Algorithm: alg}}
	}
	tests := []struct {
		name  string
		limit []quota.Bucket
		want  int64
	}{
		{"none", nil, 0},
		{"100 a second: T = 10ms", []quota.Bucket{l(100, time.Second, quota.SlidingWindow)}, 5000},
		{"3 a second: T = 333334µs rounded up", []quota.Bucket{l(3, time.Second, quota.GCRA)}, 166667},
		{"the least", []quota.Bucket{l(10, time.Second, quota.GCRA), l(100, time.Second, quota.FixedWindow)}, 5000},
		{"concurrency only", []quota.Bucket{l(2, time.Minute, quota.Concurrency)}, 0},
		{"concurrency apart", []quota.Bucket{l(2, time.Minute, quota.Concurrency), l(10, time.Second, quota.SlidingLog)}, 50000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, RestrictedWait(&quota.Demand{Limits: tt.limit}))
		})
	}
}

// TestClaims: a claim lives max(T, ClaimGrace) past its instant; a demand
// held back by claims comes back T after the latest, or after now; a
// class note is active for T.
func TestClaims(t *testing.T) {
	fast := Of(quota.Limit{Rate: 100, Per: time.Second}) // T = 10ms
	slow := Of(quota.Limit{Rate: 1, Per: time.Second})   // T = 1s
	assert.Equal(t, int64(1000+ClaimGrace), fast.ClaimEnd(1000))
	assert.Equal(t, int64(1000+1_000_000), slow.ClaimEnd(1000))
	assert.Equal(t, int64(30_000), fast.HeldUntil(20_000, 5_000), "T after the claim's instant")
	assert.Equal(t, int64(35_000), fast.HeldUntil(20_000, 25_000), "its holder is late: T after now")
	assert.True(t, fast.NoteActive(1, 10_000))
	assert.False(t, fast.NoteActive(0, 10_000), "T old")
	assert.Equal(t, int64(10_000), fast.NoteEnd(0))
	assert.Equal(t, int64(7), SharePlace(3, 7))
	assert.Equal(t, int64(9), SharePlace(9, 7))
}
