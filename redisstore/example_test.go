package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
)

// New makes a store on any go-redis client; every instance that uses the
// same Redis and prefix shares the limits. Here two instances share a quota
// of 2 per hour.
func ExampleNew() {
	var closers []func() error
	ctx := context.Background()
	prefix := fmt.Sprintf("example-%d:", time.Now().UnixNano()) // fresh keys on every run
	newInstance := func() *redisstore.Store {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()}) // the Redis TestMain started
		defer func() { closers = append(closers, rdb.Close) }()
		s, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		if err != nil {
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

	d := &throttle.Demand{
		Scope: "vendor-api",
		Limits: []throttle.Bucket{{
			Limit: throttle.Limit{Name: "hourly", Rate: 2, Per: time.Hour},
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
	d := &throttle.Demand{
		Scope:  "vendor-api",
		Limits: []throttle.Bucket{{Limit: throttle.Limit{Name: "hourly", Rate: 100, Per: time.Hour}, Key: "team-42"}},
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
