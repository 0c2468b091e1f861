package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// vendor is an httptest server that counts the requests in flight at it
// and keeps the peak. A request with header Hang blocks until its context
// ends. The count drops before the response is written out, so a client
// that has its response has left the count.
type vendor struct {
	*httptest.Server
	cur, peak, served atomic.Int64
}

func newVendor(t *testing.T) *vendor { return newVendorHolding(t, time.Millisecond) }

// newVendorHolding is newVendor holding each request's slot for hold.
func newVendorHolding(t *testing.T, hold time.Duration) *vendor {
	v := &vendor{}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := v.cur.Add(1)
		for p := v.peak.Load(); n > p && !v.peak.CompareAndSwap(p, n); p = v.peak.Load() {
		}
		if r.Header.Get("Hang") != "" {
			<-r.Context().Done()
			v.cur.Add(-1)
			return
		}
		time.Sleep(hold) // hold the slot a little, so callers contend
		v.served.Add(1)
		v.cur.Add(-1)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(v.Close)
	return v
}

// instance is one instance of a service: its own Redis client, store,
// HTTP transport and throttle.Transport.
type instance struct {
	rdb    *redis.Client
	store  *redisstore.Store
	client *http.Client
	events chan throttle.LeaseEvent
}

func newInstance(t *testing.T, addr, prefix, host string, slots int, lease time.Duration) *instance {
	in := &instance{rdb: redis.NewClient(&redis.Options{Addr: addr}), events: make(chan throttle.LeaseEvent, 1024)}
	t.Cleanup(func() { _ = in.rdb.Close() })
	in.store = newStoreOn(t, in.rdb, prefix)
	base := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor", Host: host,
		Limits: []throttle.Limit{
			{Name: "rate", Rate: 1_000_000, Per: time.Second},
			{Name: "inflight", Rate: slots, Per: lease, Algorithm: throttle.Concurrency},
		},
		Wait: waiters.Block(),
	}}}, throttle.WithStore(in.store),
		// A slow call under -race must not fall back to a local share,
		// which would admit more than the shared slots.
		throttle.WithBreaker(throttle.Breaker{CallTimeout: 10 * time.Second}),
		throttle.WithHooks(throttle.Hooks{
			OnLease: func(e throttle.LeaseEvent) {
				select {
				case in.events <- e:
				default:
				}
			},
		}))
	require.NoError(t, err)
	in.client = &http.Client{Transport: tr}
	return in
}

// get sends one request and reads its body to the end.
func (in *instance) get(ctx context.Context, u string, hdr http.Header) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header = hdr
	resp, err := in.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && (resp.StatusCode != http.StatusOK || string(b) != "ok") {
		err = fmt.Errorf("status %d, body %q", resp.StatusCode, b)
	}
	return err
}

