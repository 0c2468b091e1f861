package quotaheader_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/quotakit/throttle/quotaheader"
)

// A GitHub-style answer: the quota is spent and resets in 40 seconds by the
// vendor's clock, which runs an hour ahead of ours. The Date header cancels
// the skew.
func ExampleParse() {
	now := time.Date(2025, time.June, 1, 12, 0, 0, 0, time.UTC)
	vendorNow := now.Add(time.Hour)

	h := http.Header{}
	h.Set("Date", vendorNow.Format(http.TimeFormat))
	h.Set("X-RateLimit-Limit", "5000")
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Used", "5000")
	h.Set("X-RateLimit-Reset", fmt.Sprint(vendorNow.Add(40*time.Second).Unix()))
	h.Set("X-RateLimit-Resource", "core")

	fb := quotaheader.Parse(h, now, quotaheader.Options{})
	fmt.Println(fb.Resource, fb.Limit, fb.Remaining, fb.Used)
	fmt.Println("resets in", fb.Reset.Sub(now))
	fmt.Println("pause", fb.PauseFor(now))

	// A 429 with a Retry-After longer than the cap.
	h = http.Header{}
	h.Set("Retry-After", "3600")
	fb = quotaheader.Parse(h, now, quotaheader.Options{MaxPause: time.Minute})
	fmt.Println("pause", fb.PauseFor(now), "capped", fb.Capped)
	// Output:
	// core 5000 0 5000
	// resets in 40s
	// pause 40s
	// pause 1m0s capped true
}
