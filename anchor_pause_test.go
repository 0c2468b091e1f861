package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quotaheader"
)

// evidenceStamp is a base RoundTripper over a coarseVendor that records,
// in a request's context, the true end of the vendor's window that
// counted it, and keeps the earliest time after the start of its window
// at which any answer came back: what the answers prove of where the
// vendor's windows end at the latest (a window that counted a request
// started before its answer came back).
type evidenceStamp struct {
	v        *coarseVendor
	mu       sync.Mutex
	earliest time.Duration // the least answer time less its window's start; -1: none yet
}

type windowEndKey struct{}

func (s *evidenceStamp) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.v.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	ns, _ := strconv.ParseInt(resp.Header.Get("X-Test-Window-End"), 10, 64)
	end := time.Unix(0, ns)
	if p, ok := req.Context().Value(windowEndKey{}).(*time.Time); ok {
		*p = end
	}
	s.mu.Lock()
	if d := time.Since(end.Add(-s.v.per)); s.earliest < 0 || d < s.earliest {
		s.earliest = d
	}
	s.mu.Unlock()
	return resp, nil
}

// TestAnchorPauseEnd checks that a pause learned from an answer with
// nothing remaining ends at the latest instant the evidence allows the
// vendor's window to end, never before it: no later after the window's
// end than the earliest any answer came back after the start of its
// window (the vendor's window that counted a request started before its
// answer came back). GitHub search (30 per 1 s, windows 10-50 ms after
// the epoch's seconds, resets in whole seconds rounded up, whole-second
// Dates) on one instance of 16 callers, which spend each window's quota
// at its start and pause: nothing is sent near a window's end, so the
// evidence bounds the end only from above, and never narrows to half a
// window. Before, the pause then ran until the reset read on the Date's
// clock, 1.2-1.9 s after the vendor's window (a window of quota lost).
// In a synctest bubble on memstore: exact, whatever the machine's load.
func TestAnchorPauseEnd(t *testing.T) {
	rng := seeded(t)
	for range repeats(t) {
		phase := 10*time.Millisecond + time.Duration(rng.Int64N(int64(40*time.Millisecond)))
		synctest.Test(t, func(t *testing.T) {
			v := &coarseVendor{rate: 30, per: time.Second, phase: phase, maxLatency: 5 * time.Millisecond, accepted: map[int64]int{}}
			st := &evidenceStamp{v: v, earliest: -1}
			var (
				mu    sync.Mutex
				lates []time.Duration
				over  []time.Duration // late less the evidence's bound, where positive
			)
			hooks := throttle.Hooks{OnPause: func(ev throttle.PauseEvent) {
				end, ok := ev.Context.Value(windowEndKey{}).(*time.Time)
				if !ok || end.IsZero() {
					return
				}
				late := time.Now().Add(ev.Pause).Sub(*end)
				st.mu.Lock()
				bound := st.earliest
				st.mu.Unlock()
				mu.Lock()
				defer mu.Unlock()
				lates = append(lates, late)
				if late > bound+time.Microsecond {
					over = append(over, late-bound)
				}
			}}
			policy := throttle.Policy{Instances: 1, Rules: []throttle.Rule{{
				Name: "search", Host: "api.github.com",
				Limits: []throttle.Limit{{Name: "search", Rate: 30, Per: time.Second, Algorithm: throttle.FixedWindow}},
				Learn:  throttle.Learning{Sync: "search", Anchor: "search", SyncResource: "search"},
			}}}
			tr, err := throttle.NewTransport(st, policy, throttle.WithStore(memstore.New()), throttle.WithHooks(hooks),
				throttle.WithProfiles(quotaheader.GitHub))
			require.NoError(t, err)
			c := &http.Client{Transport: tr}
			ctx, cancel := context.WithCancel(t.Context()) // a deadline would refuse, at once, the waits that end after it
			defer cancel()
			stop := time.AfterFunc(5*time.Second, cancel)
			defer stop.Stop()
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for ctx.Err() == nil {
						var end time.Time
						req, err := http.NewRequestWithContext(context.WithValue(ctx, windowEndKey{}, &end),
							http.MethodGet, "https://api.github.com/search/code?q=x", nil)
						if err != nil {
							panic(err)
						}
						resp, err := c.Do(req)
						if err != nil {
							if ctx.Err() == nil && !errors.Is(err, throttle.ErrLimited) {
								t.Errorf("request: %v", err)
							}
							continue
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
					}
				})
			}
			wg.Wait()
			accepted, rejected, _ := v.totals()
			mu.Lock()
			defer mu.Unlock()
			t.Logf("phase %v: %d accepted, %d rejected; pauses end after the vendor's window by %v; the earliest answer came %v after its window's start",
				phase, accepted, rejected, lates, st.earliest)
			assert.Zero(t, rejected, "the vendor rejected requests")
			require.NotEmpty(t, lates, "no pause learned")
			for _, late := range lates {
				assert.GreaterOrEqual(t, late, time.Duration(0), "a pause ends before the vendor's window")
			}
			assert.Empty(t, over, "pauses that end later after the vendor's window than the evidence allows")
		})
	}
}
