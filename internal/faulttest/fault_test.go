package faulttest

import (
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modes are the failure modes each cheap fault is tried with.
var modes = []throttle.FailureMode{throttle.FailLocal, throttle.FailOpen, throttle.FailClosed}

// checkMode asserts what the caller sees in mode while the store cannot
// answer, for n requests of which none could be decided by the store, on
// a rule of quota of which the store had granted used, as its last answer
// told: FailLocal sends this instance's share, its part of what was left
// (localseed.go), and refuses the rest with a *LimitError; FailOpen sends
// all, counted; FailClosed sends none and fails with ErrStoreUnavailable.
func checkMode(t *testing.T, mode throttle.FailureMode, rec *recorder, rs results, quota, used int) {
	t.Helper()
	n := len(rs)
	switch mode {
	case throttle.FailLocal:
		share := min(quota, quota-used) / instances
		assert.Equal(t, min(share, n), rs.sent(), "local fallback sends exactly this instance's share")
		assert.Equal(t, n-min(share, n), rs.count(throttle.ErrLimited), "the rest is refused by the share")
		assert.Equal(t, n-min(share, n), rs.count(throttle.ErrStoreUnavailable), "and says the store did not decide")
	case throttle.FailOpen:
		assert.Equal(t, n, rs.sent(), "fail open sends everything")
		assert.Equal(t, n, rec.fallbacksOf(throttle.FailOpen), "and reports each as failed open")
	case throttle.FailClosed:
		assert.Zero(t, rs.sent(), "fail closed sends nothing")
		assert.Equal(t, n, rs.count(throttle.ErrStoreUnavailable))
		assert.Zero(t, rs.count(throttle.ErrLimited))
	}
}

// assertOnce asserts that an outage was reported as one failing and one
// down transition (and a recovery, if recovered), not per request.
func assertOnce(t *testing.T, rec *recorder, recovered bool) {
	t.Helper()
	want := []throttle.StoreState{throttle.StoreFailing, throttle.StoreDown}
	if recovered {
		want = append(want, throttle.StoreUp)
	}
	assert.Equal(t, want, rec.stateLog(), "each transition is reported once")
}

// 1. Redis unreachable when the transport is built.
func TestFaultUnreachableAtConstruction(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			noLeaks(t)
			v := newVendor(t)
			const quota = 10
			rec := &recorder{}
			tr := newTransport(t, newStore(t, newClient(t, freeAddr(t))), policy(quota, mode), rec)
			rs := fire(t, tr, v, "/", 2*quota, 4)
			checkMode(t, mode, rec, rs, quota, 0)
			assertLatency(t, "unreachable/"+mode.String(), rs)
			assertOnce(t, rec, false)
			assert.Equal(t, int64(rs.sent()), v.got.Load())
			if mode == throttle.FailClosed {
				refused := rs.count(syscall.ECONNREFUSED)
				assert.Equal(t, len(rs), refused, "the cause is wrapped")
			}
		})
	}
}

// 2. Redis killed mid-traffic and restarted: the fleet's over-admission is
// at most the local share during the outage plus one burst for the state
// lost; recovery is measured from the restart.
func TestFaultKillRestart(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	v := newVendor(t)
	const quota = 40
	rec := &recorder{}
	tr := newTransport(t, newStore(t, newClient(t, srv.Addr())), policy(quota, throttle.FailLocal), rec)

	stop := traffic(t, tr, v, "/", 4, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, srv.Kill())
	killed := time.Now()
	time.Sleep(time.Second)
	require.NoError(t, srv.Restart())
	restarted := time.Now()
	time.Sleep(1500 * time.Millisecond)
	rs := stop()

	first, ok := rec.storeAfter(restarted)
	require.True(t, ok, "the store decides again")
	recovery := first.Sub(restarted)
	_, ok = rec.upAfter(restarted)
	require.True(t, ok, "the transport reported recovery")
	t.Logf("kill/restart: outage %v, recovery after restart %v, %d requests, %d sent, %d by the local share",
		restarted.Sub(killed).Round(time.Millisecond), recovery.Round(time.Millisecond), len(rs), rs.sent(), rec.fallbackCount())
	assert.LessOrEqual(t, recovery, recoveryBound)
	assertLatency(t, "kill/restart", rs)
	assertOnce(t, rec, true)
	// Before: the quota; during: the share; after: the quota again, as the
	// restart lost the counters (one burst per loss).
	assert.LessOrEqual(t, rs.sent(), quota+quota/instances+quota)
	assert.Equal(t, int64(rs.sent()), v.got.Load())
}

