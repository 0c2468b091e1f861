package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
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
	"github.com/quotakit/throttle/waiters"
)

// slowVendor is an in-memory base transport whose requests take hold to
// answer (or until their context ends), so tests can run in a synctest
// bubble. It counts requests in flight, from the request until the
// response body is read to the end or closed, and counts body closes.
type slowVendor struct {
	hold   time.Duration
	fail   bool // answer with an error instead of a response
	noBody bool // answer with http.NoBody

	cur, peak, sent, closes atomic.Int64
}

func (v *slowVendor) RoundTrip(req *http.Request) (*http.Response, error) {
	n := v.cur.Add(1)
	for p := v.peak.Load(); n > p && !v.peak.CompareAndSwap(p, n); p = v.peak.Load() {
	}
	v.sent.Add(1)
	timer := time.NewTimer(v.hold)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-req.Context().Done():
		v.cur.Add(-1)
		return nil, req.Context().Err()
	}
	if v.fail {
		v.cur.Add(-1)
		return nil, errors.New("connection reset")
	}
	body := io.ReadCloser(&vendorBody{Reader: strings.NewReader("ok"), v: v})
	if v.noBody {
		v.cur.Add(-1)
		body = http.NoBody
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: body, Request: req}, nil
}

type vendorBody struct {
	io.Reader
	v      *slowVendor
	closed atomic.Bool
}

func (b *vendorBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	if err == io.EOF && !b.closed.Swap(true) {
		b.v.cur.Add(-1) // the whole answer is out: the request is over
	}
	return n, err
}

func (b *vendorBody) Close() error {
	if !b.closed.Swap(true) {
		b.v.cur.Add(-1)
	}
	b.v.closes.Add(1)
	return nil
}

// countingStore counts the lease operations of a MemoryStore.
type countingStore struct {
	*memstore.Store
	releases, renews atomic.Int64
}

func (s *countingStore) Release(ctx context.Context, r *quota.Reservation) error {
	s.releases.Add(1)
	return s.Store.Release(ctx, r)
}

func (s *countingStore) Renew(ctx context.Context, r *quota.Reservation) error {
	s.renews.Add(1)
	return s.Store.Renew(ctx, r)
}

// inflightPolicy allows slots requests in flight, with the given lease, next
// to a rate limit that always admits.
func inflightPolicy(slots int, lease time.Duration, w throttle.Waiter) throttle.Policy {
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor",
		Limits: []throttle.Limit{
			{Name: "rate", Rate: 1_000_000, Per: time.Second},
			{Name: "inflight", Rate: slots, Per: lease, Algorithm: throttle.Concurrency},
		},
		Wait: w,
	}}}
}

// leaseEvents collects OnLease events.
type leaseEvents struct {
	mu sync.Mutex
	n  map[throttle.LeaseEventKind]int
}

func (e *leaseEvents) hooks() throttle.Hooks {
	e.n = map[throttle.LeaseEventKind]int{}
	return throttle.Hooks{OnLease: func(ev throttle.LeaseEvent) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.n[ev.Kind]++
	}}
}

func (e *leaseEvents) count(k throttle.LeaseEventKind) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[k]
}

func getVendor(c *http.Client, ctx context.Context) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://vendor.test/x", nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

// TestInFlightRenewedWhileLong: requests that take 5 lease times each, 20
// at once through 3 slots, blocking: never more than 3 in flight, every
// request completes, and their leases are renewed, never lost.
func TestInFlightRenewedWhileLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Second
		v := &slowVendor{hold: 5 * lease}
		var ev leaseEvents
		store := &countingStore{Store: memstore.New()}
		tr, err := throttle.NewTransport(v, inflightPolicy(3, lease, waiters.Block()), throttle.WithStore(store), throttle.WithHooks(ev.hooks()))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				resp, err := getVendor(c, context.Background())
				if assert.NoError(t, err) {
					b, err := io.ReadAll(resp.Body)
					assert.NoError(t, err)
					assert.Equal(t, "ok", string(b))
					assert.NoError(t, resp.Body.Close())
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int64(20), v.sent.Load())
		assert.Equal(t, int64(3), v.peak.Load(), "peak in flight")
		assert.Equal(t, int64(20), store.releases.Load(), "one release per request")
		assert.Positive(t, ev.count(throttle.LeaseRenewed))
		assert.Zero(t, ev.count(throttle.LeaseLost))
		assert.Zero(t, ev.count(throttle.LeaseAbandoned))
	})
}

