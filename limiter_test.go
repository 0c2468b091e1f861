package throttle_test

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limiterStores are the stores the Limiter's cases run on: the in-process
// store shared by the instances (as one process's limiters share it), and
// a real redis-server shared by instances that each have a client and a
// store of their own, as a fleet does.
func limiterStores(t *testing.T) map[string]func(t *testing.T) func() quota.Store {
	return map[string]func(t *testing.T) func() quota.Store{
		"memstore": func(t *testing.T) func() quota.Store {
			s := memstore.New()
			return func() quota.Store { return s }
		},
		"redis": func(t *testing.T) func() quota.Store {
			srv := redistest.Start(t)
			prefix := redistest.Prefix(t)
			return func() quota.Store {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				t.Cleanup(func() { _ = c.Close() })
				s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
				require.NoError(t, err)
				return s
			}
		},
	}
}

// fleetOf returns n limiters of p, each on its own store value from next.
func fleetOf(t *testing.T, n int, p throttle.Policy, next func() quota.Store, opts ...throttle.Option) []*throttle.Limiter {
	t.Helper()
	out := make([]*throttle.Limiter, n)
	for i := range out {
		lim, err := throttle.NewLimiter(p, append([]throttle.Option{throttle.WithStore(next())}, opts...)...)
		require.NoError(t, err)
		out[i] = lim
	}
	return out
}

