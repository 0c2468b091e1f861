package redisstore_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTakeGCRAMatchesTake runs the same random GCRA-only demands through
// take_gcra.lua and through take.lua, each on its own prefix, on one
// clock, and asserts the same decisions and the same keys afterwards:
// values equal, TTLs equal up to the real time between the two calls.
//
// The "whole" runs draw one limit of whole microseconds (at most one
// pause key), the demand take_gcra.lua decides by charging first
// (busy bucket guessed, undone when wrong): every outcome occurs there
// too, a refusal's undo included.
func TestTakeGCRAMatchesTake(t *testing.T) {
	for _, replay := range []bool{false, true} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("replay=%v/seed=%d", replay, seed), func(t *testing.T) {
				t.Parallel()
				compareTakes(t, replay, seed, randomGCRADemand)
			})
			t.Run(fmt.Sprintf("whole/replay=%v/seed=%d", replay, seed), func(t *testing.T) {
				t.Parallel()
				compareTakes(t, replay, seed, randomWholeDemand)
			})
		}
	}
}

func compareTakes(t *testing.T, replay bool, seed uint64, random func(*rand.Rand) *quota.Demand) {
	rng := rand.New(rand.NewPCG(seed, 7))
	clock := storetest.NewClock(storetest.Start)
	var copts []func(*redis.Options)
	opts := []redisstore.Option{redisstore.WithNow(clock.Now)}
	if !replay {
		copts = append(copts, func(o *redis.Options) { o.MaxRetries = -1 })
		opts = append(opts, redisstore.WithReplay(redisstore.ReplayNoRetries))
	}
	c := newClient(t, srv.Addr(), copts...)
	fastPrefix, slowPrefix := redistest.Prefix(t)+"fast:", redistest.Prefix(t)+"slow:"
	fast := newStoreOn(t, c, fastPrefix, opts...)
	slow := newStoreOn(t, c, slowPrefix, append(opts, redisstore.WithGenericTake())...)

	seen := map[string]int{}
	spans := writeSpans{}
	orders := rand.New(rand.NewPCG(seed, 11)) // take_gcra.lua's order, as hinted or either one
	for step := range 300 {
		redisstore.SetChargeOrder(fast, orders.IntN(3)-1)
		if rng.IntN(8) == 0 {
			key, d := randomPause(rng)
			require.NoError(t, fast.Pause(ctx(t), "s", key, d))
			require.NoError(t, slow.Pause(ctx(t), "s", key, d))
		}
		d := random(rng)
		stepStart := time.Now()
		want, err := slow.Take(ctx(t), d)
		require.NoError(t, err)
		got, err := fast.Take(ctx(t), d)
		require.NoError(t, err)
		if want.OK {
			for _, b := range d.Limits {
				spans.charged(b.Limit.Name+":"+b.Key, stepStart)
			}
		}
		where := fmt.Sprintf("step %d: %+v", step, d)
		shape := ", one limit"
		if len(d.Limits) > 1 {
			shape = ", several limits"
		}
		seen[outcome(want)+shape]++
		sameDecision(t, want, got, where)
		for _, b := range d.Limits {
			sameGCRAKey(t, c, slowPrefix, fastPrefix, b, spans[b.Limit.Name+":"+b.Key], where)
		}
		clock.Advance(time.Duration(rng.IntN(2500)) * time.Microsecond)
	}
	t.Logf("outcomes: %v", seen)
	assert.Len(t, seen, 8, "every kind of outcome occurs with one limit and with several: %v", seen)
}

// wholeLimits are what randomWholeDemand draws from: emission intervals
// of whole microseconds.
var wholeLimits = []quota.Limit{
	{Name: "w", Rate: 5, Per: 7 * time.Millisecond, Burst: 2}, // T = 1400 µs
	{Name: "v", Rate: 4, Per: 10 * time.Millisecond},          // T = 2500 µs
	{Name: "u", Rate: 1000, Per: time.Second, Burst: 3},       // T = 1000 µs
}