// TestLeaseReleasedOnce: every way a request ends releases its slot
// exactly once, and the next request gets the slot at once.
func TestLeaseReleasedOnce(t *testing.T) {
	cases := []struct {
		name    string
		v       *slowVendor
		finish  func(*http.Response)
		wantErr bool
	}{
		{"read to the end, then closed twice", &slowVendor{}, func(r *http.Response) {
			_, _ = io.ReadAll(r.Body)
			_ = r.Body.Close()
			_ = r.Body.Close()
		}, false},
		{"closed unread", &slowVendor{}, func(r *http.Response) { _ = r.Body.Close() }, false},
		{"read to the end, never closed", &slowVendor{}, func(r *http.Response) { _, _ = io.ReadAll(r.Body) }, false},
		{"no body", &slowVendor{noBody: true}, func(r *http.Response) {}, false},
		{"round trip failed", &slowVendor{fail: true}, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			store := &countingStore{Store: memstore.New()}
			tr, err := throttle.NewTransport(tc.v, inflightPolicy(1, time.Minute, waiters.FailFast()), throttle.WithStore(store))
			require.NoError(t, err)
			c := &http.Client{Transport: tr}
			resp, err := getVendor(c, context.Background())
			if tc.wantErr {
				require.Error(t, err)
				assert.NotErrorIs(t, err, throttle.ErrLimited)
			} else {
				require.NoError(t, err)
				tc.finish(resp)
			}
			assert.Equal(t, int64(1), store.releases.Load(), "releases")
			resp, err = getVendor(c, context.Background())
			if !tc.wantErr {
				require.NoError(t, err, "the slot is free again")
				_ = resp.Body.Close()
			}
			assert.Equal(t, int64(2), store.releases.Load(), "releases")
		})
	}
}

// TestLeaseAbandoned: a body that is never read nor closed stops being
// renewed after a lease time, is reported, and its slot comes back when
// the lease expires.
func TestLeaseAbandoned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Second
		var ev leaseEvents
		tr, err := throttle.NewTransport(&slowVendor{}, inflightPolicy(1, lease, waiters.FailFast()), throttle.WithHooks(ev.hooks()))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}
		leaked, err := getVendor(c, context.Background())
		require.NoError(t, err)

		_, err = getVendor(c, context.Background())
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "inflight", le.Limit)
		assert.Equal(t, lease, le.RetryAfter, "until the lease expires, unless released")

		time.Sleep(lease + lease/3)
		synctest.Wait()
		assert.Equal(t, 1, ev.count(throttle.LeaseAbandoned))
		renewed := ev.count(throttle.LeaseRenewed)
		assert.Positive(t, renewed)

		time.Sleep(lease)
		resp, err := getVendor(c, context.Background())
		require.NoError(t, err, "the abandoned slot was reclaimed at expiry")
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, renewed, ev.count(throttle.LeaseRenewed), "no renewal after abandonment")
		require.NoError(t, leaked.Body.Close()) // late: releases nothing twice
	})
}

