package throttle_test

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
)

// TestAnchorShortenedFleet is the reproduction, saturated: 8
// instances of 16 callers on one in-process store, a vendor allowing 30
// requests per window that answers X-RateLimit-Remaining, a reset in
// epoch seconds and a whole-second Date, the fleet starting 700 ms into
// a second, without AnchorGrid. The vendor's windows are a grid (on the
// epoch's seconds as in the issue, or anywhere, its clock 300 ms off
// ours) or start at the first request after the last one ended
// (GitHub's). Each answered request's log entry is shortened to the end
// of the vendor window its reset names, which began before its first
// answer (shorten.go); a learned pause holds the decisions a send lag
// less than the sends (pauselead.go). So the fleet's bursts come a
// window and a round trip apart (a few milliseconds here), whatever the
// vendor's phase: the vendor rejects nothing, and the fleet uses at
// least 98% of the windows' quota (100% in every run measured). A log whose entries count for their span from
// their charge (the rule before) lets the bursts drift a reach (25 ms
// here) into the grid's windows at every window until one gets nothing:
// 870 of 900 in 30 windows of a second, and against the sticky vendor,
// whose windows start a reach later every time. The entries of an
// instance's burst are shortened in one store call (shortenLinger): 900
// entries in 102-156 calls in every run measured, where each answer made
// a call of its own before.
// Virtual time (synctest), seeded phases.
func TestAnchorShortenedFleet(t *testing.T) {
	const windows = 30
	rng := seeded(t)
	for _, per := range []time.Duration{time.Second, 2 * time.Second} {
		for _, kind := range []string{"epoch grid", "grid", "sticky"} {
			t.Run(fmt.Sprintf("%v %s", per, kind), func(t *testing.T) {
				for range 3 * repeats(t) {
					var phase, skew time.Duration
					if kind == "grid" {
						phase, skew = time.Duration(rng.Int64N(int64(per))), 300*time.Millisecond
					}
					synctest.Test(t, func(t *testing.T) {
						v := &coarseVendor{rate: 30, per: per, phase: phase, skew: skew, maxLatency: 2 * time.Millisecond,
							noGrid: true, sticky: kind == "sticky", accepted: map[int64]int{}}
						store := &shortenCounter{Store: memstore.New()}
						time.Sleep(700 * time.Millisecond)
						failed := searchFleet(t, windows*per, 0, v, 8, 16, true, func() quota.Store { return store }, throttle.Hooks{})
						assert.Zero(t, failed, "requests failed")
						accepted, rejected, _ := v.totals()
						quota := windows * v.rate
						calls, entries := store.calls.Load(), store.entries.Load()
						t.Logf("phase %v: accepted %d in %d windows (%d%% of their quota; per window %v), rejected %d; %d entries shortened in %d store calls", phase, accepted, windows, 100*accepted/quota, v.perWindow(), rejected, entries, calls)
						assert.Zero(t, rejected, "the vendor rejected requests")
						assert.GreaterOrEqual(t, 100*accepted, 98*quota, "the fleet left quota idle")
						// Every answered entry is shortened, a burst's
						// together: one store call for several entries
						// (each instance's 3-4 of a window, a few
						// milliseconds apart), not a call each.
						assert.GreaterOrEqual(t, entries, int64(accepted), "entries shortened")
						assert.LessOrEqual(t, 4*calls, entries, "store calls for the entries shortened")
					})
				}
			})
		}
	}
}

// shortenCounter is an in-process store that counts the Shorten calls it
// gets and the entries they name.
type shortenCounter struct {
	*memstore.Store
	calls, entries atomic.Int64
}

// Shorten implements quota.Shortener.
func (s *shortenCounter) Shorten(ctx context.Context, ss ...quota.Shortening) ([]*quota.Reservation, error) {
	s.calls.Add(1)
	s.entries.Add(int64(len(ss)))
	return s.Store.Shorten(ctx, ss...)
}

// perWindow returns what the vendor accepted in each window, in order.
func (v *coarseVendor) perWindow() []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []int
	for _, k := range slices.Sorted(maps.Keys(v.accepted)) {
		out = append(out, v.accepted[k])
	}
	return out
}

