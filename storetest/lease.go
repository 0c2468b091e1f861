package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// skipUnless skips t unless the suite's stores are an I.
func skipUnless[I any](t *testing.T, s *suite) {
	t.Helper()
	st, _ := s.newStore(t)
	if _, ok := st.(I); !ok {
		t.Skipf("%T is not a %v", st, reflect.TypeFor[I]())
	}
}

// testConcurrency runs the Concurrency cases when the stores are
// [quota.LeaseStore]s.
func (s *suite) testConcurrency(t *testing.T) {
	skipUnless[quota.LeaseStore](t, s)
	t.Run("Steps", func(t *testing.T) { s.runCases(t, concurrencyCases()) })
	// Each contention test runs on one store shared by 64 callers, and on
	// 8 instances of 8 callers each.
	for _, c := range []struct {
		name    string
		contend func(*testing.T, []quota.Store)
	}{{"Contention", s.contendSlots}, {"ClaimContention", s.contendClaims}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store, _ := s.newStore(t)
			c.contend(t, slices.Repeat([]quota.Store{store}, 64))
		})
		t.Run(c.name+"Instances", func(t *testing.T) {
			if s.c.Instances == nil {
				t.Skip("storetest: Config.Instances is nil")
			}
			t.Parallel()
			var stores []quota.Store
			for _, st := range s.instances(t, NewClock(Start), 8) {
				stores = append(stores, slices.Repeat([]quota.Store{st}, 8)...)
			}
			c.contend(t, stores)
		})
	}
	t.Run("WatchRelease", s.testWatchRelease)
}

