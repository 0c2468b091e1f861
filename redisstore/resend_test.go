package redisstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReplayAutoPicks checks which remedy ReplayAuto picks for each kind
// of client, and that an explicit choice is kept.
func TestReplayAutoPicks(t *testing.T) {
	retrying := newClient(t, srv.Addr())
	noRetry := newClient(t, srv.Addr(), func(o *redis.Options) { o.MaxRetries = -1 })
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
	noRedirects := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, MaxRedirects: -1, MaxRetries: 2})
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}})
	t.Cleanup(func() { _ = cluster.Close(); _ = noRedirects.Close(); _ = ring.Close() })
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		replay redisstore.Replay
		want   string
	}{
		{"client that retries", retrying, redisstore.ReplayAuto, "detect"},
		{"client that never retries", noRetry, redisstore.ReplayAuto, "none"},
		{"cluster client that follows redirects", cluster, redisstore.ReplayAuto, "detect"},
		{"cluster client whose nodes retry, without redirects", noRedirects, redisstore.ReplayAuto, "detect"},
		{"ring", ring, redisstore.ReplayAuto, "detect"},
		{"ids asked for", retrying, redisstore.ReplayIDs, "ids"},
		{"detect asked for, cluster", cluster, redisstore.ReplayDetect, "detect"},
		{"detect asked for, client that never retries", noRetry, redisstore.ReplayDetect, "detect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := redisstore.New(tc.client, redisstore.WithReplay(tc.replay))
			require.NoError(t, err)
			assert.Equal(t, tc.want, redisstore.ReplayMode(s))
		})
	}
}

// TestResentCallsAreRefused loses the reply of a call after Redis ran it,
// so that go-redis sends the call again, for every script a demand can
// run under ReplayDetect, and for a cancel. The call sent again must fail
// with ErrResent and leave the charge (or refund) of the first sending
// alone: a limit of 5 has exactly as much room left as one charge leaves.
func TestResentCallsAreRefused(t *testing.T) {
	const rate = 5
	demand := func(scope string, a quota.Algorithm) *quota.Demand {
		return &quota.Demand{
			Scope:  scope,
			Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: 24 * time.Hour, Algorithm: a}, Key: "k"}},
			Cost:   1,
		}
	}
	for _, tc := range []struct {
		name string
		alg  quota.Algorithm
		opts []redisstore.Option
	}{
		{"take_gcra.lua", quota.GCRA, nil},
		{"take_window.lua, fixed window", quota.FixedWindow, nil},
		{"take_window.lua, sliding window", quota.SlidingWindow, nil},
		{"take.lua, sliding log", quota.SlidingLog, nil},
		{"take.lua, GCRA", quota.GCRA, []redisstore.Option{redisstore.WithGenericTake()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := faultproxy.New(t, srv.Addr())
			s := newStoreOn(t, newClient(t, p.Addr()), redistest.Prefix(t), tc.opts...)
			require.Equal(t, "detect", redisstore.ReplayMode(s))
			d := demand("resend", tc.alg)

			// Warm up: load the script, open a connection; one charge.
			dec, err := s.Take(ctx(t), d)
			require.NoError(t, err)
			require.True(t, dec.OK)

			p.DropReplyTo("evalsha")
			_, err = s.Take(ctx(t), d)
			require.Error(t, err)
			assert.ErrorIs(t, err, redisstore.ErrResent)
			assert.Equal(t, 1, p.Stats().Dropped)

			// Two charges so far: three more fit.
			assert.Equal(t, rate-2, grants(t, s, d), "room left after the call sent again")
		})
	}

	t.Run("cancel", func(t *testing.T) {
		p := faultproxy.New(t, srv.Addr())
		s := newStoreOn(t, newClient(t, p.Addr()), redistest.Prefix(t))
		d := demand("resend-cancel", quota.FixedWindow)
		// Warm up: load take_window.lua and cancel.lua; no charge left.
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		require.NoError(t, s.Cancel(ctx(t), dec.Reservation))
		_, err = s.Take(ctx(t), d)
		require.NoError(t, err)
		dec, err = s.Take(ctx(t), d)
		require.NoError(t, err)
		require.True(t, dec.OK)

		p.DropReplyTo("evalsha")
		err = s.Cancel(ctx(t), dec.Reservation)
		assert.ErrorIs(t, err, redisstore.ErrResent)
		assert.Equal(t, 1, p.Stats().Dropped)

		// Two charges, one refund given once: four more fit (five if the
		// refund had been given twice).
		assert.Equal(t, rate-1, grants(t, s, d), "room left after the cancel sent again")
	})
}