// TestInFlightFleet: 8 instances (separate Redis clients, stores and
// transports) x 32 goroutines send through a limit of 5 in flight, blocking
// for a slot. The vendor never sees more than 5 at once, and every request
// completes. Redis sees a bounded number of scripts per request, however
// many callers wait (INFO commandstats on a server of its own).
func TestInFlightFleet(t *testing.T) {
	const (
		instances, goroutines, perG, slots = 8, 32, 2, 5
		requests                           = instances * goroutines * perG
	)
	own := redistest.Start(t)
	admin := newClient(t, own.Addr())
	require.NoError(t, admin.ConfigResetStat(ctx(t)).Err())
	// Each request holds its slot 5 ms: long enough that, on a loaded
	// machine, a slot freed and taken again (a release, its PUBLISH, a
	// waiter's wake and its Take) overlaps the other four held (with 1 ms,
	// a CI run saw a peak of 4); 512 requests on 5 slots take about 0.5 s.
	v := newVendorHolding(t, 5*time.Millisecond)
	u, _ := url.Parse(v.URL)
	prefix := redistest.Prefix(t)

	var (
		wg     sync.WaitGroup
		failed atomic.Int64
	)
	var fleet []*instance
	for range instances {
		in := newInstance(t, own.Addr(), prefix, u.Host, slots, 10*time.Second)
		fleet = append(fleet, in)
		for range goroutines {
			wg.Go(func() {
				for range perG {
					if err := in.get(ctx(t), v.URL, nil); err != nil {
						failed.Add(1)
						t.Errorf("request: %v", err)
					}
				}
			})
		}
	}
	wg.Wait()
	assert.Zero(t, failed.Load())
	assert.Equal(t, int64(requests), v.served.Load(), "requests served")
	assert.LessOrEqual(t, v.peak.Load(), int64(slots), "peak in flight at the vendor")
	assert.Equal(t, int64(slots), v.peak.Load(), "peak in flight at the vendor (contended, so every slot was used)")

	stats, err := commandStats(ctx(t), admin)
	require.NoError(t, err)
	evalsha, publish := stats["evalsha"].Calls+stats["eval"].Calls, stats["publish"].Calls
	perRequest := float64(evalsha) / requests
	t.Logf("%d requests, %d callers waiting on %d slots: %d scripts (%.1f per request), %d PUBLISH",
		requests, instances*goroutines, slots, evalsha, perRequest, publish)
	// Each request: its grant, and its release (which rides on a later
	// grant, or goes with others after a millisecond); each release wakes at most
	// one waiter per instance; each waiter polls a few times at a growing
	// interval in case a wake-up was lost. A busy poll every 10 ms would
	// cost about (callers x run time / 10 ms) scripts: tens of thousands.
	assert.LessOrEqual(t, perRequest, float64(2+2+instances+4), "scripts per request")

	// Every lease was released: the key is gone once the releases that
	// wait to ride on a later call are sent.
	for _, in := range fleet {
		require.NoError(t, in.store.Flush(ctx(t)))
	}
	keys, err := admin.Keys(ctx(t), prefix+"*:c:*").Result()
	require.NoError(t, err)
	assert.Empty(t, keys, "concurrency keys left")
}

