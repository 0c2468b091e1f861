package storetest_test

import (
	"context"
	"fmt"
	"time"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/storetest"
)

// A Clock drives a store's time in tests: here the in-process store
// refuses a fourth demand on a limit of 3 per second, and admits it once
// the clock reaches the retry time it gave.
func ExampleClock() {
	clock := storetest.NewClock(storetest.Start)
	store := memstore.New(memstore.WithClock(clock.Now))
	d := &quota.Demand{
		Scope: "example",
		Cost:  1,
		Limits: []quota.Bucket{{
			Limit: quota.Limit{Name: "calls", Rate: 3, Per: time.Second},
		}},
	}
	take := func() {
		dec, err := store.Take(context.Background(), d)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("OK=%v Delay=%v\n", dec.OK, dec.Delay)
	}
	for range 4 {
		take()
	}
	clock.Advance(333333 * time.Microsecond)
	take()
	clock.Advance(time.Microsecond)
	take()
	// Output:
	// OK=true Delay=0s
	// OK=true Delay=0s
	// OK=true Delay=0s
	// OK=false Delay=333.334ms
	// OK=false Delay=1µs
	// OK=true Delay=0s
}
