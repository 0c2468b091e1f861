package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testInspect checks [quota.Inspector] when the store is one: the
// states of every algorithm and of pauses, read without charging, limits
// and scopes kept apart, and ResetLimit and ClearPause.
func (s *suite) testInspect(t *testing.T) {
	t.Parallel()
	st, clock := s.newStore(t)
	in, ok := st.(quota.Inspector)
	if !ok {
		t.Skipf("%T is not a quota.Inspector", st)
	}
	ctx := context.Background()
	scope, other := s.scope(t, ""), s.scope(t, "other")
	const hour = time.Hour
	limits := []quota.Limit{
		{Name: "gcra", Rate: 10, Per: hour}, // T = 6m
		{Name: "fixed", Rate: 10, Per: hour, Algorithm: quota.FixedWindow},
		{Name: "window", Rate: 10, Per: hour, Algorithm: quota.SlidingWindow},
		{Name: "log", Rate: 10, Per: hour, Algorithm: quota.SlidingLog},
		{Name: "slots", Rate: 5, Per: 10 * time.Minute, Algorithm: quota.Concurrency},
		{Name: "thirteen", Rate: 13, Per: hour}, // T = 276923076 12/13 µs: arrival times with fractions
	}
	take := func(scope, key string, cost int) {
		t.Helper()
		d := &quota.Demand{Scope: scope, Cost: cost}
		for _, l := range limits {
			d.Limits = append(d.Limits, quota.Bucket{Limit: l, Key: key})
		}
		dec, err := st.Take(ctx, d)
		require.NoError(t, err)
		require.True(t, dec.OK, "take %s %s %d", scope, key, cost)
	}
	inspect := func() []quota.LimitState {
		t.Helper()
		states, err := in.Inspect(ctx, scope, limits)
		require.NoError(t, err)
		return states
	}
	state := func(l int, key string, used, remaining int64, reset time.Duration) quota.LimitState {
		return quota.LimitState{Limit: limits[l].Name, Algorithm: limits[l].Algorithm, Key: key, Used: used, Remaining: remaining, Reset: reset}
	}

	empty, err := in.Inspect(ctx, scope, limits)
	require.NoError(t, err)
	assert.Empty(t, empty, "a fresh scope")

	take(scope, "a", 3)
	take(scope, "a", 1)
	take(scope, "b", 2)
	take(other, "a", 9)
	require.NoError(t, st.Pause(ctx, scope, "", 10*time.Minute))
	require.NoError(t, st.Pause(ctx, scope, "k", time.Minute))
	clock.Advance(6 * time.Minute)

	want := []quota.LimitState{
		{Reset: 4 * time.Minute}, // the scope-wide pause; "k" has ended
		state(1, "a", 4, 6, 54*time.Minute),
		state(1, "b", 2, 8, 54*time.Minute),
		state(0, "a", 3, 7, 18*time.Minute), // TAT = 24m, now 6m
		state(0, "b", 1, 9, 6*time.Minute),
		state(3, "a", 4, 6, 54*time.Minute),
		state(3, "b", 2, 8, 54*time.Minute),
		state(4, "a", 2, 3, 4*time.Minute), // two leases until 10m
		state(4, "b", 1, 4, 4*time.Minute),
		// TAT = 4T, now = 1.3T: 2.7 units used, 3 rounded up; the reset
		// at TAT rounded up to the µs.
		state(5, "a", 3, 10, 747692308*time.Microsecond),
		state(5, "b", 1, 12, 193846154*time.Microsecond), // TAT = 2T
		state(2, "a", 4, 6, hour+54*time.Minute),         // counted as the previous window until 2h
		state(2, "b", 2, 8, hour+54*time.Minute),
	}
	assert.Equal(t, want, inspect())
	assert.Equal(t, want, inspect(), "inspecting charged nothing")
	assert.True(t, want[0].Pause())
	assert.False(t, want[1].Pause())

	only, err := in.Inspect(ctx, scope, limits[:1])
	require.NoError(t, err)
	assert.Equal(t, want[:1], only[:1], "the pause")
	assert.Equal(t, want[3:5], only[1:], "only the limits asked for")
	renamed := []quota.Limit{{Name: "gcra", Rate: 10, Per: hour, Algorithm: quota.FixedWindow}}
	other1, err := in.Inspect(ctx, scope, renamed)
	require.NoError(t, err)
	assert.Equal(t, want[:1], other1, "a limit of another algorithm does not read the counter")

	// What Inspect reported is what Take sees: 6 fit in the fixed window
	// of "a", the 7th does not.
	d := &quota.Demand{Scope: scope, Cost: 6, Limits: []quota.Bucket{{Limit: limits[1], Key: "a"}}}
	dec, err := st.Take(ctx, d)
	require.NoError(t, err)
	assert.True(t, dec.OK)
	d.Cost = 1
	dec, err = st.Take(ctx, d)
	require.NoError(t, err)
	assert.False(t, dec.OK)

	require.NoError(t, in.ResetLimit(ctx, scope, limits[1], "a"))
	dec, err = st.Take(ctx, &quota.Demand{Scope: scope, Cost: 10, Limits: []quota.Bucket{{Limit: limits[1], Key: "a"}}})
	require.NoError(t, err)
	assert.True(t, dec.OK, "the reset counter is full again")
	require.NoError(t, in.ResetLimit(ctx, scope, limits[4], "a"))
	require.NoError(t, in.ClearPause(ctx, scope, ""))
	require.NoError(t, in.ClearPause(ctx, scope, "never-paused"))

	// An hour later only the sliding window remembers the previous hour:
	// ceil(4 * 54/60) = 4 and ceil(2 * 54/60) = 2.
	clock.Advance(hour)
	assert.Equal(t, []quota.LimitState{
		state(2, "a", 4, 6, 54*time.Minute),
		state(2, "b", 2, 8, 54*time.Minute),
	}, inspect())

	otherStates, err := in.Inspect(ctx, other, limits[:1])
	require.NoError(t, err)
	assert.Empty(t, otherStates, "the other scope's GCRA (TAT 54m) is full again at 1h6m")
}
