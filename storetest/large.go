package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Large and awkward quotas: the emission interval T = P/R is rarely a
// whole number of microseconds, and P*R passes 2^53.
const (
	day     = 24 * hour
	month31 = 31 * day // P*R = 2.7*10^21 at 10^9 per 31 days
)

// largeQuotaCases pin the arithmetic of quotas that rounding to the
// microsecond would cut or reject: 10^9 per 31 days (T = 2678.4 µs),
// 10^7 a second (T = 0.1 µs), 3*10^6 a second (T = 1/3 µs), 7 per 3
// seconds (T = 428571 3/7 µs). A GCRA charge adds exactly c*T, so the
// fractions of several charges add up to whole microseconds, and R units
// take exactly P, with no drift; a delay is rounded up to the
// microsecond, never more. Start is a whole number of days, 5 days into a
// 31-day window of the epoch.
func largeQuotaCases() []stepCase {
	return []stepCase{{
		// T = 2678.4 µs.
		name:    "10^9 per 31 days GCRA",
		buckets: on(gcra("g", 1_000_000_000, month31, 0)),
		steps: []step{
			{cost: 1_000_000_000, ok: true, left: &left{0, month31}},
			{delay: 2679 * us}, // ceil(T)
			{advance: 2678 * us, delay: us},
			// TAT = Start + P + T: the bucket is full again at its
			// microsecond, P after now; nothing left.
			{advance: us, ok: true, left: &left{0, month31}},
			{cost: 5, delay: (16071 - 2679) * us}, // ceil(6T) - ceil(T)
			{cost: 1000, maxWait: hour, ok: true, delay: 2678400 * us},
			{advance: month31 + 2678400*us, cost: 1_000_000_000, ok: true},
			{cost: 1_000_000_000, delay: month31},
		},
	}, {
		name:    "10^9 per 31 days fixed window",
		buckets: on(fixed("f", 1_000_000_000, month31)),
		steps: []step{
			{cost: 1_000_000_000, ok: true, left: &left{0, 26 * day}},
			{delay: 26 * day},
			{advance: 26*day - us, delay: us},
			{advance: us, cost: 999_999_999, ok: true, left: &left{1, month31}},
			{cost: 2, delay: month31},
			{ok: true},
		},
	}, {
		// P*R > 2^52: the previous window's weight falls in steps of s =
		// ceil(P/floor(2^52/R)) = 594725 µs, W = 4503595 of them.
		name:    "10^9 per 31 days sliding window",
		buckets: on(slidingWin("w", 1_000_000_000, month31)),
		steps: []step{
			{cost: 1_000_000_000, ok: true},
			// Next window, prev = R: one unit fits from step 1 on
			// (exactly, from 2679 µs in).
			{delay: 26*day + 594725*us},
			{advance: 26*day + 594724*us, delay: us},
			{advance: us, ok: true},
			// Half the quota fits once prev weighs at most half: from
			// step W - floor(W/2) = 2251798 (exactly, from P/2 on).
			{cost: 499_999_999, delay: (2251798*594725 - 594725) * us},
			{cost: 499_999_999, maxWait: month31, ok: true, delay: (2251798*594725 - 594725) * us},
		},
	}, {
		// T = 0.1 µs: 10 units a microsecond, fractions carried.
		name:    "10^7 a second GCRA",
		buckets: on(gcra("g", 10_000_000, sec, 0)),
		steps: []step{
			{cost: 10_000_000, ok: true, left: &left{0, sec}},
			{delay: us},
			{advance: us, cost: 10, ok: true, left: &left{0, sec}},
			{delay: us},
			{advance: us, cost: 11, delay: us},
			{advance: us, cost: 11, ok: true},
			{cost: 9, ok: true}, // 2.1 µs + 0.9 µs: exactly the microsecond
			{delay: us},
			{advance: sec, cost: 10_000_000, ok: true},
			{delay: us},
		},
	}, {
		name:    "10^7 a second fixed window",
		buckets: on(fixed("f", 10_000_000, sec)),
		steps: []step{
			{cost: 10_000_000, ok: true},
			{delay: sec},
			{advance: sec - us, delay: us},
			{advance: us, cost: 10_000_000, ok: true, left: &left{0, sec}},
		},
	}, {
		// P*R = 10^13 <= 2^52: the weight is exact, to the microsecond.
		name:    "10^7 a second sliding window",
		buckets: on(slidingWin("w", 10_000_000, sec)),
		steps: []step{
			{cost: 10_000_000, ok: true},
			{delay: sec + us}, // P - floor((R-1)*P/R) = 1 µs into the next window
			{advance: sec, delay: us},
			{advance: us, ok: true},
			{cost: 4_999_999, delay: 500*ms - us},
			{advance: 500*ms - us, cost: 4_999_999, ok: true},
			{delay: us},
		},
	}, {
		// T = 1/3 µs.
		name:    "3*10^6 a second GCRA",
		buckets: on(gcra("g", 3_000_000, sec, 0)),
		steps: []step{
			{cost: 3_000_000, ok: true},
			{delay: us},
			{cost: 3, delay: us},
			{cost: 4, delay: 2 * us},
			{advance: us, cost: 3, ok: true},
			{cost: 2, delay: us},
			{advance: us, cost: 2, ok: true},
			{ok: true}, // 2/3 + 1/3: three a microsecond
			{delay: us},
		},
	}, {
		// T = 3e6/7 µs: units come at ceil(k*T), 7 in exactly 3 s, again
		// and again (T rounded up to 428572 µs would drift 4 µs a cycle).
		name:    "7 per 3 seconds GCRA",
		buckets: on(gcra("g", 7, 3*sec, 0)),
		steps:   sevenPerThree(),
	}, {
		// A refund is exact too: the charge's fraction comes back.
		name:    "3*10^6 a second GCRA cancel",
		buckets: on(gcra("g", 3_000_000, sec, 0)),
		steps: []step{
			{cost: 3_000_000, ok: true},
			{cost: 2, maxWait: hour, ok: true, delay: us}, // TAT = S+1s+2/3
			{op: opCancel, cancel: 2},
			{cost: 3, delay: us}, // not 2 µs: the 2/3 µs came back
		},
	}, {
		// A later grant moves the arrival time by 1/3 µs, within its
		// microsecond: the first charge is no longer the last, so it is
		// not refunded (the mark is in nanoseconds).
		name:    "3*10^6 a second GCRA cancel after a later grant",
		buckets: on(gcra("g", 3_000_000, sec, 0)),
		steps: []step{
			{cost: 3_000_000, ok: true},
			{maxWait: hour, ok: true, delay: us}, // TAT = S+1s+1/3
			{maxWait: hour, ok: true, delay: us}, // TAT = S+1s+2/3
			{op: opCancel, cancel: 2},
			{cost: 2, delay: 2 * us}, // ceil(2/3 + 2/3): nothing came back
		},
	}}
}

