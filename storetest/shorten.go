package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
)

// testShorten runs the shortening cases when the stores are
// [quota.Shortener]s: the step tables, and bad input.
func (s *suite) testShorten(t *testing.T) {
	skipUnless[quota.Shortener](t, s)
	t.Run("Steps", func(t *testing.T) { s.runCases(t, shortenCases()) })
	t.Run("Malformed", s.testShortenMalformed)
	t.Run("Many", s.testShortenMany)
}

// shortenCases pin [quota.Shortener.Shorten]: an entry moved to E-Per
// frees the log at E = now+within and not before, an end at or after
// the entry's moves nothing, nor does shortening again, a cancelled entry
// or one moved already; a settled entry moves with its settled cost; the
// other entries keep their instants and the running totals stay right.
func shortenCases() []stepCase {
	return []stepCase{{
		name:    "the log admits again at now+within, not before",
		buckets: on(slidingLog("l", 2, sec)),
		steps: []step{
			{ok: true},   // at S
			{ok: true},   // 2: at S, the log is full
			{delay: sec}, // S's entries leave at S+1s
			{op: opShorten, cancel: 2, d: 300 * ms, moved: true}, // to S+300ms-1s
			{delay: 300 * ms},                 // it counts until S+300ms
			{advance: 300*ms - us, delay: us}, // not before
			{advance: us, ok: true},           // at S+300ms
			{delay: 700 * ms},                 // step 1's entry is where it was
		},
	}, {
		name:    "an end at or after the entry's moves nothing; within is rounded up",
		buckets: on(slidingLog("l", 2, sec)),
		steps: []step{
			{ok: true}, // 1: at S
			{advance: 500 * ms, op: opShorten, cancel: 1, d: 600 * ms},  // E-Per = S+100ms
			{op: opShorten, cancel: 1, d: 500 * ms},                     // E-Per = S: not earlier
			{op: opShorten, cancel: 1, d: 500*ms - 500*time.Nanosecond}, // rounded up to 500ms
			{ok: true},        // at S+500ms
			{delay: 500 * ms}, // step 1's entry leaves at S+1s
			{op: opShorten, cancel: 1, d: 500*ms - us, moved: true}, // to S-1µs
			{delay: 500*ms - us},
		},
	}, {
		name:    "shortening again to the same end changes nothing",
		buckets: on(slidingLog("l", 2, sec)),
		steps: []step{
			{ok: true},              // at S
			{advance: ms, ok: true}, // 2: at S+1ms
			{advance: 99 * ms, op: opShorten, cancel: 2, d: 200 * ms, moved: true}, // 3: S+100ms: to S-700ms
			{op: opShorten, cancel: 3, d: 200 * ms},                                // already there
			{op: opShorten, cancel: 2, d: 200 * ms},                                // the old mark: moved already
			{delay: 200 * ms},                                                      // the moved entry counts until S+300ms
			{advance: 200 * ms, ok: true},
			{delay: 700 * ms}, // step 1's entry leaves at S+1s
		},
	}, {
		name:    "a cancelled reservation: nothing moves",
		buckets: on(slidingLog("l", 2, sec)),
		steps: []step{
			{ok: true},              // at S
			{advance: ms, ok: true}, // 2: at S+1ms
			{op: opCancel, cancel: 2},
			{op: opShorten, cancel: 2, d: 0},
			{ok: true},        // step 2's place
			{delay: 999 * ms}, // step 1's entry leaves at S+1s
			{op: opShorten, cancel: 1, d: -sec, moved: true}, // an end in the past: S's entry leaves the log
			{ok: true},
		},
	}, {
		name:    "a settled entry moves with its settled cost, and settles from its new instant",
		buckets: on(slidingLog("l", 4, sec)),
		steps: []step{
			{ok: true}, // 1: at S, cost 1
			{op: opSettle, cancel: 1, settle: []int{3}}, // its entry holds 3
			{cost: 2, delay: sec},
			{advance: 100 * ms, op: opShorten, cancel: 1, d: 200 * ms, moved: true}, // 4: to S-700ms
			{cost: 2, delay: 200 * ms},                                              // 3 count until S+300ms: not 1, and moved
			{op: opSettle, cancel: 4, settle: []int{1}},                             // the moved entry to 1
			{cost: 3, ok: true},
			{delay: 200 * ms},
			{advance: 200 * ms, ok: true},
		},
	}, {
		name:    "a reservation ahead moves back",
		buckets: on(slidingLog("l", 2, sec)),
		steps: []step{
			{ok: true},                            // at S
			{ok: true},                            // at S
			{maxWait: hour, ok: true, delay: sec}, // 3: its entry at S+1s
			{advance: 100 * ms, op: opShorten, cancel: 3, d: 1500 * ms, moved: true}, // to S+600ms
			{maxWait: hour, ok: true, delay: 900 * ms},                               // at S+1s, when S's entries leave
			{maxWait: hour, ok: true, delay: 1500 * ms},                              // at S+1.6s, not S+2s
		},
	}, {
		name:    "moved before every other entry, the others keep their instants",
		buckets: on(slidingLog("l", 3, sec)),
		steps: []step{
			{ok: true},                    // A at S
			{advance: 200 * ms, ok: true}, // B at S+200ms
			{advance: 200 * ms, ok: true}, // 3: C at S+400ms
			{advance: 100 * ms, op: opShorten, cancel: 3, d: 300 * ms, moved: true}, // S+500ms: C to S-200ms
			{delay: 300 * ms},             // C leaves at S+800ms
			{advance: 300 * ms, ok: true}, // D at S+800ms
			{delay: 200 * ms},             // A leaves at S+1s
			{advance: 200 * ms, ok: true}, // at S+1s
			{delay: 200 * ms},             // B leaves at S+1.2s
			{advance: 200 * ms, ok: true}, // at S+1.2s
			{delay: 600 * ms},             // D leaves at S+1.8s
		},
	}, {
		name:    "moved between other entries, the running totals stay right",
		buckets: on(slidingLog("l", 6, sec)),
		steps: []step{
			{ok: true},                             // A at S, 1
			{advance: 200 * ms, cost: 2, ok: true}, // B at S+200ms, 2
			{advance: 200 * ms, cost: 3, ok: true}, // 3: C at S+400ms, 3
			{advance: 100 * ms, op: opShorten, cancel: 3, d: 600 * ms, moved: true}, // S+500ms: C to S+100ms
			{delay: 500 * ms},                      // A leaves at S+1s
			{advance: 500 * ms, ok: true},          // D at S+1s, 1
			{cost: 3, delay: 100 * ms},             // C's 3 leave at S+1.1s, not S+1.4s
			{advance: 100 * ms, cost: 3, ok: true}, // at S+1.1s
			{cost: 2, delay: 100 * ms},             // B's 2 leave at S+1.2s
			{advance: 100 * ms, cost: 2, ok: true},
			{cost: 4, delay: 900 * ms}, // D's 1 and E's 3 leave at S+2s, S+2.1s
		},
	}, {
		name:    "one limit of several; a bad index or algorithm is ErrInvalid",
		buckets: on(conc("c", 5, minute), slidingLog("l", 4, sec), gcra("g", 10, sec, 10)),
		steps: []step{
			{ok: true}, // 1: at S
			{op: opSettle, cancel: 1, settle: []int{1, 3, 1}},           // the entry holds 3
			{op: opShorten, cancel: 1, index: 0, err: quota.ErrInvalid}, // Concurrency
			{op: opShorten, cancel: 1, index: 2, err: quota.ErrInvalid}, // GCRA
			{op: opShorten, cancel: 1, index: 3, err: quota.ErrInvalid},
			{op: opShorten, cancel: 1, index: -1, err: quota.ErrInvalid},
			{advance: 100 * ms, op: opShorten, cancel: 1, index: 1, d: 200 * ms, moved: true}, // to S-700ms
			{use: []int{1}, cost: 2, delay: 200 * ms},
			{advance: 200 * ms, use: []int{1}, cost: 4, ok: true},
		},
	}}
}