// 3. SCRIPT FLUSH: the next EVALSHA gets NOSCRIPT and go-redis falls back
// to EVAL; nobody sees anything, and counts stay exact.
func TestFaultScriptFlush(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	v := newVendor(t)
	const quota = 20
	rec := &recorder{}
	tr := newTransport(t, newStore(t, newClient(t, srv.Addr())), policy(quota, throttle.FailClosed), rec)

	before := fire(t, tr, v, "/", quota/2, 4)
	_, err := srv.Do("SCRIPT", "FLUSH")
	require.NoError(t, err)
	after := fire(t, tr, v, "/", quota, 4)
	rs := append(before, after...)
	assert.Equal(t, quota, rs.sent(), "exactly the quota")
	assert.Equal(t, quota/2, rs.count(throttle.ErrLimited))
	assert.Zero(t, rs.count(throttle.ErrStoreUnavailable))
	assert.Empty(t, rec.stateLog(), "no store failure")
	assertLatency(t, "script flush", after)
}

// 4. FLUSHALL: counters are lost, so at most one more burst is admitted;
// a pause this instance learned survives in its local copy.
func TestFaultFlushAll(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	v := newVendor(t)
	const quota = 10
	rec := &recorder{}
	tr := newTransport(t, newStore(t, newClient(t, srv.Addr())), policy(quota, throttle.FailClosed), rec)

	r := roundTrip(t, tr, v, "/slow-down")
	require.NoError(t, r.err)
	require.Equal(t, 429, r.status, "the vendor asks for a 30 s pause")
	before := fire(t, tr, v, "/", 2*quota, 4)
	require.Equal(t, quota, before.sent())

	_, err := srv.Do("FLUSHALL")
	require.NoError(t, err)

	after := fire(t, tr, v, "/", 2*quota, 4)
	assert.LessOrEqual(t, before.sent()+after.sent(), 2*quota, "at most one burst per loss")
	t.Logf("flushall: %d sent before, %d after (quota %d)", before.sent(), after.sent(), quota)
	paused := roundTrip(t, tr, v, "/slow-down")
	var le *throttle.LimitError
	require.ErrorAs(t, paused.err, &le, "the pause survives through the local copy")
	assert.Greater(t, le.RetryAfter, 20*time.Second)
	assert.Empty(t, rec.stateLog(), "state loss is not a store failure")
	assertLatency(t, "flushall", after)
}

// proxied starts a server behind a fault proxy and a transport through it,
// warmed up with one request decided by the store.
func proxied(t *testing.T, quota int, mode throttle.FailureMode, opts ...redistest.Option) (*redistest.Server, *faultproxy.Proxy, *vendor, *recorder, *throttle.Transport) {
	return proxiedStore(t, quota, mode, nil, opts...)
}

// proxiedStore is proxied with a store made with storeOpts.
func proxiedStore(t *testing.T, quota int, mode throttle.FailureMode, storeOpts []redisstore.Option, opts ...redistest.Option) (*redistest.Server, *faultproxy.Proxy, *vendor, *recorder, *throttle.Transport) {
	srv := redistest.Start(t, opts...)
	px := faultproxy.New(t, srv.Addr())
	v := newVendor(t)
	rec := &recorder{}
	tr := newTransport(t, newStore(t, newClient(t, px.Addr()), storeOpts...), policy(quota, mode), rec)
	require.NoError(t, roundTrip(t, tr, v, "/").err)
	require.Equal(t, int64(1), rec.byStore.Load())
	return srv, px, v, rec, tr
}

// outage runs a fault that makes the store not answer (blackhole, BUSY)
// for each mode: requests during it get their mode within
// the call budget, and after it ends the store decides again within about
// a second.
func outage(t *testing.T, name string, start, end func(*redistest.Server, *faultproxy.Proxy), opts ...redistest.Option) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			noLeaks(t)
			const quota = 20
			srv, px, v, rec, tr := proxied(t, quota, mode, opts...)
			start(srv, px)
			rs := fire(t, tr, v, "/", 30, 3)
			checkMode(t, mode, rec, rs, quota, 1) // the warm-up's grant
			assertLatency(t, name+"/"+mode.String(), rs)

			end(srv, px)
			ended := time.Now()
			rec2 := waitStoreDecides(t, tr, v, rec, ended, recoveryBound)
			reported := waitReported(t, tr, v, rec, ended, recoveryBound)
			t.Logf("%s/%s: after the fault ended, the store decides again in %v; recovery reported in %v", name, mode, rec2.Round(time.Millisecond), reported.Round(time.Millisecond))
			assertOnce(t, rec, true)
		})
	}
}

