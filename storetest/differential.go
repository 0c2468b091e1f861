package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/require"
)

// testDifferential drives the store under test and the suite's reference
// model with the same seeded random sequence of demands, cancellations,
// pauses and clock moves, and asserts identical decisions. Afterwards it
// checks the limits' invariants over every admission not cancelled.
func (s *suite) testDifferential(t *testing.T) {
	mixes := []struct {
		name   string
		algs   []quota.Algorithm
		large  bool // large and awkward rates (largeLimit)
		shares bool // headrooms and tenants too
		expiry bool // sliding logs' entries scored by a random quota.LogExpiry, mostly
	}{
		{"GCRA", []quota.Algorithm{quota.GCRA}, false, false, false},
		{"FixedWindow", []quota.Algorithm{quota.FixedWindow}, false, false, false},
		{"SlidingLog", []quota.Algorithm{quota.SlidingLog}, false, false, false},
		{"SlidingLog/expiry", []quota.Algorithm{quota.SlidingLog}, false, false, true},
		{"SlidingWindow", []quota.Algorithm{quota.SlidingWindow}, false, false, false},
		{"mixed", algorithms, false, false, false},
		{"mixed/expiry", algorithms, false, false, true},
		{"large/GCRA", []quota.Algorithm{quota.GCRA}, true, false, false},
		{"large/SlidingWindow", []quota.Algorithm{quota.SlidingWindow}, true, false, false},
		{"large/mixed", algorithms, true, false, false},
		{"shares/GCRA", []quota.Algorithm{quota.GCRA}, false, true, false},
		{"shares/mixed", algorithms, false, true, false},
		{"large/shares/mixed", algorithms, true, true, false},
	}
	for _, mix := range mixes {
		seeds := uint64(4)
		if mix.shares {
			seeds = 8 // claims are rarer than the rest
		}
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", mix.name, seed), func(t *testing.T) {
				t.Parallel()
				s.differential(t, mix.algs, mix.large, mix.shares, mix.expiry, seed)
			})
		}
	}
}

// largeLimit returns a limit of algorithm alg with a large or awkward
// rate: one of the quotas the issue names (7 per 3 s, 3*10^6 and 10^7 a
// second, 10^6 a day, 10^9 per 31 days), or a random Rate up to 10^9 over
// a random Per up to 40 days, within quota.Limit's bounds. A GCRA burst
// is sometimes below or above the rate.
func largeLimit(rng *rand.Rand, name string, alg quota.Algorithm) quota.Limit {
	named := []struct {
		rate int
		per  time.Duration
	}{{7, 3 * sec}, {3_000_000, sec}, {10_000_000, sec}, {1_000_000, day}, {1_000_000_000, month31}}
	l := quota.Limit{Name: name, Algorithm: alg}
	if i := rng.IntN(len(named) + 2); i < len(named) {
		l.Rate, l.Per = named[i].rate, named[i].per
	} else {
		l.Per = time.Duration(1+rng.Int64N(40*day.Microseconds())) * us
		l.Rate = 1 + rng.IntN(1_000_000_000)
	}
	if alg == quota.SlidingLog {
		l.Rate = min(l.Rate, quota.MaxSlidingLogRate)
	}
	l.Rate = min(int64ToInt(l.Per.Nanoseconds()), l.Rate) // one unit a nanosecond at most
	if alg == quota.GCRA && rng.IntN(2) == 0 {
		l.Burst = 1 + rng.IntN(2*l.Rate)
	}
	return l
}

func int64ToInt(n int64) int { return int(min(n, int64(^uint(0)>>1))) }

// randomExpiry returns a [quota.LogExpiry] for a sliding log l: a grid
// of windows up to Per (mostly near it, as an Anchor limit's log has),
// its ends known exactly or within a spread, and a reach up to Per; or,
// one in five, a grid of a microsecond and a reach near Per.
func randomExpiry(rng *rand.Rand, l quota.Limit) quota.LogExpiry {
	p := per(l)
	every := 1 + rng.Int64N(p)
	if rng.IntN(2) == 0 {
		every = p - rng.Int64N(p/4+1)
	}
	if rng.IntN(5) == 0 {
		// A grid of a microsecond: the entry counts for its reach, up to
		// Per, as an Anchor limit's entries count for their own time.
		return quota.LogExpiry{Every: us, Reach: time.Duration(p-rng.Int64N(p/4+1)) * us}
	}
	e := quota.LogExpiry{Every: time.Duration(every) * us, Phase: time.Duration(rng.Int64N(every)) * us,
		Reach: time.Duration(rng.Int64N(p+1)) * us}
	if rng.IntN(3) > 0 {
		e.Spread = time.Duration(rng.Int64N(every)) * us
	}
	return e
}