// TestInFlightCrash: an instance takes every slot with requests that hang,
// then "crashes": its Redis client is closed mid-request, so it can neither
// renew nor release. Its leases outlive it until they expire: a fail-fast
// request is refused; then the other instances, blocking, all complete once
// the leases expire, and the vendor never sees more than the limit.
func TestInFlightCrash(t *testing.T) {
	const (
		slots = 5
		lease = time.Second
	)
	own := redistest.Start(t)
	v := newVendor(t)
	u, _ := url.Parse(v.URL)
	prefix := redistest.Prefix(t)
	admin := newClient(t, own.Addr())

	crashed := newInstance(t, own.Addr(), prefix, u.Host, slots, lease)
	hangCtx, crash := context.WithCancel(context.Background())
	defer crash()
	var hanging sync.WaitGroup
	for range slots {
		hanging.Go(func() {
			err := crashed.get(hangCtx, v.URL, http.Header{"Hang": {"1"}})
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
	require.Eventually(t, func() bool { return v.cur.Load() == slots }, time.Minute, time.Millisecond, "the hanging requests reach the vendor")

	// Crash: no more Redis for this instance, and its connections drop.
	require.NoError(t, crashed.rdb.Close())
	crash()
	hanging.Wait()
	// The releases were queued to ride on a later call (Store.Release):
	// the transport saw no failure, and the store, its client closed,
	// drops them.
	for len(crashed.events) > 0 {
		e := <-crashed.events
		assert.NotEqual(t, throttle.LeaseReleaseFailed, e.Kind, "%v", e.Err)
	}
	// Flushed now, or already by the store's own prompt flush (on a
	// loaded machine it may come first): either way on a closed client.
	if err := crashed.store.Flush(ctx(t)); err != nil {
		assert.ErrorIs(t, err, redis.ErrClosed)
	}

	others := make([]*instance, 7)
	for i := range others {
		others[i] = newInstance(t, own.Addr(), prefix, u.Host, slots, lease)
	}
	// The crashed instance's leases still hold every slot.
	ff := throttle.WithWaiter(ctx(t), waiters.FailFast())
	err := others[0].get(ff, v.URL, nil)
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "inflight", le.Limit)
	assert.Positive(t, le.RetryAfter)
	assert.LessOrEqual(t, le.RetryAfter, lease)

	var wg sync.WaitGroup
	for _, in := range others {
		for range 32 {
			wg.Go(func() { assert.NoError(t, in.get(ctx(t), v.URL, nil)) })
		}
	}
	wg.Wait()
	assert.Equal(t, int64(7*32), v.served.Load(), "requests served after the crash")
	assert.LessOrEqual(t, v.peak.Load(), int64(slots), "peak in flight at the vendor")
	for _, in := range others {
		require.NoError(t, in.store.Flush(ctx(t)))
	}
	n, err := admin.Exists(ctx(t), prefix+"v1:{vendor}:c:inflight:").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the concurrency key is gone once every lease expired or was released")
}

// TestLeaseKeyTTL: the concurrency key lives just past its latest lease,
// renewals extend it, and it is gone when the last lease is released.
func TestLeaseKeyTTL(t *testing.T) {
	prefix := redistest.Prefix(t)
	c := newClient(t, srv.Addr())
	s := newStoreOn(t, c, prefix)
	b := quota.Bucket{Limit: quota.Limit{Name: "c", Rate: 2, Per: 10 * time.Second, Algorithm: throttle.Concurrency}, Key: "k"}
	d := &quota.Demand{Scope: "ttl", Cost: 1, Limits: []quota.Bucket{b}}
	key := prefix + "v1:{ttl}:c:c:k"
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	require.True(t, dec.OK)
	ttl, err := c.PTTL(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Positive(t, ttl)
	assert.LessOrEqual(t, ttl, 10*time.Second)

	require.NoError(t, c.PExpire(ctx(t), key, time.Second).Err()) // as if time passed
	require.NoError(t, s.Renew(ctx(t), dec.Reservation))
	ttl, err = c.PTTL(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Second, "renew raised the TTL")

	require.NoError(t, s.Release(ctx(t), dec.Reservation))
	assert.ErrorIs(t, s.Renew(ctx(t), dec.Reservation), quota.ErrLeaseLost, "a renewal sends the queued release first")
	n, err := c.Exists(ctx(t), key).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
	assert.ErrorIs(t, s.Renew(ctx(t), dec.Reservation), quota.ErrLeaseLost)
	assert.NoError(t, s.Release(ctx(t), dec.Reservation), "a second release is a no-op")
}

// TestLeaseErrors: malformed reservations and a closed client are errors
// that wrap their cause.
func TestLeaseErrors(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	s := newStoreOn(t, c, redistest.Prefix(t))
	assert.Error(t, s.Release(ctx(t), nil))
	assert.Error(t, s.Renew(ctx(t), &quota.Reservation{}))
	d := &quota.Demand{Scope: "e", Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "c", Rate: 1, Per: time.Second, Algorithm: throttle.Concurrency}}}}
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, s.Release(ctx(t), dec.Reservation), "queued, to ride on a later call")
	err = s.Flush(ctx(t))
	assert.True(t, errors.Is(err, redis.ErrClosed), "%v", err)
	assert.NoError(t, s.Flush(ctx(t)), "dropped: a closed client never comes back")
	_, _, err = s.WatchRelease(ctx(t), "e", d.Limits[0])
	assert.Error(t, err)
}