// 5. 300 ms of latency on every reply: slow, not down. Every request is
// decided by the store, in every mode: exact counts, no failure mode, no
// change of state.
func TestFaultLatency(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			noLeaks(t)
			const quota = 20
			_, px, v, rec, tr := proxied(t, quota, mode)
			px.SetLatency(faultproxy.ToClient, 300*time.Millisecond)
			rs := fire(t, tr, v, "/", 30, 3)
			px.SetLatency(faultproxy.ToClient, 0)
			t.Logf("latency 300ms/%s: %d requests, latency median %v, max %v", mode, len(rs), rs.median().Round(time.Millisecond), rs.max().Round(time.Millisecond))
			assert.Equal(t, quota-1, rs.sent(), "exactly the quota (the warm-up sent one)")
			assert.Equal(t, len(rs)-(quota-1), rs.count(throttle.ErrLimited), "the rest refused by the shared limit")
			assert.Zero(t, rs.count(throttle.ErrStoreUnavailable))
			assert.Zero(t, rec.fallbackCount(), "no request got its failure mode")
			assert.Empty(t, rec.stateLog(), "a slow store is not a failing one")
			assert.Equal(t, int64(quota), v.got.Load())
		})
	}
}

// 7. Blackhole: nothing comes back at all.
func TestFaultBlackhole(t *testing.T) {
	outage(t, "blackhole",
		func(_ *redistest.Server, px *faultproxy.Proxy) { px.SetBlackhole(true) },
		func(_ *redistest.Server, px *faultproxy.Proxy) { px.SetBlackhole(false) })
}

// 8. BUSY: another client's script runs past busy-reply-threshold, so
// Redis answers every other command with BUSY until it is killed.
func TestFaultBusy(t *testing.T) {
	var wg sync.WaitGroup
	outage(t, "busy",
		func(srv *redistest.Server, _ *faultproxy.Proxy) {
			wg.Go(func() {
				// Runs until SCRIPT KILL; its reply is then an error.
				_, _ = srv.Do("EVAL", "local x = 0 for i = 1, 1e12 do x = x + i end return x", "0")
			})
			require.Eventually(t, func() bool {
				_, err := srv.Do("PING")
				return err != nil && strings.HasPrefix(err.Error(), "BUSY")
			}, 5*time.Second, 10*time.Millisecond)
		},
		func(srv *redistest.Server, _ *faultproxy.Proxy) {
			_, err := srv.Do("SCRIPT", "KILL")
			require.NoError(t, err)
			wg.Wait()
		},
		redistest.Args("--busy-reply-threshold", "50"))
}

// 6. The connection is reset while a reply is in flight: Redis ran the
// script, the client never saw its answer, go-redis sent it again. With
// replay ids the call sent again gets the remembered reply; with
// ReplayDetect (the default for this client) it fails with ErrResent and
// the request gets the store-failure mode. Either way the first sending's
// charge is the only one.
func TestFaultResetInFlight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []redisstore.Option
		failed int // requests that got the failure mode
	}{
		{"ids", []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs)}, 0},
		{"detect", nil, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			noLeaks(t)
			const quota = 10
			_, px, v, rec, tr := proxiedStore(t, quota, throttle.FailClosed, tc.opts)
			var rs, faulted results
			for range 3 {
				px.DropReplyTo("evalsha")
				r := roundTrip(t, tr, v, "/")
				if tc.failed == 0 {
					require.NoError(t, r.err, "the retry gets the remembered reply")
				} else {
					require.ErrorIs(t, r.err, throttle.ErrStoreUnavailable)
					require.ErrorIs(t, r.err, redisstore.ErrResent)
				}
				faulted = append(faulted, r)
				// A request without a fault between, so that three failures
				// in a row do not open the breaker.
				ok := roundTrip(t, tr, v, "/")
				require.NoError(t, ok.err)
				rs = append(rs, r, ok)
			}
			assert.Equal(t, 3, px.Stats().Dropped)
			rs = append(rs, fire(t, tr, v, "/", 2*quota, 4)...)
			// One request was sent by proxied's warm-up; each dropped reply's
			// call charged once, sent or not.
			assert.Equal(t, quota-1, rs.sent()+tc.failed, "no double charge")
			assert.Equal(t, int64(quota-tc.failed), v.got.Load())
			assert.Equal(t, tc.failed, rs.count(throttle.ErrStoreUnavailable))
			if tc.failed == 0 {
				assert.Empty(t, rec.stateLog())
			}
			assertLatency(t, "reset in flight, "+tc.name, faulted)
		})
	}
}

