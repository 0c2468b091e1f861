package throttle_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
)

// A vendor that allows 3 requests in flight and 100 per second: both
// limits sit in one rule and are decided together. A slot is held from the
// decision until the response body is closed or read to the end; waiting
// callers are woken by the release.
func ExampleTransport_inFlight() {
	var cur, peak atomic.Int64
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		cur.Add(-1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer vendor.Close()

	tr, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor",
		Limits: []throttle.Limit{
			{Name: "rate", Rate: 100, Per: time.Second},
			// At most 3 in flight; a slot not renewed within 30s is reclaimed.
			{Name: "inflight", Rate: 3, Per: 30 * time.Second, Algorithm: throttle.Concurrency},
		},
		Wait: waiters.Block(),
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	var wg sync.WaitGroup
	var served atomic.Int64
	for range 20 {
		wg.Go(func() {
			resp, err := client.Get(vendor.URL)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer resp.Body.Close() // releases the slot
			if _, err := io.ReadAll(resp.Body); err == nil {
				served.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Println("served:", served.Load())
	fmt.Println("never more than 3 at once:", peak.Load() <= 3)
	// Output:
	// served: 20
	// never more than 3 at once: true
}