func TestLimiter(t *testing.T) {
	for name, stores := range limiterStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("AllowIsExactAcrossInstances", func(t *testing.T) {
				p := throttle.Policy{Rules: []throttle.Rule{{Name: "send",
					Limits: []throttle.Limit{{Name: "per-min", Rate: 7, Per: time.Minute}}}}}
				fleet := fleetOf(t, 4, p, stores(t))
				var granted, refused atomic.Int64
				var mu sync.Mutex
				var remaining []int64
				var wg sync.WaitGroup
				for i := range 4 * 8 {
					wg.Go(func() {
						for range 5 {
							pm, err := fleet[i%4].Allow(t.Context(), "send")
							var le *throttle.LimitError
							switch {
							case err == nil:
								granted.Add(1)
								mu.Lock()
								remaining = append(remaining, pm.Remaining)
								mu.Unlock()
								if pm.ResetAfter <= 0 || pm.ResetAfter > time.Minute {
									t.Errorf("ResetAfter %v, want in (0, 1m]", pm.ResetAfter)
								}
								pm.Done()
							case errors.As(err, &le) && errors.Is(err, throttle.ErrLimited) && le.RetryAfter > 0 && le.Limit == "per-min":
								refused.Add(1)
							default:
								t.Errorf("unexpected: %v", err)
							}
						}
					})
				}
				wg.Wait()
				assert.Equal(t, int64(7), granted.Load(), "exactly the burst, across 4 instances and 32 goroutines")
				slices.Sort(remaining)
				assert.Equal(t, []int64{0, 1, 2, 3, 4, 5, 6}, remaining, "each grant saw what the one decision before it left")
				assert.Equal(t, int64(160-7), refused.Load())
			})

			t.Run("AllowNAndCosts", func(t *testing.T) {
				p := throttle.Policy{Rules: []throttle.Rule{{Name: "tokens",
					Limits: []throttle.Limit{{Name: "tok", Rate: 5, Per: time.Hour}}}}}
				lim := fleetOf(t, 1, p, stores(t))[0]
				_, err := lim.AllowN(t.Context(), "tokens", 3)
				require.NoError(t, err)
				_, err = lim.AllowN(t.Context(), "tokens", 3)
				require.ErrorIs(t, err, throttle.ErrLimited, "2 left")
				_, err = lim.AllowN(t.Context(), "tokens", 2)
				require.NoError(t, err)
				_, err = lim.AllowN(t.Context(), "tokens", 6)
				require.ErrorIs(t, err, throttle.ErrCostTooHigh)
				_, err = lim.AllowN(t.Context(), "tokens", 0)
				require.ErrorIs(t, err, throttle.ErrInvalidPolicy)
				_, err = lim.Allow(t.Context(), "nope")
				require.ErrorIs(t, err, throttle.ErrUnknownRule)
			})

			t.Run("WaitWaitsForItsTurn", func(t *testing.T) {
				p := throttle.Policy{Rules: []throttle.Rule{{Name: "w",
					Limits: []throttle.Limit{{Name: "w", Rate: 20, Per: time.Second, Burst: 1}}}}}
				lim := fleetOf(t, 1, p, stores(t))[0]
				// Call i returns no sooner than i intervals (50 ms each)
				// after the first began: a loaded machine may return a call
				// late, so that the next need not wait (its instant has
				// passed), but never early.
				start := time.Now()
				for i := range 3 {
					pm, err := lim.Wait(t.Context(), "w")
					require.NoError(t, err)
					assert.GreaterOrEqual(t, time.Since(start), time.Duration(i)*50*time.Millisecond-time.Millisecond,
						"call %d returned before its reserved instant (waited %v)", i, pm.Waited)
					pm.Done()
				}

				ctx := throttle.WithWaiter(t.Context(), waiters.FailFast())
				_, err := lim.Wait(ctx, "w")
				_, err2 := lim.Wait(ctx, "w")
				assert.True(t, err != nil || err2 != nil, "a fail-fast waiter on ctx does not wait")
			})

			t.Run("ReserveAndCancel", func(t *testing.T) {
				p := throttle.Policy{Rules: []throttle.Rule{{Name: "r",
					Limits: []throttle.Limit{{Name: "r", Rate: 1, Per: time.Minute}}}}}
				lim := fleetOf(t, 1, p, stores(t))[0]
				first, err := lim.Reserve(t.Context(), "r", 1)
				require.NoError(t, err)
				assert.Zero(t, first.Delay)
				second, err := lim.Reserve(t.Context(), "r", 1)
				require.NoError(t, err)
				assert.Greater(t, second.Delay, 59*time.Second, "the next minute is reserved")
				require.NoError(t, second.Cancel(t.Context()))
				require.NoError(t, second.Cancel(t.Context()), "twice does nothing more")
				third, err := lim.Reserve(t.Context(), "r", 1)
				require.NoError(t, err)
				assert.Greater(t, third.Delay, 59*time.Second)
				assert.Less(t, third.Delay, 61*time.Second, "the cancelled reservation was given back, not stacked")

				ctx := throttle.WithWaiter(t.Context(), waiters.UpTo(time.Second))
				_, err = lim.Reserve(ctx, "r", 1)
				require.ErrorIs(t, err, throttle.ErrLimited, "further than the waiter allows")

				pc := throttle.Policy{Rules: []throttle.Rule{{Name: "c",
					Limits: []throttle.Limit{{Name: "c", Rate: 2, Per: time.Second, Algorithm: throttle.Concurrency}}}}}
				limc := fleetOf(t, 1, pc, stores(t))[0]
				_, err = limc.Reserve(t.Context(), "c", 1)
				require.ErrorIs(t, err, throttle.ErrInvalidPolicy, "an in-flight slot cannot be reserved")
			})

			t.Run("InFlightSlotsFreedByDone", func(t *testing.T) {
				p := throttle.Policy{Rules: []throttle.Rule{{Name: "c", Wait: waiters.FailFast(),
					Limits: []throttle.Limit{{Name: "slots", Rate: 2, Per: time.Minute, Algorithm: throttle.Concurrency}}}}}
				lim := fleetOf(t, 1, p, stores(t))[0]
				a, err := lim.Allow(t.Context(), "c")
				require.NoError(t, err)
				b, err := lim.Allow(t.Context(), "c")
				require.NoError(t, err)
				_, err = lim.Allow(t.Context(), "c")
				var le *throttle.LimitError
				require.ErrorAs(t, err, &le)
				assert.Equal(t, "slots", le.Limit)
				a.Done()
				a.Done() // once only
				c, err := lim.Allow(t.Context(), "c")
				require.NoError(t, err, "Done freed a slot")
				_, err = lim.Allow(t.Context(), "c")
				require.ErrorIs(t, err, throttle.ErrLimited, "and only one")
				b.Done()
				require.NoError(t, c.Cancel(t.Context()))
			})

			t.Run("ReportPausesEveryInstance", func(t *testing.T) {
				p := throttle.Policy{Rules: []throttle.Rule{{Name: "v", Wait: waiters.FailFast(),
					Learn:  throttle.Learning{Jitter: -1},
					Limits: []throttle.Limit{{Name: "v", Rate: 1000, Per: time.Second}}}}}
				var pauses atomic.Int64
				fleet := fleetOf(t, 2, p, stores(t), throttle.WithHooks(throttle.Hooks{OnPause: func(ev throttle.PauseEvent) {
					if ev.Rule == "v" && ev.Status == 0 && ev.Pause == 30*time.Second {
						pauses.Add(1)
					}
				}}))
				pm, err := fleet[0].Allow(t.Context(), "v")
				require.NoError(t, err)
				pm.Report(t.Context(), true, quotaheader.Feedback{Limit: -1, Remaining: -1, Used: -1, RetryAfter: 30 * time.Second, HasRetryAfter: true})
				pm.Done()
				assert.Equal(t, int64(1), pauses.Load(), "OnPause saw the pause, with no HTTP status")
				_, err = fleet[1].Allow(t.Context(), "v")
				var le *throttle.LimitError
				require.ErrorAs(t, err, &le, "the other instance is paused through the store")
				assert.Empty(t, le.Limit)
				assert.Greater(t, le.RetryAfter, 25*time.Second)

				// Not "slow down", and nothing said: no pause.
				p2 := p
				p2.Rules = []throttle.Rule{p.Rules[0]}
				p2.Rules[0].Name = "quiet"
				lim := fleetOf(t, 1, p2, stores(t))[0]
				pm, err = lim.Allow(t.Context(), "quiet")
				require.NoError(t, err)
				pm.Report(t.Context(), false, quotaheader.Feedback{Limit: -1, Remaining: -1, Used: -1})
				_, err = lim.Allow(t.Context(), "quiet")
				require.NoError(t, err)
			})

			t.Run("KeysFromTheContext", func(t *testing.T) {
				p := throttle.Policy{Rules: []throttle.Rule{{Name: "k", Wait: waiters.FailFast(),
					Limits: []throttle.Limit{{Name: "tenant", Rate: 1, Per: time.Hour, Key: throttle.KeyFromContext("tenant")}}}}}
				var decisions atomic.Int64
				lim := fleetOf(t, 1, p, stores(t), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
					if ev.Rule == "k" && ev.Context != nil {
						decisions.Add(1)
					}
				}}))[0]
				a := throttle.WithKey(t.Context(), "tenant", "a")
				b := throttle.WithKey(t.Context(), "tenant", "b")
				_, err := lim.Allow(a, "k")
				require.NoError(t, err)
				_, err = lim.Allow(a, "k")
				require.ErrorIs(t, err, throttle.ErrLimited)
				_, err = lim.Allow(b, "k")
				require.NoError(t, err, "another tenant has its own counter")
				_, err = lim.Allow(t.Context(), "k")
				require.ErrorIs(t, err, throttle.ErrMissingKey)
				assert.Equal(t, int64(4), decisions.Load(), "every call is reported to OnDecision")
			})
		})
	}
}

