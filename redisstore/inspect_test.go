package redisstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

func TestInspectResetAndClearPause(t *testing.T) {
	s := newStore(t, redistest.Prefix(t))
	c := ctx(t)
	limits := []quota.Limit{
		{Name: "gcra", Rate: 10, Per: time.Hour},
		{Name: "fixed", Rate: 10, Per: time.Hour, Algorithm: quota.FixedWindow},
		{Name: "window", Rate: 10, Per: time.Hour, Algorithm: quota.SlidingWindow},
		{Name: "log", Rate: 10, Per: time.Hour, Algorithm: quota.SlidingLog},
	}
	take := func(key string, cost int) {
		d := &quota.Demand{Scope: "api", Cost: cost}
		for _, l := range limits {
			d.Limits = append(d.Limits, quota.Bucket{Limit: l, Key: key})
		}
		dec, err := s.Take(c, d)
		require.NoError(t, err)
		require.True(t, dec.OK)
	}
	take("team-a", 3)
	take("team-a", 1)
	take("team-b", 2)
	require.NoError(t, s.Pause(c, "api", "", time.Minute))
	other := &quota.Demand{Scope: "other", Cost: 1, Limits: []quota.Bucket{{Limit: limits[0], Key: "team-a"}}}
	_, err := s.Take(c, other)
	require.NoError(t, err)

	states, err := s.Inspect(c, "api", limits)
	require.NoError(t, err)
	require.Len(t, states, 9, "a pause and 2 keys x 4 limits; the other scope is not listed")
	assert.True(t, states[0].Pause())
	assert.InDelta(t, time.Minute, states[0].Reset, float64(5*time.Second))
	used := map[string]int64{}
	for _, st := range states[1:] {
		used[st.Limit+"/"+st.Key] = st.Used
		assert.Equal(t, int64(10), st.Used+st.Remaining, "%s/%s", st.Limit, st.Key)
		assert.Positive(t, st.Reset, "%s/%s", st.Limit, st.Key)
		assert.LessOrEqual(t, st.Reset, 2*time.Hour, "%s/%s", st.Limit, st.Key)
	}
	for _, l := range []string{"gcra", "fixed", "window", "log"} {
		assert.Equal(t, int64(4), used[l+"/team-a"], l)
		assert.Equal(t, int64(2), used[l+"/team-b"], l)
	}

	// Reset one counter, clear the pause: the rest is untouched.
	require.NoError(t, s.ResetLimit(c, "api", limits[0], "team-a"))
	require.NoError(t, s.ClearPause(c, "api", ""))
	states, err = s.Inspect(c, "api", limits)
	require.NoError(t, err)
	require.Len(t, states, 7)
	for _, st := range states {
		assert.False(t, st.Pause())
		assert.False(t, st.Limit == "gcra" && st.Key == "team-a", "reset")
	}
	dec, err := s.Take(c, &quota.Demand{Scope: "api", Cost: 10, Limits: []quota.Bucket{{Limit: limits[0], Key: "team-a"}}})
	require.NoError(t, err)
	assert.True(t, dec.OK, "the whole burst is back after a reset")
}

func TestInspectConcurrency(t *testing.T) {
	inspectConcurrency(t, newStore(t, redistest.Prefix(t)))
}

// inspectConcurrency takes 3 of 5 slots and inspects them; TestCluster
// runs it on a Cluster too.
func inspectConcurrency(t *testing.T, s *redisstore.Store) {
	c := ctx(t)
	slots := quota.Limit{Name: "in-flight", Rate: 5, Per: time.Minute, Algorithm: quota.Concurrency}
	for range 3 {
		dec, err := s.Take(c, &quota.Demand{Scope: "gh", Cost: 1, Limits: []quota.Bucket{{Limit: slots, Key: "tok"}}})
		require.NoError(t, err)
		require.True(t, dec.OK)
	}
	states, err := s.Inspect(c, "gh", []quota.Limit{slots})
	require.NoError(t, err)
	require.Len(t, states, 1)
	assert.Equal(t, int64(3), states[0].Used)
	assert.Equal(t, int64(2), states[0].Remaining)
	assert.InDelta(t, time.Minute, states[0].Reset, float64(5*time.Second))
	require.NoError(t, s.ResetLimit(c, "gh", slots, "tok"))
	states, err = s.Inspect(c, "gh", []quota.Limit{slots})
	require.NoError(t, err)
	assert.Empty(t, states)
}
