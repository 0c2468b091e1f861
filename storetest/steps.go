package storetest

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
)

const (
	us     = time.Microsecond
	ms     = time.Millisecond
	sec    = time.Second
	minute = time.Minute
	hour   = time.Hour
)

// A stepCase is one named table of steps run in order against one fresh
// store whose clock starts at Start.
type stepCase struct {
	name    string
	buckets []quota.Bucket
	steps   []step
}

// An op is what a step does.
type op int

const (
	opTake    op = iota // Take a demand
	opCancel            // Cancel the reservation of an earlier step
	opPause             // Pause a key
	opSync              // Sync a bucket (the store must be a quota.Syncer)
	opRelease           // Release the slots of an earlier step (quota.LeaseStore)
	opRenew             // Renew the leases of an earlier step (quota.LeaseStore)
	opClaim             // Claim the slots of an earlier step's reservation (quota.LeaseStore)
	opAnchor            // Anchor a bucket (the store must be a quota.Anchorer)
	opSettle            // Settle the reservation of an earlier step (quota.Settler)
	opRetime            // Retime the reservation of an earlier step (quota.Retimer)
	opShorten           // Shorten the reservation of an earlier step (quota.Shortener)
)

// costZero asks a step for a demand of cost 0 (a zero cost field means 1).
const costZero = math.MinInt

// errAny in step.err accepts any error.
var errAny = errors.New("any error")

// A step advances the clock, then does one operation and checks its result.
type step struct {
	advance time.Duration // moves the clock before the operation
	op      op

	// For opTake: the demand.
	use     []int         // indexes into the case's buckets; nil means all
	costs   []int         // non-nil: Bucket.Cost of each limit of the demand
	scope   string        // non-empty: a separate scope, named so
	cost    int           // 0 means 1; costZero means 0
	maxWait time.Duration // Demand.MaxWait
	pauses  []string      // Demand.Pauses

	// For opTake, opClaim and opRetime: the wanted decision. When ok, Delay must be
	// delay and Limit -1. When not ok, Delay must be delay, and Limit must
	// be limit unless pause is set, in which case Limit must be -1 and
	// Pause pause. A granted take of a demand with Concurrency limits must
	// leave their slots unclaimed exactly when delay is not 0; a granted
	// claim holds them.
	ok    bool
	delay time.Duration
	limit int
	pause string
	err   error // non-nil: Take must fail with an error matching err (errAny: any)
	left  *left // non-nil: a take's Remaining and ResetAfter must be these

	// For opCancel, opRelease, opRenew, opClaim, opSettle, opRetime and
	// opShorten: the 1-based number of the step whose reservation is
	// cancelled, released, renewed, claimed, settled, retimed or
	// shortened. For opRenew, opSettle and opShorten, err is the error
	// wanted (nil: none).
	cancel int

	// For opShorten: Shorten(reservation, index, d), which must report
	// moved; when moved, the reservation's mark for limit index must be
	// now + d - Per, else the reservation itself must come back. The
	// step's reservation is then the one returned.
	index int

	// For opSettle: the costs, one per limit of the reservation's demand.
	settle []int

	// For opPause: Pause(scope, key, d). For opSync: Sync(scope, bucket
	// use[0] (default 0), remaining, d). For opAnchor: Anchor(scope,
	// bucket use[0] (default 0), d, tolerance), which must report moved
	// and ends, or fail with err.
	key       string
	d         time.Duration
	remaining int
	tolerance time.Duration
	moved     bool
	ends      time.Duration
}

// demand builds the step's demand.
func (st step) demand(buckets []quota.Bucket, scope string) *quota.Demand {
	d := &quota.Demand{Scope: scope, Cost: st.cost, MaxWait: st.maxWait, Pauses: st.pauses}
	switch st.cost {
	case 0:
		d.Cost = 1
	case costZero:
		d.Cost = 0
	}
	if st.use == nil {
		d.Limits = buckets
	} else {
		for _, i := range st.use {
			d.Limits = append(d.Limits, buckets[i])
		}
	}
	if st.costs != nil {
		d.Limits = slices.Clone(d.Limits)
		for i, c := range st.costs {
			d.Limits[i].Cost = c
		}
	}
	return d
}

