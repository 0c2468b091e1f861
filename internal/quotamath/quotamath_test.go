package quotamath

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// maxUnits is 2^53, past which Lua's doubles skip integers: the largest
// values the arithmetic must carry exactly.
const maxUnits = 1 << 53

func TestFloorDiv(t *testing.T) {
	tests := []struct {
		a, b, want int64
	}{
		{0, 5, 0},
		{7, 3, 2},
		{6, 3, 2},
		{-1, 1000, -1}, // the window before the epoch, not window 0
		{-999, 1000, -1},
		{-1000, 1000, -1},
		{-1001, 1000, -2},
		{-6, 3, -2},
		{-7, 3, -3},
		{maxUnits, 1, maxUnits},
		{-maxUnits - 1, maxUnits, -2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d", tt.a, tt.b), func(t *testing.T) {
			assert.Equal(t, tt.want, FloorDiv(tt.a, tt.b))
		})
	}
}

func TestCeilDiv(t *testing.T) {
	tests := []struct {
		a, b, want int64
	}{
		{0, 3, 0},
		{1, 3, 1},
		{3, 3, 1},
		{4, 3, 2},
		{1_000_000, 3, 333_334},
		{maxUnits - 1, 1, maxUnits - 1},
		{maxUnits, 7, maxUnits/7 + 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d/%d", tt.a, tt.b), func(t *testing.T) {
			assert.Equal(t, tt.want, CeilDiv(tt.a, tt.b))
		})
	}
}

func TestCeilMicros(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Nanosecond, 1}, // a pause of 1ns still ends after now
		{999, 1},
		{time.Microsecond, 1},
		{time.Microsecond + 1, 2},
		{time.Hour, 3_600_000_000},
		{-time.Nanosecond, 0},
		{-time.Microsecond - 1, -1},
	}
	for _, tt := range tests {
		t.Run(tt.d.String(), func(t *testing.T) {
			assert.Equal(t, tt.want, CeilMicros(tt.d))
			assert.GreaterOrEqual(t, Micros(CeilMicros(tt.d)), tt.d, "never early")
		})
	}
}

func TestOf(t *testing.T) {
	assert.Equal(t, Limit{Per: 60_000_000, Rate: 60, Burst: 60}, Of(quota.Limit{Rate: 60, Per: time.Minute}))
	assert.Equal(t, Limit{Per: 1, Rate: 5, Burst: 9}, Of(quota.Limit{Rate: 5, Per: 1500 * time.Nanosecond, Burst: 9}))
}

// Large and awkward quotas, P in µs.
const (
	day     = 86_400_000_000
	month31 = 31 * day
)

func TestEmissions(t *testing.T) {
	tests := []struct {
		name         string
		per, rate, n int64
		want         Time
	}{
		{"exact", 60_000_000, 60, 1, Time{1_000_000, 0}},
		{"a third of a second", 1_000_000, 3, 1, Time{333_333, 1}},
		{"three thirds", 1_000_000, 3, 3, Time{1_000_000, 0}},
		{"7 per 3 s", 3_000_000, 7, 5, Time{2_142_857, 1}},
		{"10^7 a second: 0.1 µs", 1_000_000, 10_000_000, 1, Time{0, 1_000_000}},
		{"10^7 a second, 25 units", 1_000_000, 10_000_000, 25, Time{2, 5_000_000}},
		{"3*10^6 a second", 1_000_000, 3_000_000, 1, Time{0, 1_000_000}},
		{"10^6 a day", day, 1_000_000, 1, Time{86_400, 0}},
		{"10^9 per 31 days", month31, 1_000_000_000, 1, Time{2678, 400_000_000}},
		{"10^9 per 31 days, n*P past 2^63", month31, 1_000_000_000, 1_000_000_000, Time{month31, 0}},
		{"10^9 per 31 days, all but one", month31, 1_000_000_000, 999_999_999, Time{month31 - 2679, 600_000_000}},
		{"negative", 1_000_000, 3, -1, Time{-333_334, 2}},
		{"zero", 1_000_000, 3, 0, Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Limit{Per: tt.per, Rate: tt.rate}
			got := l.Emissions(tt.n)
			assert.Equal(t, tt.want, got)
			// Micros*R + Frac == n*P, exactly.
			sum := new(big.Int).Mul(big.NewInt(got.Micros), big.NewInt(tt.rate))
			sum.Add(sum, big.NewInt(got.Frac))
			assert.Equal(t, new(big.Int).Mul(big.NewInt(tt.n), big.NewInt(tt.per)).String(), sum.String())
			assert.True(t, 0 <= got.Frac && got.Frac < tt.rate, "0 <= Frac < R")
		})
	}
}

