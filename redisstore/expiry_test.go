package redisstore_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGCRAKeyExpiry checks the expiry rule of GCRA keys on Redis's clock,
// after every script that writes one (both takes, with and without a
// pause key, one to three limits, a bucket busy across seconds; cancel;
// sync): a key whose arrival time
// lies in second n expires exactly at the end of second n+1. That is what
// lets the takes skip rewriting the expiry (INCRBY keeps it) while the
// value stays within its second, and it keeps every key alive past its
// arrival time.
func TestGCRAKeyExpiry(t *testing.T) {
	noRetries := func(o *redis.Options) { o.MaxRetries = -1 }
	for _, tc := range []struct {
		name   string
		client []func(*redis.Options)
		opts   []redisstore.Option
	}{
		{"take_gcra", []func(*redis.Options){noRetries}, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries)}},
		{"take_gcra detect", nil, nil},
		{"take_gcra replay ids", nil, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs)}},
		{"take", []func(*redis.Options){noRetries}, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayNoRetries), redisstore.WithGenericTake()}},
		{"take replay ids", nil, []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs), redisstore.WithGenericTake()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A server of its own: every check SCANs the keyspace, which
			// on the shared server holds the other tests' keys.
			t.Parallel()
			own := redistest.Start(t)
			c := newClient(t, own.Addr())
			prefix := redistest.Prefix(t)
			s := newStoreOn(t, newClient(t, own.Addr(), tc.client...), prefix, tc.opts...)
			fast := quota.Limit{Name: "fast", Rate: 2000, Per: time.Second, Burst: 50}     // stays within a second
			slow := quota.Limit{Name: "slow", Rate: 3, Per: 2 * time.Second, Burst: 2}     // moves 0.67 s a take, with a fraction
			third := quota.Limit{Name: "third", Rate: 10, Per: time.Second, Burst: 100}    // 3 limits: the general path
			quarter := quota.Limit{Name: "quarter", Rate: 4, Per: time.Second, Burst: 100} // busy, its TAT into a new second every 4 takes
			keys := map[string]bool{}
			check := func(where string) {
				t.Helper()
				var cursor uint64
				for {
					ks, next, err := c.Scan(ctx(t), cursor, prefix+"*", 100).Result()
					require.NoError(t, err)
					for _, k := range ks {
						keys[k] = true
					}
					if cursor = next; cursor == 0 {
						break
					}
				}
				for k := range keys {
					if !isGCRAKey(k) {
						continue
					}
					raw, err := c.Get(ctx(t), k).Result()
					if err == redis.Nil {
						continue // expired or refunded away
					}
					require.NoError(t, err, k)
					v, _, err := redisstore.ParseArrival(raw) // the second of its whole µs
					require.NoError(t, err, k)
					exp, err := c.PExpireTime(ctx(t), k).Result()
					require.NoError(t, err, k)
					want := (v/1_000_000 + 2) * 1000
					assert.Equal(t, want, exp.Milliseconds(), "%s: key %s with arrival time %d µs", where, k, v)
				}
			}
			demands := []*quota.Demand{
				{Scope: "s", Cost: 1, Limits: []quota.Bucket{{Limit: fast, Key: "a"}}},
				{Scope: "s", Cost: 1, Pauses: []string{""}, Limits: []quota.Bucket{{Limit: fast, Key: "b"}}},
				{Scope: "s", Cost: 1, Pauses: []string{""}, Limits: []quota.Bucket{{Limit: fast, Key: "c"}, {Limit: slow, Key: "c"}}, MaxWait: time.Minute},
				{Scope: "s", Cost: 1, Limits: []quota.Bucket{{Limit: fast, Key: "d"}, {Limit: slow, Key: "d"}, {Limit: third, Key: "d"}}, MaxWait: time.Minute},
				{Scope: "s", Cost: 1, Limits: []quota.Bucket{{Limit: quarter, Key: "f"}}, MaxWait: time.Minute}, // charged first (orders)
				{Scope: "s", Cost: 1, Limits: []quota.Bucket{{Limit: quarter, Key: "g"}}},                       // read first (orders)
				{Scope: "s", Cost: 1, Limits: []quota.Bucket{{Limit: fast, Key: "h"}}, MaxWait: time.Minute},    // charged first, mostly idle (orders)
			}
			// take_gcra.lua's order per demand: as hinted, or forced.
			orders := []int{0, 0, 0, 0, 1, -1, 1}
			var reserved []*quota.Reservation
			for round := range 40 {
				for i, d := range demands {
					redisstore.SetChargeOrder(s, orders[i])
					dec, err := s.Take(ctx(t), d)
					require.NoError(t, err)
					if dec.OK && len(d.Limits) == 1 {
						// The value written is the TAT the grant names.
						b := d.Limits[0]
						raw, err := c.Get(ctx(t), prefix+gcraKey(b)).Result()
						require.NoError(t, err)
						v, frac, err := redisstore.ParseArrival(raw)
						require.NoError(t, err)
						require.Zero(t, frac, "whole µs")
						assert.Equal(t, dec.Reservation.Marks[0], v*1000, "round %d, demand %d: the key's arrival time (the mark in ns)", round, i)
					}
					if dec.OK && dec.Delay > 0 && round%3 == 0 {
						reserved = append(reserved, dec.Reservation)
					}
					check(fmt.Sprintf("round %d, demand %d", round, i))
				}
			}
			require.NotEmpty(t, reserved, "no reservation to cancel")
			for i := len(reserved) - 1; i >= 0; i-- {
				require.NoError(t, s.Cancel(ctx(t), reserved[i]))
				check(fmt.Sprintf("cancel %d", i))
			}
			require.NoError(t, s.Sync(ctx(t), "s", quota.Bucket{Limit: fast, Key: "e"}, 0, 1500*time.Millisecond))
			require.NoError(t, s.Sync(ctx(t), "s", quota.Bucket{Limit: fast, Key: "a"}, 0, 3*time.Second))
			check("sync")
			n := 0
			for k := range keys {
				if isGCRAKey(k) {
					n++
				}
			}
			assert.Equal(t, 11, n, "GCRA keys seen: %v", keys)
		})
	}
}