// TestWaitForSlot: waiting for a slot follows the waiter and wakes on
// release, not on a poll.
func TestWaitForSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			lease = time.Minute
			hold  = 10 * time.Second
		)
		v := &slowVendor{hold: hold}
		var outcomes []throttle.DecisionEvent
		var mu sync.Mutex
		store := &countingStore{Store: memstore.New()}
		tr, err := throttle.NewTransport(v, inflightPolicy(1, lease, waiters.Block()), throttle.WithStore(store), throttle.WithHooks(throttle.Hooks{
			OnDecision: func(e throttle.DecisionEvent) { mu.Lock(); outcomes = append(outcomes, e); mu.Unlock() },
		}))
		require.NoError(t, err)
		c := &http.Client{Transport: tr}

		start := time.Now()
		first := make(chan struct{})
		go func() {
			resp, err := getVendor(c, context.Background())
			if assert.NoError(t, err) {
				close(first)
				_ = resp.Body.Close()
			}
		}()
		synctest.Wait() // the first request holds the slot

		// Up to a bound shorter than the hold: refused after the bound.
		_, err = getVendor(c, throttle.WithWaiter(context.Background(), waiters.UpTo(time.Second)))
		var le *throttle.LimitError
		require.ErrorAs(t, err, &le)
		assert.Equal(t, "inflight", le.Limit)
		assert.Equal(t, time.Second, time.Since(start))

		// Cancelled while waiting: gave up.
		cctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(time.Second, cancel)
		_, err = getVendor(c, cctx)
		stop.Stop()
		cancel()
		require.ErrorAs(t, err, &le)
		assert.ErrorIs(t, err, context.Canceled)

		// Blocking: woken by the release, at the instant of it.
		resp, err := getVendor(c, context.Background())
		require.NoError(t, err)
		<-first
		assert.Equal(t, hold+hold, time.Since(start), "the first request's hold, then its own")
		require.NoError(t, resp.Body.Close())

		mu.Lock()
		defer mu.Unlock()
		var kinds []throttle.Outcome
		for _, e := range outcomes {
			kinds = append(kinds, e.Outcome)
		}
		assert.Equal(t, []throttle.Outcome{throttle.Allowed, throttle.Refused, throttle.GaveUp, throttle.Waited}, kinds)
		assert.Equal(t, hold-2*time.Second, outcomes[3].Wait, "waited from its start to the release")
	})
}

// TestLeaseRetry: a resend after a 429 gives up the slot of the first
// attempt before asking for its own; with one slot it would otherwise wait
// for itself. With Rule.Settle, the slot is found below the body that
// keeps the answer for it.
func TestLeaseRetry(t *testing.T) {
	// GitHub's secondary limit: a 403 whose body GitHubLimited peeks at,
	// above the body kept for Rule.Settle; longer than the peek, so that
	// the peek does not read it to its end (which frees the slot).
	secondary := func(h http.Header) int {
		h.Set("X-Test-Body", `{"message":"You have exceeded a secondary rate limit","padding":"`+strings.Repeat("x", 100<<10)+`"}`)
		return http.StatusForbidden
	}
	for _, c := range []struct {
		settle, peek bool
	}{{false, false}, {true, false}, {true, true}} {
		t.Run(fmt.Sprintf("settle=%v,peek=%v", c.settle, c.peek), func(t *testing.T) {
			settle := c.settle
			synctest.Test(t, func(t *testing.T) {
				v := newScriptedVendor(tooMany("1"), ok200)
				p := inflightPolicy(1, time.Minute, waiters.Block())
				p.Rules[0].Retry = throttle.Retry{Max: 1}
				p.Rules[0].Learn.Jitter = -1
				if c.peek {
					v = newScriptedVendor(secondary, ok200)
					v.echoBodyHeader = true
					p.Rules[0].Learn.Limited = quotaheader.GitHubLimited
				}
				var settled atomic.Int64
				if settle {
					p.Rules[0].Settle = func(*http.Response) (int, bool) { settled.Add(1); return 1, true }
				}
				store := &countingStore{Store: memstore.New()}
				tr, err := throttle.NewTransport(v, p, throttle.WithStore(store))
				require.NoError(t, err)
				resp, err := getVendor(&http.Client{Transport: tr}, context.Background())
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.StatusCode)
				require.NoError(t, resp.Body.Close())
				assert.Equal(t, int64(2), store.releases.Load(), "one release per attempt")
				at := v.arrivals()
				require.Len(t, at, 2)
				assert.Less(t, at[1], time.Minute, "the resend went after the pause, not after its own slot's lease")
				if settle {
					assert.Equal(t, int64(2), settled.Load(), "one settlement per attempt")
				}
			})
		})
	}
}

