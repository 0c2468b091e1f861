package throttle_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
)

// ExampleWithClass is the README's policy of classes and fair shares: a
// sync of customer acme sends as "bulk" until it reaches its headroom,
// and a click of the same customer still goes. The lines between the
// markers are the README's (TestReadmePriorities checks).
func ExampleWithClass() {
	ctx := context.Background()
	// readme:priorities:begin
	policy := throttle.Policy{
		Classes: []throttle.Class{{Name: "interactive"}, {Name: "bulk", Headroom: 0.2}},
		Rules: []throttle.Rule{{
			Name: "vendor", Host: "api.vendor.example", Class: "bulk", // the rule's default class
			Limits: []throttle.Limit{{Name: "calls", Rate: 100, Per: 10 * time.Second, Burst: 10,
				Tenant: throttle.KeyFromContext("customer")}},
		}},
	}
	ctx = throttle.WithKey(ctx, "customer", "acme")
	click := throttle.WithClass(ctx, "interactive") // this request is a click
	// readme:priorities:end
	policy.Rules[0].Wait = waiters.FailFast()
	at := time.Unix(1_700_000_000, 0) // a clock that stands still
	client := &http.Client{Transport: must(throttle.NewTransport(answer200{}, policy,
		throttle.WithStore(memstore.New(memstore.WithClock(func() time.Time { return at })))))}
	send := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://api.vendor.example/send", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	sent := 0
	for send(ctx) == nil {
		sent++
	}
	fmt.Printf("the sync: %d sent before its headroom; the click: %v\n", sent, send(click) == nil)
	// Output:
	// the sync: 8 sent before its headroom; the click: true
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestReadmePriorities checks that the README shows ExampleWithClass's
// policy word for word.
func TestReadmePriorities(t *testing.T) {
	assertReadmeShows(t, "class_example_test.go", "priorities", "## Priorities and fair shares", "")
}

// A nightly sync and a user's "send to Slack" share one quota. The sync
// is class "bulk", which leaves the last 20% of every limit free; the
// click is "interactive", which leaves nothing. However long the sync's
// backlog, the click finds its quota at once: bulk requests never hold
// quota ahead of time (they wait in their instance and ask again).
func ExampleClass() {
	lim, err := throttle.NewLimiter(throttle.Policy{
		Classes: []throttle.Class{{Name: "interactive"}, {Name: "bulk", Headroom: 0.2}},
		Rules: []throttle.Rule{{
			Name: "slack", Class: "bulk", Wait: waiters.FailFast(),
			Limits: []throttle.Limit{{Name: "posts", Rate: 10, Per: time.Hour}},
		}},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	sent := 0
	for range 50 {
		if _, err := lim.Allow(ctx, "slack"); err == nil {
			sent++
		}
	}
	_, err = lim.Allow(throttle.WithClass(ctx, "interactive"), "slack")
	fmt.Printf("sync: %d of 50 sent now; the click: sent %v\n", sent, err == nil)
	// Output:
	// sync: 8 of 50 sent now; the click: sent true
}

// Four customers share a vendor's 100 calls per 10 s: A wants 10 times an
// equal share, B twice, C half and D a tenth. With the limit shared among
// tenants (Limit.Tenant), none gets more than its share while another is
// held back: C and D get all they ask, A and B split the rest. Without,
// every request reserves its turn, and A's backlog pushes the others'
// turns past the end of the minute.
//
// The minute runs on a clock of its own. Each customer asks in turn
// every 100 ms (the limit's emission interval) for what has come in, and
// a request waits for its quota: Reserve grants it an instant at most
// half an emission interval ahead, or refuses it (it asks again at the
// next step), the free quota going to the customer furthest below its
// share. A request counts as sent if its instant is within the minute.
func ExampleLimit_tenant() {
	wants := []float64{2.5, 0.5, 0.125, 0.025} // requests every 100 ms: a share is 0.25
	minute := func(shared bool) []int {
		now := time.Unix(1_700_000_000, 0)
		clock := func() time.Time { return now }
		limit := throttle.Limit{Name: "calls", Rate: 100, Per: 10 * time.Second, Burst: 10}
		if shared {
			limit.Tenant = throttle.KeyFromContext("customer")
		}
		lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
			Name: "vendor", Wait: waiters.Block(), Limits: []throttle.Limit{limit},
		}}}, throttle.WithStore(memstore.New(memstore.WithClock(clock))), throttle.WithClock(clock))
		if err != nil {
			panic(err)
		}
		end := now.Add(time.Minute)
		backlog, sent := make([]float64, len(wants)), make([]int, len(wants))
		for now.Before(end) {
			for i, want := range wants {
				backlog[i] += want
				ctx := throttle.WithKey(context.Background(), "customer", string(rune('A'+i)))
				for ; backlog[i] >= 1; backlog[i]-- {
					p, err := lim.Reserve(ctx, "vendor", 1)
					if err != nil {
						break // no quota within T/2, or another customer goes first
					}
					if now.Add(p.Delay).Before(end) {
						sent[i]++
					}
				}
			}
			now = now.Add(100 * time.Millisecond)
		}
		return sent
	}
	shared, unshared := minute(true), minute(false)
	fmt.Println("customer  wants  shared  not shared")
	for i, want := range wants {
		fmt.Printf("%c         %5.0f  %6d  %10d\n", 'A'+i, want*600, shared[i], unshared[i])
	}
	// Output:
	// customer  wants  shared  not shared
	// A          1500     265         485
	// B           300     256          96
	// C            75      74          24
	// D            15      14           4
}