// TestGCRA steps one bucket through charges, as a store does: earliest,
// then charge there.
func TestGCRA(t *testing.T) {
	const T = 1_000_000
	l := Limit{Algorithm: quota.GCRA, Per: 60 * T, Rate: 60, Burst: 10}
	// T = 1/3 µs: 3*10^6 a second, burst 9.
	third := Limit{Algorithm: quota.GCRA, Per: 1_000_000, Rate: 3_000_000, Burst: 9}
	tests := []struct {
		name     string
		l        Limit
		tat      Time
		at       int64 // decision instant
		cost     int64
		earliest int64
		newTAT   Time
	}{
		{"fresh bucket, cost == burst, at once", l, At(0), 5 * T, 10, 5 * T, At(15 * T)},
		{"an idle bucket forgets", l, At(2 * T), 100 * T, 10, 100 * T, At(110 * T)},
		{"cost == burst waits for the whole burst", l, At(15 * T), 5 * T, 10, 15 * T, At(25 * T)},
		{"full bucket, one unit", l, At(15 * T), 5 * T, 1, 6 * T, At(16 * T)},
		{"partly used", l, At(8 * T), 5 * T, 7, 5 * T, At(15 * T)},
		{"partly used, one too many", l, At(8 * T), 5 * T, 8, 6 * T, At(16 * T)},
		{"before the epoch", l, At(-15 * T), -20 * T, 1, -20 * T, At(-14 * T)},
		{"waits across the epoch", l, At(-5 * T), -20 * T, 10, -5 * T, At(5 * T)},

		{"a third: fresh, a full burst", third, At(0), 100, 9, 100, At(103)},
		{"a third: one unit is a third of a µs", third, At(100), 100, 1, 100, Time{100, 1_000_000}},
		{"a third: the fraction carries", third, Time{100, 2_000_000}, 100, 1, 100, At(101)},
		{"a third: full, one more waits a third, rounded up", third, At(103), 100, 1, 101, Time{103, 1_000_000}},
		{"a third: full, three more wait exactly 1 µs", third, At(103), 100, 3, 101, At(104)},
		{"a third: a fractional arrival time waits to the next µs", third, Time{103, 1_000_000}, 100, 1, 101, Time{103, 2_000_000}},
		{"a third: idle past a fractional arrival time", third, Time{103, 1_000_000}, 104, 1, 104, Time{104, 1_000_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Counter{TAT: tt.tat}
			e := tt.l.Earliest(c, tt.at, tt.cost)
			assert.Equal(t, tt.earliest, e)
			assert.True(t, tt.l.Admits(c, e, tt.cost), "admitted at earliest")
			if e > tt.at {
				assert.False(t, tt.l.Admits(c, e-1, tt.cost), "never early")
			}
			tat := tt.l.GCRACharge(tt.tat, e, tt.cost)
			assert.Equal(t, tt.newTAT, tat)
			start := tt.tat
			if start.Before(At(e)) {
				start = At(e)
			}
			assert.Equal(t, start, tt.l.GCRARefund(tat, tt.cost), "refund undoes the charge")
		})
	}
}

// TestGCRALargeQuotas charges large and awkward quotas unit by unit, and
// in one piece: the arrival time after R units is exactly P later, with
// nothing lost to rounding (ceil(P/R) µs a unit admitted 89% of 10^6
// units per 8.05 s).
func TestGCRALargeQuotas(t *testing.T) {
	for _, tt := range []struct {
		name      string
		per, rate int64
		step      int64 // cost of each charge
	}{
		{"7 per 3 s", 3_000_000, 7, 1},
		{"10^6 per 8.05 s", 8_050_000, 1_000_000, 1},
		{"3*10^6 a second", 1_000_000, 3_000_000, 7},
		{"10^7 a second", 1_000_000, 10_000_000, 13},
		{"10^6 a day", day, 1_000_000, 1},
		{"10^9 per 31 days", month31, 1_000_000_000, 999_983},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := Limit{Algorithm: quota.GCRA, Per: tt.per, Rate: tt.rate, Burst: tt.rate}
			const start = 1_728_000_000_000_000
			tat := At(start)
			var charged int64
			for charged+tt.step <= tt.rate {
				tat = l.GCRACharge(tat, start, tt.step)
				charged += tt.step
			}
			tat = l.GCRACharge(tat, start, tt.rate-charged)
			assert.Equal(t, At(start+tt.per), tat, "R units take exactly P")
			assert.Equal(t, At(start+tt.per), l.GCRACharge(At(start), start, tt.rate), "in one charge")
			// Full: one more unit waits T, rounded up to the µs.
			one := l.Emissions(1)
			assert.Equal(t, l.add(At(start), one).Ceil(), l.Earliest(Counter{TAT: tat}, start, 1))
			st := l.State(Counter{TAT: tat}, start)
			assert.Equal(t, quota.LimitState{Used: tt.rate, Remaining: 0, Reset: Micros(tt.per)}, st)
			// Half the period later, what came back: R - ceil((P - P/2)*R/P).
			st = l.State(Counter{TAT: tat}, start+tt.per/2)
			used := new(big.Int).Mul(big.NewInt(tt.per-tt.per/2), big.NewInt(tt.rate))
			used.Add(used, big.NewInt(tt.per-1)).Div(used, big.NewInt(tt.per))
			assert.Equal(t, tt.rate-used.Int64(), st.Remaining, "%+v", st)
		})
	}
}