// A retime sent again moves the charge once: a sliding log's entry run
// twice would be logged at the new instant twice (the second run finds
// the old entry gone).
func TestResentRetimeIsRefused(t *testing.T) {
	const rate = 5
	p := faultproxy.New(t, srv.Addr())
	s := newStoreOn(t, newClient(t, p.Addr()), redistest.Prefix(t))
	d := &quota.Demand{
		Scope:  "resend-retime",
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: 24 * time.Hour, Algorithm: quota.SlidingLog}, Key: "k"}},
		Cost:   1,
	}
	// Warm up: load take.lua, retime.lua and cancel.lua; no charge left.
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	moved, err := s.Retime(ctx(t), dec.Reservation)
	require.NoError(t, err)
	require.True(t, moved.OK)
	require.NoError(t, s.Cancel(ctx(t), moved.Reservation))
	dec, err = s.Take(ctx(t), d)
	require.NoError(t, err)
	require.True(t, dec.OK)

	p.DropReplyTo("evalsha")
	_, err = s.Retime(ctx(t), dec.Reservation)
	assert.ErrorIs(t, err, redisstore.ErrResent)
	assert.Equal(t, 1, p.Stats().Dropped)

	// One charge, moved once: four more fit (three if moved twice).
	assert.Equal(t, rate-1, grants(t, s, d), "room left after the retime sent again")
}

// grants takes d until the store refuses and returns how many it granted.
func grants(t *testing.T, s *redisstore.Store, d *quota.Demand) int {
	t.Helper()
	for n := 0; n < 100; n++ {
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		if !dec.OK {
			return n
		}
	}
	t.Fatal("never refused")
	return 0
}

// TestResentAfterFlush checks that a call Redis refuses with NOSCRIPT (its
// script cache flushed) is decided by the EVAL that follows, as a first
// sending, under ReplayDetect.
func TestResentAfterFlush(t *testing.T) {
	c := newClient(t, srv.Addr())
	s := newStoreOn(t, c, redistest.Prefix(t))
	require.Equal(t, "detect", redisstore.ReplayMode(s))
	d := &quota.Demand{Scope: "flush", Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: 5, Per: time.Hour}, Key: "k"}}, Cost: 1}
	for range 3 {
		require.NoError(t, c.ScriptFlush(ctx(t)).Err())
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		assert.True(t, dec.OK)
	}
	assert.False(t, errors.Is(nil, redisstore.ErrResent))
}

// A shorten sent again is refused: its second run would find the entries
// gone from their marks and answer "not moved", which Shorten would return
// with the old marks, although the first run moved them (see
// Store.Shorten). The entries move once.
func TestResentShortenIsRefused(t *testing.T) {
	const rate = 5
	p := faultproxy.New(t, srv.Addr())
	s := newStoreOn(t, newClient(t, p.Addr()), redistest.Prefix(t))
	d := &quota.Demand{
		Scope:  "resend-shorten",
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: 24 * time.Hour, Algorithm: quota.SlidingLog}, Key: "k"}},
		Cost:   1,
	}
	// Warm up: load take.lua and shorten.lua; the entry ends now, so it
	// counts no more.
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	rs, err := s.Shorten(ctx(t), quota.Shortening{Reservation: dec.Reservation})
	require.NoError(t, err)
	require.Len(t, rs, 1)
	require.NotSame(t, dec.Reservation, rs[0], "moved")

	// Two entries in one call, whose reply is lost.
	var ss []quota.Shortening
	for range 2 {
		dec, err = s.Take(ctx(t), d)
		require.NoError(t, err)
		require.True(t, dec.OK)
		ss = append(ss, quota.Shortening{Reservation: dec.Reservation})
	}
	p.DropReplyTo("evalsha")
	rs, err = s.Shorten(ctx(t), ss...)
	assert.ErrorIs(t, err, redisstore.ErrResent)
	if assert.Len(t, rs, 2) {
		assert.Same(t, ss[0].Reservation, rs[0], "not known to have moved")
		assert.Same(t, ss[1].Reservation, rs[1], "not known to have moved")
	}
	assert.Equal(t, 1, p.Stats().Dropped)

	// The first sending ran: no entry counts, five fit.
	assert.Equal(t, rate, grants(t, s, d), "room left after the shorten sent again")
}
