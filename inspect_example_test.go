package throttle_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

// An Inspector shows what each counter of a rule holds, without charging
// anything, and resets one. Here the in-process store, on a fixed clock so
// the times printed do not move; redisstore.Store does the same on Redis.
func Example_inspect() {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer vendor.Close()

	now := time.Date(2026, 1, 1, 12, 10, 0, 0, time.UTC)
	store := memstore.New(memstore.WithClock(func() time.Time { return now }))
	rule := throttle.Rule{
		Name: "notify",
		Wait: waiters.FailFast(),
		Limits: []throttle.Limit{
			{Name: "global", Rate: 10, Per: time.Hour, Algorithm: throttle.FixedWindow},
			{Name: "category", Rate: 2, Per: time.Hour, Algorithm: throttle.FixedWindow, Key: throttle.KeyFromContext("category")},
		},
	}
	tr, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{rule}}, throttle.WithStore(store))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, category := range []string{"errors", "errors", "errors", "info"} {
		ctx := throttle.WithKey(context.Background(), "category", category)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, vendor.URL, nil)
		if resp, err := tr.RoundTrip(req); err == nil {
			resp.Body.Close()
		}
	}

	var in quota.Inspector = store
	show := func() {
		states, err := in.Inspect(context.Background(), "notify", []quota.Limit{rule.Limits[0].Quota(), rule.Limits[1].Quota()})
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, s := range states {
			fmt.Printf("%s %q: used %d, remaining %d, full in %s\n", s.Limit, s.Key, s.Used, s.Remaining, s.Reset)
		}
	}
	show()
	if err := in.ResetLimit(context.Background(), "notify", rule.Limits[1].Quota(), "errors"); err != nil {
		fmt.Println(err)
	}
	fmt.Println("after resetting category \"errors\":")
	show()
	// Output:
	// category "errors": used 2, remaining 0, full in 50m0s
	// category "info": used 1, remaining 1, full in 50m0s
	// global "": used 3, remaining 7, full in 50m0s
	// after resetting category "errors":
	// category "info": used 1, remaining 1, full in 50m0s
	// global "": used 3, remaining 7, full in 50m0s
}