// shortenStep runs st, an opShorten step numbered n, on r at now, checks
// its result and returns the reservation to act on from then on, or false
// after a failed check.
func shortenStep(t *testing.T, store quota.Store, n int, st step, r *quota.Reservation, now time.Time) (*quota.Reservation, bool) {
	t.Helper()
	sh, ok := store.(quota.Shortener)
	if !assert.True(t, ok, "step %d: %v: the store is not a quota.Shortener", n, st) {
		return nil, false
	}
	marks := slices.Clone(r.Marks)
	res, err := sh.Shorten(t.Context(), quota.Shortening{Reservation: r, Limit: st.index, Within: st.d})
	var nr *quota.Reservation
	if err == nil && assert.Len(t, res, 1, "step %d: %v: results", n, st) {
		nr = res[0]
	}
	moved := nr != nil && nr != r
	if !assert.Equal(t, marks, r.Marks, "step %d: %v: Shorten modified the reservation", n, st) {
		return nil, false
	}
	if st.err != nil {
		if !assert.Error(t, err, "step %d: %v", n, st) ||
			st.err != errAny && !assert.ErrorIs(t, err, st.err, "step %d: %v", n, st) {
			return nil, false
		}
		return r, true
	}
	if !assert.NoError(t, err, "step %d: %v", n, st) || nr == nil ||
		!assert.Equal(t, st.moved, moved, "step %d: %v: moved", n, st) {
		return nil, false
	}
	if !moved {
		return r, assert.Same(t, r, nr, "step %d: %v: not moved, but a reservation other than r", n, st)
	}
	want := slices.Clone(marks)
	want[st.index] = now.UnixMicro() + quotamath.CeilMicros(st.d) - r.Demand.Limits[st.index].Limit.Per.Microseconds()
	ok = assert.NotSame(t, r, nr, "step %d: %v: moved, and r returned", n, st) &&
		assert.Equal(t, want, nr.Marks, "step %d: %v: marks (want vs got)", n, st) &&
		assert.Equal(t, [3]any{r.ID, r.Demand, r.Unclaimed}, [3]any{nr.ID, nr.Demand, nr.Unclaimed}, "step %d: %v: the reservation's ID, Demand and Unclaimed", n, st)
	return nr, ok
}

