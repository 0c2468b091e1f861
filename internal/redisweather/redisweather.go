// Package redisweather is the weather of Redis that the SDK fleet tests
// (examples/slack, examples/github) run their fleets in: prompt, slow,
// stopped, beside a busy CPU, and killed. One list, so that every fleet
// meets the same faults.
package redisweather

import (
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/cpuburn"
	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
)

// A Weather is what Redis does while a fleet runs.
type Weather struct {
	Name string
	// Down: Redis is gone from the fault on, so the instances decide
	// alone (their local shares).
	Down bool

	start func(t testing.TB, px *faultproxy.Proxy)
	fault func(t testing.TB, srv *redistest.Server)
}

// All returns every weather, in the order the tests run them.
func All() []Weather {
	return []Weather{
		{Name: "prompt"},
		// A tenth of Redis's replies 150-350 ms late: slow, not down.
		{Name: "slow", start: func(_ testing.TB, px *faultproxy.Proxy) {
			px.SetJitter(faultproxy.ToClient, 0.1, 150*time.Millisecond, 350*time.Millisecond)
		}},
		// Redis stopped (SIGSTOP) for a second: slow, not down.
		{Name: "stopped", fault: func(t testing.TB, srv *redistest.Server) {
			if err := srv.Pause(); err != nil {
				t.Fatalf("redisweather: stopping Redis: %v", err)
			}
			time.Sleep(time.Second) // the fault's length, not a wait for a result
			if err := srv.Resume(); err != nil {
				t.Fatalf("redisweather: resuming Redis: %v", err)
			}
		}},
		// One spinning process per core beside the fleet and Redis.
		{Name: "busy CPU", start: func(t testing.TB, _ *faultproxy.Proxy) {
			cpuburn.Start(t, 1)
		}},
		// Redis killed (SIGKILL) for the rest of the run.
		{Name: "killed", Down: true, fault: func(t testing.TB, srv *redistest.Server) {
			if err := srv.Kill(); err != nil {
				t.Fatalf("redisweather: killing Redis: %v", err)
			}
		}},
	}
}

// Begin starts a Redis of the test's own behind a loopback proxy, and
// the weather's lasting part (a slow link, a busy CPU). The fleet's
// clients dial px.Addr().
func (w Weather) Begin(t testing.TB) (srv *redistest.Server, px *faultproxy.Proxy) {
	t.Helper()
	srv = redistest.Start(t)
	px = faultproxy.New(t, srv.Addr())
	if w.start != nil {
		w.start(t, px)
	}
	return srv, px
}

// Fault brings the weather's fault (a stop, a kill), if it has one, in
// the test's goroutine once the traffic has run as long as the test
// wants; it returns once the fault is over, or at once for a kill.
func (w Weather) Fault(t testing.TB, srv *redistest.Server) {
	t.Helper()
	if w.fault != nil {
		w.fault(t, srv)
	}
}
