package redisstore_test

import (
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newMultiExec returns a MultiExecStore on the package's server.
func newMultiExec(t *testing.T, prefix string) *redisstore.MultiExecStore {
	t.Helper()
	s, err := redisstore.NewMultiExec(newClient(t, srv.Addr()), redisstore.WithPrefix(prefix), redisstore.WithTimeout(20*time.Second))
	require.NoError(t, err)
	return s
}

func TestMultiExec(t *testing.T) {
	prefix := redistest.Prefix(t)
	s := newMultiExec(t, prefix)
	c := ctx(t)
	fw := func(name string, rate int) quota.Bucket {
		return quota.Bucket{Limit: quota.Limit{Name: name, Rate: rate, Per: time.Hour, Algorithm: throttle.FixedWindow}, Key: "k"}
	}
	d := &quota.Demand{Scope: "tx", Limits: []quota.Bucket{fw("a", 5), fw("b", 3)}, Cost: 1, MaxWait: time.Hour}

	for i := range 3 {
		dec, err := s.Take(c, d)
		require.NoError(t, err)
		assert.True(t, dec.OK, "request %d", i)
		assert.Zero(t, dec.Delay)
	}
	dec, err := s.Take(c, d)
	require.NoError(t, err)
	assert.False(t, dec.OK, "no reservations: MaxWait is ignored")
	assert.Equal(t, 1, dec.Limit)
	assert.Greater(t, dec.Delay, 59*time.Minute)
	assert.LessOrEqual(t, dec.Delay, time.Hour+time.Millisecond)

	// Over-count: the refused demand was still charged to "a".
	admin := newClient(t, srv.Addr())
	n, err := admin.Get(c, prefix+"v1:{tx}:x:a:k").Int()
	require.NoError(t, err)
	assert.Equal(t, 4, n)

	// Pauses.
	p := &quota.Demand{Scope: "tx", Pauses: []string{"p"}, Cost: 1}
	require.NoError(t, s.Pause(c, "tx", "p", 2*time.Hour))
	require.NoError(t, s.Pause(c, "tx", "p", time.Minute)) // never shortens
	dec, err = s.Take(c, p)
	require.NoError(t, err)
	assert.False(t, dec.OK)
	assert.Equal(t, -1, dec.Limit)
	assert.Equal(t, "p", dec.Pause)
	assert.Greater(t, dec.Delay, 119*time.Minute)

	// Every key has a TTL.
	keys, err := admin.Keys(c, prefix+"*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 3)
	for _, k := range keys {
		ttl, err := admin.PTTL(c, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, k)
	}

	// Only fixed windows; cost is still checked.
	_, err = s.Take(c, gcraDemand("tx", 1))
	assert.Error(t, err)
	_, err = s.Take(c, &quota.Demand{Scope: "tx", Limits: []quota.Bucket{fw("a", 5)}, Cost: 6})
	assert.ErrorIs(t, err, quota.ErrCostTooHigh)
	// Cancel gives back nothing.
	before, err := admin.Get(c, prefix+"v1:{tx}:x:a:k").Int()
	require.NoError(t, err)
	assert.NoError(t, s.Cancel(c, &quota.Reservation{Demand: d, Marks: make([]int64, 2)}))
	after, err := admin.Get(c, prefix+"v1:{tx}:x:a:k").Int()
	require.NoError(t, err)
	assert.Equal(t, before, after, "Cancel gave nothing back")
	assert.Error(t, s.Cancel(c, &quota.Reservation{Demand: d}), "a malformed reservation")

	// Sync raises the current window's counter, never lowers it.
	require.NoError(t, s.Sync(c, "tx", fw("b", 3), 0, time.Minute))
	n, err = admin.Get(c, prefix+"v1:{tx}:x:b:k").Int()
	require.NoError(t, err)
	assert.Equal(t, 4, n, "already past Rate - remaining: unchanged")
	require.NoError(t, s.Sync(c, "tx", fw("z", 10), 4, time.Minute))
	n, err = admin.Get(c, prefix+"v1:{tx}:x:z:k").Int()
	require.NoError(t, err)
	assert.Equal(t, 6, n)

	require.NoError(t, s.Check(c), "Check runs no script")
}

// TestMultiExecIsNotALeaseStore: what the type cannot do, it does not
// offer.
func TestMultiExecIsNotALeaseStore(t *testing.T) {
	var s any = newMultiExec(t, redistest.Prefix(t))
	_, lease := s.(quota.LeaseStore)
	_, inspector := s.(quota.Inspector)
	assert.False(t, lease, "no Concurrency limits, no reservations")
	assert.False(t, inspector)
	_, checker := s.(quota.LimitChecker)
	assert.True(t, checker)
}

// TestMultiExecRefusesWhatItCannotDo: NewTransport on a MULTI/EXEC store
// refuses, at start-up and naming the rule and field, a rule whose waiter
// may wait (nil is waiters.Block) or whose limit is not a fixed window; a
// fail-fast fixed-window rule is accepted, and the Lua store accepts all.
func TestMultiExecRefusesWhatItCannotDo(t *testing.T) {
	tx := newMultiExec(t, redistest.Prefix(t))
	lua := newStore(t, redistest.Prefix(t))
	rule := func(alg throttle.Algorithm, w throttle.Waiter) throttle.Policy {
		return throttle.Policy{Rules: []throttle.Rule{{Name: "r", Wait: w,
			Limits: []throttle.Limit{{Name: "l", Rate: 5, Per: time.Minute, Algorithm: alg}}}}}
	}
	for _, tc := range []struct {
		name  string
		p     throttle.Policy
		field string // "" when accepted
	}{
		{"fail-fast fixed window", rule(throttle.FixedWindow, waiters.FailFast()), ""},
		{"nil waiter blocks", rule(throttle.FixedWindow, nil), "Wait"},
		{"waits up to", rule(throttle.FixedWindow, waiters.UpTo(5*time.Second)), "Wait"},
		{"GCRA", rule(throttle.GCRA, waiters.FailFast()), "Limits[0].Algorithm"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := throttle.NewTransport(nil, tc.p, throttle.WithStore(tx))
			if tc.field == "" {
				assert.NoError(t, err)
			} else {
				var pe *throttle.PolicyError
				require.ErrorAs(t, err, &pe)
				assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
				assert.Equal(t, "r", pe.Rule)
				assert.Equal(t, tc.field, pe.Field)
				assert.Contains(t, err.Error(), "MULTI/EXEC")
			}
			_, err = throttle.NewTransport(nil, tc.p, throttle.WithStore(lua))
			assert.NoError(t, err, "the Lua store decides every rule")
		})
	}
}