// testShortenMalformed checks that a reservation that is none is an
// error, not a panic.
func (s *suite) testShortenMalformed(t *testing.T) {
	t.Parallel()
	store, _ := s.newStore(t)
	sh := store.(quota.Shortener)
	d := &quota.Demand{Scope: s.scope(t, ""), Cost: 1, Limits: on(slidingLog("l", 2, sec))}
	dec, err := store.Take(t.Context(), d)
	if !assert.NoError(t, err) || !assert.True(t, dec.OK) {
		return
	}
	good := dec.Reservation
	for _, c := range []struct {
		name string
		r    *quota.Reservation
	}{
		{"nil", nil},
		{"no demand", &quota.Reservation{ID: good.ID, Marks: good.Marks}},
		{"no marks", &quota.Reservation{ID: good.ID, Demand: good.Demand}},
		{"too many marks", &quota.Reservation{ID: good.ID, Demand: good.Demand, Marks: []int64{0, 0}}},
	} {
		assert.NotPanics(t, func() {
			_, err := sh.Shorten(t.Context(), quota.Shortening{Reservation: c.r})
			assert.Error(t, err, c.name)
			// With a good one before it: an error, and nothing moves.
			_, err = sh.Shorten(t.Context(), quota.Shortening{Reservation: good}, quota.Shortening{Reservation: c.r})
			assert.Error(t, err, c.name)
		}, c.name)
	}
	_, err = sh.Shorten(t.Context(), quota.Shortening{Reservation: good}, quota.Shortening{Reservation: good, Limit: 1})
	var fe *quota.FieldError
	assert.ErrorAs(t, err, &fe, "a bad index after a good one")
	assert.ErrorIs(t, err, quota.ErrInvalid, "a bad index after a good one")
	res, err := sh.Shorten(t.Context())
	assert.NoError(t, err, "no entry")
	assert.Empty(t, res, "no entry")
	// The reservation itself is still whole, and shortens: nothing moved
	// above.
	res, err = sh.Shorten(t.Context(), quota.Shortening{Reservation: good})
	if assert.NoError(t, err) && assert.Len(t, res, 1) {
		assert.NotSame(t, good, res[0], "not moved before")
	}
}