func TestGCRAHugePer(t *testing.T) {
	// Per at quota.MaxPer (100 years), burst 8 at the same bound: one unit
	// per 12.5 years; every value stays below 2^53.
	per := quota.MaxPer.Microseconds()
	l := Limit{Per: per, Rate: 8, Burst: 8}
	T := l.Emissions(1)
	assert.Equal(t, Time{per / 8, 0}, T)
	tat := l.GCRACharge(At(0), 0, 8)
	assert.Equal(t, At(per), tat)
	assert.Equal(t, per/8, l.Earliest(Counter{TAT: tat}, 0, 1))
	assert.Equal(t, per, l.Earliest(Counter{TAT: tat}, 0, 8))
	st := l.State(Counter{TAT: tat}, 1)
	assert.Equal(t, quota.LimitState{Used: 8, Remaining: 0, Reset: Micros(per - 1)}, st)
}

func TestGCRASync(t *testing.T) {
	// T = 1s, B = 60: 2 left within 30s puts the arrival time at now+30s+58s.
	l := Limit{Per: 60_000_000, Rate: 60, Burst: 60}
	assert.Equal(t, At(1_000+30_000_000+58_000_000), l.GCRASync(1_000, 30_000_000, 2))
	assert.Equal(t, At(1_000+30_000_000+60_000_000), l.GCRASync(1_000, 30_000_000, 0))
	// T = 1/3 µs, B = 9: 1 left within 10 µs is 8/3 µs more.
	third := Limit{Per: 1_000_000, Rate: 3_000_000, Burst: 9}
	assert.Equal(t, Time{1_012, 2_000_000}, third.GCRASync(1_000, 10, 1))
}

func TestGCRAState(t *testing.T) {
	const T = 1000
	l := Limit{Per: 10 * T, Rate: 10, Burst: 5}
	third := Limit{Per: 1_000_000, Rate: 3_000_000, Burst: 9}
	tests := []struct {
		name string
		l    Limit
		tat  Time
		want quota.LimitState
	}{
		{"fresh", l, At(0), quota.LimitState{Remaining: 5}},
		{"at now", l, At(100 * T), quota.LimitState{Remaining: 5}},
		{"one unit", l, At(101 * T), quota.LimitState{Used: 1, Remaining: 4, Reset: Micros(T)}},
		{"part of a unit counts whole", l, At(100*T + 1), quota.LimitState{Used: 1, Remaining: 4, Reset: 1 * time.Microsecond}},
		{"two and a half", l, At(100*T + 2*T + T/2), quota.LimitState{Used: 3, Remaining: 2, Reset: Micros(2*T + T/2)}},
		{"reserved past the burst", l, At(108 * T), quota.LimitState{Used: 5, Remaining: 0, Reset: Micros(8 * T)}},
		{"a third: one unit", third, Time{100 * T, 1_000_000}, quota.LimitState{Used: 1, Remaining: 8, Reset: time.Microsecond}},
		{"a third: a whole µs is three", third, At(100*T + 1), quota.LimitState{Used: 3, Remaining: 6, Reset: time.Microsecond}},
		{"a third: four, rounded up", third, Time{100*T + 1, 1}, quota.LimitState{Used: 4, Remaining: 5, Reset: 2 * time.Microsecond}},
		{"a third: far past the burst", third, At(100*T + 1_000_000_000), quota.LimitState{Used: 9, Remaining: 0, Reset: Micros(1_000_000_000)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.l.State(Counter{TAT: tt.tat}, 100*T))
		})
	}
}

// TestMark checks what stores record of a GCRA charge: every later grant,
// on top or after an idle spell, changes it, even at 10^9 units a second
// (T = 1 ns), and it rounds up to the arrival time's microsecond.
func TestMark(t *testing.T) {
	for _, l := range []Limit{
		{Per: 1_000_000, Rate: 1_000_000_000, Burst: 1_000_000_000},
		{Per: 1_000_000, Rate: 3_000_000, Burst: 9},
		{Per: 3_000_000, Rate: 7, Burst: 7},
		{Per: month31, Rate: 1_000_000_000, Burst: 1_000_000_000},
	} {
		rng := rand.New(rand.NewPCG(uint64(l.Rate), 1))
		tat, now := At(1_000), int64(1_000)
		for range 2000 {
			now += rng.Int64N(3)
			cost := 1 + rng.Int64N(3)
			at := l.gcraEarliest(tat, now, cost)
			next := l.GCRACharge(tat, at, cost)
			if !assert.NotEqual(t, l.Mark(tat), l.Mark(next), "%+v: %+v to %+v", l, tat, next) {
				break
			}
			gcra := Limit{Algorithm: quota.GCRA}
			assert.Equal(t, next.Ceil(), gcra.ChargeEnd(l.Mark(next)))
			tat = next
		}
	}
	l := Limit{Per: 1_000_000, Rate: 3}
	assert.Equal(t, int64(333_333_334), l.Mark(Time{333_333, 1}), "ns, rounded up")
	assert.Equal(t, int64(5_000), l.Mark(At(5)))
	assert.Equal(t, int64(-4_666), l.Mark(Time{-5, 1}))
	gcra := Limit{Algorithm: quota.GCRA}
	assert.Equal(t, int64(-4), gcra.ChargeEnd(-4_666))
}

