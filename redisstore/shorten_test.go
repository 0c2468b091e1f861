package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The store's Shorten of many entries: one call of shorten.lua per scope
// and per 64 entries of it. The conformance suite (storetest) checks what
// a shortening does to the log; these check how the entries of one
// Shorten travel and what each gets back.

// shortenPer is the Per of the logs these tests shorten.
const shortenPer = time.Hour

// shortenStore returns a store on a client of its own whose scripts take
// the instant from the clock returned, and the count of the EVALSHA
// commands the client sends.
func shortenStore(t *testing.T) (*redisstore.Store, *storetest.Clock, *atomic.Int64) {
	sent := new(atomic.Int64)
	c := newClient(t, srv.Addr())
	c.AddHook(evalshaHook{sent})
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithNow(clock.Now))
	require.Equal(t, "detect", redisstore.ReplayMode(s))
	return s, clock, sent
}

// evalshaHook counts the EVALSHA commands a client sends (an EVAL after
// NOSCRIPT is not one).
type evalshaHook struct{ n *atomic.Int64 }

func (evalshaHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h evalshaHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "evalsha" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (evalshaHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// logDemand is a demand of cost on one sliding log of rate per
// shortenPer, in scope.
func logDemand(scope string, rate, cost int) *quota.Demand {
	return &quota.Demand{
		Scope:  scope,
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: shortenPer, Algorithm: quota.SlidingLog}, Key: "k"}},
		Cost:   cost,
	}
}

// takeEntries takes d n times, a millisecond apart, each granted now, and
// returns their shortenings of limit 0 by within.
func takeEntries(t *testing.T, s *redisstore.Store, clock *storetest.Clock, d *quota.Demand, n int, within time.Duration) []quota.Shortening {
	t.Helper()
	ss := make([]quota.Shortening, n)
	for k := range ss {
		clock.Advance(time.Millisecond)
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		require.True(t, dec.OK, "take %d", k)
		require.Equal(t, clock.Now().UnixMicro(), dec.Reservation.Marks[0], "take %d granted now", k)
		ss[k] = quota.Shortening{Reservation: dec.Reservation, Within: within}
	}
	return ss
}

// assertMoved checks that rs[k] is a copy of ss[k]'s reservation whose
// mark for its limit is to, its other marks and ss[k]'s own alone.
func assertMoved(t *testing.T, ss []quota.Shortening, rs []*quota.Reservation, k int, to int64) {
	t.Helper()
	r, nr := ss[k].Reservation, rs[k]
	if !assert.NotSame(t, r, nr, "entry %d moved", k) {
		return
	}
	want := append([]int64(nil), r.Marks...)
	want[ss[k].Limit] = to
	assert.Equal(t, want, nr.Marks, "entry %d's marks", k)
	assert.NotEqual(t, to, r.Marks[ss[k].Limit], "entry %d: the input's mark is its own", k)
	assert.Equal(t, [3]any{r.ID, r.Demand, r.Unclaimed}, [3]any{nr.ID, nr.Demand, nr.Unclaimed}, "entry %d", k)
}

// TestShortenManyEntries: n entries of one scope, on logs of up to 32
// entries (the script's budget never splits them), move in ceil(n/64)
// EVALSHA, each to now - Per (within 0), and the logs then have their
// whole rate free at now.
func TestShortenManyEntries(t *testing.T) {
	t.Parallel()
	const perLog = 32
	s, clock, sent := shortenStore(t)
	for _, n := range []int{1, 2, 64, 65, 130} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			scope := fmt.Sprintf("many-%d", n)
			var ss []quota.Shortening
			for j := 0; j*perLog < n; j++ {
				d := logDemand(scope, perLog, 1)
				d.Limits[0].Key = fmt.Sprint(j)
				ss = append(ss, takeEntries(t, s, clock, d, min(perLog, n-j*perLog), 0)...)
			}
			before := sent.Load()
			rs, err := s.Shorten(ctx(t), ss...)
			require.NoError(t, err)
			assert.Equal(t, int64((n+63)/64), sent.Load()-before, "EVALSHA for %d entries", n)
			require.Len(t, rs, n)
			to := clock.Now().Add(-shortenPer).UnixMicro()
			for k := range ss {
				assertMoved(t, ss, rs, k, to)
			}
			// No entry counts in the windows ending now: each log's whole
			// rate fits at once.
			for j := 0; j*perLog < n; j++ {
				d := logDemand(scope, perLog, perLog)
				d.Limits[0].Key = fmt.Sprint(j)
				dec, err := s.Take(ctx(t), d)
				require.NoError(t, err)
				assert.True(t, dec.OK, "log %d: the whole rate is free", j)
			}
		})
	}
}