// testShortenMany shortens many entries in one call: of one log, of
// another scope's, one not moved, and a settled one; each result is its
// own entry's, and the logs admit as each moved. (No entry is named
// twice: memstore and the model find an entry by its instant and cost,
// which the log's other entries of this test share.)
func (s *suite) testShortenMany(t *testing.T) {
	t.Parallel()
	store, clock := s.newStore(t)
	sh := store.(quota.Shortener)
	a := &quota.Demand{Scope: s.scope(t, "a"), Cost: 1, Limits: on(slidingLog("l", 4, sec))}
	b := &quota.Demand{Scope: s.scope(t, "b"), Cost: 1, Limits: on(slidingLog("l", 1, sec))}
	take := func(d *quota.Demand) *quota.Reservation {
		t.Helper()
		dec, err := store.Take(t.Context(), d)
		if !assert.NoError(t, err) || !assert.True(t, dec.OK) {
			t.FailNow()
		}
		return dec.Reservation
	}
	start := clock.Now()
	ra := []*quota.Reservation{take(a), take(a), take(a), take(a)} // a's log full until S+1s
	rb := take(b)
	// ra[3]'s entry is settled to 2 where the store settles: the move
	// must find it with its settled cost.
	settler, settles := store.(quota.Settler)
	if settles {
		assert.NoError(t, settler.Settle(t.Context(), ra[3], []int{2}))
	}
	clock.Advance(100 * ms)
	ss := []quota.Shortening{
		{Reservation: ra[0], Within: 200 * ms}, // to S-700ms: counts until S+300ms
		{Reservation: rb, Within: 400 * ms},    // b's: until S+500ms
		{Reservation: ra[1], Within: 200 * ms},
		{Reservation: ra[2], Within: 2 * sec},  // after its own end: not moved
		{Reservation: ra[3], Within: 300 * ms}, // until S+400ms
	}
	res, err := sh.Shorten(t.Context(), ss...)
	if !assert.NoError(t, err) || !assert.Len(t, res, len(ss)) {
		return
	}
	at := func(d time.Duration) int64 { return start.Add(d).UnixMicro() }
	for k, want := range []int64{at(-700 * ms), at(-500 * ms), at(-700 * ms), 0, at(-600 * ms)} {
		r := ss[k].Reservation
		if want == 0 {
			assert.Same(t, r, res[k], "entry %d: not moved", k)
			continue
		}
		if assert.NotSame(t, r, res[k], "entry %d: moved", k) {
			assert.Equal(t, []int64{want}, res[k].Marks, "entry %d: its mark", k)
			assert.Equal(t, []int64{at(0)}, r.Marks, "entry %d: the reservation given is unchanged", k)
		}
	}
	refused := func(d *quota.Demand, delay time.Duration, what string) {
		t.Helper()
		dec, err := store.Take(t.Context(), d)
		if assert.NoError(t, err, what) {
			assert.Equal(t, [2]any{false, delay}, [2]any{dec.OK, dec.Delay}, what)
		}
	}
	// a's log: two entries leave at S+300ms, ra[3]'s at S+400ms, ra[2]'s
	// at S+1s.
	clock.Advance(200*ms - us)
	refused(a, us, "a at S+300ms-1µs")
	clock.Advance(us)
	take(a)
	if !settles {
		take(a) // ra[3]'s entry holds 1
	}
	refused(a, 100*ms, "a at S+300ms, full until ra[3]'s entry leaves")
	// b's log: free at S+500ms.
	refused(b, 200*ms, "b at S+300ms")
}

// The model's shortening: a view is a quota.Shortener.

var _ quota.Shortener = view{}

// Shorten implements quota.Shortener.
func (v view) Shorten(_ context.Context, ss ...quota.Shortening) ([]*quota.Reservation, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	for k, sh := range ss {
		if err := sh.Reservation.CheckShorten(sh.Limit); err != nil {
			return nil, fmt.Errorf("storetest model: shorten %d: %w", k, err)
		}
		if err := check(sh.Reservation.Demand); err != nil {
			return nil, fmt.Errorf("storetest model: shorten %d: %w", k, err)
		}
	}
	now := v.micros()
	res := make([]*quota.Reservation, len(ss))
	for k, sh := range ss {
		res[k] = v.m.shorten(sh.Reservation, sh.Limit, sh.Within, now)
	}
	return res, nil
}

// shorten moves the entry r charged to its limit i, a sliding log, to
// now + within - Per when that is earlier than its instant, as
// quota.Shortener says. The entry holds the cost r was last settled to,
// or the cost charged; like refund, it takes any entry alike. r has
// passed CheckShorten(i). It returns r when nothing moved.
func (m *model) shorten(r *quota.Reservation, i int, within time.Duration, now int64) *quota.Reservation {
	d := r.Demand
	b := d.Limits[i]
	to := now + quotamath.CeilMicros(within) - per(b.Limit)
	if to >= r.Marks[i] {
		return r
	}
	cost := int64(d.CostOf(i))
	if s := m.settled[r.ID]; len(s) == len(d.Limits) {
		cost = s[i]
	}
	id := bucketID(d.Scope, b)
	j := slices.Index(m.log[id], quotamath.LogEntry{At: r.Marks[i], Cost: cost})
	if j < 0 {
		return r
	}
	m.log[id] = quotamath.Insert(slices.Delete(m.log[id], j, j+1), quotamath.LogEntry{At: to, Cost: cost})
	nr := *r
	nr.Marks = slices.Clone(r.Marks)
	nr.Marks[i] = to
	return &nr
}