func TestSteps(t *testing.T) {
	tests := []struct {
		name      string
		per, rate int64
		s, w      int64
	}{
		{"a second", 1_000_000, 10_000_000, 1, 1_000_000},
		{"at the bound", 1 << 26, 1 << 26, 1, 1 << 26},
		{"just past it", 1<<26 + 1, 1 << 26, 2, 1<<25 + 1},
		{"10^6 a day", day, 1_000_000, 20, 4_320_000_000},
		{"10^9 per 31 days", month31, 1_000_000_000, 594_725, 4_503_595},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := Limit{Per: tt.per, Rate: tt.rate}
			s, w := l.Steps()
			assert.Equal(t, [2]int64{tt.s, tt.w}, [2]int64{s, w})
			assert.LessOrEqual(t, w*tt.rate, int64(1<<52), "W*R <= 2^52")
			assert.GreaterOrEqual(t, s*w, tt.per, "W steps cover the window")
			assert.Less(t, s*(w-1), tt.per, "every step starts in the window")
		})
	}
}

func TestWindow(t *testing.T) {
	l := Limit{Per: 1000, Rate: 3}
	for _, tt := range []struct{ t, k int64 }{
		{0, 0}, {999, 0}, {1000, 1}, {-1, -1}, {-1000, -1}, {-1001, -2},
	} {
		assert.Equal(t, tt.k, l.Window(tt.t), "window of %d", tt.t)
		assert.Equal(t, tt.k*1000, l.Start(tt.k))
	}
	// Phase 250: window k covers [250 + k*1000, 1250 + k*1000).
	p := l.WithPhase(250)
	for _, tt := range []struct{ t, k int64 }{
		{250, 0}, {1249, 0}, {1250, 1}, {249, -1}, {0, -1}, {-750, -1}, {-751, -2},
	} {
		assert.Equal(t, tt.k, p.Window(tt.t), "window of %d at phase 250", tt.t)
		assert.LessOrEqual(t, p.Start(p.Window(tt.t)), tt.t)
		assert.Greater(t, p.Start(p.Window(tt.t)+1), tt.t)
	}
	assert.Equal(t, int64(250), l.WithPhase(-750).Phase, "phases are taken modulo P")
	assert.Equal(t, int64(250), Of(quota.Limit{Rate: 1, Per: time.Millisecond, Phase: 250 * time.Microsecond}).Phase)
}

func TestFloorMod(t *testing.T) {
	for _, tt := range []struct{ a, b, want int64 }{
		{0, 5, 0}, {7, 5, 2}, {-1, 5, 4}, {-5, 5, 0}, {-6, 5, 4},
	} {
		assert.Equal(t, tt.want, FloorMod(tt.a, tt.b), "%d mod %d", tt.a, tt.b)
	}
}

func TestAnchorMoves(t *testing.T) {
	l := Limit{Per: 1000, Rate: 3, Phase: 100}
	for _, tt := range []struct {
		end, tol int64
		moves    bool
	}{
		{100, 0, false}, {5100, 0, false}, // on a boundary
		{150, 50, false}, {151, 50, true}, // later, within or past the tolerance
		{50, 50, false}, {49, 50, true}, // earlier
		{1090, 10, false}, {-910, 10, false}, // across a window, and before the epoch
		{600, 499, true}, {600, 500, false}, // half a window away is the furthest
	} {
		assert.Equal(t, tt.moves, l.AnchorMoves(tt.end, tt.tol), "end %d tolerance %d", tt.end, tt.tol)
	}
	assert.Equal(t, int64(900), l.Ends(200))
	assert.Equal(t, int64(1), l.Ends(1099))
	assert.Equal(t, int64(1000), l.Ends(1100))
}

