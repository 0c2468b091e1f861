package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/queuetest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

// queued is a policy of one rule, one request per hour and key (so that a
// second request of a key must wait), whose queue holds max requests.
func queued(max int, full throttle.QueueFull) throttle.Policy {
	return throttle.Policy{Rules: []throttle.Rule{{
		Name:      "bulk",
		Limits:    []throttle.Limit{{Name: "hourly", Rate: 1, Per: time.Hour, Key: throttle.KeyFromHeader("Tenant")}},
		Wait:      waiters.Block(),
		MaxQueue:  max,
		QueueFull: full,
	}}}
}

// sendAs sends one request of tenant and reports its outcome on out.
func sendAs(ctx context.Context, tr http.RoundTripper, tenant string, out chan<- error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example.com/x", nil)
	if err == nil {
		req.Header.Set("Tenant", tenant)
		var resp *http.Response
		if resp, err = tr.RoundTrip(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	out <- err
}

// drain reads what out holds now.
func drain(out <-chan error) []error {
	var errs []error
	for {
		select {
		case err := <-out:
			errs = append(errs, err)
		default:
			return errs
		}
	}
}

// TestQueueBound: 10,000 callers want a rule whose quota is spent, and
// whose queue holds 100. With RefuseNew, 100 wait and 9,900 are refused at
// once with ErrQueueFull and the time to retry; with DropOldest, each
// newcomer makes the oldest waiter give up (ErrQueueDropped), so the last
// 100 wait. synctest.Wait returns once every caller has either finished or
// blocked, so the counts are exact, with no timing involved; goleak
// (TestMain) checks that no goroutine outlives the callers.
func TestQueueBound(t *testing.T) {
	const callers, max = 10_000, 100
	for _, tc := range []struct {
		full    throttle.QueueFull
		outcome error
	}{
		{throttle.RefuseNew, throttle.ErrQueueFull},
		{throttle.DropOldest, throttle.ErrQueueDropped},
	} {
		t.Run(tc.full.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				rec := newRecorder()
				tr, err := throttle.NewTransport(rec, queued(max, tc.full))
				require.NoError(t, err)
				out := make(chan error, callers+1)
				sendAs(context.Background(), tr, "big", out)
				require.NoError(t, <-out, "the first request spends the hour's quota")

				ctx, cancel := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() { sendAs(ctx, tr, "big", out) })
				}
				synctest.Wait()
				settled := drain(out)
				assert.Len(t, settled, callers-max, "all but the queue's places settled at once")
				for _, err := range settled {
					var le *throttle.LimitError
					if !assert.ErrorAs(t, err, &le) || !assert.ErrorIs(t, err, tc.outcome) {
						break
					}
					assert.ErrorIs(t, err, throttle.ErrLimited)
					if tc.full == throttle.RefuseNew {
						assert.Positive(t, le.RetryAfter, "a refusal says when to retry")
					}
				}

				// A tenant whose quota is there goes at once, queue full or not.
				other := make(chan error, 1)
				sendAs(context.Background(), tr, "small", other)
				assert.NoError(t, <-other)

				cancel()
				wg.Wait()
				waited := drain(out)
				assert.Len(t, waited, max)
				for _, err := range waited {
					if !assert.ErrorIs(t, err, context.Canceled, "%v", err) {
						break
					}
				}
				assert.Len(t, rec.times(), 2, "only the first request and the other tenant's were sent")
			})
		})
	}
}

// TestQueueDropsOldestFirst: with a queue of 2 and DropOldest, the third
// waiter makes the first give up, and the fourth the second, and the two
// that stayed go in their turn.
func TestQueueDropsOldestFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, queued(2, throttle.DropOldest))
		require.NoError(t, err)
		first := make(chan error, 1)
		sendAs(context.Background(), tr, "t", first)
		require.NoError(t, <-first)

		outs := make([]chan error, 4)
		for i := range outs {
			outs[i] = make(chan error, 1)
			go sendAs(context.Background(), tr, "t", outs[i])
			synctest.Wait() // the i-th waiter is in the queue before the next comes
		}
		for i, want := range []error{throttle.ErrQueueDropped, throttle.ErrQueueDropped} {
			err := <-outs[i]
			assert.ErrorIs(t, err, want, "waiter %d", i)
			assert.Contains(t, fmt.Sprint(err), "dropped")
		}
		for i := 2; i < 4; i++ {
			assert.NoError(t, <-outs[i], "waiter %d goes in its turn", i)
		}
		times := rec.times()
		require.Len(t, times, 3)
		// Each newcomer took over the dropped waiter's reservation: the
		// newcomers went in hours 1 and 2, the dropped ones' slots, and no
		// hour was lost.
		assert.Equal(t, []time.Duration{0, time.Hour, 2 * time.Hour}, times)
	})
}

