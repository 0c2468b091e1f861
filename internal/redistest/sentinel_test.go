package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/internal/redistest"
)

func newFailoverClient(t *testing.T, s *redistest.Sentinel) *redis.Client {
	t.Helper()
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName(), SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestSentinel: the Sentinels agree on the master at start; a write through
// a failover client reaches the replica; the master is killed, the
// Sentinels promote the replica, and the same client writes to it.
func TestSentinel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.StartSentinel(t)
	require.Len(t, s.Servers(), 2)
	require.Len(t, s.Sentinels(), 3)
	assert.Len(t, s.SentinelAddrs(), 3)
	master, replica := s.Servers()[0], s.Servers()[1]
	got, err := s.Master()
	require.NoError(t, err)
	assert.Same(t, master, got)
	info, err := s.Sentinels()[0].Do("INFO", "server")
	require.NoError(t, err)
	assert.Contains(t, info, "redis_mode:sentinel")

	c := newFailoverClient(t, s)
	require.NoError(t, c.Set(ctx, "k", "before", 0).Err())
	acked, err := master.Do("WAIT", "1", "5000")
	require.NoError(t, err)
	assert.Equal(t, int64(1), acked, "the replica acknowledged the write")

	old, err := s.KillMaster()
	require.NoError(t, err)
	assert.Same(t, master, old)
	assert.False(t, old.Running())
	killed := time.Now()
	promoted, err := s.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	t.Logf("the Sentinels promoted the replica %v after the kill", time.Since(killed).Round(time.Millisecond))
	assert.Same(t, replica, promoted)
	require.NoError(t, s.WaitReady(10*time.Second), "ready without the killed master")

	// The client's pooled connections went to the dead master; go-redis
	// dials the new one through the Sentinels.
	require.Eventually(t, func() bool { return c.Set(ctx, "k", "after", 0).Err() == nil }, 10*time.Second, 10*time.Millisecond)
	v, err := replica.Do("GET", "k")
	require.NoError(t, err)
	assert.Equal(t, "after", v)
}

// TestSentinelFailover: SENTINEL FAILOVER promotes the replica while the old
// master still runs.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	master, replica := s.Servers()[0], s.Servers()[1]
	old, err := s.Failover()
	require.NoError(t, err)
	assert.Same(t, master, old)
	promoted, err := s.WaitFailover(old, 30*time.Second)
	require.NoError(t, err)
	assert.Same(t, replica, promoted)
	assert.True(t, old.Running())
	role, err := replica.Do("ROLE")
	require.NoError(t, err)
	assert.Equal(t, "master", role.([]any)[0])
}

// TestSentinelCleanup: t.Cleanup stops and reaps all five processes.
func TestSentinelCleanup(t *testing.T) {
	t.Parallel()
	var pids []string
	t.Run("inner", func(t *testing.T) {
		s := redistest.StartSentinel(t)
		for _, srv := range append(s.Servers(), s.Sentinels()...) {
			pids = append(pids, pidOf(t, srv))
		}
	})
	require.Len(t, pids, 5)
	for _, pid := range pids {
		assert.False(t, alive(pid), "pid %s", pid)
	}
}