// TestLeaseStoreRequired: a policy with a Concurrency limit needs a
// LeaseStore, and bad Concurrency limits are refused by name.
func TestLeaseStoreRequired(t *testing.T) {
	plain := struct{ quota.Store }{memstore.New()}
	_, err := throttle.NewTransport(nil, inflightPolicy(1, time.Minute, nil), throttle.WithStore(plain))
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Limits[1].Algorithm", pe.Field)
	assert.Contains(t, err.Error(), "LeaseStore")

	bad := []struct {
		field string
		limit throttle.Limit
	}{
		{"Limits[1].Burst", throttle.Limit{Name: "c", Rate: 2, Burst: 3, Per: time.Second, Algorithm: throttle.Concurrency}},
		{"Limits[1].Per", throttle.Limit{Name: "c", Rate: 2, Per: time.Millisecond, Algorithm: throttle.Concurrency}},
		{"Limits[1].Rate", throttle.Limit{Name: "c", Rate: 0, Per: time.Second, Algorithm: throttle.Concurrency}},
	}
	for _, b := range bad {
		p := inflightPolicy(1, time.Minute, nil)
		p.Rules[0].Limits[1] = b.limit
		err := p.Validate()
		require.ErrorAs(t, err, &pe, b.field)
		assert.Equal(t, b.field, pe.Field)
		assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	}
	p := inflightPolicy(1, time.Minute, nil)
	p.Rules[0].Learn.Sync = "inflight"
	require.ErrorAs(t, p.Validate(), &pe)
	assert.Equal(t, "Learn.Sync", pe.Field)

	a, err := quota.ParseAlgorithm("concurrency")
	require.NoError(t, err)
	assert.Equal(t, throttle.Concurrency, a)
}

// TestLeaseLost: a lease that expired before its renewal (the store's
// clock jumped, as a stalled process would see it) is reported lost, and
// renewals stop; the request still completes and releases nothing twice.
func TestLeaseLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Second
		var skew atomic.Int64
		store := &countingStore{Store: memstore.New(memstore.WithClock(func() time.Time {
			return time.Now().Add(time.Duration(skew.Load()))
		}))}
		var ev leaseEvents
		tr, err := throttle.NewTransport(&slowVendor{hold: 2 * lease}, inflightPolicy(1, lease, waiters.Block()), throttle.WithStore(store), throttle.WithHooks(ev.hooks()))
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := getVendor(&http.Client{Transport: tr}, context.Background())
			if assert.NoError(t, err) {
				assert.NoError(t, resp.Body.Close())
			}
		}()
		synctest.Wait()
		skew.Store(int64(2 * lease))
		<-done
		assert.Equal(t, 1, ev.count(throttle.LeaseLost))
		assert.Zero(t, ev.count(throttle.LeaseRenewed))
		assert.Equal(t, int64(1), store.renews.Load(), "no renewal after the loss")
		assert.Equal(t, int64(1), store.releases.Load())
	})
}

// downStore is a LeaseStore whose every call fails, as a Redis that is
// away; it counts the lease calls that reach it.
type downStore struct {
	quota.Store
	releases atomic.Int64
}

var errDown = errors.New("store down")

func (s *downStore) Take(context.Context, *quota.Demand) (quota.Decision, error) {
	return quota.Decision{}, errDown
}

func (s *downStore) Release(context.Context, *quota.Reservation) error {
	s.releases.Add(1)
	return errDown
}

func (s *downStore) Renew(context.Context, *quota.Reservation) error { return errDown }

func (s *downStore) Claim(context.Context, *quota.Reservation) (quota.Decision, error) {
	return quota.Decision{}, errDown
}

func (s *downStore) WatchRelease(context.Context, string, quota.Bucket) (<-chan struct{}, func(), error) {
	return nil, nil, errDown
}

// TestLeaseLocalFallback: with the store away, a rule that fails locally
// ([throttle.FailLocal]) holds its in-flight slots in the local fallback
// store, and releases them there.
func TestLeaseLocalFallback(t *testing.T) {
	store := &downStore{Store: memstore.New()}
	tr, err := throttle.NewTransport(&slowVendor{}, inflightPolicy(1, time.Minute, waiters.FailFast()), throttle.WithStore(store))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	first, err := getVendor(c, context.Background())
	require.NoError(t, err)

	_, err = getVendor(c, context.Background())
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le, "the local slot is held")
	assert.Equal(t, "inflight", le.Limit)

	require.NoError(t, first.Body.Close())
	resp, err := getVendor(c, context.Background())
	require.NoError(t, err, "released in the local store")
	require.NoError(t, resp.Body.Close())
	assert.Zero(t, store.releases.Load(), "no release sent to the store that did not grant")
}