// TestReanchor pins the moves of quota.Anchorer's doc: units are counted
// in every new window their span meets, no more.
func TestReanchor(t *testing.T) {
	fixed := Limit{Algorithm: quota.FixedWindow, Per: 1000, Rate: 10}
	sliding := Limit{Algorithm: quota.SlidingWindow, Per: 1000, Rate: 10}
	tests := []struct {
		name  string
		l     Limit
		ws    []WindowCount
		phase int64
		now   int64
		want  []WindowCount
	}{{
		// Granted at once in [0, 400]: all before the new boundary 600.
		name: "units before the new boundary stay in the window of now",
		l:    fixed, ws: []WindowCount{{K: 0, Count: 7, Last: 300}}, phase: 600, now: 400,
		want: []WindowCount{{K: -1, Count: 7, Last: 400}},
	}, {
		// Now is past the new boundary 300: the 7 units may lie on
		// either side of it; the new window of now counts them.
		name: "units that may straddle the new boundary count on its later side",
		l:    fixed, ws: []WindowCount{{K: 0, Count: 7, Last: 300}}, phase: 300, now: 400,
		want: []WindowCount{{K: 0, Count: 7, Last: 400}},
	}, {
		// A reservation at 1000 (window 1's start) lands in the new
		// window [600, 1600); window 2's at 2000 in [1600, 2600).
		name: "reservations move to the new window of their instant",
		l:    fixed, ws: []WindowCount{{K: 0, Count: 10, Last: 100}, {K: 1, Count: 10, Last: 1000}, {K: 2, Count: 4, Last: 2000}}, phase: 600, now: 100,
		want: []WindowCount{{K: -1, Count: 10, Last: 100}, {K: 0, Count: 10, Last: 1000}, {K: 1, Count: 4, Last: 2000}},
	}, {
		// Moving earlier: the new window of now [-200, 800) also meets
		// the old previous window's span [-1000, -1].
		name: "a move earlier counts the old previous window too",
		l:    fixed, ws: []WindowCount{{K: -1, Count: 3, Last: -900}, {K: 0, Count: 5, Last: 50}}, phase: 800, now: 100,
		want: []WindowCount{{K: -1, Count: 8, Last: 100}},
	}, {
		name: "a reservation late in its window counts on both sides",
		l:    fixed, ws: []WindowCount{{K: 1, Count: 2, Last: 1700}}, phase: 500, now: 100,
		want: []WindowCount{{K: 0, Count: 2, Last: 1499}, {K: 1, Count: 2, Last: 1700}},
	}, {
		name: "windows before the one of now are dropped",
		l:    fixed, ws: []WindowCount{{K: 0, Count: 5, Last: 10}, {K: 3, Count: 1, Last: 3000}}, phase: 500, now: 3100,
		want: []WindowCount{{K: 2, Count: 1, Last: 3100}},
	}, {
		name: "a sliding window keeps the previous new window",
		l:    sliding, ws: []WindowCount{{K: 0, Count: 5, Last: 10}, {K: 1, Count: 3, Last: 1100}}, phase: 500, now: 1600,
		want: []WindowCount{{K: 0, Count: 8, Last: 1499}, {K: 1, Count: 3, Last: 1600}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.l.Reanchor(tt.ws, tt.phase, tt.now))
		})
	}
}

// TestReanchorNeverUndercounts places the units of random counters at
// random instants their windows allow (at most now, or their Last), moves
// the windows, and checks that every new window from the one of now on
// counts at least the units placed inside it.
func TestReanchorNeverUndercounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		l := Limit{Algorithm: quota.FixedWindow, Per: 1 + rng.Int64N(20), Rate: 10}
		if rng.IntN(2) == 0 {
			l.Algorithm = quota.SlidingWindow
		}
		l = l.WithPhase(rng.Int64N(l.Per))
		now := rng.Int64N(200) - 100
		var ws []WindowCount
		var at []int64 // one instant per unit
		for k := l.Window(now) - 2; k <= l.Window(now)+3; k++ {
			lo, end := l.Start(k), l.Start(k+1)
			if lo > now && rng.IntN(2) == 0 {
				continue // a later window without reservations
			}
			w := WindowCount{K: k, Last: lo + rng.Int64N(l.Per)}
			hi := min(end-1, max(now, w.Last))
			for range rng.IntN(4) {
				w.Count++
				at = append(at, lo+rng.Int64N(max(hi-lo, 0)+1))
			}
			ws = append(ws, w)
		}
		phase := rng.Int64N(l.Per)
		got := l.Reanchor(ws, phase, now)
		m := l.WithPhase(phase)
		placed := map[int64]int64{}
		for _, x := range at {
			placed[m.Window(x)]++
		}
		counted := map[int64]int64{}
		for _, w := range got {
			counted[w.K] = w.Count
			assert.GreaterOrEqual(t, w.Last, m.Start(w.K), "case %d: Last within the window", i)
			assert.Less(t, w.Last, m.Start(w.K+1), "case %d: Last within the window", i)
		}
		keep := m.Window(now)
		if l.Algorithm == quota.SlidingWindow {
			keep--
		}
		for k, n := range placed {
			if k >= keep && !assert.GreaterOrEqual(t, counted[k], n, "case %d: %+v phase %d -> %d at %d: new window %d holds %d units", i, ws, l.Phase, phase, now, k, n) {
				t.FailNow()
			}
		}
	}
}

