// Command fleetview runs a small fleet, three instances of one service
// sharing one store, against a local fake vendor, and serves each
// instance's quota page (package quotaview) while traffic runs:
//
//	go run ./examples/fleetview
//	open http://127.0.0.1:8080/debug/throttle/
//
// Instance 0's page is at /debug/throttle/, the others' at
// /debug/throttle-1/ and /debug/throttle-2/: each shows the same
// fleet-wide counters and pauses, and its own traffic. POST /trip makes
// the vendor answer the next message with 429 and Retry-After: 60, which
// pauses the "messages" rule for the whole fleet. The store is the
// in-process memstore shared by the three instances; with -redis ADDR
// nothing changes but the store (see redisstore).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaview"
	"github.com/quotakit/throttle/waiters"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "where to serve the pages")
	rate := flag.Int("rate", 20, "requests per second each instance sends")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *rate); err != nil {
		fmt.Fprintln(os.Stderr, "fleetview:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, rate int) error {
	f, err := startFleet(ctx, memstore.New(), rate)
	if err != nil {
		return err
	}
	defer f.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: f.mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	fmt.Printf("quota pages at http://%s/debug/throttle/ (instances 1 and 2: /debug/throttle-1/, /debug/throttle-2/)\n", ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Instances is the fleet's size.
const instances = 3

// The policy every instance applies. "messages" stacks a per-second limit
// on the whole vendor, which the fleet's traffic exceeds (so messages
// wait), with an hourly one per channel; "search" is limited
// per API token, hashed (the page shows the hash, never the token), with
// at most 4 searches in flight; "export" shares an hourly budget fairly
// among tenants, and its bulk class leaves a fifth of it to interactive
// requests.
func policy(vendorHost string) throttle.Policy {
	return throttle.Policy{
		Instances: instances,
		Classes:   []throttle.Class{{Name: "interactive"}, {Name: "bulk", Headroom: 0.2}},
		Rules: []throttle.Rule{
			{
				Name: "messages", Host: vendorHost, Method: http.MethodPost, Path: "/v1/messages",
				Wait: waiters.UpTo(2 * time.Second),
				Limits: []throttle.Limit{
					{Name: "vendor-rate", Rate: 10, Per: time.Second, Burst: 5},
					{Name: "per-channel", Rate: 600, Per: time.Hour, Algorithm: throttle.FixedWindow, Key: throttle.KeyFromHeader("X-Channel")},
				},
				MaxQueue: 50,
			},
			{
				Name: "search", Host: vendorHost, Path: "/v1/search",
				Wait: waiters.FailFast(),
				Limits: []throttle.Limit{
					{Name: "per-token", Rate: 120, Per: time.Minute, Algorithm: throttle.SlidingWindow, Key: throttle.HashKey(throttle.KeyFromHeader("Authorization"))},
					{Name: "in-flight", Rate: 4, Per: 10 * time.Second, Algorithm: throttle.Concurrency},
				},
			},
			{
				Name: "export", Host: vendorHost, Path: "/v1/export", Class: "bulk",
				Wait: waiters.UpTo(time.Second),
				Limits: []throttle.Limit{
					{Name: "export-hourly", Rate: 2000, Per: time.Hour, Algorithm: throttle.SlidingLog, Tenant: throttle.KeyFromHeader("X-Tenant")},
				},
			},
		},
	}
}

// A fleet is the instances, the vendor and the pages.
type fleet struct {
	vendor *vendor
	srv    *httptest.Server // the vendor's
	store  quota.Store
	policy throttle.Policy
	tr     [instances]*throttle.Transport
	client [instances]*http.Client
	mux    *http.ServeMux
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

// startFleet starts the vendor and the fleet's instances on store, each
// sending rate requests per second until ctx ends or Close.
func startFleet(ctx context.Context, store quota.Store, rate int) (*fleet, error) {
	v := &vendor{}
	f := &fleet{vendor: v, srv: httptest.NewServer(v), store: store, mux: http.NewServeMux()}
	f.policy = policy(f.srv.Listener.Addr().String())
	for i := range instances {
		rec := quotaview.NewRecorder(quotaview.RecordSpan(2*time.Minute, time.Second))
		t, err := throttle.NewTransport(nil, f.policy, throttle.WithStore(store), throttle.WithHooks(rec.Hooks(throttle.Hooks{})))
		if err != nil {
			f.srv.Close()
			return nil, err
		}
		f.tr[i], f.client[i] = t, &http.Client{Transport: t, Timeout: 10 * time.Second}
		path := "/debug/throttle/"
		if i > 0 {
			path = fmt.Sprintf("/debug/throttle-%d/", i)
		}
		f.mux.Handle(path, quotaview.New(t.Limiter(), quotaview.WithRecorder(rec), quotaview.WithActions()))
	}
	f.mux.HandleFunc("POST /trip", func(w http.ResponseWriter, r *http.Request) {
		v.trip.Add(1)
		fmt.Fprintln(w, "the vendor answers the next message with 429")
	})
	if rate > 0 {
		ctx, f.stop = context.WithCancel(ctx)
		for i := range instances {
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				f.traffic(ctx, i, rate)
			}()
		}
	}
	return f, nil
}

// Close stops the traffic and the vendor.
func (f *fleet) Close() {
	if f.stop != nil {
		f.stop()
	}
	f.wg.Wait()
	for _, c := range f.client {
		c.CloseIdleConnections()
	}
	f.srv.Close()
}

// traffic sends rate requests per second from instance i until ctx ends:
// messages to a few channels, searches with a few tokens, exports for a
// few tenants.
func (f *fleet) traffic(ctx context.Context, i, rate int) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	rnd := rand.New(rand.NewPCG(uint64(i), 7))
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var req *http.Request
		switch n % 4 {
		case 0, 1:
			req, _ = http.NewRequestWithContext(ctx, http.MethodPost, f.srv.URL+"/v1/messages", nil)
			req.Header.Set("X-Channel", "C"+strconv.Itoa(rnd.IntN(6)))
		case 2:
			req, _ = http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/v1/search", nil)
			req.Header.Set("Authorization", "Bearer secret-token-"+strconv.Itoa(rnd.IntN(3)))
		default:
			req, _ = http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/v1/export", nil)
			req.Header.Set("X-Tenant", []string{"acme", "globex", "initech"}[rnd.IntN(3)])
		}
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			resp, err := f.client[i].Do(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
}

// vendor is the fake API: it answers every request at once, the next
// message after a trip with 429 and Retry-After: 60, and a search after
// a short delay (so the in-flight slots are seen).
type vendor struct {
	trip atomic.Int64
}

func (v *vendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/messages":
		if v.trip.Load() > 0 && v.trip.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "60")
			http.Error(w, `{"ok":false,"error":"ratelimited"}`, http.StatusTooManyRequests)
			return
		}
	case "/v1/search":
		time.Sleep(50 * time.Millisecond)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintln(w, `{"ok":true}`)
}
