//go:build unix

package quotaview_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quotaview"
	"github.com/quotakit/throttle/waiters"
)

// cpuTime returns the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPage serves the page (and its JSON) of a policy of 50 rules
// with 1,000 keys in the store and a recorder full of traffic: the
// server's time per view, store reads included (the in-process store).
// The target is under 100 ms per view: ns/op reports it as wall time,
// and cpu-ms/op as the CPU time of the whole process per view, which a
// loaded machine does not inflate; the baseline, the same policy with an
// empty store and no recorder, gives the ratio.
func BenchmarkPage(b *testing.B) {
	const rules, keys = 50, 1000
	var p throttle.Policy
	for i := range rules {
		p.Rules = append(p.Rules, throttle.Rule{
			Name: "rule-" + strconv.Itoa(i), Wait: waiters.FailFast(),
			Limits: []throttle.Limit{
				{Name: "rate-" + strconv.Itoa(i), Rate: 1000, Per: time.Second},
				{Name: "per-key-" + strconv.Itoa(i), Rate: 100, Per: time.Hour, Algorithm: throttle.FixedWindow, Key: throttle.KeyFromContext("k")},
			},
		})
	}
	page := func(b *testing.B, full bool) http.Handler {
		rec := quotaview.NewRecorder()
		lim, err := throttle.NewLimiter(p, throttle.WithStore(memstore.New()), throttle.WithHooks(rec.Hooks(throttle.Hooks{})))
		require.NoError(b, err)
		if !full {
			return quotaview.New(lim)
		}
		for i := range keys {
			ctx := throttle.WithKey(context.Background(), "k", "key-"+strconv.Itoa(i))
			pm, err := lim.Allow(ctx, "rule-"+strconv.Itoa(i%rules))
			require.NoError(b, err)
			pm.Done()
		}
		hooks := rec.Hooks(throttle.Hooks{})
		for i := range 10_000 {
			hooks.OnDecision(throttle.DecisionEvent{Rule: "rule-" + strconv.Itoa(i%rules), Outcome: throttle.Outcome(i % 4), Wait: time.Duration(i) * time.Microsecond, Limit: "rate-1"})
		}
		return quotaview.New(lim, quotaview.WithRecorder(rec))
	}
	run := func(b *testing.B, h http.Handler, target string) {
		req := httptest.NewRequest(http.MethodGet, target, nil)
		b.ReportAllocs()
		cpu := cpuTime()
		for b.Loop() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatal(w.Code, w.Body.String())
			}
			b.SetBytes(int64(w.Body.Len()))
		}
		// CPU time, unlike ns/op, does not grow with the machine's load.
		b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Millisecond)/float64(b.N), "cpu-ms/op")
	}
	b.Run("baseline-empty", func(b *testing.B) { run(b, page(b, false), "/debug/throttle/") })
	full := page(b, true)
	b.Run("html", func(b *testing.B) { run(b, full, "/debug/throttle/") })
	b.Run("json", func(b *testing.B) { run(b, full, "/debug/throttle/json") })
}

// BenchmarkRecorderHook is what a Recorder adds to each decision: its
// OnDecision against an empty hook (the baseline), alone and from every
// core at once.
func BenchmarkRecorderHook(b *testing.B) {
	ev := throttle.DecisionEvent{Rule: "rule-1", Outcome: throttle.Waited, Wait: 3 * time.Millisecond, Tenant: "acme"}
	var sink int
	empty := throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) { sink += int(ev.Outcome) }}
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{Name: "rule-1"}, {Name: "rule-2"}}})
	require.NoError(b, err)
	rec := quotaview.NewRecorder()
	quotaview.New(lim, quotaview.WithRecorder(rec)) // samples the limiter's gauges
	hooks := rec.Hooks(throttle.Hooks{})
	b.Run("baseline-empty", func(b *testing.B) {
		for b.Loop() {
			empty.OnDecision(ev)
		}
	})
	b.Run("recorder", func(b *testing.B) {
		for b.Loop() {
			hooks.OnDecision(ev)
		}
	})
	b.Run("recorder-parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				hooks.OnDecision(ev)
			}
		})
	})
}