func TestSyncWindows(t *testing.T) {
	l := Limit{Per: 1000, Rate: 3, Phase: 100}
	for _, tt := range []struct{ now, within, first, last int64 }{
		{500, 1, 0, 0},
		{500, 600, 0, 0},    // the reset is this window's end
		{500, 601, 0, 1},    // window 1 starts before the reset
		{500, 2600, 0, 2},   // windows 1 and 2 do
		{1099, 1, 0, 0},     // the last µs of window 0
		{-400, 500, -1, -1}, // before the epoch
	} {
		first, last := l.SyncWindows(tt.now, tt.within)
		assert.Equal(t, [2]int64{tt.first, tt.last}, [2]int64{first, last}, "sync at %d within %d", tt.now, tt.within)
	}
}

// TestCounters pins each window algorithm's earliest instant and state
// on one counter; the earliest instant is admitted, the microsecond
// before it is not.
func TestCounters(t *testing.T) {
	fixed := Limit{Algorithm: quota.FixedWindow, Per: 1000, Rate: 3}
	sliding := Limit{Algorithm: quota.SlidingWindow, Per: 1000, Rate: 4}
	log := Limit{Algorithm: quota.SlidingLog, Per: 1000, Rate: 3}
	// P*R = 1000*2^45 > 2^52: steps of s = ceil(1000/floor(2^52/2^45)) = 8
	// µs, W = 125 to a window.
	const huge = 1 << 45
	stepped := Limit{Algorithm: quota.SlidingWindow, Per: 1000, Rate: huge}
	month := Limit{Algorithm: quota.SlidingWindow, Per: month31, Rate: 1e9}
	windows := func(m map[int64]int64) Counter { return Counter{Count: func(k int64) int64 { return m[k] }} }
	entries := func(log ...LogEntry) Counter { return Counter{Log: log} }
	us := time.Microsecond
	tests := []struct {
		name     string
		l        Limit
		c        Counter
		at, cost int64
		earliest int64
		state    quota.LimitState
	}{
		{"fixed: empty", fixed, Counter{}, 1500, 3, 1500, quota.LimitState{Remaining: 3}},
		{"fixed: room", fixed, windows(map[int64]int64{1: 2}), 1500, 1, 1500, quota.LimitState{Used: 2, Remaining: 1, Reset: 500 * us}},
		{"fixed: cost == rate waits for an empty window", fixed, windows(map[int64]int64{1: 1}), 1500, 3, 2000, quota.LimitState{Used: 1, Remaining: 2, Reset: 500 * us}},
		{"fixed: skips full windows", fixed, windows(map[int64]int64{1: 3, 2: 3, 3: 1}), 1500, 2, 3000, quota.LimitState{Used: 3, Remaining: 0, Reset: 500 * us}},
		{"fixed: before the epoch", fixed, windows(map[int64]int64{-1: 3}), -500, 1, 0, quota.LimitState{Used: 3, Remaining: 0, Reset: 500 * us}},
		{"fixed: just before the epoch", fixed, windows(map[int64]int64{-1: 3}), -1, 1, 0, quota.LimitState{Used: 3, Remaining: 0, Reset: us}},

		{"sliding: empty", sliding, Counter{}, 1500, 4, 1500, quota.LimitState{Remaining: 4}},
		// prev 4 weighs 4*(1000-e)/1000: one unit fits once e >= 250.
		{"sliding: the previous window fades", sliding, windows(map[int64]int64{0: 4}), 1000, 1, 1250, quota.LimitState{Used: 4, Remaining: 0, Reset: 1000 * us}},
		{"sliding: already faded enough", sliding, windows(map[int64]int64{0: 4}), 1300, 1, 1300, quota.LimitState{Used: 3, Remaining: 1, Reset: 700 * us}},
		// 4*0.699 = 2.796 is rounded up to 3 in the state.
		{"sliding: estimate rounded up", sliding, windows(map[int64]int64{0: 4}), 1301, 1, 1301, quota.LimitState{Used: 3, Remaining: 1, Reset: 699 * us}},
		{"sliding: cost == rate waits for prev to fade", sliding, windows(map[int64]int64{0: 1}), 1000, 4, 2000, quota.LimitState{Used: 1, Remaining: 3, Reset: 1000 * us}},
		{"sliding: current full", sliding, windows(map[int64]int64{1: 4}), 1100, 1, 2250, quota.LimitState{Used: 4, Remaining: 0, Reset: 1900 * us}},
		{"sliding: before the epoch", sliding, windows(map[int64]int64{-2: 4}), -1000, 1, -750, quota.LimitState{Used: 4, Remaining: 0, Reset: 1000 * us}},
		// A full previous window leaves room for one unit once it weighs
		// (W-j)/W with huge*(125-j) <= (huge-1)*125: from j = 1, 8 µs in
		// (exactly, from 1 µs in).
		{"stepped: the weight falls a step at a time", stepped, windows(map[int64]int64{0: huge}), 1000, 1, 1008, quota.LimitState{Used: huge, Remaining: 0, Reset: 1000 * us}},
		{"stepped: within the first step", stepped, windows(map[int64]int64{0: huge}), 1007, 1, 1008, quota.LimitState{Used: huge, Remaining: 0, Reset: 993 * us}},
		// At j = 1 the estimate is ceil(huge*124/125) = huge - floor(huge/125).
		{"stepped: one step in", stepped, windows(map[int64]int64{0: huge}), 1008, 1, 1008, quota.LimitState{Used: huge - huge/125, Remaining: huge / 125, Reset: 992 * us}},
		{"stepped: half the quota waits half the window", stepped, windows(map[int64]int64{0: huge}), 1000, huge / 2, 1504, quota.LimitState{Used: huge, Remaining: 0, Reset: 1000 * us}},
		// room*W/prev far above W: any step admits (and j*s must not
		// overflow).
		{"stepped: a small previous window", stepped, windows(map[int64]int64{0: 38}), 1000, 46, 1000, quota.LimitState{Used: 38, Remaining: huge - 38, Reset: 1000 * us}},
		{"10^9 per 31 days: a small previous window", month, windows(map[int64]int64{0: 38}), month31, 46, month31, quota.LimitState{Used: 38, Remaining: 1e9 - 38, Reset: month31 * us}},

		{"log: empty", log, Counter{}, 500, 3, 500, quota.LimitState{Remaining: 3}},
		{"log: room", log, entries(LogEntry{100, 1}), 500, 2, 500, quota.LimitState{Used: 1, Remaining: 2, Reset: 600 * us}},
		{"log: entries leave at their instant plus P", log, entries(LogEntry{100, 1}, LogEntry{200, 2}), 500, 1, 1100, quota.LimitState{Used: 3, Remaining: 0, Reset: 700 * us}},
		{"log: cost == rate waits for all", log, entries(LogEntry{100, 1}, LogEntry{200, 1}), 500, 3, 1200, quota.LimitState{Used: 2, Remaining: 1, Reset: 700 * us}},
		{"log: an entry at t-P has left", log, entries(LogEntry{100, 3}), 1100, 3, 1100, quota.LimitState{Remaining: 3}},
		{"log: in the gap before a reservation", log, entries(LogEntry{100, 1}, LogEntry{900, 1}), 500, 1, 500, quota.LimitState{Used: 2, Remaining: 1, Reset: 1400 * us}},
		{"log: not within P before a reservation whose window is full", log, entries(LogEntry{100, 1}, LogEntry{900, 2}), 500, 1, 1100, quota.LimitState{Used: 3, Remaining: 0, Reset: 1400 * us}},
		{"log: a gap that a later window cannot hold", log, entries(LogEntry{100, 1}, LogEntry{600, 1}, LogEntry{900, 1}), 500, 1, 1100, quota.LimitState{Used: 3, Remaining: 0, Reset: 1400 * us}},
		{"log: before the epoch", log, entries(LogEntry{-900, 3}), -500, 1, 100, quota.LimitState{Used: 3, Remaining: 0, Reset: 600 * us}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := tt.l.Earliest(tt.c, tt.at, tt.cost)
			assert.Equal(t, tt.earliest, e)
			assert.True(t, tt.l.Admits(tt.c, e, tt.cost), "admitted at earliest")
			if e > tt.at {
				assert.False(t, tt.l.Admits(tt.c, e-1, tt.cost), "never early")
			}
			assert.Equal(t, tt.state, tt.l.State(tt.c, tt.at))
		})
	}
}

