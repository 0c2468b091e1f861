package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/waiters"
)

// A loop that sends emails through a provider that allows 2 per second per
// account, outside HTTP: every instance of the service shares the quota
// (give them one store: throttle.WithStore(redisstore.New(client))), and a
// "slow down" answer from the provider pauses them all.
func ExampleLimiter() {
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name:   "email",
		Wait:   waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "account", Rate: 2, Per: time.Second, Key: throttle.KeyFromContext("account")}},
	}}})
	if err != nil {
		panic(err)
	}
	ctx := throttle.WithKey(context.Background(), "account", "acme")
	for i := range 3 {
		// The third email would be refused by the limit (2 per second);
		// the provider's answer to the second has paused every instance.
		p, err := lim.Allow(ctx, "email")
		var le *throttle.LimitError
		if errors.As(err, &le) {
			fmt.Printf("email %d: not now (limit %q; paused: %v)\n", i, le.Limit, le.Limit == "")
			continue
		}
		fmt.Printf("email %d: sent\n", i)
		// The provider's answer; here it said "slow down, retry in 30 s".
		p.Report(ctx, i == 1, quotaheader.Feedback{Limit: -1, Remaining: -1, Used: -1, RetryAfter: 30 * time.Second, HasRetryAfter: i == 1})
		p.Done()
	}
	// Output:
	// email 0: sent
	// email 1: sent
	// email 2: not now (limit ""; paused: true)
}