// randomWholeDemand returns a demand of scope "s" with, three times in
// four, one of wholeLimits and at most one of gcraPauses (else two limits
// and any pauses, randomDemandOf's), cost 1 or 2 and a MaxWait below 4 ms,
// zero one time in three.
func randomWholeDemand(rng *rand.Rand) *quota.Demand {
	d := randomDemandOf(rng, wholeLimits)
	if rng.IntN(3) == 0 {
		d.MaxWait = 0 // read first (take_gcra.lua)
	}
	if rng.IntN(4) > 0 {
		d.Limits = d.Limits[:1]
		if len(d.Pauses) > 1 {
			d.Pauses = d.Pauses[:1]
		}
	} else if len(d.Limits) == 1 {
		d.Limits = append(d.Limits, quota.Bucket{Limit: wholeLimits[(slices.Index(wholeLimits, d.Limits[0].Limit)+1)%len(wholeLimits)], Key: "x"})
	}
	return d
}

// gcraLimits and gcraPauses are what randomGCRADemand draws from, on
// scope "s" and keys "x" and "y".
var (
	gcraLimits = []quota.Limit{
		{Name: "a", Rate: 3, Per: 10 * time.Millisecond},                     // T = 3333 1/3 µs
		{Name: "b", Rate: 5, Per: 7 * time.Millisecond, Burst: 2},            // T = 1400 µs
		{Name: "c", Rate: 2, Per: 999 * time.Microsecond, Burst: 6},          // T = 499.5 µs
		{Name: "d", Rate: 10_000_000, Per: time.Second, Burst: 30_000},       // T = 0.1 µs
		{Name: "e", Rate: 1_000_000_000, Per: 31 * 24 * time.Hour, Burst: 3}, // T = 2678.4 µs
	}
	gcraPauses = []string{"p", "q"}
)

// randomGCRADemand returns a demand of scope "s" with one to three of
// gcraLimits on random keys, some of gcraPauses, cost 1 or 2 and a MaxWait
// below 4 ms. A cost of 1 or 2 of limit d takes 0.1 or 0.2 µs: its
// arrival times have fractions.
func randomGCRADemand(rng *rand.Rand) *quota.Demand { return randomDemandOf(rng, gcraLimits) }

// randomDemandOf is randomGCRADemand drawing from limits.
func randomDemandOf(rng *rand.Rand, limits []quota.Limit) *quota.Demand {
	d := &quota.Demand{Scope: "s", Cost: 1 + rng.IntN(2), MaxWait: time.Duration(rng.IntN(4000)) * time.Microsecond}
	for _, i := range rng.Perm(len(limits))[:1+rng.IntN(3)] {
		d.Limits = append(d.Limits, quota.Bucket{Limit: limits[i], Key: []string{"x", "y"}[rng.IntN(2)]})
	}
	for _, p := range gcraPauses {
		if rng.IntN(3) == 0 {
			d.Pauses = append(d.Pauses, p)
		}
	}
	return d
}

// randomPause returns one of gcraPauses and a pause below 3 ms.
func randomPause(rng *rand.Rand) (string, time.Duration) {
	return gcraPauses[rng.IntN(2)], time.Duration(rng.IntN(3000)) * time.Microsecond
}

// outcome names the kind of a decision, for counting what a random test
// covered.
func outcome(d quota.Decision) string {
	switch {
	case d.OK && d.Delay == 0:
		return "granted now"
	case d.OK:
		return "reserved"
	case d.Limit >= 0:
		return "refused by a limit"
	default:
		return "refused by a pause"
	}
}

// sameDecision asserts that got decides as want, and reports whether it
// does.
func sameDecision(t *testing.T, want, got quota.Decision, where string) bool {
	t.Helper()
	ok := assert.Equal(t, want.OK, got.OK, where) &&
		assert.Equal(t, want.Delay, got.Delay, where) &&
		assert.Equal(t, want.Limit, got.Limit, where) &&
		assert.Equal(t, want.Pause, got.Pause, where) &&
		assert.Equal(t, want.Remaining, got.Remaining, where) &&
		assert.Equal(t, want.ResetAfter, got.ResetAfter, where)
	if ok && want.OK && assert.NotNil(t, got.Reservation, where) {
		ok = assert.Equal(t, want.Reservation.Marks, got.Reservation.Marks, where)
	}
	return ok
}