func TestLogCostAndInsert(t *testing.T) {
	var log []LogEntry
	for _, e := range []LogEntry{{300, 1}, {100, 2}, {300, 4}, {200, 8}} {
		log = Insert(log, e)
	}
	assert.Equal(t, []LogEntry{{100, 2}, {200, 8}, {300, 1}, {300, 4}}, log, "in order of instant, equal instants in order of insertion")
	assert.Equal(t, int64(15), LogCost(log, 0, 300))
	assert.Equal(t, int64(13), LogCost(log, 100, 300), "(from, to]: from is out")
	assert.Equal(t, int64(10), LogCost(log, 0, 299))
	assert.Equal(t, int64(0), LogCost(log, 300, 1000))
	assert.Equal(t, int64(0), LogCost(nil, 0, 1000))
}

func TestConcurrency(t *testing.T) {
	l := Limit{Algorithm: quota.Concurrency, Per: 10_000, Rate: 2}
	tests := []struct {
		name     string
		expiries []int64
		freeAt   int64
		full     bool
	}{
		{"none held", nil, 0, false},
		{"one free", []int64{500}, 0, false},
		{"full: the first expiry frees one", []int64{700, 500}, 500, true},
		{"over full: expiries must free n-R+1", []int64{900, 500, 700}, 700, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at, full := l.SlotFreeAt(append([]int64(nil), tt.expiries...))
			assert.Equal(t, tt.full, full)
			assert.Equal(t, tt.freeAt, at)
		})
	}
	assert.Equal(t, quota.LimitState{Used: 2, Remaining: 0, Reset: 900 * time.Microsecond}, l.State(Counter{Expiries: []int64{100, 700, 1000}}, 100))
	assert.Equal(t, quota.LimitState{Remaining: 2}, l.State(Counter{Expiries: []int64{100}}, 100))
}