// admitted returns the admission of a grant of cost c on bucket b at
// instant at (its entry's instant too, for a log with an expiry).
func admitted(b quota.Bucket, at, c int64) admission {
	a := admission{at: at, cost: c}
	if b.Limit.Algorithm == quota.SlidingLog && b.Expiry.Every > 0 {
		l := quotamath.Of(b.Limit).WithExpiry(b.Expiry)
		a.scored, a.logAt = true, l.LogAt(at)
	}
	return a
}

// granted is a reservation the differential test may cancel.
type granted struct {
	step   int
	seq    int // order of grants
	store  *quota.Reservation
	model  *quota.Reservation
	demand *quota.Demand
	adm    []int // indexes into the admissions of each limit of demand
	// settled: the reservation was settled, so it is not cancelled (see
	// quota.Settler) and its buckets' invariants are not checked.
	settled bool
}

func (s *suite) differential(t *testing.T, algs []quota.Algorithm, large, shares, expiry bool, seed uint64) {
	const steps = 400
	stream := uint64(len(algs))
	if shares {
		stream += 100
	}
	if expiry {
		stream += 300
	}
	if large {
		stream += 200
	}
	rng := rand.New(rand.NewPCG(seed, stream))
	tenants := []string{"", "x", "y", "x", "y", "z"}
	store, clock := s.newStore(t)
	m := newModel()
	scope := s.scope(t, "")

	// The limits: three names, random parameters, two keys each.
	periods := []int64{1000, 1500, 3000, 7000, 10000, 333, 999}
	var limits []quota.Limit
	for i := range 3 {
		l := quota.Limit{
			Name:      fmt.Sprintf("l%d", i),
			Rate:      1 + rng.IntN(6),
			Per:       time.Duration(periods[rng.IntN(len(periods))]) * us,
			Algorithm: algs[rng.IntN(len(algs))],
		}
		if l.Algorithm == quota.GCRA && rng.IntN(2) == 0 {
			l.Burst = 1 + rng.IntN(8)
		}
		if large {
			l = largeLimit(rng, l.Name, l.Algorithm)
		}
		if l.Windowed() {
			switch rng.IntN(3) {
			case 1:
				l.Phase = time.Duration(rng.Int64N(per(l))) * us
			case 2:
				l.Anchored = true
			}
		}
		limits = append(limits, l)
	}
	t.Logf("limits: %+v", limits)
	var maxPer int64
	for _, l := range limits {
		maxPer = max(maxPer, per(l))
	}
	keys := []string{"a", "b"}
	pauseKeys := []string{"p", "q"}

	// Even seeds settle reservations too, when the store can: a
	// settlement changes what a bucket holds from outside, so the
	// invariants below skip the buckets it touched, and odd seeds keep
	// checking them all.
	settler, _ := store.(quota.Settler)
	if seed%2 == 1 {
		settler = nil
	}
	touched := map[string]bool{} // buckets a settlement changed

	var (
		adm       = map[string][]admission{} // per bucket, in order of grant
		cancelled = map[string][]bool{}
		lastGrant = map[string]int{} // per bucket: seq of the latest grant
		out       []*granted
		seq       int
		trace     []string
		stats     = map[string]int{}
	)
	fail := func(step int, format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d: %s\nlast steps:\n%s", step, fmt.Sprintf(format, args...), lastLines(trace, 12))
	}

	// take decides d in both, compares, records, and returns the decision.
	take := func(step int, d *quota.Demand) (quota.Decision, bool) {
		now := clock.Now().UnixMicro()
		want, at, wantErr := m.take(d, now)
		stats["headroom lent"] += m.lent
		stats["headroom held"] += m.kept
		got, err := store.Take(t.Context(), d)
		trace = append(trace, fmt.Sprintf("  step %d at +%dµs: %s -> want %s, got %s", step, now-Start.UnixMicro(), describe(d), outcomeString(want, wantErr), outcomeString(got, err)))
		switch {
		case wantErr != nil:
			stats["error"]++
		case want.OK && want.Delay == 0:
			stats["granted now"]++
		case want.OK:
			stats["reserved"]++
		case m.held != nil:
			stats["held back by a claim"]++
		case want.Limit >= 0:
			stats["refused by a limit"]++
		default:
			stats["refused by a pause"]++
		}
		if wantErr != nil {
			if err == nil {
				fail(step, "want an error (%v), got %+v", wantErr, got)
			}
			if errors.Is(wantErr, quota.ErrCostTooHigh) && !errors.Is(err, quota.ErrCostTooHigh) {
				fail(step, "want an error matching ErrCostTooHigh, got %v", err)
			}
			return got, false
		}
		if err != nil {
			fail(step, "unexpected error: %v", err)
		}
		if got.OK != want.OK || got.Delay != want.Delay {
			fail(step, "want OK=%v Delay=%v, got OK=%v Delay=%v", want.OK, want.Delay, got.OK, got.Delay)
		}
		if !got.OK {
			lims, pauses := m.binding(d, at)
			lims = append(lims, m.held...) // held back by other tenants' claims, or a held headroom
			okBinding := got.Limit >= 0 && slices.Contains(lims, got.Limit) || got.Limit == -1 && slices.Contains(pauses, got.Pause)
			if !okBinding {
				fail(step, "refused until +%dµs, bound by limits %v or pauses %q; got Limit=%d Pause=%q", at-now, lims, pauses, got.Limit, got.Pause)
			}
			if got.Reservation != nil {
				fail(step, "refused with a Reservation")
			}
			if got.Remaining != 0 || got.ResetAfter != 0 {
				fail(step, "refused with Remaining=%d ResetAfter=%v, want 0", got.Remaining, got.ResetAfter)
			}
			return got, true
		}
		if got.Limit != -1 || got.Pause != "" {
			fail(step, "granted with Limit=%d Pause=%q, want -1 and \"\"", got.Limit, got.Pause)
		}
		if got.Remaining != want.Remaining || got.ResetAfter != want.ResetAfter {
			fail(step, "granted with Remaining=%d ResetAfter=%v, want %d and %v", got.Remaining, got.ResetAfter, want.Remaining, want.ResetAfter)
		}
		if !got.At.IsZero() && got.At.UnixMicro() != now {
			fail(step, "granted with At=+%dµs, want the store's clock, +%dµs", got.At.UnixMicro()-Start.UnixMicro(), now-Start.UnixMicro())
		}
		if len(d.Limits) > 0 && got.Reservation == nil {
			fail(step, "granted without a Reservation")
		}
		seq++
		g := &granted{step: step, seq: seq, store: got.Reservation, model: want.Reservation, demand: d}
		for _, b := range d.Limits {
			id := bucketID(d.Scope, b)
			g.adm = append(g.adm, len(adm[id]))
			adm[id] = append(adm[id], admitted(b, at, int64(d.Cost)))
			cancelled[id] = append(cancelled[id], false)
			lastGrant[id] = seq
		}
		if len(d.Limits) > 0 {
			out = append(out, g)
		}
		return got, true
	}

	// retime moves g's charges to now in both, compares, and records
	// where the charges now lie: a moved charge counts at now in the
	// invariants, and so does one left in place (quota.Retimer: a GCRA
	// charge stays only where a request sent now is counted the same).
	retimer, _ := store.(quota.Retimer)
	retime := func(step int, g *granted) {
		now := clock.Now().UnixMicro()
		want, short, wantErr := m.retime(g.model, now)
		require.NoError(t, wantErr)
		got, err := retimer.Retime(t.Context(), g.store)
		trace = append(trace, fmt.Sprintf("  step %d at +%dµs: retime the reservation of step %d -> want %s, got %s", step, now-Start.UnixMicro(), g.step, outcomeString(want, nil), outcomeString(got, err)))
		if err != nil {
			fail(step, "retime: unexpected error: %v", err)
		}
		if got.OK != want.OK || got.Delay != 0 || got.Pause != want.Pause || !got.OK && got.Pause == "" && !slices.Contains(short, got.Limit) {
			fail(step, "retime: want OK=%v Pause=%q Limit in %v, got OK=%v Delay=%v Pause=%q Limit=%d", want.OK, want.Pause, short, got.OK, got.Delay, got.Pause, got.Limit)
		}
		if !got.OK {
			stats["retime refused"]++
			return
		}
		if got.ResetAfter != want.ResetAfter || got.Limit != -1 || got.Reservation == nil || got.Reservation.ID != g.store.ID {
			fail(step, "retime: granted with ResetAfter=%v Limit=%d, want %v and -1, and the reservation's ID", got.ResetAfter, got.Limit, want.ResetAfter)
		}
		if !got.At.IsZero() && got.At.UnixMicro() != now {
			fail(step, "retime: granted with At=+%dµs, want the store's clock, +%dµs", got.At.UnixMicro()-Start.UnixMicro(), now-Start.UnixMicro())
		}
		for j, b := range g.demand.Limits {
			id := bucketID(g.demand.Scope, b)
			adm[id][g.adm[j]] = admitted(b, now, adm[id][g.adm[j]].cost)
			if want.Reservation.Marks[j] != g.model.Marks[j] {
				lastGrant[id] = g.seq // a GCRA charge made again: the bucket's latest
			}
		}
		g.store, g.model = got.Reservation, want.Reservation
		stats["retime"]++
	}

	syncer, _ := store.(quota.Syncer)
	anchorer, _ := store.(quota.Anchorer)
	for step := 1; step <= steps; step++ {
		r := rng.IntN(100)
		if shares && r >= 46 && r < 61 {
			r = 0 // more takes, to crowd tenants past their shares
		}
		switch {
		case r < 46: // take, sometimes followed by probes of the retry time
			d := &quota.Demand{Scope: scope, Cost: 1}
			capMin := int64(1 << 30)
			for _, i := range rng.Perm(len(limits)) {
				if rng.IntN(10) < 6 {
					l := limits[i]
					b := quota.Bucket{Limit: l, Key: keys[rng.IntN(len(keys))]}
					if shares {
						b.Tenant = tenants[rng.IntN(len(tenants))]
						if rng.IntN(2) == 0 {
							b.Headroom = rng.IntN(int(capacity(l)))
						}
						b.Classed = rng.IntN(2) == 0 // lent headrooms: noted classes
					}
					if expiry && l.Algorithm == quota.SlidingLog && rng.IntN(4) > 0 {
						b.Expiry = randomExpiry(rng, l)
					}
					d.Limits = append(d.Limits, b)
					capMin = min(capMin, capacity(l)-int64(b.Headroom))
				}
			}
			for _, p := range pauseKeys {
				if rng.IntN(5) == 0 {
					d.Pauses = append(d.Pauses, p)
				}
			}
			if len(d.Limits) > 0 && capMin > 0 {
				d.Cost = 1 + rng.IntN(int(capMin))
				if large && rng.IntN(2) == 0 {
					d.Cost = 1 + rng.IntN(int(min(capMin, 50))) // a few units: fractions of a µs
				}
				if rng.IntN(30) == 0 {
					d.Cost = int(capMin) + 1
				}
			}
			wait := maxPer
			if large && rng.IntN(2) == 0 {
				wait = min(maxPer, 1000)
			}
			switch w := rng.IntN(20); {
			case w < 10:
			case w == 10:
				d.MaxWait = -time.Duration(rng.Int64N(wait)) * us
			default:
				d.MaxWait = time.Duration(rng.Int64N(3*wait)) * us
			}
			dec, ok := take(step, d)
			if !ok || dec.OK || rng.IntN(3) != 0 || d.Shared() || d.Noted() {
				break
			}
			// Never early: refused 1µs before the retry time, admitted at it
			// (unless a tenant's, whom other claims may come before, or one whose headroom
			// may be lent then).
			probe := *d
			probe.MaxWait = 0
			clock.Advance(dec.Delay - us)
			if again, _ := take(step, &probe); again.OK || again.Delay != us {
				fail(step, "at the retry time minus 1µs: want refused with Delay 1µs, got OK=%v Delay=%v", again.OK, again.Delay)
			}
			clock.Advance(us)
			if again, _ := take(step, &probe); !again.OK || again.Delay != 0 {
				fail(step, "at the retry time: want granted now, got OK=%v Delay=%v", again.OK, again.Delay)
			}
		case r < 70: // move the clock
			var d int64
			switch c := rng.IntN(4); {
			case c == 0:
			case c == 1: // to the next boundary of a window
				p := per(limits[rng.IntN(len(limits))])
				now := clock.Now().UnixMicro()
				d = (now/p+1)*p - now
			case c == 2 && large: // a few µs: within the emission interval of 10^7 a second
				d = rng.Int64N(20)
			default:
				d = rng.Int64N(maxPer)
				if shares {
					d /= 4
				}
				if large && rng.IntN(2) == 0 {
					d = rng.Int64N(min(maxPer, sec.Microseconds()))
				}
			}
			clock.Advance(time.Duration(d) * us)
			trace = append(trace, fmt.Sprintf("  step %d: advance %dµs", step, d))
		case r < 77: // pause
			key := pauseKeys[rng.IntN(len(pauseKeys))]
			span := maxPer
			if large {
				span = min(maxPer, sec.Microseconds())
			}
			d := time.Duration(rng.Int64N(4*span)-span) * us
			require.NoError(t, store.Pause(t.Context(), scope, key, d), "step %d: pause %q for %v", step, key, d)
			m.pause(scope, key, d, clock.Now().UnixMicro())
			trace = append(trace, fmt.Sprintf("  step %d: pause %q for %v", step, key, d))
		case r < 82: // sync a bucket to what a vendor might say
			l := limits[rng.IntN(len(limits))]
			if syncer == nil || l.Algorithm == quota.Concurrency {
				continue
			}
			b := quota.Bucket{Limit: l, Key: keys[rng.IntN(len(keys))]}
			left := rng.IntN(int(capacity(l))+2) - 1
			within := time.Duration(rng.Int64N(4*per(l))-per(l)) * us
			require.NoError(t, syncer.Sync(t.Context(), scope, b, left, within), "step %d: sync", step)
			m.sync(scope, b, int64(max(left, 0)), within, clock.Now().UnixMicro())
			trace = append(trace, fmt.Sprintf("  step %d: sync %s/%s to %d within %v", step, l.Name, b.Key, left, within))
			stats["sync"]++
		case r < 87: // anchor a bucket to a vendor's window end
			l := limits[rng.IntN(len(limits))]
			if anchorer == nil || !l.Anchored {
				continue
			}
			b := quota.Bucket{Limit: l, Key: keys[rng.IntN(len(keys))]}
			within := time.Duration(rng.Int64N(9*per(l)/4)-per(l)/4) * us
			tol := time.Duration(rng.Int64N(per(l)/2+1)) * us
			ends, moved, err := anchorer.Anchor(t.Context(), scope, b, within, tol)
			require.NoError(t, err, "step %d: anchor", step)
			wantEnds, wantMoved := m.anchor(scope, b, within, tol, clock.Now().UnixMicro())
			trace = append(trace, fmt.Sprintf("  step %d: anchor %s/%s within %v tolerance %v -> want %v %v, got %v %v", step, l.Name, b.Key, within, tol, wantMoved, time.Duration(wantEnds)*us, moved, ends))
			if moved != wantMoved || ends != time.Duration(wantEnds)*us {
				fail(step, "anchor: want moved=%v ends=%v, got moved=%v ends=%v", wantMoved, time.Duration(wantEnds)*us, moved, ends)
			}
			stats["anchor"]++
		case r < 94 && settler != nil: // settle a reservation, maybe again
			if len(out) == 0 {
				continue
			}
			g := out[rng.IntN(len(out))]
			costs := make([]int, len(g.demand.Limits))
			for j, b := range g.demand.Limits {
				if rng.IntN(4) > 0 { // else 0: left as it is
					costs[j] = 1 + rng.IntN(2*int(capacity(b.Limit)))
				}
				touched[bucketID(g.demand.Scope, b)] = true
			}
			g.settled = true
			require.NoError(t, settler.Settle(t.Context(), g.store, costs), "step %d: settle the reservation of step %d to %v", step, g.step, costs)
			require.NoError(t, m.settle(g.model, costs, clock.Now().UnixMicro()))
			trace = append(trace, fmt.Sprintf("  step %d: settle the reservation of step %d to %v", step, g.step, costs))
			stats["settle"]++
		case r < 97 && retimer != nil: // retime a reservation to now
			if len(out) == 0 {
				continue
			}
			g := out[rng.IntN(len(out))]
			if g.settled {
				continue
			}
			retime(step, g)
		default: // cancel a reservation, where the semantics are unambiguous
			if len(out) == 0 {
				continue
			}
			i := rng.IntN(len(out))
			g := out[i]
			if g.settled || !unambiguousCancel(m, g, lastGrant) {
				continue
			}
			out = slices.Delete(out, i, i+1)
			require.NoError(t, store.Cancel(t.Context(), g.store), "step %d: cancel the reservation of step %d", step, g.step)
			require.NoError(t, m.cancel(g.model, clock.Now().UnixMicro()))
			for j, b := range g.demand.Limits {
				cancelled[bucketID(g.demand.Scope, b)][g.adm[j]] = true
			}
			trace = append(trace, fmt.Sprintf("  step %d: cancel the reservation of step %d", step, g.step))
			stats["cancel"]++
		}
	}

	t.Logf("decisions: %v", stats)

	// Invariants over what stayed granted, bucket by bucket.
	for _, l := range limits {
		for _, k := range keys {
			id := bucketID(scope, quota.Bucket{Limit: l, Key: k})
			if touched[id] {
				continue
			}
			var kept []admission
			for j, a := range adm[id] {
				if !cancelled[id][j] {
					kept = append(kept, a)
				}
			}
			checkAdmissions(t, fmt.Sprintf("%s key %s (%v)", l.Name, k, l.Algorithm), l, kept)
		}
	}
}