// TestAnchorShortenThenSettle settles each answered request of an Anchor
// rule when its body is read: at once, before its batch of shortenings
// would go to the store (shortenLinger), or after it went. Either way the
// settlement acts on the entry where it is: before the move (the move
// then finds the entry by its settled cost), or where it moved, never on
// its old instant, where it would find nothing (memstore's sliding log
// then settles nothing, Redis's the same). A store that records every
// entry's move checks each Settle's marks. Sequential requests and
// concurrent ones, in virtual time (synctest).
func TestAnchorShortenThenSettle(t *testing.T) {
	for _, c := range []struct {
		callers int
		read    time.Duration // from the answer to reading its body
	}{{1, 0}, {8, 0}, {1, 50 * time.Millisecond}, {8, 50 * time.Millisecond}} {
		callers, read := c.callers, c.read
		t.Run(fmt.Sprintf("%d callers, body read after %v", callers, c.read), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				v := &coarseVendor{rate: 100, per: time.Second, maxLatency: 2 * time.Millisecond, accepted: map[int64]int{}}
				store := &settleOrder{Store: memstore.New(), moved: map[string][]int64{}}
				policy := throttle.Policy{Rules: []throttle.Rule{{
					Name: "search", Host: "api.github.com",
					Limits: []throttle.Limit{{Name: "search", Rate: v.rate, Per: v.per, Algorithm: throttle.FixedWindow}},
					Learn:  throttle.Learning{Sync: "search", Anchor: "search"},
					Settle: func(*http.Response) (int, bool) { return 1, true },
				}}}
				var settleErrs atomic.Int64
				tr, err := throttle.NewTransport(v, policy, throttle.WithStore(store), throttle.WithProfiles(quotaheader.GitHub),
					throttle.WithHooks(throttle.Hooks{OnSettle: func(ev throttle.SettleEvent) {
						if ev.Err != nil {
							settleErrs.Add(1)
						}
					}}))
				require.NoError(t, err)
				c := &http.Client{Transport: tr}
				var wg sync.WaitGroup
				for range callers {
					wg.Go(func() {
						for range 20 {
							resp, err := c.Get("https://api.github.com/search/code?q=x")
							if !assert.NoError(t, err) {
								return
							}
							time.Sleep(read)
							_, _ = io.Copy(io.Discard, resp.Body) // settles at the end
							_ = resp.Body.Close()
						}
					})
				}
				wg.Wait()
				time.Sleep(time.Second) // the last batch, if any, goes
				store.mu.Lock()
				defer store.mu.Unlock()
				t.Logf("%d settles, %d entries moved, %d settles on a moved entry's old marks", store.settles, len(store.moved), store.stale)
				assert.Equal(t, 20*callers, store.settles, "settles")
				assert.Zero(t, settleErrs.Load(), "settle errors")
				assert.GreaterOrEqual(t, len(store.moved), 20*callers*9/10, "entries moved")
				assert.Zero(t, store.stale, "settles on a moved entry's old marks")
			})
		})
	}
}

// settleOrder is an in-process store that records each reservation's
// marks after a Shorten moved its entry, and counts the Settles of such a
// reservation with other marks: the entry's old instant.
type settleOrder struct {
	*memstore.Store
	mu      sync.Mutex
	moved   map[string][]int64 // by reservation id
	settles int
	stale   int
}

// Shorten implements quota.Shortener.
func (s *settleOrder) Shorten(ctx context.Context, ss ...quota.Shortening) ([]*quota.Reservation, error) {
	res, err := s.Store.Shorten(ctx, ss...)
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, r := range res {
		if r != ss[k].Reservation {
			s.moved[r.ID] = slices.Clone(r.Marks)
		}
	}
	return res, err
}

// Settle implements quota.Settler.
func (s *settleOrder) Settle(ctx context.Context, r *quota.Reservation, costs []int) error {
	s.mu.Lock()
	s.settles++
	if m, ok := s.moved[r.ID]; ok && !slices.Equal(m, r.Marks) {
		s.stale++
	}
	s.mu.Unlock()
	return s.Store.Settle(ctx, r, costs)
}