// concurrencyCases pin [quota.Concurrency]: slots held as leases that
// expire Per after the instant they were granted for, released and renewed
// by id, decided with the other limits all or nothing.
func concurrencyCases() []stepCase {
	lost := quota.ErrLeaseLost
	return []stepCase{{
		name:    "slots up to Rate; a refusal's delay runs to the earliest expiry",
		buckets: on(conc("c", 2, minute)),
		steps: []step{
			{ok: true},
			{advance: 10 * sec, ok: true},
			{delay: 50 * sec},
			{advance: 50*sec - us, delay: us},
			{advance: us, ok: true},
			{delay: 10 * sec},
		},
	}, {
		name:    "release frees a slot, and only once",
		buckets: on(conc("c", 2, minute)),
		steps: []step{
			{ok: true},
			{ok: true},
			{delay: minute},
			{op: opRelease, cancel: 1},
			{ok: true},
			{op: opRelease, cancel: 1},
			{delay: minute},
			{op: opRelease, cancel: 2},
			{op: opRelease, cancel: 5},
			{ok: true},
			{ok: true},
			{delay: minute},
		},
	}, {
		name:    "a demand takes one slot whatever its cost",
		buckets: on(conc("c", 2, minute)),
		steps:   []step{{cost: 5, ok: true}, {cost: 100, ok: true}, {cost: 5, delay: minute}},
	}, {
		name:    "renew extends to Per from now; an expired lease is lost",
		buckets: on(conc("c", 1, minute)),
		steps: []step{
			{ok: true},
			{advance: 30 * sec, op: opRenew, cancel: 1},
			{delay: minute},
			{advance: minute - us, delay: us},
			{advance: us, op: opRenew, cancel: 1, err: lost},
			{ok: true},
			{op: opRenew, cancel: 1, err: lost},
			{op: opRenew, cancel: 6},
			{op: opRelease, cancel: 6},
			{op: opRenew, cancel: 6, err: lost},
			{ok: true},
		},
	}, {
		// T = 10s, B = 1: a reservation takes no slot while it waits; its
		// claim takes it from the claim's instant until then plus Per.
		name:    "a reservation holds no slot until it is claimed",
		buckets: on(gcra("g", 1, 10*sec, 1), conc("c", 1, minute)),
		steps: []step{
			{ok: true},
			{op: opRelease, cancel: 1},
			{maxWait: 20 * sec, ok: true, delay: 10 * sec},
			{op: opRenew, cancel: 3, err: lost},
			{use: []int{1}, ok: true},
			{advance: 10 * sec, op: opClaim, cancel: 3, delay: 50 * sec, limit: 1},
			{op: opRelease, cancel: 5},
			{op: opClaim, cancel: 3, ok: true},
			{use: []int{1}, delay: minute},
			{advance: 30 * sec, op: opClaim, cancel: 3, ok: true}, // again: no further slot
			{use: []int{1}, delay: minute},
			{op: opRelease, cancel: 8},
			{use: []int{1}, ok: true},
			{op: opRelease, cancel: 3}, // never claimed since: its lease is gone
			{use: []int{1}, delay: minute},
			{op: opClaim, cancel: 1, ok: true}, // not unclaimed: returned as it is
		},
	}, {
		name:    "a claim takes every slot or none",
		buckets: on(gcra("g", 1, 10*sec, 1), conc("a", 1, minute), conc("b", 1, minute)),
		steps: []step{
			{use: []int{0}, ok: true},
			{maxWait: 20 * sec, ok: true, delay: 10 * sec},
			{use: []int{1}, ok: true},
			{advance: 10 * sec, op: opClaim, cancel: 2, delay: 50 * sec, limit: 1},
			{use: []int{2}, ok: true},
			{op: opRelease, cancel: 3},
			{op: opClaim, cancel: 2, delay: minute, limit: 2},
			{use: []int{1}, ok: true},
			{op: opRelease, cancel: 8},
			{op: opRelease, cancel: 5},
			{op: opClaim, cancel: 2, ok: true},
			{use: []int{1}, delay: minute},
			{use: []int{2}, delay: minute},
			{op: opRelease, cancel: 11},
			{use: []int{1, 2}, ok: true},
		},
	}, {
		name:    "cancel of an unclaimed reservation gives back its rate charge only",
		buckets: on(gcra("g", 1, 10*sec, 1), conc("c", 1, minute)),
		steps: []step{
			{use: []int{0}, ok: true},
			{maxWait: 20 * sec, ok: true, delay: 10 * sec},
			{use: []int{1}, ok: true},
			{op: opCancel, cancel: 2},
			{use: []int{0}, maxWait: 20 * sec, ok: true, delay: 10 * sec},
			{use: []int{1}, delay: minute},
		},
	}, {
		name:    "cancel of a claimed reservation gives back its charge and its slot",
		buckets: on(fixed("f", 1, minute), conc("c", 1, minute)),
		steps: []step{
			{use: []int{0}, ok: true},
			{maxWait: hour, ok: true, delay: minute},
			{advance: minute, op: opClaim, cancel: 2, ok: true},
			{use: []int{1}, delay: minute},
			{op: opCancel, cancel: 3},
			{ok: true},
		},
	}, {
		name:    "all or nothing with a rate limit",
		buckets: on(fixed("f", 1, minute), conc("c", 2, minute)),
		steps: []step{
			{ok: true},
			{delay: minute, limit: 0},
			{use: []int{1}, ok: true},
			{use: []int{1}, delay: minute},
			{advance: 30 * sec, op: opRelease, cancel: 3},
			{use: []int{1}, ok: true},
			{advance: 30 * sec, use: []int{1}, ok: true},
			// f has room in its new window, c is full: refused by c, and
			// f is not charged.
			{delay: 30 * sec, limit: 1},
			{op: opRelease, cancel: 6},
			{ok: true},
			{op: opRelease, cancel: 10},
			{delay: minute, limit: 0},
		},
	}, {
		name:    "a rate limit beyond MaxWait binds before a full slot",
		buckets: on(gcra("g", 1, minute, 1), conc("c", 1, minute)),
		steps: []step{
			{ok: true},
			{delay: minute, limit: 0},
			{maxWait: hour, delay: minute, limit: 1},
			{advance: 10 * sec, maxWait: hour, delay: 50 * sec, limit: 1},
		},
	}, {
		name:    "a full slot's delay is at least the other limits'",
		buckets: on(gcra("g", 1, minute, 1), conc("c", 1, 10*sec)),
		steps: []step{
			{ok: true},
			{maxWait: hour, delay: minute, limit: 1},
			{advance: 10 * sec, maxWait: hour, ok: true, delay: 50 * sec},
		},
	}, {
		name:    "cancel gives the slot back",
		buckets: on(fixed("f", 3, minute), conc("c", 1, minute)),
		steps: []step{
			{ok: true},
			{op: opCancel, cancel: 1},
			{ok: true},
			{delay: minute, limit: 1},
			{op: opCancel, cancel: 3},
			{ok: true},
		},
	}, {
		name:    "keys and scopes are separate slots",
		buckets: []quota.Bucket{{Limit: conc("c", 1, minute), Key: "a"}, {Limit: conc("c", 1, minute), Key: "b"}},
		steps: []step{
			{use: []int{0}, ok: true},
			{use: []int{1}, ok: true},
			{use: []int{0}, delay: minute},
			{use: []int{0}, scope: "other", ok: true},
		},
	}, {
		name:    "a pause and a full slot",
		buckets: on(conc("c", 1, minute)),
		steps: []step{
			{ok: true},
			{op: opPause, key: "p", d: 30 * sec},
			{pauses: []string{"p"}, delay: 30 * sec, pause: "p"},
			{pauses: []string{"p"}, maxWait: hour, delay: minute},
			{op: opRelease, cancel: 1},
			{pauses: []string{"p"}, maxWait: hour, ok: true, delay: 30 * sec},
		},
	}, {
		name:    "a burst is an error",
		buckets: on(quota.Limit{Name: "c", Rate: 2, Burst: 2, Per: minute, Algorithm: quota.Concurrency}),
		steps: []step{
			{err: quota.ErrInvalid},
			{use: []int{}, ok: true},
		},
	}, {
		name:    "a lease below MinLease is an error",
		buckets: on(conc("c", 2, quota.MinLease-us)),
		steps:   []step{{maxWait: hour, err: quota.ErrInvalid}},
	}}
}

