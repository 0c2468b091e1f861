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
	nr, moved, err := sh.Shorten(t.Context(), r, st.index, st.d)
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
	if !assert.NoError(t, err, "step %d: %v", n, st) ||
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
			_, moved, err := sh.Shorten(t.Context(), c.r, 0, 0)
			assert.Error(t, err, c.name)
			assert.False(t, moved, c.name)
		}, c.name)
	}
	// The reservation itself is still whole, and shortens.
	_, moved, err := sh.Shorten(t.Context(), good, 0, 0)
	assert.NoError(t, err)
	assert.True(t, moved)
}

// The model's shortening: a view is a quota.Shortener.

var _ quota.Shortener = view{}

// Shorten implements quota.Shortener.
func (v view) Shorten(_ context.Context, r *quota.Reservation, i int, within time.Duration) (*quota.Reservation, bool, error) {
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	return v.m.shorten(r, i, within, v.micros())
}

// shorten moves the entry r charged to its limit i, a sliding log, to
// now + within - Per when that is earlier than its instant, as
// quota.Shortener says. The entry holds the cost r was last settled to,
// or the cost charged; like refund, it takes any entry alike.
func (m *model) shorten(r *quota.Reservation, i int, within time.Duration, now int64) (*quota.Reservation, bool, error) {
	if err := r.CheckShorten(i); err != nil {
		return r, false, fmt.Errorf("storetest model: %w", err)
	}
	d := r.Demand
	if err := check(d); err != nil {
		return r, false, err
	}
	b := d.Limits[i]
	to := now + quotamath.CeilMicros(within) - per(b.Limit)
	if to >= r.Marks[i] {
		return r, false, nil
	}
	cost := int64(d.CostOf(i))
	if s := m.settled[r.ID]; len(s) == len(d.Limits) {
		cost = s[i]
	}
	id := bucketID(d.Scope, b)
	j := slices.Index(m.log[id], quotamath.LogEntry{At: r.Marks[i], Cost: cost})
	if j < 0 {
		return r, false, nil
	}
	m.log[id] = quotamath.Insert(slices.Delete(m.log[id], j, j+1), quotamath.LogEntry{At: to, Cost: cost})
	nr := *r
	nr.Marks = slices.Clone(r.Marks)
	nr.Marks[i] = to
	return &nr, true, nil
}
