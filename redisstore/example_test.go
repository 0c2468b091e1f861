package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
)

// New makes a store on any go-redis client; every instance that uses the
// same Redis and prefix shares the limits. Here two instances share a quota
// of 2 per hour. Each makes its client with the options recommended in the
// package documentation and checks the store before serving.
func ExampleNew() {
	var closers []func() error
	ctx := context.Background()
	prefix := fmt.Sprintf("example-%d:", time.Now().UnixNano()) // fresh keys on every run
	newInstance := func() *redisstore.Store {
		rdb := redis.NewClient(&redis.Options{
			Addr:                  srv.Addr(),            // the Redis TestMain started
			ContextTimeoutEnabled: true,                  // call deadlines reach the socket
			DialTimeout:           time.Second,           // default 5 s
			DialerRetries:         1,                     // default 5, 100 ms apart
			MinIdleConns:          8,                     // connections kept open
			MaxRetryBackoff:       64 * time.Millisecond, // default 1 s
		})
		closers = append(closers, rdb.Close)
		s, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		if err != nil {
			panic(err)
		}
		if err := s.Check(ctx); err != nil { // at start-up: a wrong password fails here
			panic(err)
		}
		return s
	}
	a, b := newInstance(), newInstance()
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()

	d := &quota.Demand{
		Scope: "vendor-api",
		Limits: []quota.Bucket{{
			Limit: quota.Limit{Name: "hourly", Rate: 2, Per: time.Hour},
			Key:   "team-42",
		}},
		Cost: 1,
	}
	for i, s := range []*redisstore.Store{a, b, a} {
		dec, err := s.Take(ctx, d)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("request %d: granted=%v", i+1, dec.OK)
		if !dec.OK {
			fmt.Printf(", bound by %s, retry in about %v", d.Limits[dec.Limit].Limit.Name, dec.Delay.Round(time.Minute))
		}
		fmt.Println()
	}
	// Output:
	// request 1: granted=true
	// request 2: granted=true
	// request 3: granted=false, bound by hourly, retry in about 30m0s
}

// Check, called once after New, contacts Redis: a misconfiguration fails
// at start-up with an error that names it and matches
// quota.ErrStoreConfig, rather than later as errors of every request.
// On success, the scripts are loaded and connections are open. Here the
// first client names a user the server does not know.
func ExampleStore_Check() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, username := range []string{"nobody", ""} {
		rdb := redis.NewClient(&redis.Options{
			Addr:                  srv.Addr(),
			Username:              username,
			Password:              "secret", // the default user has none and accepts any
			ContextTimeoutEnabled: true,
			DialTimeout:           time.Second,
			DialerRetries:         1,
			MinIdleConns:          8,
			MaxRetryBackoff:       64 * time.Millisecond,
		})
		store, err := redisstore.New(rdb)
		if err != nil {
			panic(err)
		}
		err = store.Check(ctx)
		switch {
		case errors.Is(err, quota.ErrStoreConfig):
			fmt.Println("fix the configuration:", err)
		case err != nil:
			fmt.Println("Redis is unreachable:", err)
		default:
			fmt.Println("ready")
		}
		_ = rdb.Close()
	}
	// Output:
	// fix the configuration: redisstore: check: misconfigured Redis: authentication: the server refused the client's username or password, or the user is disabled: INFO cluster: WRONGPASS invalid username-password pair or user is disabled.
	// ready
}

// WithReplay chooses what keeps a call that go-redis sends again after a
// failure from charging twice. The default suits most clients; a store
// that should answer such a call with the first reply, rather than fail
// it, remembers replies. Either way an error may have charged.
func ExampleWithReplay() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // retries: 3 by default
	defer rdb.Close()
	s, err := redisstore.New(rdb,
		redisstore.WithPrefix(fmt.Sprintf("example-%d:", time.Now().UnixNano())),
		redisstore.WithReplay(redisstore.ReplayIDs)) // default here: ReplayDetect
	if err != nil {
		panic(err)
	}
	d := &quota.Demand{
		Scope:  "vendor-api",
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "hourly", Rate: 100, Per: time.Hour}, Key: "team-42"}},
		Cost:   1,
	}
	dec, err := s.Take(ctx, d)
	switch {
	case errors.Is(err, redisstore.ErrResent):
		// ReplayDetect refused a call sent again: not granted, and the
		// first sending may have charged.
		fmt.Println("not granted: sent again")
	case err != nil:
		fmt.Println("not granted:", err)
	default:
		fmt.Println("granted:", dec.OK)
	}
	// Output: granted: true
}

