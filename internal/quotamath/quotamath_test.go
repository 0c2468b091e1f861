package quotamath

import (
	"fmt"
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

// maxUnits is quota's bound on P*max(R, B): the largest products the
// arithmetic must carry exactly.
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

func TestEmission(t *testing.T) {
	tests := []struct {
		name      string
		per, rate int64
		want      int64
	}{
		{"exact", 60_000_000, 60, 1_000_000},
		{"rounded up", 1_000_000, 3, 333_334},
		{"rate above per", 1, 5, 1},
		{"huge per", maxUnits - 1, 1, maxUnits - 1},
		{"huge per and rate", maxUnits / 8, 8, maxUnits / 64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			T := Limit{Per: tt.per, Rate: tt.rate}.Emission()
			assert.Equal(t, tt.want, T)
			assert.GreaterOrEqual(t, T*tt.rate, tt.per, "R units never take less than P")
		})
	}
}

// TestGCRA steps one bucket through charges, as a store does: earliest,
// then charge there.
func TestGCRA(t *testing.T) {
	const T = 1_000_000
	l := Limit{Per: 60 * T, Rate: 60, Burst: 10}
	tests := []struct {
		name     string
		tat, at  int64 // state, decision instant
		cost     int64
		earliest int64
		newTAT   int64
	}{
		{"fresh bucket, cost == burst, at once", 0, 5 * T, 10, 5 * T, 15 * T},
		{"an idle bucket forgets", 2 * T, 100 * T, 10, 100 * T, 110 * T},
		{"cost == burst waits for the whole burst", 15 * T, 5 * T, 10, 15 * T, 25 * T},
		{"full bucket, one unit", 15 * T, 5 * T, 1, 6 * T, 16 * T},
		{"partly used", 8 * T, 5 * T, 7, 5 * T, 15 * T},
		{"partly used, one too many", 8 * T, 5 * T, 8, 6 * T, 16 * T},
		{"before the epoch", -15 * T, -20 * T, 1, -20 * T, -14 * T},
		{"waits across the epoch", -5 * T, -20 * T, 10, -5 * T, 5 * T},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := l.GCRAEarliest(tt.tat, tt.at, tt.cost)
			assert.Equal(t, tt.earliest, e)
			assert.True(t, l.GCRAAdmits(tt.tat, e, tt.cost), "admitted at earliest")
			if e > tt.at {
				assert.False(t, l.GCRAAdmits(tt.tat, e-1, tt.cost), "never early")
			}
			tat := l.GCRACharge(tt.tat, e, tt.cost)
			assert.Equal(t, tt.newTAT, tat)
			assert.Equal(t, max(tt.tat, e), l.GCRARefund(tat, tt.cost), "refund undoes the charge")
		})
	}
}

func TestGCRAHugePer(t *testing.T) {
	// Per*Burst at quota's bound: one unit per 2^50µs (about 35 years),
	// burst 8; every product stays exact.
	l := Limit{Per: maxUnits / 8, Rate: 1, Burst: 8}
	T := l.Emission()
	tat := l.GCRACharge(0, 0, 8)
	assert.Equal(t, 8*T, tat)
	assert.Equal(t, T, l.GCRAEarliest(tat, 0, 1))
	assert.Equal(t, 8*T, l.GCRAEarliest(tat, 0, 8))
	st := l.GCRAState(tat, 1)
	assert.Equal(t, quota.LimitState{Used: 8, Remaining: 0, Reset: Micros(8*T - 1)}, st)
}

func TestGCRASync(t *testing.T) {
	// T = 1s, B = 60: 2 left within 30s puts the arrival time at now+30s+58s.
	l := Limit{Per: 60_000_000, Rate: 60, Burst: 60}
	assert.Equal(t, int64(1_000+30_000_000+58_000_000), l.GCRASync(1_000, 30_000_000, 2))
	assert.Equal(t, int64(1_000+30_000_000+60_000_000), l.GCRASync(1_000, 30_000_000, 0))
}

func TestGCRAState(t *testing.T) {
	const T = 1000
	l := Limit{Per: 10 * T, Rate: 10, Burst: 5}
	tests := []struct {
		name string
		tat  int64
		want quota.LimitState
	}{
		{"fresh", 0, quota.LimitState{Remaining: 5}},
		{"at now", 100 * T, quota.LimitState{Remaining: 5}},
		{"one unit", 101 * T, quota.LimitState{Used: 1, Remaining: 4, Reset: Micros(T)}},
		{"part of a unit counts whole", 100*T + 1, quota.LimitState{Used: 1, Remaining: 4, Reset: 1 * time.Microsecond}},
		{"two and a half", 100*T + 2*T + T/2, quota.LimitState{Used: 3, Remaining: 2, Reset: Micros(2*T + T/2)}},
		{"reserved past the burst", 108 * T, quota.LimitState{Used: 5, Remaining: 0, Reset: Micros(8 * T)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, l.GCRAState(tt.tat, 100*T))
		})
	}
}