// isGCRAKey reports whether k is a GCRA limit's key (layout in keys.go):
// g: when Rate divides Per, else G:.
func isGCRAKey(k string) bool { return strings.Contains(k, "}:g:") || strings.Contains(k, "}:G:") }

// TestSlidingLogKeyExpiry checks, on Redis's clock, that a sliding log
// lives until Per after its newest entry when demands are placed before
// reservations (slidinglog.lua): writes reserve content and points
// seconds ahead, then reads fill the points free before them. A key that
// expired early would forget the reservations and over-admit.
func TestSlidingLogKeyExpiry(t *testing.T) {
	c := newClient(t, srv.Addr())
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, c, prefix)
	per := 2500 * time.Millisecond
	points := quota.Limit{Name: "points", Rate: 300, Per: per, Algorithm: quota.SlidingLog}
	content := quota.Limit{Name: "content", Rate: 27, Per: per, Algorithm: quota.SlidingLog}
	take := func(cost int, ls ...quota.Bucket) {
		dec, err := s.Take(t.Context(), &quota.Demand{Scope: "s", Cost: cost, MaxWait: 20 * time.Second, Limits: ls})
		require.NoError(t, err)
		require.True(t, dec.OK)
	}
	check := func(when string) {
		keys, err := c.Keys(t.Context(), prefix+"*:l:*").Result()
		require.NoError(t, err)
		require.Len(t, keys, 2)
		for _, k := range keys {
			ttl, err := c.PTTL(t.Context(), k).Result()
			require.NoError(t, err)
			newest, err := c.ZRange(t.Context(), k, -1, -1).Result()
			require.NoError(t, err)
			at, err := strconv.ParseInt(strings.Split(newest[0], ":")[0], 10, 64)
			require.NoError(t, err)
			clock, err := c.Time(t.Context()).Result()
			require.NoError(t, err)
			need := time.Duration(at-clock.UnixMicro())*time.Microsecond + per
			assert.GreaterOrEqual(t, ttl, need-time.Millisecond, "%s: %s expires before Per after its newest entry", when, k)
		}
	}
	for range 100 { // content for 9 s ahead
		take(1, quota.Bucket{Limit: points, Cost: 5}, quota.Bucket{Limit: content})
	}
	check("after the writes")
	for range 100 { // reads before the writes' reservations
		take(1, quota.Bucket{Limit: points})
	}
	check("after the reads")
}