// Batching is on by default and changes no decision: once BatchInFlight
// calls of a scope are in flight, further GCRA demands of the scope go
// together in one call, each decided as its own call would be. Here 64
// concurrent callers share a quota of 40 per hour, with batching and
// without. A batched demand whose context ends before its batch is sent
// fails with an error matching ErrNotSent, and nothing was charged.
func ExampleWithBatching() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 64})
	defer rdb.Close()
	prefix := fmt.Sprintf("example-%d:", time.Now().UnixNano())
	for _, opts := range [][]redisstore.Option{
		{redisstore.WithPrefix(prefix + "batched:")},                            // default: WithBatching(DefaultBatchMax)
		{redisstore.WithPrefix(prefix + "single:"), redisstore.WithBatching(0)}, // one call per decision
	} {
		s, err := redisstore.New(rdb, opts...)
		if err != nil {
			panic(err)
		}
		d := &quota.Demand{
			Scope:  "vendor-api",
			Limits: []quota.Bucket{{Limit: quota.Limit{Name: "hourly", Rate: 40, Per: time.Hour}}},
			Cost:   1,
		}
		var granted atomic.Int64
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				dec, err := s.Take(ctx, d)
				switch {
				case errors.Is(err, redisstore.ErrNotSent):
					// never sent: nothing charged
				case err != nil:
					fmt.Println("not granted:", err)
				case dec.OK:
					granted.Add(1)
				}
			})
		}
		wg.Wait()
		fmt.Printf("granted %d of 64\n", granted.Load())
	}
	// Output:
	// granted 40 of 64
	// granted 40 of 64
}

// Anchor moves an anchored limit's windows to where the vendor's end, for
// every instance that shares the Redis. Here a vendor counts 2 per hour on
// windows of its own: one instance's first request starts the fleet's
// first window, and its answer says the vendor's window ends in 10
// minutes. The request already sent counts in the vendor's window, so the
// other instance can send one more before it ends, not two.
func ExampleStore_Anchor() {
	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()
	ctx := context.Background()
	prefix := fmt.Sprintf("example-%d:", time.Now().UnixNano())
	newInstance := func() *redisstore.Store {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		closers = append(closers, rdb.Close)
		s, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		if err != nil {
			panic(err)
		}
		return s
	}
	a, b := newInstance(), newInstance()
	hourly := quota.Bucket{Limit: quota.Limit{Name: "hourly", Rate: 2, Per: time.Hour, Algorithm: quota.FixedWindow, Anchored: true}}
	demand := func(cost int) *quota.Demand {
		return &quota.Demand{Scope: "vendor", Limits: []quota.Bucket{hourly}, Cost: cost}
	}

	if _, err := a.Take(ctx, demand(1)); err != nil {
		panic(err)
	}
	// The answer's X-RateLimit-Reset says the vendor's window ends in 10m.
	ends, moved, err := a.Anchor(ctx, "vendor", hourly, 10*time.Minute, time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("moved:", moved, "window ends in", ends.Round(time.Minute))

	dec, err := b.Take(ctx, demand(2))
	if err != nil {
		panic(err)
	}
	fmt.Println("b, cost 2: granted", dec.OK, "retry in", dec.Delay.Round(time.Minute))
	dec, err = b.Take(ctx, demand(1))
	if err != nil {
		panic(err)
	}
	fmt.Println("b, cost 1: granted", dec.OK)
	// Output:
	// moved: true window ends in 10m0s
	// b, cost 2: granted false retry in 10m0s
	// b, cost 1: granted true
}
