package quotaheader

import (
	"math/rand/v2"
	"net/http"
	"reflect"
	"testing"
	"time"
)

// TestFamiliesSkipNothing checks that reading only the families of
// headers a response holds (present) changes nothing: Parse agrees with
// a parse that looks up every header it knows, on responses made of
// random picks of every header it reads, under other names too, and of
// headers it does not read.
func TestFamiliesSkipNothing(t *testing.T) {
	every := retryFamily | ietfFamily | xFamily | xDashFamily | anthropicFamily
	headers := [][2]string{
		{"Date", "Sun, 01 Jun 2025 12:00:00 GMT"},
		{"Retry-After", "120"}, {"Retry-After", "Sun, 01 Jun 2025 12:00:20 GMT"}, {"Retry-After-Ms", "1500"},
		{"Ratelimit-Limit", "100, 100;w=60"}, {"Ratelimit-Remaining", "0"}, {"Ratelimit-Reset", "30"},
		{"Ratelimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`}, {"Ratelimit", `"burst";r=0;t=5, "daily";r=10;t=300`},
		{"Ratelimit", "limit=100, remaining=0, reset=30"}, {"Ratelimit-Policy", "100;w=60"},
		{"X-Ratelimit-Limit", "5000"}, {"X-Ratelimit-Remaining", "0"}, {"X-Ratelimit-Used", "5000"},
		{"X-Ratelimit-Reset", "1748779500"}, {"X-Ratelimit-Resource", "core"}, {"X-Ratelimit-Reset-After", "1.5"},
		{"X-Ratelimit-Limit-Requests", "60"}, {"X-Ratelimit-Remaining-Requests", "0"}, {"X-Ratelimit-Reset-Requests", "6m0s"},
		{"X-Ratelimit-Limit-Tokens", "1000"}, {"X-Ratelimit-Remaining-Tokens", "0"}, {"X-Ratelimit-Reset-Tokens", "12ms"},
		{"X-Rate-Limit-Limit", "900"}, {"X-Rate-Limit-Remaining", "0"}, {"X-Rate-Limit-Reset", "1748779290"},
		{"Anthropic-Ratelimit-Requests-Remaining", "0"}, {"Anthropic-Ratelimit-Requests-Reset", "2025-06-01T12:00:20Z"},
		{"Anthropic-Ratelimit-Tokens-Limit", "10000"}, {"Anthropic-Ratelimit-Input-Tokens-Remaining", "0"},
		{"Anthropic-Ratelimit-Output-Tokens-Reset", "2025-06-01T12:00:40Z"},
		{"x-ratelimit-remaining", "0"}, {"retry-after", "5"}, // not canonical: neither parse finds them
		{"Content-Type", "application/json"}, {"X-Request-Id", "abc"}, {"Server", "vendor"},
	}
	now := time.Date(2025, time.June, 1, 12, 0, 0, 0, time.UTC)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		h := http.Header{}
		for range rng.IntN(8) {
			kv := headers[rng.IntN(len(headers))]
			h[kv[0]] = append(h[kv[0]], kv[1])
		}
		o := Options{ResetFormat: ResetFormat(rng.IntN(5)), MaxPause: time.Duration(rng.IntN(3)) * time.Minute}
		got, want := Parse(h, now, o), parse(h, now, o, every)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("case %d, headers %v: Parse = %+v, reading every family = %+v", i, h, got, want)
		}
	}
}