// sevenPerThree steps a GCRA limit of 7 per 3 s through two cycles: the
// burst, then unit k at ceil(k*3e6/7) µs.
func sevenPerThree() []step {
	at := func(k int64) time.Duration { return time.Duration((k*3_000_000+6)/7) * us }
	st := repeat(7, step{ok: true})
	for k := int64(1); k <= 14; k++ {
		gap := at(k) - at(k-1)
		st = append(st, step{delay: gap}, step{advance: gap - us, delay: us}, step{advance: us, ok: true})
	}
	return append(st, step{delay: at(15) - at(14)})
}

// testUsable measures how much of a large or awkward quota one greedy
// client gets, on the store's clock (advanced to each grant's instant,
// never slept): at least 99.9%, and never more than the quota. Rounding T
// up to the microsecond would give 33% of 3*10^6 a second and 10% of 10^7;
// an arrival time rounded at each charge would lose a microsecond a grant.
//
// GCRA: after a full burst, 500 grants of c units, c*T >= 200 µs and not
// a whole number of µs where T allows; the rate between the first and the
// last is compared with R/P. Windows: a
// grant of R fills the window of Start, then grants of c units fill the
// next one, whose count is compared with R (a sliding window's previous
// window weighs R there, the hardest case). The sliding window admits at
// most R - c per window by its own arithmetic (a unit that does not fit
// waits for the next window), so it is measured with c = R/2000; the
// fixed window with c = R/1000.
func (s *suite) testUsable(t *testing.T) {
	type quotaCase struct {
		rate int
		per  time.Duration
	}
	awkward := []quotaCase{
		{1_000_000, day}, {1_000_000_000, month31}, {3_000_000, sec}, {10_000_000, sec}, {7, 3 * sec},
	}
	for _, alg := range []quota.Algorithm{quota.GCRA, quota.FixedWindow, quota.SlidingWindow} {
		for _, q := range awkward {
			if alg == quota.SlidingWindow && q.rate < 2000 {
				continue // R - c of 7 is 6/7: the algorithm's granularity, not rounding
			}
			l := quota.Limit{Name: "u", Rate: q.rate, Per: q.per, Algorithm: alg}
			t.Run(fmt.Sprintf("%v/%d per %v", alg, q.rate, q.per), func(t *testing.T) {
				t.Parallel()
				store, clock := s.newStore(t)
				scope := s.scope(t, "")
				if alg == quota.GCRA {
					usableGCRA(t, store, clock, scope, l)
				} else {
					usableWindow(t, store, clock, scope, l)
				}
			})
		}
	}
}