// unambiguousCancel reports whether cancelling g has one documented
// outcome. A GCRA charge is refunded "only if no later demand has been
// granted on the same bucket since"; a store may test that by comparing
// its TAT with the mark it set, which differs from the wording when a
// later grant was itself cancelled. Such cancels are left out.
func unambiguousCancel(m *model, g *granted, lastGrant map[string]int) bool {
	for i, b := range g.demand.Limits {
		if b.Limit.Algorithm != quota.GCRA {
			continue
		}
		id := bucketID(g.demand.Scope, b)
		l := quotamath.Of(b.Limit)
		tail := l.Mark(m.tat[id]) == g.model.Marks[i]
		noLater := lastGrant[id] == g.seq
		if tail != noLater {
			return false
		}
	}
	return true
}

func describe(d *quota.Demand) string {
	s := fmt.Sprintf("take cost %d", d.Cost)
	for _, b := range d.Limits {
		s += fmt.Sprintf(" %s/%s", b.Limit.Name, b.Key)
		if b.Tenant != "" {
			s += " for " + b.Tenant
		}
		if b.Headroom > 0 {
			s += fmt.Sprintf(" leaving %d", b.Headroom)
		}
	}
	if d.MaxWait != 0 {
		s += fmt.Sprintf(" maxWait %v", d.MaxWait)
	}
	if len(d.Pauses) > 0 {
		s += fmt.Sprintf(" pauses %q", d.Pauses)
	}
	return s
}

func outcomeString(d quota.Decision, err error) string {
	switch {
	case err != nil:
		return "error " + err.Error()
	case d.OK:
		return fmt.Sprintf("OK delay %v", d.Delay)
	case d.Limit >= 0:
		return fmt.Sprintf("refused %v by limit %d", d.Delay, d.Limit)
	}
	return fmt.Sprintf("refused %v by pause %q", d.Delay, d.Pause)
}

func lastLines(lines []string, n int) string {
	s := ""
	for _, l := range lines[max(0, len(lines)-n):] {
		s += l + "\n"
	}
	return s
}