// sameGCRAKey asserts that b's GCRA key of scope "s" under prefix got
// holds want's value, with the same PTTL up to real time: written is the
// longest real time that the writes of the key under both prefixes in one
// step took (see writeSpans).
func sameGCRAKey(t *testing.T, c *redis.Client, want, got string, b quota.Bucket, written time.Duration, where string) {
	t.Helper()
	k := gcraKey(b)
	start := time.Now()
	wv, wt := keyState(t, c, want+k)
	gv, gt := keyState(t, c, got+k)
	assert.Equal(t, wv, gv, "%s: value of %s", where, k)
	samePTTL(t, wt, gt, written, time.Since(start), where+": PTTL of "+k)
}

// samePTTL asserts that two PTTLs (ms) of keys given the same TTL are
// equal up to real time. Each key's TTL was set at one real instant (T1,
// T2) and read at another (R1, R2), so they differ by (R2-R1)-(T2-T1): at
// most the time between the writes (written) plus the time between the
// reads (read), plus a millisecond of rounding each. The bound holds on a
// machine however loaded, and still catches a TTL rule that differs.
func samePTTL(t *testing.T, want, got int64, written, read time.Duration, where string) {
	t.Helper()
	bound := (written + read).Milliseconds() + 2
	assert.InDelta(t, want, got, float64(bound), "%s (ms; writes %v apart at most, reads %v)", where, written, read)
}

// writeSpans keeps, per key, the longest real time one step took to write
// it under both prefixes: a step that charged the key (a TTL is only set
// by a charge) covers both writes from its start.
type writeSpans map[string]time.Duration

// charged records that a step begun at start charged key under both
// prefixes.
func (w writeSpans) charged(key string, start time.Time) {
	w[key] = max(w[key], time.Since(start))
}

// keyState returns a key's value ("" if none) and its PTTL in ms.
func keyState(t *testing.T, c *redis.Client, key string) (string, int64) {
	t.Helper()
	v, err := c.Get(ctx(t), key).Result()
	if err == redis.Nil {
		v, err = "", nil
	}
	require.NoError(t, err)
	ttl, err := c.PTTL(ctx(t), key).Result()
	require.NoError(t, err)
	return v, ttl.Milliseconds()
}

// gcraKey is the key of b, a GCRA limit's bucket of scope "s", after the
// store's prefix (keys.go).
func gcraKey(b quota.Bucket) string { return "v1:{s}:" + gcraTag(b.Limit) + b.Limit.Name + ":" + b.Key }

// gcraTag is the algorithm part of a GCRA limit's key (keys.go): g: when
// Rate divides Per, else G:.
func gcraTag(l quota.Limit) string {
	if l.Per.Microseconds()%int64(l.Rate) != 0 {
		return "G:"
	}
	return "g:"
}

// TestTakeGCRARefusalWritesNothing checks, on Redis's clock, that a
// refusal of a one-limit demand leaves its key as it was, though
// take_gcra.lua charges the key first when told the bucket is busy
// (busyhint.go), and reads it first otherwise: in either order a busy key
// keeps its value and expiry, refused by the limit or by a pause, and a
// key that did not exist is not left behind.
func TestTakeGCRARefusalWritesNothing(t *testing.T) {
	for _, order := range []int{-1, 1} { // read first, charged first
		for _, wait := range []time.Duration{0, time.Millisecond} {
			t.Run(fmt.Sprintf("order=%d/MaxWait=%v", order, wait), func(t *testing.T) { refusalWritesNothing(t, order, wait) })
		}
	}
}