// TestBlockedCallersDoNotFlood: 64 callers in 8 instances block behind
// one slot held by a hanging request. While they wait, Redis sees only
// their occasional safety polls (at a growing interval from 250 ms), not a
// busy poll: INFO commandstats over a 2 s window stays within 5 scripts per
// caller, where polling every millisecond would be 2000. When the holder
// ends, its release wakes them and every caller completes.
func TestBlockedCallersDoNotFlood(t *testing.T) {
	const (
		instances, perInstance = 8, 8
		callers                = instances * perInstance
		window                 = 2 * time.Second
	)
	own := redistest.Start(t)
	admin := newClient(t, own.Addr())
	v := newVendor(t)
	u, _ := url.Parse(v.URL)
	prefix := redistest.Prefix(t)
	scripts := func() int64 {
		st, err := commandStats(ctx(t), admin)
		require.NoError(t, err)
		return st["evalsha"].Calls + st["eval"].Calls
	}

	holder := newInstance(t, own.Addr(), prefix, u.Host, 1, time.Minute)
	hangCtx, stopHang := context.WithCancel(context.Background())
	defer stopHang()
	held := make(chan error, 1)
	go func() { held <- holder.get(hangCtx, v.URL, http.Header{"Hang": {"1"}}) }()
	require.Eventually(t, func() bool { return v.cur.Load() == 1 }, time.Minute, time.Millisecond)

	base := scripts()
	var wg sync.WaitGroup
	for range instances {
		in := newInstance(t, own.Addr(), prefix, u.Host, 1, time.Minute)
		for range perInstance {
			wg.Go(func() { assert.NoError(t, in.get(ctx(t), v.URL, nil)) })
		}
	}
	// Each caller asks, is refused, arms its watch and asks again.
	require.Eventually(t, func() bool { return scripts()-base >= 2*callers }, time.Minute, time.Millisecond)
	start := scripts()
	time.Sleep(window) // an observation window, not an assertion of speed
	during := scripts() - start
	t.Logf("%d callers blocked for %v: %d scripts (%.1f per caller)", callers, window, during, float64(during)/callers)
	assert.LessOrEqual(t, during, int64(5*callers), "scripts while blocked")

	stopHang()
	assert.ErrorIs(t, <-held, context.Canceled)
	wg.Wait()
	assert.Equal(t, int64(callers), v.served.Load())
	assert.LessOrEqual(t, v.peak.Load(), int64(1))
	total := scripts() - base
	t.Logf("%d requests after the holder: %d scripts in all (%.1f per request)", callers, total, float64(total)/callers)
}

// reservingStore is a Store that reports each reservation it grants for a
// later instant, so a test knows a request is waiting on one.
type reservingStore struct {
	*redisstore.Store
	reserved chan struct{}
}

func (s *reservingStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	dec, err := s.Store.Take(ctx, d)
	if err == nil && dec.OK && dec.Delay > 0 {
		select {
		case s.reserved <- struct{}{}:
		default:
		}
	}
	return dec, err
}

// TestWaitingRequestHoldsNoSlot: one POST rule (1 write per 2 s and 1
// slot in flight) and one GET rule sharing that slot (same scope, limit
// name and key), on Redis. POST #1 goes at once; POST #2 reserves its
// write instant and waits for it holding no slot, so a GET sent meanwhile
// reaches the vendor before POST #2, which then goes at its instant. The
// vendor never has more than one request in flight.
func TestWaitingRequestHoldsNoSlot(t *testing.T) {
	var (
		mu        sync.Mutex
		arrivals  []string
		cur, peak atomic.Int64
	)
	v := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		mu.Lock()
		arrivals = append(arrivals, r.Method)
		mu.Unlock()
		cur.Add(-1)
	}))
	t.Cleanup(v.Close)
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), arrivals...)
	}
	store := &reservingStore{Store: newStore(t, redistest.Prefix(t)), reserved: make(chan struct{}, 1)}
	inflight := throttle.Limit{Name: "inflight", Rate: 1, Per: time.Minute, Algorithm: throttle.Concurrency}
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
		Name: "writes", Method: http.MethodPost, Scope: "vendor",
		Limits: []throttle.Limit{{Name: "writes", Rate: 1, Per: 2 * time.Second, Burst: 1}, inflight},
		Wait:   waiters.Block(),
	}, {
		Name: "reads", Method: http.MethodGet, Scope: "vendor",
		Limits: []throttle.Limit{inflight},
		Wait:   waiters.Block(),
	}}}, throttle.WithStore(store), throttle.WithBreaker(throttle.Breaker{CallTimeout: 10 * time.Second}))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	send := func(method string) error {
		req, err := http.NewRequestWithContext(ctx(t), method, v.URL, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}

	require.NoError(t, send(http.MethodPost))
	post2 := make(chan error, 1)
	go func() { post2 <- send(http.MethodPost) }()
	<-store.reserved // POST #2 waits for its write instant

	require.NoError(t, send(http.MethodGet))
	assert.Equal(t, []string{"POST", "GET"}, seen(), "the GET reached the vendor while POST #2 waited")
	require.NoError(t, <-post2)
	assert.Equal(t, []string{"POST", "GET", "POST"}, seen())
	assert.Equal(t, int64(1), peak.Load(), "never more than the one slot in flight")
}