// counts returns a window count function over m.
func counts(m map[int64]int64) func(int64) int64 {
	return func(k int64) int64 { return m[k] }
}

func TestWindow(t *testing.T) {
	l := Limit{Per: 1000, Rate: 3}
	for _, tt := range []struct{ t, k int64 }{
		{0, 0}, {999, 0}, {1000, 1}, {-1, -1}, {-1000, -1}, {-1001, -2},
	} {
		assert.Equal(t, tt.k, l.Window(tt.t), "window of %d", tt.t)
	}
}

func TestFixedWindow(t *testing.T) {
	l := Limit{Per: 1000, Rate: 3}
	tests := []struct {
		name     string
		counts   map[int64]int64
		at, cost int64
		earliest int64
		state    quota.LimitState
	}{
		{"empty", nil, 1500, 3, 1500, quota.LimitState{Remaining: 3}},
		{"room", map[int64]int64{1: 2}, 1500, 1, 1500, quota.LimitState{Used: 2, Remaining: 1, Reset: 500 * time.Microsecond}},
		{"cost == rate waits for an empty window", map[int64]int64{1: 1}, 1500, 3, 2000, quota.LimitState{Used: 1, Remaining: 2, Reset: 500 * time.Microsecond}},
		{"skips full windows", map[int64]int64{1: 3, 2: 3, 3: 1}, 1500, 2, 3000, quota.LimitState{Used: 3, Remaining: 0, Reset: 500 * time.Microsecond}},
		{"before the epoch", map[int64]int64{-1: 3}, -500, 1, 0, quota.LimitState{Used: 3, Remaining: 0, Reset: 500 * time.Microsecond}},
		{"just before the epoch", map[int64]int64{-1: 3}, -1, 1, 0, quota.LimitState{Used: 3, Remaining: 0, Reset: time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := counts(tt.counts)
			e := l.FixedWindowEarliest(tt.at, tt.cost, c)
			assert.Equal(t, tt.earliest, e)
			assert.True(t, l.FixedWindowAdmits(e, tt.cost, c))
			if e > tt.at {
				assert.False(t, l.FixedWindowAdmits(e-1, tt.cost, c), "never early")
			}
			assert.Equal(t, tt.state, l.FixedWindowState(tt.at, c))
		})
	}
}

func TestSlidingWindow(t *testing.T) {
	l := Limit{Per: 1000, Rate: 4}
	tests := []struct {
		name     string
		counts   map[int64]int64
		at, cost int64
		earliest int64
		state    quota.LimitState
	}{
		{"empty", nil, 1500, 4, 1500, quota.LimitState{Remaining: 4}},
		// prev 4 weighs 4*(1000-e)/1000: one unit fits once e >= 250.
		{"the previous window fades", map[int64]int64{0: 4}, 1000, 1, 1250, quota.LimitState{Used: 4, Remaining: 0, Reset: time.Millisecond}},
		{"already faded enough", map[int64]int64{0: 4}, 1300, 1, 1300, quota.LimitState{Used: 3, Remaining: 1, Reset: 700 * time.Microsecond}},
		// 4*0.699 = 2.796 is rounded up to 3 in the state.
		{"estimate rounded up", map[int64]int64{0: 4}, 1301, 1, 1301, quota.LimitState{Used: 3, Remaining: 1, Reset: 699 * time.Microsecond}},
		{"cost == rate waits for prev to fade", map[int64]int64{0: 1}, 1000, 4, 2000, quota.LimitState{Used: 1, Remaining: 3, Reset: time.Millisecond}},
		{"current full", map[int64]int64{1: 4}, 1100, 1, 2250, quota.LimitState{Used: 4, Remaining: 0, Reset: 1900 * time.Microsecond}},
		{"before the epoch", map[int64]int64{-2: 4}, -1000, 1, -750, quota.LimitState{Used: 4, Remaining: 0, Reset: time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := counts(tt.counts)
			e := l.SlidingWindowEarliest(tt.at, tt.cost, c)
			assert.Equal(t, tt.earliest, e)
			assert.True(t, l.SlidingWindowAdmits(e, tt.cost, c))
			if e > tt.at {
				assert.False(t, l.SlidingWindowAdmits(e-1, tt.cost, c), "never early")
			}
			assert.Equal(t, tt.state, l.SlidingWindowState(tt.at, c))
		})
	}
}