// TestEarliestIsFirstAdmitted checks every algorithm's closed form for the
// earliest instant against a scan of its admission test, on random small
// states: admitted at the earliest instant, and at no instant between t
// and it (never early). Half the limits are huge, with Per*Rate past
// 2^52: GCRA's arrival times have fractions, sliding windows steps.
func TestEarliestIsFirstAdmitted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const span = 40
	for i := range 6000 {
		l := Limit{Per: 1 + rng.Int64N(9), Rate: 1 + rng.Int64N(5)}
		if i%2 == 1 {
			l.Per = 2 + rng.Int64N(8)
			l.Rate = 1<<52/l.Per + 1 + rng.Int64N(1<<51/l.Per)
		}
		l.Burst = l.Rate + rng.Int64N(3)
		l = l.WithPhase(rng.Int64N(l.Per))
		at := rng.Int64N(2*span) - span // instants before the epoch too
		windows := map[int64]int64{}
		small := rng.IntN(2) == 0 // counts far below the rate
		for k := l.Window(at) - 2; k <= l.Window(at)+2; k++ {
			windows[k] = rng.Int64N(l.Rate + 1)
			if small {
				windows[k] = rng.Int64N(min(l.Rate+1, 100))
			}
		}
		var log []LogEntry
		for range rng.IntN(5) {
			log = Insert(log, LogEntry{At: at + rng.Int64N(span) - span/2, Cost: 1 + rng.Int64N(l.Rate)})
		}
		c := Counter{
			TAT:   Time{at + rng.Int64N(span) - span/2, rng.Int64N(l.Rate)},
			Count: func(k int64) int64 { return windows[k] },
			Log:   log,
		}
		for _, alg := range []quota.Algorithm{quota.GCRA, quota.FixedWindow, quota.SlidingWindow, quota.SlidingLog} {
			l.Algorithm = alg
			cost := 1 + rng.Int64N(int64(quota.Limit{Rate: int(l.Rate), Burst: int(l.Burst), Algorithm: alg}.Capacity()))
			first := at
			for !l.Admits(c, first, cost) {
				first++
			}
			if !assert.Equal(t, first, l.Earliest(c, at, cost), "case %d: %+v at %d cost %d windows %v log %v tat %+v", i, l, at, cost, windows, log, c.TAT) {
				t.FailNow()
			}
		}
	}
}

func TestGCRASettle(t *testing.T) {
	const T = 1000
	l := Limit{Algorithm: quota.GCRA, Per: 10 * T, Rate: 10, Burst: 10}
	third := Limit{Algorithm: quota.GCRA, Per: 1_000_000, Rate: 3_000_000, Burst: 9} // T = 1/3 µs
	tests := []struct {
		name      string
		l         Limit
		tat       Time
		now, diff int64
		want      Time
	}{
		{"refund", l, At(150 * T), 100 * T, -20, At(130 * T)},
		{"extra charge", l, At(150 * T), 100 * T, 5, At(155 * T)},
		{"a debt beyond the burst", l, At(105 * T), 100 * T, 30, At(135 * T)},
		{"an empty bucket is charged from now", l, At(90 * T), 100 * T, 5, At(105 * T)},
		{"a refund below now is a full bucket", l, At(103 * T), 100 * T, -5, At(98 * T)},
		{"no difference", l, At(150 * T), 100 * T, 0, At(150 * T)},
		{"a third: the fraction comes back", third, Time{150, 2_000_000}, 100, -2, At(150)},
		{"a third: and is charged", third, Time{150, 2_000_000}, 100, 4, Time{152, 0}},
		{"a third: from now", third, Time{90, 1}, 100, 1, Time{100, 1_000_000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.l.GCRASettle(tt.tat, tt.now, tt.diff))
		})
	}
}

func TestSettleEnd(t *testing.T) {
	const P = 1000
	for _, tt := range []struct {
		alg        quota.Algorithm
		mark, want int64
	}{
		{quota.GCRA, 5_500_000, 6500},    // Per after the arrival time (a mark in ns)
		{quota.GCRA, 5_499_001, 6500},    // rounded up to its µs
		{quota.FixedWindow, 5, 6000},     // the window's end
		{quota.SlidingWindow, 5, 7000},   // the next window's end
		{quota.SlidingLog, 5500, 6500},   // Per after the instant
		{quota.Concurrency, 5500, 0},     // nothing to settle
		{quota.FixedWindow, -1, 0},       // before the epoch
		{quota.SlidingWindow, -3, -1000}, // before the epoch
	} {
		l := Limit{Algorithm: tt.alg, Per: P, Rate: 10, Burst: 10}
		assert.Equal(t, tt.want, l.SettleEnd(tt.mark), "%v mark %d", tt.alg, tt.mark)
	}
}