func refusalWritesNothing(t *testing.T, order int, wait time.Duration) {
	c := newClient(t, srv.Addr())
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, c, prefix)
	redisstore.SetChargeOrder(s, order)
	lim := quota.Limit{Name: "slow", Rate: 1, Per: time.Minute, Burst: 1}
	key := func(k string) string { return prefix + gcraKey(quota.Bucket{Limit: lim, Key: k}) }
	state := func(k string) (string, time.Duration) {
		t.Helper()
		v, err := c.Get(ctx(t), k).Result()
		require.NoError(t, err, k)
		exp, err := c.PExpireTime(ctx(t), k).Result()
		require.NoError(t, err, k)
		return v, exp
	}
	demand := func(k string, pauses ...string) *quota.Demand {
		return &quota.Demand{Scope: "s", Cost: 1, Pauses: pauses, Limits: []quota.Bucket{{Limit: lim, Key: k}}, MaxWait: wait}
	}

	dec, err := s.Take(ctx(t), demand("busy"))
	require.NoError(t, err)
	require.True(t, dec.OK)
	v, exp := state(key("busy"))
	dec, err = s.Take(ctx(t), demand("busy"))
	require.NoError(t, err)
	require.False(t, dec.OK)
	assert.Equal(t, 0, dec.Limit, "refused by the limit")
	v2, exp2 := state(key("busy"))
	assert.Equal(t, v, v2, "the value of a key refused by its limit")
	assert.Equal(t, exp, exp2, "the expiry of a key refused by its limit")

	require.NoError(t, s.Pause(ctx(t), "s", "", 2*time.Minute))
	dec, err = s.Take(ctx(t), demand("busy", ""))
	require.NoError(t, err)
	require.False(t, dec.OK)
	assert.Equal(t, -1, dec.Limit, "refused by the pause, which ends after the limit would let it go")
	v2, exp2 = state(key("busy"))
	assert.Equal(t, v, v2, "the value of a key refused by a pause")
	assert.Equal(t, exp, exp2, "the expiry of a key refused by a pause")

	dec, err = s.Take(ctx(t), demand("fresh", ""))
	require.NoError(t, err)
	require.False(t, dec.OK)
	assert.Equal(t, -1, dec.Limit, "refused by the pause alone")
	n, err := c.Exists(ctx(t), key("fresh")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a refusal left a key that did not exist")
}

// TestTakeGCRAMaxWaitEdge checks take_gcra.lua's one-limit path at the
// edge of MaxWait, in both orders (its MaxWait is sent as -(MaxWait+1)
// when it charges first): a wait of exactly MaxWait is granted, one
// microsecond more is refused.
func TestTakeGCRAMaxWaitEdge(t *testing.T) {
	for _, order := range []int{-1, 1} {
		t.Run(fmt.Sprintf("order=%d", order), func(t *testing.T) {
			clock := storetest.NewClock(storetest.Start)
			s := newStoreOn(t, newClient(t, srv.Addr()), redistest.Prefix(t), redisstore.WithNow(clock.Now))
			redisstore.SetChargeOrder(s, order)
			lim := quota.Limit{Name: "edge", Rate: 1, Per: time.Millisecond} // T = 1000 µs, burst 1
			d := func(wait time.Duration) *quota.Demand {
				return &quota.Demand{Scope: "s", Cost: 1, MaxWait: wait, Limits: []quota.Bucket{{Limit: lim, Key: "k"}}}
			}
			dec, err := s.Take(ctx(t), d(0))
			require.NoError(t, err)
			require.True(t, dec.OK)
			dec, err = s.Take(ctx(t), d(999*time.Microsecond))
			require.NoError(t, err)
			assert.False(t, dec.OK, "a wait of 1000 µs over a MaxWait of 999")
			assert.Equal(t, time.Millisecond, dec.Delay)
			dec, err = s.Take(ctx(t), d(time.Millisecond))
			require.NoError(t, err)
			assert.True(t, dec.OK, "a wait of 1000 µs within a MaxWait of 1000")
			assert.Equal(t, time.Millisecond, dec.Delay)
		})
	}
}