// left is what a step wants of Decision.Remaining and ResetAfter.
type left struct {
	remaining int64
	reset     time.Duration
}

// String describes the step for failure messages.
func (st step) String() string {
	s := ""
	if st.advance != 0 {
		s = fmt.Sprintf("advance %v, ", st.advance)
	}
	switch st.op {
	case opCancel:
		return s + fmt.Sprintf("cancel the reservation of step %d", st.cancel)
	case opRelease:
		return s + fmt.Sprintf("release the slots of step %d", st.cancel)
	case opRenew:
		return s + fmt.Sprintf("renew the leases of step %d", st.cancel)
	case opClaim:
		return s + fmt.Sprintf("claim the slots of step %d", st.cancel)
	case opSettle:
		return s + fmt.Sprintf("settle the reservation of step %d to %v", st.cancel, st.settle)
	case opRetime:
		return s + fmt.Sprintf("retime the reservation of step %d", st.cancel)
	case opShorten:
		return s + fmt.Sprintf("shorten limit %d of the reservation of step %d to within %v", st.index, st.cancel, st.d)
	case opPause:
		return s + fmt.Sprintf("pause %q for %v", st.key, st.d)
	case opSync:
		return s + fmt.Sprintf("sync to %d remaining within %v", st.remaining, st.d)
	case opAnchor:
		return s + fmt.Sprintf("anchor to a window ending within %v, tolerance %v", st.d, st.tolerance)
	}
	s += "take"
	if st.use != nil {
		s += fmt.Sprintf(" limits %v", st.use)
	}
	if st.scope != "" {
		s += " in scope " + st.scope
	}
	switch st.cost {
	case 0:
	case costZero:
		s += " cost 0"
	default:
		s += fmt.Sprintf(" cost %d", st.cost)
	}
	if st.costs != nil {
		s += fmt.Sprintf(" limit costs %v", st.costs)
	}
	if st.maxWait != 0 {
		s += fmt.Sprintf(" maxWait %v", st.maxWait)
	}
	if st.pauses != nil {
		s += fmt.Sprintf(" pauses %q", st.pauses)
	}
	return s
}

// outcome is the checked part of a Decision.
type outcome struct {
	OK    bool
	Delay time.Duration
	Limit int
	Pause string
}

func (st step) want() outcome {
	w := outcome{OK: st.ok, Delay: st.delay, Limit: -1}
	if !st.ok {
		w.Pause = st.pause
		if st.pause == "" {
			w.Limit = st.limit
		}
	}
	return w
}

func (s *suite) runCases(t *testing.T, cases []stepCase) {
	for _, sc := range cases {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			store, clock := s.newStore(t)
			runSteps(t, store, clock, sc, func(v string) string { return s.scope(t, v) })
		})
	}
}