// The Transport is a Limiter's user: a Limiter and a Transport on one
// store share the rule's counter.
func TestLimiterSharesTheTransportsCounters(t *testing.T) {
	v := newVendor(t)
	s := memstore.New()
	p := throttle.Policy{Rules: []throttle.Rule{{Name: "api", Host: "127.0.0.1", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "api", Rate: 2, Per: time.Hour}}}}}
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(s))
	require.NoError(t, err)
	lim, err := throttle.NewLimiter(p, throttle.WithStore(s))
	require.NoError(t, err)
	resp, err := (&http.Client{Transport: tr}).Get(v.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, err = lim.Allow(context.Background(), "api")
	require.NoError(t, err)
	_, err = lim.Allow(context.Background(), "api")
	require.ErrorIs(t, err, throttle.ErrLimited, "one by HTTP, one by the Limiter: the quota of 2 is spent")
}

// TestPermitReportCaps checks that Permit.Report caps a hand-built
// Feedback at the rule's MaxPause, as quotaheader.Parse caps what it
// reads: the pause is MaxPause and the event says Capped.
func TestPermitReportCaps(t *testing.T) {
	const maxPause = 2 * time.Second
	for _, c := range []struct {
		name    string
		limited bool
		fb      func(now time.Time) quotaheader.Feedback
	}{
		{"RetryAfter", true, func(time.Time) quotaheader.Feedback {
			return quotaheader.Feedback{Limit: -1, Remaining: -1, Used: -1, RetryAfter: time.Hour, HasRetryAfter: true}
		}},
		{"Reset", false, func(now time.Time) quotaheader.Feedback {
			return quotaheader.Feedback{Limit: -1, Remaining: 0, Used: -1, Reset: now.Add(time.Hour)}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			p := throttle.Policy{Rules: []throttle.Rule{{Name: "v", Wait: waiters.FailFast(),
				Learn:  throttle.Learning{Jitter: -1, MaxPause: maxPause},
				Limits: []throttle.Limit{{Name: "v", Rate: 1000, Per: time.Second}}}}}
			var got []throttle.PauseEvent
			lim, err := throttle.NewLimiter(p, throttle.WithStore(memstore.New(memstore.WithClock(func() time.Time { return now }))),
				throttle.WithClock(func() time.Time { return now }),
				throttle.WithHooks(throttle.Hooks{OnPause: func(ev throttle.PauseEvent) { got = append(got, ev) }}))
			require.NoError(t, err)
			pm, err := lim.Allow(t.Context(), "v")
			require.NoError(t, err)
			pm.Report(t.Context(), c.limited, c.fb(now))
			pm.Done()
			require.Len(t, got, 1)
			assert.Equal(t, maxPause, got[0].Pause)
			assert.True(t, got[0].Capped)
		})
	}
}