func TestSlidingLog(t *testing.T) {
	l := Limit{Per: 1000, Rate: 3}
	tests := []struct {
		name     string
		log      []LogEntry
		at, cost int64
		earliest int64
		state    quota.LimitState
	}{
		{"empty", nil, 500, 3, 500, quota.LimitState{Remaining: 3}},
		{"room", []LogEntry{{100, 1}}, 500, 2, 500, quota.LimitState{Used: 1, Remaining: 2, Reset: 600 * time.Microsecond}},
		{"entries leave at their instant plus P", []LogEntry{{100, 1}, {200, 2}}, 500, 1, 1100, quota.LimitState{Used: 3, Remaining: 0, Reset: 700 * time.Microsecond}},
		{"cost == rate waits for all", []LogEntry{{100, 1}, {200, 1}}, 500, 3, 1200, quota.LimitState{Used: 2, Remaining: 1, Reset: 700 * time.Microsecond}},
		{"an entry at t-P has left", []LogEntry{{100, 3}}, 1100, 3, 1100, quota.LimitState{Remaining: 3}},
		{"never before a reservation", []LogEntry{{100, 1}, {900, 1}}, 500, 1, 900, quota.LimitState{Used: 2, Remaining: 1, Reset: 1400 * time.Microsecond}},
		{"before the epoch", []LogEntry{{-900, 3}}, -500, 1, 100, quota.LimitState{Used: 3, Remaining: 0, Reset: 600 * time.Microsecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := l.SlidingLogEarliest(tt.log, tt.at, tt.cost)
			assert.Equal(t, tt.earliest, e)
			assert.True(t, l.SlidingLogAdmits(tt.log, e, tt.cost))
			if e > tt.at {
				assert.False(t, l.SlidingLogAdmits(tt.log, e-1, tt.cost), "never early")
			}
			assert.Equal(t, tt.state, l.SlidingLogState(tt.log, tt.at))
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
	l := Limit{Per: 10_000, Rate: 2}
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
	assert.Equal(t, quota.LimitState{Used: 2, Remaining: 0, Reset: 900 * time.Microsecond}, l.ConcurrencyState([]int64{100, 700, 1000}, 100))
	assert.Equal(t, quota.LimitState{Remaining: 2}, l.ConcurrencyState([]int64{100}, 100))
}

// TestEarliestIsFirstAdmitted checks every algorithm's closed form for the
// earliest instant against a scan of its admission test, on random small
// states: admitted at the earliest instant, and at no instant between t
// and it (never early).
func TestEarliestIsFirstAdmitted(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const span = 40
	for i := range 3000 {
		l := Limit{Per: 1 + rng.Int64N(9), Rate: 1 + rng.Int64N(5)}
		l.Burst = l.Rate + rng.Int64N(3)
		at := rng.Int64N(2*span) - span // instants before the epoch too
		windows := map[int64]int64{}
		for k := l.Window(at) - 2; k <= l.Window(at)+2; k++ {
			windows[k] = rng.Int64N(l.Rate + 1)
		}
		var log []LogEntry
		for range rng.IntN(5) {
			log = Insert(log, LogEntry{At: at + rng.Int64N(span) - span/2, Cost: 1 + rng.Int64N(l.Rate)})
		}
		tat := at + rng.Int64N(span) - span/2
		cost := 1 + rng.Int64N(l.Rate)
		c := counts(windows)
		check := func(alg string, e int64, admits func(int64) bool) {
			t.Helper()
			first := at
			for !admits(first) {
				first++
			}
			if !assert.Equal(t, first, e, "case %d: %s %+v at %d cost %d windows %v log %v tat %d", i, alg, l, at, cost, windows, log, tat) {
				t.FailNow()
			}
		}
		gcraCost := 1 + rng.Int64N(l.Burst)
		check("gcra", l.GCRAEarliest(tat, at, gcraCost), func(t int64) bool { return l.GCRAAdmits(tat, t, gcraCost) })
		check("fixed window", l.FixedWindowEarliest(at, cost, c), func(t int64) bool { return l.FixedWindowAdmits(t, cost, c) })
		check("sliding window", l.SlidingWindowEarliest(at, cost, c), func(t int64) bool { return l.SlidingWindowAdmits(t, cost, c) })
		check("sliding log", l.SlidingLogEarliest(log, at, cost), func(t int64) bool { return l.SlidingLogAdmits(log, t, cost) })
	}
}
