package retryable_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/retryable"
	"github.com/quotakit/throttle/waiters"
)

// A go-retryablehttp client on a throttle transport: the vendor's first
// answer is a 429 with Retry-After, which pauses the rule; the retry waits
// for it and goes through the limiter again.
func ExampleNewClient() {
	var calls atomic.Int32
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0.1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	defer vendor.Close()

	t, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "api",
		Limits: []throttle.Limit{{Name: "per-second", Rate: 10, Per: time.Second}},
		Wait:   waiters.FailFast(),
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := retryable.NewClient(t, retryable.Policy{MaxWait: time.Minute})
	client.RetryWaitMin = 10 * time.Millisecond

	resp, err := client.Get(vendor.URL + "/items")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode, "after", calls.Load(), "calls")
	// Output: 200 after 2 calls
}