// usableGCRA measures one client on GCRA limit l (see testUsable).
func usableGCRA(t *testing.T, store quota.Store, clock *Clock, scope string, l quota.Limit) {
	const grants = 500
	p, r := per(l), int64(l.Rate)
	c := max(1, (200*r+p-1)/p) // c*T >= 200 µs
	for i := 0; i < 3 && c*p%r == 0; i++ {
		c++ // and not a whole number of µs, where T allows
	}
	adm := []admission{take(t, store, clock, scope, l, r)}
	for range grants {
		adm = append(adm, take(t, store, clock, scope, l, c))
	}
	checkAdmissions(t, l.Name, l, adm)
	first, last := adm[1].at, adm[len(adm)-1].at
	// Units over time, against R/P: (grants-1)*c*P / ((last-first)*R).
	got := float64(grants-1) * float64(c) * float64(p) / (float64(last-first) * float64(r))
	t.Logf("%d grants of %d: %.6f of the quota's rate", grants, c, got)
	assert.GreaterOrEqual(t, got, 0.999, "usable fraction")
	assert.LessOrEqual(t, got, 1+1/float64(last-first), "over the rate by more than the microsecond rounding")
}

// usableWindow measures one client on window limit l (see testUsable).
func usableWindow(t *testing.T, store quota.Store, clock *Clock, scope string, l quota.Limit) {
	p, r := per(l), int64(l.Rate)
	c := max(1, r/1000)
	if l.Algorithm == quota.SlidingWindow {
		c = max(1, r/2000)
	}
	start := clock.Now().UnixMicro()
	from := (start/p + 1) * p // the next window
	adm := []admission{take(t, store, clock, scope, l, r)}
	var got int64
	for {
		a := take(t, store, clock, scope, l, c)
		if a.at >= from+p {
			break
		}
		adm = append(adm, a)
		if a.at >= from {
			got += c
		}
	}
	checkAdmissions(t, l.Name, l, adm)
	t.Logf("%d grants of %d: %d of %d in window [%d, %d)µs, %.6f", len(adm)-1, c, got, r, from-start, from-start+p, float64(got)/float64(r))
	assert.GreaterOrEqual(t, float64(got), 0.999*float64(r), "usable fraction")
	assert.LessOrEqual(t, got, r, "over the quota")
}

// take takes cost of l, waiting as long as it must: the clock moves to
// the grant's instant, which it returns with the cost.
func take(t *testing.T, store quota.Store, clock *Clock, scope string, l quota.Limit, cost int64) admission {
	t.Helper()
	d := &quota.Demand{Scope: scope, Cost: int(cost), MaxWait: 2 * l.Per, Limits: []quota.Bucket{{Limit: l}}}
	dec, err := store.Take(t.Context(), d)
	require.NoError(t, err)
	require.True(t, dec.OK, "refused after %v", dec.Delay)
	clock.Advance(dec.Delay)
	return admission{at: clock.Now().UnixMicro(), cost: cost}
}