// TestQueueLineMovesUp: when a waiter gives up, the waiters of the same
// demand behind it move up a slot, and the latest slot is given back: a
// GCRA reservation can only be given back while no later one sits on it
// (quota.Reservation). With a queue of 3 and three waiters at hours 1, 2
// and 3, the first leaving makes the others go in hours 1 and 2, and a
// fail-fast caller is told hour 3 is free.
func TestQueueLineMovesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, queued(3, throttle.RefuseNew))
		require.NoError(t, err)
		first := make(chan error, 1)
		sendAs(context.Background(), tr, "t", first)
		require.NoError(t, <-first)

		ctx, cancel := context.WithCancel(context.Background())
		outs := make([]chan error, 3)
		for i := range outs {
			outs[i] = make(chan error, 1)
			c := context.Background()
			if i == 0 {
				c = ctx
			}
			go sendAs(c, tr, "t", outs[i])
			synctest.Wait() // in line in turn: hours 1, 2, 3
		}
		retryAfter := func() time.Duration {
			out := make(chan error, 1)
			sendAs(throttle.WithWaiter(context.Background(), waiters.FailFast()), tr, "t", out)
			var le *throttle.LimitError
			require.ErrorAs(t, <-out, &le)
			return le.RetryAfter
		}
		assert.Equal(t, 4*time.Hour, retryAfter(), "three waiting: hour 4 is the next free")
		cancel()
		assert.ErrorIs(t, <-outs[0], context.Canceled)
		assert.Equal(t, 3*time.Hour, retryAfter(), "two waiting: hour 3 is free again")
		for i := 1; i < 3; i++ {
			assert.NoError(t, <-outs[i], "waiter %d goes", i)
		}
		assert.Equal(t, []time.Duration{0, time.Hour, 2 * time.Hour}, rec.times(), "the two that stayed went in hours 1 and 2")
	})
}

// TestQueueDropOtherDemand: a newcomer that drops a waiter of another
// demand (another tenant's counter) cannot take over its reservation: the
// dropped waiter's slot goes to the next waiter of its own demand, the
// latest of those is given back, and then the newcomer is decided.
func TestQueueDropOtherDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		tr, err := throttle.NewTransport(rec, queued(2, throttle.DropOldest))
		require.NoError(t, err)
		for _, tenant := range []string{"a", "b"} {
			first := make(chan error, 1)
			sendAs(context.Background(), tr, tenant, first)
			require.NoError(t, <-first, "tenant %s spends its hour", tenant)
		}
		outs := make([]chan error, 3)
		for i, tenant := range []string{"a", "a", "b"} {
			outs[i] = make(chan error, 1)
			go sendAs(context.Background(), tr, tenant, outs[i])
			synctest.Wait()
		}
		assert.ErrorIs(t, <-outs[0], throttle.ErrQueueDropped, "the oldest of tenant a made room for tenant b")
		for i := 1; i < 3; i++ {
			assert.NoError(t, <-outs[i], "waiter %d goes", i)
		}
		// a's second waiter took the dropped hour 1 (hour 2 was given
		// back), and b went in its own hour 1.
		assert.Equal(t, []time.Duration{0, 0, time.Hour, time.Hour}, rec.times())
	})
}

// TestQueuePolicyErrors: a negative MaxQueue or an unknown QueueFull is
// refused by NewTransport, naming the rule and the field.
func TestQueuePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rule  func(*throttle.Rule)
		field string
	}{
		{"negative", func(r *throttle.Rule) { r.MaxQueue = -1 }, "MaxQueue"},
		{"unknown choice", func(r *throttle.Rule) { r.MaxQueue, r.QueueFull = 3, throttle.QueueFull(7) }, "QueueFull"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := queued(1, throttle.RefuseNew)
			tc.rule(&p.Rules[0])
			_, err := throttle.NewTransport(http.DefaultTransport, p)
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var pe *throttle.PolicyError
			require.True(t, errors.As(err, &pe), "%v", err)
			assert.Equal(t, "bulk", pe.Rule)
			assert.Equal(t, tc.field, pe.Field)
		})
	}
}

// TestQueueDropOldestHorizon is issue 28's first reproduction on the
// in-process store (queuetest.Horizon), in virtual time: 1,000 callers of
// a rule at 1 per hour whose queue holds 10 and drops the oldest. The
// dropped waiters' hours are not lost: while 10 wait, a fail-fast
// Limiter is told at most 10 hours more than after the first call, and
// once they have gone, no more than then.
func TestQueueDropOldestHorizon(t *testing.T) {
	for _, c := range queuetest.Cases {
		t.Run(c.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := memstore.New()
				queuetest.Horizon(t, s, s, c)
			})
		})
	}
}

// TestQueueDropOldestThroughput is issue 28's second reproduction on the
// in-process store (queuetest.Throughputs), in virtual time: 10 per
// second, a queue of 10, 50 per second offered for 5 s. Dropping the
// oldest sends as many as refusing the newest does: the newcomer goes in
// the dropped waiter's slot.
func TestQueueDropOldestThroughput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sent := queuetest.Throughputs(t, func() quota.Store { return memstore.New() })
		for i, c := range queuetest.Cases {
			refuse, drop := sent[i][0], sent[i][1]
			t.Logf("%s: sent within %v: RefuseNew %d, DropOldest %d", c.Name, refuse.Window, refuse.Sent, drop.Sent)
			assert.GreaterOrEqual(t, refuse.Sent, 45, "%s: RefuseNew uses (about) the whole quota", c.Name)
			assert.GreaterOrEqual(t, drop.Sent, refuse.Sent, "%s: DropOldest sends as many as RefuseNew", c.Name)
		}
	})
}