// TestArrivalTimesExact charges GCRA limits whose T is not a whole
// microsecond back to back on Redis's own clock, the production path
// (INCRBY, or SET KEEPTTL for a fraction, within a second; SET PXAT
// across), through take_gcra.lua, take.lua and take_batch.lua: every
// charge is a reservation, and the arrival time it stores is exactly
// quotamath's, fraction included; the decision's mark is the stored
// arrival time's.
func TestArrivalTimesExact(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []redisstore.Option
		batch bool
	}{
		{"take_gcra", []redisstore.Option{redisstore.WithBatching(0)}, false},
		{"take", []redisstore.Option{redisstore.WithGenericTake()}, false},
		{"take_batch", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClient(t, srv.Addr())
			prefix := redistest.Prefix(t)
			s := newStoreOn(t, c, prefix, tc.opts...)
			// T = 33333 1/3 µs, and 38262 6/7 µs: 100 charges (150
			// units) reserve 5 s ahead, so every charge lands on the last
			// one's arrival time however slowly a loaded machine makes
			// them (at 10 ms and 2678.4 µs they reserved 0.3 s, which 100
			// calls under -race at load outran).
			for _, l := range []quota.Limit{
				{Name: "third", Rate: 3, Per: 100 * time.Millisecond, Burst: 2},
				{Name: "month", Rate: 70_000_000, Per: 31 * 24 * time.Hour, Burst: 2},
			} {
				q := quotamath.Of(l)
				key := prefix + "v1:{exact}:G:" + l.Name + ":"
				read := func() quotamath.Time {
					v, err := c.Get(ctx(t), key).Result()
					require.NoError(t, err)
					us, frac, err := redisstore.ParseArrival(v)
					require.NoError(t, err, v)
					return quotamath.Time{Micros: us, Frac: frac}
				}
				var last quotamath.Time
				fractions := 0
				for i := range 100 {
					d := &quota.Demand{Scope: "exact", Cost: 1 + i%2, MaxWait: 10 * time.Second, Limits: []quota.Bucket{{Limit: l}}}
					costs := []int64{int64(d.Cost)}
					var dec quota.Decision
					if tc.batch {
						decs, errs := redisstore.TakeBatch(s, []*quota.Demand{d, {Scope: "exact", Cost: 1, MaxWait: 10 * time.Second, Limits: d.Limits}})
						require.NoError(t, errs[0])
						require.NoError(t, errs[1])
						require.True(t, decs[0].OK)
						dec, costs = decs[1], append(costs, 1)
					} else {
						var err error
						dec, err = s.Take(ctx(t), d)
						require.NoError(t, err)
					}
					require.True(t, dec.OK, "%s: charge %d refused", l.Name, i)
					tat := read()
					if i > 0 {
						// Each charge is a reservation at the first instant
						// the bucket admits it, ceil(TAT - (B-c)*T), after
						// now: TAT' = max(TAT, that instant) + c*T.
						want := last
						for _, c := range costs {
							at := q.Earliest(quotamath.Counter{TAT: want}, 0, c)
							want = q.GCRACharge(want, at, c)
						}
						require.Equal(t, want, tat, "%s: charge %d of %v on %+v", l.Name, i, costs, last)
					}
					assert.Equal(t, q.Mark(tat), dec.Reservation.Marks[0], "%s: charge %d: the mark is the stored arrival time's", l.Name, i)
					last = tat
					if tat.Frac != 0 {
						fractions++
					}
				}
				assert.NotZero(t, fractions, "%s: no arrival time had a fraction", l.Name)
			}
		})
	}
}

// TestParseArrival reads the values a GCRA key holds, and refuses
// malformed ones; an integer and an arrival time with a fraction are
// read without allocating (every decision's reply holds them).
func TestParseArrival(t *testing.T) {
	for _, tc := range []struct {
		in       string
		us, frac int64
		ok       bool
	}{
		{"1700000000000000", 1700000000000000, 0, true},
		{"-5", -5, 0, true},
		{"1700000000000000:3", 1700000000000000, 3, true},
		{"", 0, 0, false},
		{"x", 0, 0, false},
		{"12:", 0, 0, false},
		{"12:0", 0, 0, false},
		{"12:-1", 0, 0, false},
		{"12:x", 0, 0, false},
		{"x:3", 0, 0, false},
		{"1 2", 0, 0, false},
	} {
		us, frac, err := redisstore.ParseArrival(tc.in)
		if (err == nil) != tc.ok || us != tc.us || frac != tc.frac {
			t.Errorf("ParseArrival(%q) = %d, %d, %v; want %d, %d, ok %v", tc.in, us, frac, err, tc.us, tc.frac, tc.ok)
		}
	}
	if testing.CoverMode() != "" || raceEnabled {
		return // instrumented builds allocate on their own
	}
	for _, v := range []string{"1700000000000000", "1700000000000000:3"} {
		if n := testing.AllocsPerRun(100, func() { _, _, _ = redisstore.ParseArrival(v) }); n != 0 {
			t.Errorf("ParseArrival(%q) allocates %v times, want 0", v, n)
		}
	}
}
