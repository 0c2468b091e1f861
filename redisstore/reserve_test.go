package redisstore_test

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReservationsBlock: 8 instances ask for 5x a GCRA quota at once and
// block for their reservations (MaxWait large, then wait Delay). Every
// request goes through, the grants are spaced by at least the emission
// interval (the rate holds), and Redis runs about one script per request.
func TestReservationsBlock(t *testing.T) {
	const (
		rate, requests = 20, 100 // 5 x the burst
		per            = 200 * time.Millisecond
		interval       = per / rate
	)
	own := redistest.Start(t) // its own server, so commandstats are ours
	admin := newClient(t, own.Addr())
	require.NoError(t, admin.ConfigResetStat(ctx(t)).Err())

	prefix := redistest.Prefix(t)
	d := &quota.Demand{Scope: "reserve", Cost: 1, MaxWait: time.Minute,
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: per}}}}
	var (
		tickets atomic.Int64
		mu      sync.Mutex
		marks   []int64
		wg      sync.WaitGroup
	)
	for range 8 {
		s := newStoreOn(t, newClient(t, own.Addr()), prefix)
		for range 4 {
			wg.Go(func() {
				for tickets.Add(1) <= requests {
					dec, err := s.Take(ctx(t), d)
					if !assert.NoError(t, err) || !assert.True(t, dec.OK, "refused after %v", dec.Delay) {
						return
					}
					time.Sleep(dec.Delay) // blocking: act when the slot comes
					mu.Lock()
					marks = append(marks, dec.Reservation.Marks[0])
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()

	require.Len(t, marks, requests)
	slices.Sort(marks)
	for i := 1; i < len(marks); i++ {
		assert.GreaterOrEqual(t, marks[i]-marks[i-1], interval.Nanoseconds(), "grants %d and %d (marks in ns)", i-1, i)
	}
	st, err := commandStats(ctx(t), admin)
	require.NoError(t, err)
	// On the fresh server, every caller that raced to the first call may
	// have met NOSCRIPT (a failed EVALSHA) and then run EVAL; any other
	// failure would have failed its Take.
	ran := st["evalsha"].Calls - st["evalsha"].Failed + st["eval"].Calls
	noScript := st["evalsha"].Failed + st["evalsha"].Rejected
	t.Logf("scripts run: %d for %d requests, NOSCRIPT: %d (%+v)", ran, requests, noScript, st["evalsha"])
	// Batching (4 callers per store, more than BatchInFlight) decides
	// several demands in one script at times: never more than one each.
	assert.LessOrEqual(t, ran, int64(requests), "at most one script per request")
	assert.LessOrEqual(t, noScript, int64(8*4), "NOSCRIPT at most once per caller, when the script was not yet loaded")
	assert.Equal(t, noScript, st["eval"].Calls, "one EVAL after each NOSCRIPT")
}

// TestScriptCacheLoss flushes the script cache and restarts Redis while
// decisions run: the NOSCRIPT that follows is never seen by a caller.
func TestScriptCacheLoss(t *testing.T) {
	own := redistest.Start(t)
	admin := newClient(t, own.Addr())
	s := newStoreOn(t, newClient(t, own.Addr()), redistest.Prefix(t))
	d := gcraDemand("flush", 1_000_000)

	run := func(n int) (errs []error) {
		var (
			mu sync.Mutex
			wg sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for range n {
					if _, err := s.Take(ctx(t), d); err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
		return errs
	}
	noNoScript := func(errs []error) {
		t.Helper()
		for _, err := range errs {
			assert.False(t, errors.Is(err, redis.ErrNoScript), "%v", err)
			assert.NotContains(t, err.Error(), "NOSCRIPT")
		}
	}

	require.Empty(t, run(10))
	for range 5 {
		require.NoError(t, admin.ScriptFlush(ctx(t)).Err())
		assert.Empty(t, run(10), "after SCRIPT FLUSH")
	}
	st, err := commandStats(ctx(t), admin)
	require.NoError(t, err)
	require.Positive(t, st["eval"].Calls, "the flushes made EVALSHA fall back to EVAL")

	// A restart loses the cache (and the data: no persistence). Calls in
	// flight may fail with connection errors, never with NOSCRIPT.
	var wg sync.WaitGroup
	var during []error
	wg.Go(func() { during = run(50) })
	require.NoError(t, own.Restart())
	wg.Wait()
	noNoScript(during)
	assert.Empty(t, run(10), "after the restart")
}