// 10. 10,000 callers blocked during an outage (Redis blackholed, the worst
// case: calls hang rather than fail): store calls, Redis connections,
// goroutines and memory stay bounded, and every caller returns.
func TestFaultManyBlockedCallers(t *testing.T) {
	noLeaks(t)
	srv := redistest.Start(t)
	px := faultproxy.New(t, srv.Addr())
	v := newVendor(t)
	client := newClient(t, px.Addr())
	cs := &countingStore{Store: newStore(t, client)}
	rec := &recorder{}
	// 2,000 per second for the fleet: this instance's share admits 1,000
	// at once and 1,000 a second; callers wait up to a second for it.
	p := throttle.Policy{Instances: instances, Rules: []throttle.Rule{{
		Name: "api", Host: "127.0.0.1", Wait: waiters.UpTo(time.Second),
		Limits: []throttle.Limit{{Name: "calls", Rate: 2000, Per: time.Second}},
	}}}
	// The vendor answers in process: this test counts goroutines, and a
	// real server's connections would add two or three per request sent.
	base := &answer{}
	tr, err := throttle.NewTransport(base, p, throttle.WithStore(cs), throttle.WithHooks(rec.hooks()))
	require.NoError(t, err)
	require.NoError(t, roundTrip(t, tr, v, "/").err)
	px.SetBlackhole(true)

	const callers = 10_000
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap0, g0 := ms.HeapInuse, runtime.NumGoroutine()
	var peakG, peakConns int
	var peakHeap uint64
	quit := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		var m runtime.MemStats
		for {
			select {
			case <-quit:
				return
			case <-time.After(50 * time.Millisecond):
			}
			peakG = max(peakG, runtime.NumGoroutine())
			peakConns = max(peakConns, int(client.PoolStats().TotalConns))
			runtime.ReadMemStats(&m)
			peakHeap = max(peakHeap, m.HeapInuse)
		}
	})
	start := time.Now()
	rs := fire(t, tr, v, "/", callers, callers)
	took := time.Since(start)
	close(quit)
	sampler.Wait()

	maxCalls := int64(256) // Breaker.MaxInFlight's default
	growth := int64(peakHeap) - int64(heap0)
	t.Logf("10k callers: done in %v; store calls %d (max %d at once); redis connections %d dialled, %d open at once; goroutines %d -> peak %d; heap +%d KiB (%d B per caller); sent %d, refused %d",
		took.Round(time.Millisecond), cs.calls.Load()-1, cs.maxInFlight.Load(), px.Stats().Accepted, peakConns, g0, peakG, growth>>10, growth/callers, rs.sent(), rs.count(throttle.ErrLimited))
	assert.LessOrEqual(t, cs.maxInFlight.Load(), maxCalls, "in-flight store calls are capped")
	assert.LessOrEqual(t, cs.calls.Load(), maxCalls+10, "store calls: the cap, then the breaker, plus a few probes")
	assert.LessOrEqual(t, peakConns, client.Options().PoolSize, "Redis connections: at most the pool at once")
	// Each caller is its own goroutine, blocked on its timer; the
	// transport adds at most one per in-flight store call.
	assert.LessOrEqual(t, peakG, g0+callers+int(maxCalls)+100)
	assert.Less(t, growth, int64(callers)*64<<10, "memory grows by less than 64 KiB per blocked caller")
	assert.Equal(t, rs.sent()+rs.count(throttle.ErrLimited), callers, "each caller is sent or refused, none fails")
	// The share admits its burst, then its rate: 1,000 + 1,000 a second.
	assert.LessOrEqual(t, float64(rs.sent()), 1000+1000*took.Seconds()+1)
	assert.Equal(t, int64(rs.sent()+1), base.sent.Load())
	px.SetBlackhole(false)
}

// answer is a base transport that answers every request 200 in process,
// counting them.
type answer struct{ sent atomic.Int64 }

func (a *answer) RoundTrip(req *http.Request) (*http.Response, error) {
	a.sent.Add(1)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}