// runSteps runs the steps of sc and stops at the first step that fails.
func runSteps(t *testing.T, store quota.Store, clock *Clock, sc stepCase, scope func(v string) string) {
	decs := make([]quota.Decision, len(sc.steps))
	for i, st := range sc.steps {
		n := i + 1
		clock.Advance(st.advance)
		sp := scope(st.scope)
		switch st.op {
		case opCancel:
			r := decs[st.cancel-1].Reservation
			if !assert.NotNil(t, r, "step %d: %v: step %d granted no reservation", n, st, st.cancel) {
				return
			}
			if !assert.NoError(t, store.Cancel(t.Context(), r), "step %d: %v", n, st) {
				return
			}
		case opPause:
			if !assert.NoError(t, store.Pause(t.Context(), sp, st.key, st.d), "step %d: %v", n, st) {
				return
			}
		case opRelease, opRenew:
			r := decs[st.cancel-1].Reservation
			ls, ok := store.(quota.LeaseStore)
			if !assert.True(t, ok, "step %d: %v: the store is not a quota.LeaseStore", n, st) ||
				!assert.NotNil(t, r, "step %d: %v: step %d granted no reservation", n, st, st.cancel) {
				return
			}
			if st.op == opRelease {
				if !assert.NoError(t, ls.Release(t.Context(), r), "step %d: %v", n, st) {
					return
				}
				continue
			}
			err := ls.Renew(t.Context(), r)
			if st.err == nil && !assert.NoError(t, err, "step %d: %v", n, st) ||
				st.err != nil && !assert.ErrorIs(t, err, st.err, "step %d: %v", n, st) {
				return
			}
		case opSync:
			b := sc.buckets[0]
			if len(st.use) > 0 {
				b = sc.buckets[st.use[0]]
			}
			syncer, ok := store.(quota.Syncer)
			if !assert.True(t, ok, "step %d: %v: the store is not a quota.Syncer", n, st) {
				return
			}
			if !assert.NoError(t, syncer.Sync(t.Context(), sp, b, st.remaining, st.d), "step %d: %v", n, st) {
				return
			}
		case opAnchor:
			b := sc.buckets[0]
			if len(st.use) > 0 {
				b = sc.buckets[st.use[0]]
			}
			anchorer, ok := store.(quota.Anchorer)
			if !assert.True(t, ok, "step %d: %v: the store is not a quota.Anchorer", n, st) {
				return
			}
			ends, moved, err := anchorer.Anchor(t.Context(), sp, b, st.d, st.tolerance)
			if st.err != nil {
				if !assert.ErrorIs(t, err, st.err, "step %d: %v", n, st) {
					return
				}
				continue
			}
			if !assert.NoError(t, err, "step %d: %v", n, st) ||
				!assert.Equal(t, [2]any{st.moved, st.ends}, [2]any{moved, ends}, "step %d: %v: moved and ends (want vs got)", n, st) {
				return
			}
		case opSettle:
			r := decs[st.cancel-1].Reservation
			settler, ok := store.(quota.Settler)
			if !assert.True(t, ok, "step %d: %v: the store is not a quota.Settler", n, st) ||
				!assert.NotNil(t, r, "step %d: %v: step %d granted no reservation", n, st, st.cancel) {
				return
			}
			err := settler.Settle(t.Context(), r, st.settle)
			if st.err == nil && !assert.NoError(t, err, "step %d: %v", n, st) ||
				st.err != nil && !assert.ErrorIs(t, err, st.err, "step %d: %v", n, st) {
				return
			}
		case opRetime:
			r := decs[st.cancel-1].Reservation
			rt, ok := store.(quota.Retimer)
			if !assert.True(t, ok, "step %d: %v: the store is not a quota.Retimer", n, st) ||
				!assert.NotNil(t, r, "step %d: %v: step %d granted no reservation", n, st, st.cancel) {
				return
			}
			marks := slices.Clone(r.Marks)
			dec, err := rt.Retime(t.Context(), r)
			if !assert.NoError(t, err, "step %d: %v", n, st) {
				return
			}
			decs[i] = dec
			if !checkDecision(t, n, st, dec, len(r.Demand.Limits), r.Unclaimed) ||
				!assert.Equal(t, marks, r.Marks, "step %d: %v: Retime modified the reservation", n, st) ||
				dec.OK && !assert.Equal(t, r.ID, dec.Reservation.ID, "step %d: %v: the retimed reservation's ID", n, st) {
				return
			}
		case opShorten:
			r := decs[st.cancel-1].Reservation
			if !assert.NotNil(t, r, "step %d: %v: step %d granted no reservation", n, st, st.cancel) {
				return
			}
			nr, ok := shortenStep(t, store, n, st, r, clock.Now())
			if !ok {
				return
			}
			decs[i] = quota.Decision{OK: true, Limit: -1, Reservation: nr}
		case opClaim:
			r := decs[st.cancel-1].Reservation
			ls, ok := store.(quota.LeaseStore)
			if !assert.True(t, ok, "step %d: %v: the store is not a quota.LeaseStore", n, st) ||
				!assert.NotNil(t, r, "step %d: %v: step %d granted no reservation", n, st, st.cancel) {
				return
			}
			unclaimed := r.Unclaimed
			dec, err := ls.Claim(t.Context(), r)
			if !assert.NoError(t, err, "step %d: %v", n, st) {
				return
			}
			decs[i] = dec
			if !checkDecision(t, n, st, dec, len(r.Demand.Limits), false) ||
				!assert.Equal(t, unclaimed, r.Unclaimed, "step %d: %v: Claim modified the reservation", n, st) {
				return
			}
		case opTake:
			d := st.demand(sc.buckets, sp)
			dec, err := store.Take(t.Context(), d)
			if st.err != nil {
				if !assert.Error(t, err, "step %d: %v: want an error, got decision %+v", n, st, dec) {
					return
				}
				if st.err != errAny && !assert.ErrorIs(t, err, st.err, "step %d: %v", n, st) {
					return
				}
				continue
			}
			if !assert.NoError(t, err, "step %d: %v", n, st) {
				return
			}
			decs[i] = dec
			if !checkDecision(t, n, st, dec, len(d.Limits), st.delay > 0 && hasConcurrency(d)) {
				return
			}
			if st.left != nil && !assert.Equal(t, *st.left, left{dec.Remaining, dec.ResetAfter}, "step %d: %v: Remaining and ResetAfter (want vs got)", n, st) {
				return
			}
		}
	}
}