// TestShortenLongLog: the entries of a long log go in more calls, as
// many a call as fit the script's budget of log entries (shorten.lua's
// BUDGET, read from the script), and all move.
func TestShortenLongLog(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("shorten.lua")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^local BUDGET = (\d+)$`).FindSubmatch(src)
	require.NotNil(t, m, "shorten.lua sets BUDGET")
	budget, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)

	const size, n = 200, 64
	s, clock, sent := shortenStore(t)
	all := takeEntries(t, s, clock, logDemand("long", size, 1), size, 0)
	ss := all[size-n:] // the latest: each move rewrites the whole log
	perCall := budget / size
	require.Less(t, perCall, n, "the budget splits %d entries of a log of %d", n, size)
	before := sent.Load()
	rs, err := s.Shorten(ctx(t), ss...)
	require.NoError(t, err)
	assert.Equal(t, int64((n+perCall-1)/perCall), sent.Load()-before, "EVALSHA for %d entries of a log of %d, %d a call", n, size, perCall)
	require.Len(t, rs, n)
	to := clock.Now().Add(-shortenPer).UnixMicro()
	for k := range ss {
		assertMoved(t, ss, rs, k, to)
	}
	// The n moved count no more at now: n fit, and no more.
	assert.Equal(t, n, grants(t, s, logDemand("long", size, 1)))
}

// TestShortenScopes: entries of two scopes, interleaved, go in one call
// per scope, and each result is its own entry's, in the order given. Two
// limits of one reservation in one call give two copies, each with one
// new mark; an entry named twice moves once.
func TestShortenScopes(t *testing.T) {
	t.Parallel()
	s, clock, sent := shortenStore(t)
	a := takeEntries(t, s, clock, logDemand("scope-a", 3, 1), 3, 0)
	b := takeEntries(t, s, clock, logDemand("scope-b", 2, 1), 2, 0)
	ss := []quota.Shortening{a[0], b[0], a[1], b[1], a[2]}
	before := sent.Load()
	rs, err := s.Shorten(ctx(t), ss...)
	require.NoError(t, err)
	assert.Equal(t, int64(2), sent.Load()-before, "EVALSHA for two scopes")
	require.Len(t, rs, len(ss))
	to := clock.Now().Add(-shortenPer).UnixMicro()
	for k := range ss {
		assertMoved(t, ss, rs, k, to)
	}

	t.Run("two limits", func(t *testing.T) {
		d := &quota.Demand{
			Scope: "scope-two",
			Limits: []quota.Bucket{
				{Limit: quota.Limit{Name: "a", Rate: 1, Per: shortenPer, Algorithm: quota.SlidingLog}, Key: "k"},
				{Limit: quota.Limit{Name: "g", Rate: 1, Per: time.Second}, Key: "k"},
				{Limit: quota.Limit{Name: "b", Rate: 1, Per: 2 * shortenPer, Algorithm: quota.SlidingLog}, Key: "k"},
			},
			Cost: 1,
		}
		dec, err := s.Take(ctx(t), d)
		require.NoError(t, err)
		require.True(t, dec.OK)
		r := dec.Reservation
		ss := []quota.Shortening{{Reservation: r, Limit: 0}, {Reservation: r, Limit: 2}}
		before := sent.Load()
		rs, err := s.Shorten(ctx(t), ss...)
		require.NoError(t, err)
		assert.Equal(t, int64(1), sent.Load()-before)
		require.Len(t, rs, 2)
		now := clock.Now()
		assertMoved(t, ss, rs, 0, now.Add(-shortenPer).UnixMicro())
		assertMoved(t, ss, rs, 1, now.Add(-2*shortenPer).UnixMicro())
	})

	t.Run("named twice", func(t *testing.T) {
		one := takeEntries(t, s, clock, logDemand("scope-twice", 1, 1), 1, 0)
		ss := []quota.Shortening{one[0], one[0]}
		rs, err := s.Shorten(ctx(t), ss...)
		require.NoError(t, err)
		require.Len(t, rs, 2)
		assertMoved(t, ss, rs, 0, clock.Now().Add(-shortenPer).UnixMicro())
		assert.Same(t, one[0].Reservation, rs[1], "the second finds its member gone")
	})
}

// TestShortenSettledAndCancelled: in one call, a settled entry moves with
// its settled cost, a cancelled one and one whose end is not earlier
// stay, and a plain one moves; the log then holds just the one that
// stayed.
func TestShortenSettledAndCancelled(t *testing.T) {
	t.Parallel()
	const rate = 10
	s, clock, sent := shortenStore(t)
	scope := "settled"
	settled := takeEntries(t, s, clock, logDemand(scope, rate, 3), 1, 0)[0]
	require.NoError(t, s.Settle(ctx(t), settled.Reservation, []int{1}))
	cancelled := takeEntries(t, s, clock, logDemand(scope, rate, 1), 1, 0)[0]
	require.NoError(t, s.Cancel(ctx(t), cancelled.Reservation))
	later := takeEntries(t, s, clock, logDemand(scope, rate, 1), 1, 2*shortenPer)[0]
	plain := takeEntries(t, s, clock, logDemand(scope, rate, 1), 1, 0)[0]

	ss := []quota.Shortening{settled, cancelled, later, plain}
	before := sent.Load()
	rs, err := s.Shorten(ctx(t), ss...)
	require.NoError(t, err)
	assert.Equal(t, int64(1), sent.Load()-before)
	require.Len(t, rs, len(ss))
	to := clock.Now().Add(-shortenPer).UnixMicro()
	assertMoved(t, ss, rs, 0, to)
	assert.Same(t, cancelled.Reservation, rs[1], "cancelled: not in the log")
	assert.Same(t, later.Reservation, rs[2], "within beyond Per: not earlier")
	assertMoved(t, ss, rs, 3, to)

	// Only the entry that stayed (cost 1) counts at now.
	assert.Equal(t, rate-1, grants(t, s, logDemand(scope, rate, 1)))
}

// TestShortenBadInput: an element that is no shortening of this store is
// an error naming it, matchable as the contract says, and nothing is
// sent or moved: the good entries beside it still move afterwards.
func TestShortenBadInput(t *testing.T) {
	t.Parallel()
	s, clock, sent := shortenStore(t)
	good := takeEntries(t, s, clock, logDemand("bad", 2, 1), 2, 0)
	r := good[0].Reservation
	gcra := &quota.Demand{Scope: "bad", Limits: []quota.Bucket{{Limit: quota.Limit{Name: "g", Rate: 1, Per: time.Second}, Key: "k"}}, Cost: 1}
	invalid := *r.Demand
	invalid.Cost = 0
	for _, c := range []struct {
		name  string
		s     quota.Shortening
		field bool // a *quota.FieldError, matching quota.ErrInvalid
	}{
		{"nil reservation", quota.Shortening{}, false},
		{"nil demand", quota.Shortening{Reservation: &quota.Reservation{ID: r.ID, Marks: r.Marks}}, false},
		{"no marks", quota.Shortening{Reservation: &quota.Reservation{ID: r.ID, Demand: r.Demand}}, false},
		{"limit out of range", quota.Shortening{Reservation: r, Limit: 1}, true},
		{"negative limit", quota.Shortening{Reservation: r, Limit: -1}, true},
		{"not a log", quota.Shortening{Reservation: &quota.Reservation{ID: r.ID, Demand: gcra, Marks: r.Marks}}, true},
		{"invalid demand", quota.Shortening{Reservation: &quota.Reservation{ID: r.ID, Demand: &invalid, Marks: r.Marks}}, true},
		{"no id", quota.Shortening{Reservation: &quota.Reservation{Demand: r.Demand, Marks: r.Marks}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			ss := []quota.Shortening{good[0], c.s, good[1]}
			before := sent.Load()
			var rs []*quota.Reservation
			var err error
			require.NotPanics(t, func() { rs, err = s.Shorten(ctx(t), ss...) })
			require.Error(t, err)
			assert.Contains(t, err.Error(), "shorten 1:", "names the element")
			var fe *quota.FieldError
			assert.Equal(t, c.field, errors.As(err, &fe), "a *quota.FieldError: %v", err)
			assert.Equal(t, c.field, errors.Is(err, quota.ErrInvalid), "matches quota.ErrInvalid: %v", err)
			assert.Zero(t, sent.Load()-before, "nothing sent")
			if assert.Len(t, rs, len(ss)) {
				for k := range ss {
					assert.Same(t, ss[k].Reservation, rs[k], "entry %d as given", k)
				}
			}
		})
	}

	// Zero entries: nothing to send.
	before := sent.Load()
	rs, err := s.Shorten(ctx(t))
	require.NoError(t, err)
	assert.NotNil(t, rs)
	assert.Empty(t, rs)
	assert.Zero(t, sent.Load()-before)

	// The good entries were never moved: they move now.
	rs, err = s.Shorten(ctx(t), good...)
	require.NoError(t, err)
	require.Len(t, rs, 2)
	to := clock.Now().Add(-shortenPer).UnixMicro()
	assertMoved(t, good, rs, 0, to)
	assertMoved(t, good, rs, 1, to)
}

// TestShortenPartialError: the reply to the second call of a Shorten (the
// second scope's) is lost, and its resending refused: Shorten returns
// ErrResent with the first scope's entries moved and the second's as
// given, although the first sending moved them (the contract's "may or
// may not have moved"). A third scope after it is not sent.
func TestShortenPartialError(t *testing.T) {
	t.Parallel()
	p := faultproxy.New(t, srv.Addr())
	c := newClient(t, p.Addr())
	var armed atomic.Bool // from the Shorten on: the takes before run EVALSHA too
	var once sync.Once
	c.AddHook(afterEvalsha{func() {
		if armed.Load() {
			once.Do(func() { p.DropReplyTo("evalsha") })
		}
	}})
	sent := new(atomic.Int64)
	c.AddHook(evalshaHook{sent})
	clock := storetest.NewClock(time.Unix(1_700_000_000, 0))
	s := newStoreOn(t, c, redistest.Prefix(t), redisstore.WithNow(clock.Now))
	var ss []quota.Shortening
	for _, scope := range []string{"part-a", "part-b", "part-c"} {
		ss = append(ss, takeEntries(t, s, clock, logDemand(scope, 2, 1), 2, 0)...)
	}
	before := sent.Load()
	armed.Store(true)
	rs, err := s.Shorten(ctx(t), ss...)
	require.ErrorIs(t, err, redisstore.ErrResent)
	assert.Equal(t, 1, p.Stats().Dropped)
	// The hook sees a command once, however often go-redis sends it.
	assert.Equal(t, int64(2), sent.Load()-before, "EVALSHA: scope a's and scope b's; none of c's")
	require.Len(t, rs, len(ss))
	to := clock.Now().Add(-shortenPer).UnixMicro()
	assertMoved(t, ss, rs, 0, to)
	assertMoved(t, ss, rs, 1, to)
	for k := 2; k < len(ss); k++ {
		assert.Same(t, ss[k].Reservation, rs[k], "entry %d as given", k)
	}
	// Scope b's first sending ran: its log is free at now; c's is full.
	assert.Equal(t, 2, grants(t, s, logDemand("part-b", 2, 1)))
	assert.Equal(t, 0, grants(t, s, logDemand("part-c", 2, 1)))
}

// afterEvalsha calls f after each EVALSHA a client sends.
type afterEvalsha struct{ f func() }

func (afterEvalsha) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h afterEvalsha) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "evalsha" {
			h.f()
		}
		return err
	}
}
func (afterEvalsha) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// shortenAcrossSlots: entries of scopes in different slots of a Cluster,
// in one Shorten, each go to their own slot's node (one script touching
// two slots would fail with CROSSSLOT) and all move.
func shortenAcrossSlots(t *testing.T, c *redis.ClusterClient) {
	s := newStoreOn(t, c, redistest.Prefix(t))
	slots := map[int64]bool{}
	var ss []quota.Shortening
	for i := range 4 {
		scope := fmt.Sprintf("slots-%d", i)
		slot, err := c.ClusterKeySlot(ctx(t), "{"+scope+"}").Result()
		require.NoError(t, err)
		slots[slot] = true
		d := logDemand(scope, 2, 1)
		for range 2 {
			dec, err := s.Take(ctx(t), d)
			require.NoError(t, err)
			require.True(t, dec.OK)
			ss = append(ss, quota.Shortening{Reservation: dec.Reservation})
		}
	}
	require.Greater(t, len(slots), 1, "the scopes span slots")
	rs, err := s.Shorten(ctx(t), ss...)
	require.NoError(t, err)
	require.Len(t, rs, len(ss))
	for k := range ss {
		assert.Less(t, rs[k].Marks[0], ss[k].Reservation.Marks[0], "entry %d moved", k)
	}
}
