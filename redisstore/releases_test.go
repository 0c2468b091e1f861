package redisstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scriptCalls returns how many scripts and PUBLISH commands c's server
// has run since its stats were last reset.
func scriptCalls(t *testing.T, s map[string]cmdStat) (scripts, publishes int64) {
	t.Helper()
	return s["evalsha"].Calls + s["eval"].Calls, s["publish"].Calls
}

// TestReleaseRidesOnLaterCalls: with a linger longer than the test, a
// release costs no call of its own: the next take.lua or claim.lua call of
// its scope carries it, applies it first (the slot is free for that very
// call) and announces it. Four decisions, four scripts, two releases
// announced.
func TestReleaseRidesOnLaterCalls(t *testing.T) {
	own := redistest.Start(t)
	admin := newClient(t, own.Addr())
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, newClient(t, own.Addr()), prefix, redisstore.WithReleaseLinger(time.Hour))
	slot := quota.Bucket{Limit: quota.Limit{Name: "slot", Rate: 1, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"}
	rate := quota.Bucket{Limit: quota.Limit{Name: "rate", Rate: 1, Per: time.Hour}, Key: "k"}
	key := prefix + "v1:{ride}:c:slot:k"
	require.NoError(t, s.Check(ctx(t)), "loads the scripts, so no call below meets NOSCRIPT")
	require.NoError(t, admin.ConfigResetStat(ctx(t)).Err())

	first, err := s.Take(ctx(t), &quota.Demand{Scope: "ride", Cost: 1, Limits: []quota.Bucket{rate, slot}})
	require.NoError(t, err)
	require.True(t, first.OK)
	require.NoError(t, s.Release(ctx(t), first.Reservation))
	n, err := admin.ZCard(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "queued: the lease is still in Redis")

	// The rate limit makes this one a reservation (an hour away) that
	// takes no slot; it needs a free slot now, which only the carried
	// release gives.
	waiting, err := s.Take(ctx(t), &quota.Demand{Scope: "ride", Cost: 1, MaxWait: 2 * time.Hour, Limits: []quota.Bucket{rate, slot}})
	require.NoError(t, err)
	require.True(t, waiting.OK, "the carried release freed the slot")
	require.True(t, waiting.Reservation.Unclaimed)

	other, err := s.Take(ctx(t), &quota.Demand{Scope: "ride", Cost: 1, Limits: []quota.Bucket{slot}})
	require.NoError(t, err)
	require.True(t, other.OK)
	require.NoError(t, s.Release(ctx(t), other.Reservation))
	claimed, err := s.Claim(ctx(t), waiting.Reservation)
	require.NoError(t, err)
	assert.True(t, claimed.OK, "the claim carried the release of the slot it takes")

	stats, err := commandStats(ctx(t), admin)
	require.NoError(t, err)
	scripts, publishes := scriptCalls(t, stats)
	assert.Equal(t, int64(4), scripts, "three takes and a claim; no release call")
	assert.Equal(t, int64(2), publishes, "each carried release announced once")
	members, err := admin.ZRange(ctx(t), key, 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{claimed.Reservation.ID}, members, "only the claimed lease is held")
}

// TestReleaseSentAlone: a release that no later call carries is sent on
// its own after the linger, and wakes a watcher of its bucket in another
// store.
func TestReleaseSentAlone(t *testing.T) {
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, newClient(t, srv.Addr()), prefix)
	watcher := newStoreOn(t, newClient(t, srv.Addr()), prefix)
	slot := quota.Bucket{Limit: quota.Limit{Name: "slot", Rate: 1, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"}
	dec, err := s.Take(ctx(t), &quota.Demand{Scope: "alone", Cost: 1, Limits: []quota.Bucket{slot}})
	require.NoError(t, err)
	require.True(t, dec.OK)

	wake, stop, err := watcher.WatchRelease(ctx(t), "alone", slot)
	require.NoError(t, err)
	defer stop()
	require.NoError(t, s.Release(ctx(t), dec.Reservation))
	select {
	case <-wake:
	case <-ctx(t).Done():
		t.Fatal("no release announced")
	}
	n, err := newClient(t, srv.Addr()).Exists(ctx(t), prefix+"v1:{alone}:c:slot:k").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the lease is gone, and with it the key")
}

// TestReleaseThenTake: a Take sent after Release returned sees the slot
// free, whether it carries the release, or the release is already on its
// way alone (no linger: the send starts at once and the Take waits it
// out). Goroutines on separate scopes run the loop at once, so sends and
// takes interleave in every order.
func TestReleaseThenTake(t *testing.T) {
	for _, linger := range []time.Duration{0, time.Millisecond, time.Hour} {
		t.Run(fmt.Sprint("linger=", linger), func(t *testing.T) {
			prefix := redistest.Prefix(t)
			s := newStoreOn(t, newClient(t, srv.Addr()), prefix, redisstore.WithReleaseLinger(linger))
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					slot := quota.Bucket{Limit: quota.Limit{Name: "slot", Rate: 1, Per: time.Minute, Algorithm: quota.Concurrency}}
					d := &quota.Demand{Scope: fmt.Sprint("loop", g), Cost: 1, Limits: []quota.Bucket{slot}}
					for i := range 100 {
						dec, err := s.Take(ctx(t), d)
						if !assert.NoError(t, err) || !assert.True(t, dec.OK, "take %d of scope %d: the slot released before is free", i, g) {
							return
						}
						if !assert.NoError(t, s.Release(ctx(t), dec.Reservation)) {
							return
						}
					}
				})
			}
			wg.Wait()
			require.NoError(t, s.Flush(ctx(t)))
			keys, err := newClient(t, srv.Addr()).Keys(ctx(t), prefix+"*").Result()
			require.NoError(t, err)
			assert.Empty(t, keys, "every lease released")
		})
	}
}

// TestReleaseRetried: a release whose send fails (scripts are refused
// for a moment) is queued again and applied once Redis takes scripts
// again.
func TestReleaseRetried(t *testing.T) {
	own := redistest.Start(t)
	admin := newClient(t, own.Addr())
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, newClient(t, own.Addr()), prefix)
	slot := quota.Bucket{Limit: quota.Limit{Name: "slot", Rate: 1, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"}
	dec, err := s.Take(ctx(t), &quota.Demand{Scope: "retry", Cost: 1, Limits: []quota.Bucket{slot}})
	require.NoError(t, err)
	require.True(t, dec.OK)

	require.NoError(t, admin.Do(ctx(t), "ACL", "SETUSER", "default", "-evalsha", "-eval").Err())
	require.NoError(t, s.Release(ctx(t), dec.Reservation))
	err = s.Flush(ctx(t))
	assert.ErrorIs(t, err, quota.ErrStoreConfig, "scripts refused: %v", err)
	require.NoError(t, admin.Do(ctx(t), "ACL", "SETUSER", "default", "+evalsha", "+eval").Err())

	assert.Eventually(t, func() bool {
		n, err := admin.Exists(context.Background(), prefix+"v1:{retry}:c:slot:k").Result()
		return err == nil && n == 0
	}, time.Minute, 10*time.Millisecond, "the release was sent again")
}