// checkDecision checks dec, the decision of step n on a demand of limits
// limits, against st, and that a granted decision's slots are unclaimed
// exactly when unclaimed.
func checkDecision(t *testing.T, n int, st step, dec quota.Decision, limits int, unclaimed bool) bool {
	t.Helper()
	got := outcome{OK: dec.OK, Delay: dec.Delay, Limit: dec.Limit, Pause: dec.Pause}
	if !assert.Equal(t, st.want(), got, "step %d: %v: decision (want vs got)", n, st) {
		return false
	}
	if !dec.OK {
		return assert.Nil(t, dec.Reservation, "step %d: %v: refused with a Reservation", n, st)
	}
	if limits == 0 {
		return true // a Reservation is optional
	}
	return assert.NotNil(t, dec.Reservation, "step %d: %v: granted without a Reservation", n, st) &&
		assert.Equal(t, unclaimed, dec.Reservation.Unclaimed, "step %d: %v: Reservation.Unclaimed", n, st)
}

// hasConcurrency reports whether d has a Concurrency limit.
func hasConcurrency(d *quota.Demand) bool {
	for _, b := range d.Limits {
		if b.Limit.Algorithm == quota.Concurrency {
			return true
		}
	}
	return false
}

// Limit constructors for the tables.

func gcra(name string, rate int, per time.Duration, burst int) quota.Limit {
	return quota.Limit{Name: name, Rate: rate, Per: per, Burst: burst, Algorithm: quota.GCRA}
}

func fixed(name string, rate int, per time.Duration) quota.Limit {
	return quota.Limit{Name: name, Rate: rate, Per: per, Algorithm: quota.FixedWindow}
}

func slidingLog(name string, rate int, per time.Duration) quota.Limit {
	return quota.Limit{Name: name, Rate: rate, Per: per, Algorithm: quota.SlidingLog}
}

func conc(name string, slots int, lease time.Duration) quota.Limit {
	return quota.Limit{Name: name, Rate: slots, Per: lease, Algorithm: quota.Concurrency}
}

func slidingWin(name string, rate int, per time.Duration) quota.Limit {
	return quota.Limit{Name: name, Rate: rate, Per: per, Algorithm: quota.SlidingWindow}
}

// phased returns l with its windows at phase.
func phased(l quota.Limit, phase time.Duration) quota.Limit {
	l.Phase = phase
	return l
}

// anchored returns l with Anchored set.
func anchored(l quota.Limit) quota.Limit {
	l.Anchored = true
	return l
}

// on returns the buckets of limits, each with key "k".
func on(limits ...quota.Limit) []quota.Bucket {
	bs := make([]quota.Bucket, len(limits))
	for i, l := range limits {
		bs[i] = quota.Bucket{Limit: l, Key: "k"}
	}
	return bs
}

// repeat returns n copies of st.
func repeat(n int, st step) []step {
	s := make([]step, n)
	for i := range s {
		s[i] = st
	}
	return s
}

// steps concatenates groups of steps.
func steps(groups ...[]step) []step {
	var s []step
	for _, g := range groups {
		s = append(s, g...)
	}
	return s
}
