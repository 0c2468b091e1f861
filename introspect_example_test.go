package throttle_test

import (
	"context"
	"fmt"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
)

// What each rule's requests hold in this Limiter now: a call holds one of
// the two in-flight slots until Done.
func ExampleLimiter_Stats() {
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name: "export", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "slots", Rate: 2, Per: time.Minute, Algorithm: throttle.Concurrency}},
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := lim.Allow(context.Background(), "export")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%+v\n", lim.Stats())
	p.Done()
	fmt.Printf("%+v\n", lim.Stats())
	fmt.Println(lim.Policy().Rules[0].Limits[0].Name)
	// Output:
	// [{Rule:export Deciding:0 InFlight:1}]
	// [{Rule:export Deciding:0 InFlight:0}]
	// slots
}