// contendSlots runs one goroutine per store, all taking a slot of a limit
// of 5 (with a rate limit that always admits, in the same demand) on a
// frozen clock: exactly 5 are granted. Then the holders release and all
// try again: exactly 5 again.
func (s *suite) contendSlots(t *testing.T, stores []quota.Store) {
	const slots = 5
	d := &quota.Demand{Scope: s.scope(t, ""), Cost: 1, Limits: []quota.Bucket{
		{Limit: gcra("rate", 1_000_000, sec, 0)},
		{Limit: conc("inflight", slots, minute), Key: "k"},
	}}
	round := func() map[int]*quota.Reservation {
		takes := make([]func() (quota.Decision, error), len(stores))
		for g, st := range stores {
			takes[g] = func() (quota.Decision, error) { return st.Take(t.Context(), d) }
		}
		return race(t, takes)
	}
	held := round()
	assert.Len(t, held, slots, "granted slots")
	ls := stores[0].(quota.LeaseStore)
	for _, r := range held {
		require.NoError(t, ls.Release(t.Context(), r))
		require.NoError(t, ls.Release(t.Context(), r)) // never twice
	}
	flush(t, ls)
	assert.Len(t, round(), slots, "granted slots after every holder released")
}

// contendClaims gives each store a reservation whose slot of a limit of 5
// is unclaimed, on a frozen clock, then has one goroutine per store claim
// it: exactly 5 claims succeed, and the others are refused by that limit
// and take nothing. Then the holders release and the refused claim again:
// exactly 5 again.
func (s *suite) contendClaims(t *testing.T, stores []quota.Store) {
	const slots = 5
	d := &quota.Demand{Scope: s.scope(t, ""), Cost: 1, MaxWait: hour, Limits: []quota.Bucket{
		{Limit: gcra("rate", 1_000_000, sec, 1)},
		{Limit: conc("inflight", slots, minute), Key: "k"},
	}}
	ls := stores[0].(quota.LeaseStore)
	first, err := ls.Take(t.Context(), d) // every later demand waits for the rate
	require.NoError(t, err)
	require.True(t, first.OK)
	require.NoError(t, ls.Release(t.Context(), first.Reservation))
	flush(t, ls)
	pending := make([]*quota.Reservation, len(stores))
	for i, st := range stores {
		dec, err := st.Take(t.Context(), d)
		require.NoError(t, err)
		require.True(t, dec.OK, "reservation %d", i)
		require.Positive(t, dec.Delay, "reservation %d", i)
		require.True(t, dec.Reservation.Unclaimed, "reservation %d", i)
		pending[i] = dec.Reservation
	}
	round := func() map[int]*quota.Reservation {
		takes := make([]func() (quota.Decision, error), len(stores))
		for g, r := range pending {
			if r != nil {
				takes[g] = func() (quota.Decision, error) { return stores[g].(quota.LeaseStore).Claim(t.Context(), r) }
			}
		}
		held := race(t, takes)
		for g := range held {
			pending[g] = nil
		}
		return held
	}
	held := round()
	assert.Len(t, held, slots, "claimed slots")
	for _, r := range held {
		assert.False(t, r.Unclaimed)
		require.NoError(t, ls.Release(t.Context(), r))
	}
	// Other store values claim next: a store that sends releases later
	// (see quota.LeaseStore.Release) must have sent them by then.
	flush(t, ls)
	assert.Len(t, round(), slots, "claimed slots after every holder released")
}

