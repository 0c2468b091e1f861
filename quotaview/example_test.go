package quotaview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quotaview"
	"github.com/quotakit/throttle/waiters"
)

// The page of a Limiter, mounted at /debug/throttle/, and its JSON view
// read by a script: what the (fleet's) store holds for each key.
func ExampleNew() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	rec := quotaview.NewRecorder(quotaview.RecorderClock(clock))
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name: "email", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "per-user", Rate: 10, Per: time.Hour, Algorithm: throttle.FixedWindow, Key: throttle.KeyFromContext("user")}},
	}}}, throttle.WithStore(memstore.New(memstore.WithClock(clock))), throttle.WithHooks(rec.Hooks(throttle.Hooks{})))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, user := range []string{"ann", "ann", "bob"} {
		if p, err := lim.Allow(throttle.WithKey(context.Background(), "user", user), "email"); err == nil {
			p.Done()
		}
	}

	mux := http.NewServeMux()
	mux.Handle("/debug/throttle/", quotaview.New(lim, quotaview.WithRecorder(rec), quotaview.WithClock(clock)))
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/throttle/json", nil))
	var snap quotaview.Snapshot
	if err := json.Unmarshal(w.Body.Bytes(), &snap); err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range snap.Counters {
		fmt.Printf("%s %s: used %d, remaining %d of %d, full in %s\n", c.Limit, c.Key, c.Used, c.Remaining, c.Capacity, c.Reset)
	}
	fmt.Println("allowed here:", snap.Rules[0].Outcomes["allowed"])
	// Output:
	// per-user ann: used 2, remaining 8 of 10, full in 1h0m0s
	// per-user bob: used 1, remaining 9 of 10, full in 1h0m0s
	// allowed here: 3
}