// testWatchRelease: a watch armed on a bucket is woken by a release made
// through another instance (or the same store), oldest watcher first.
func (s *suite) testWatchRelease(t *testing.T) {
	t.Parallel()
	var watcher, releaser quota.LeaseStore
	if s.c.Instances != nil {
		ss := s.instances(t, NewClock(Start), 2)
		watcher, releaser = ss[0].(quota.LeaseStore), ss[1].(quota.LeaseStore)
	} else {
		st, _ := s.newStore(t)
		watcher = st.(quota.LeaseStore)
		releaser = watcher
	}
	b := quota.Bucket{Limit: conc("c", 2, minute), Key: "k"}
	d := &quota.Demand{Scope: s.scope(t, ""), Cost: 1, Limits: []quota.Bucket{b}}
	var held []*quota.Reservation
	for range 2 {
		dec, err := releaser.Take(t.Context(), d)
		require.NoError(t, err)
		require.True(t, dec.OK)
		held = append(held, dec.Reservation)
	}
	first, stop1, err := watcher.WatchRelease(t.Context(), d.Scope, b)
	require.NoError(t, err)
	second, stop2, err := watcher.WatchRelease(t.Context(), d.Scope, b)
	if err != nil {
		stop1()
	}
	require.NoError(t, err)
	defer stop2()
	if first == nil {
		stop1()
		t.Skip("the store sends no wake-ups")
	}
	wait := func(c <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-c:
		case <-time.After(time.Minute): // a failure bound, not a measurement
			t.Fatalf("%s: no wake-up", what)
		}
	}
	err = releaser.Release(t.Context(), held[0])
	if err == nil {
		wait(first, "first release, first watcher")
	}
	stop1()
	require.NoError(t, err)
	require.NoError(t, releaser.Cancel(t.Context(), held[1]))
	wait(second, "cancel, second watcher")
}

// flush sends the releases that s holds back to ride on a later call, if
// it is a store that does (redisstore's Store.Flush), so that another
// store value sees them. Release promises only the same store value that.
func flush(t *testing.T, s quota.Store) {
	if f, ok := s.(interface{ Flush(context.Context) error }); ok {
		require.NoError(t, f.Flush(t.Context()))
	}
}

// race calls the takes at once, one goroutine each (none for a nil take),
// and returns the reservations granted, by index. An error, or a refusal
// other than by limit 1 with a delay of a minute, fails t.
func race(t *testing.T, takes []func() (quota.Decision, error)) map[int]*quota.Reservation {
	var (
		mu       sync.Mutex
		held     = map[int]*quota.Reservation{}
		problems []error
	)
	atOnce(len(takes), func(g int) {
		if takes[g] == nil {
			return
		}
		dec, err := takes[g]()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err != nil:
			problems = append(problems, fmt.Errorf("goroutine %d: %w", g, err))
		case dec.OK:
			held[g] = dec.Reservation
		case dec.Limit != 1 || dec.Delay != minute:
			problems = append(problems, fmt.Errorf("goroutine %d: refusal with Limit %d, Delay %v", g, dec.Limit, dec.Delay))
		}
	})
	require.NoError(t, errors.Join(problems...))
	return held
}
