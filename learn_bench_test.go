package throttle_test

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quotaheader"
)

// BenchmarkLearn measures the learning path per response: a round trip
// through a Transport on the in-process store to a vendor that answers at
// once with GitHub's headers, learning Off (the baseline), learning with
// Sync, and with Sync and Anchor; and with a 4 MiB RateLimit header, which
// the parser's cap ignores. Compare each to the baseline of the same run.
//
// The vendor counts what it answered in one window, as large as the
// rule's limit and ending at a fixed reset half an hour away, and reports
// what remains of it: every response is below what the limit could admit
// until the reset, so Sync calls the store each time, and the window
// never fills, so any -benchtime runs without a wait.
func BenchmarkLearn(b *testing.B) {
	const quota = 1 << 30 // the vendor's window and the rule's limit
	answer := func(extra string) http.RoundTripper {
		reset := strconv.FormatInt(time.Now().Add(30*time.Minute).Unix(), 10)
		seen := 0
		return rtFunc(func(req *http.Request) (*http.Response, error) {
			seen++
			h := http.Header{}
			h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
			h.Set("X-RateLimit-Limit", strconv.Itoa(quota))
			h.Set("X-RateLimit-Remaining", strconv.Itoa(quota-seen))
			h.Set("X-RateLimit-Reset", reset)
			h.Set("X-RateLimit-Resource", "search")
			if extra != "" {
				h.Set("RateLimit", extra)
			}
			return &http.Response{StatusCode: http.StatusOK, Header: h, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
		})
	}
	big := `"default";r=7;t=30` + strings.Repeat(`, "p";r=1;t=1`, (4<<20)/13)
	for _, c := range []struct {
		name  string
		learn throttle.Learning
		extra string
	}{
		{"off", throttle.Learning{Off: true}, ""},
		{"sync", throttle.Learning{Sync: "search"}, ""},
		{"sync+anchor", throttle.Learning{Sync: "search", Anchor: "search"}, ""},
		{"sync+anchor+4MiB-header", throttle.Learning{Sync: "search", Anchor: "search"}, big},
	} {
		b.Run(c.name, func(b *testing.B) {
			policy := throttle.Policy{Rules: []throttle.Rule{{
				Name: "search", Host: "api.github.com",
				Limits: []throttle.Limit{{Name: "search", Rate: quota, Per: time.Hour, Algorithm: throttle.FixedWindow}},
				Learn:  c.learn,
			}}}
			var syncs, pauses int // what learning did, checked below
			tr, err := throttle.NewTransport(answer(c.extra), policy, throttle.WithStore(memstore.New()),
				throttle.WithProfiles(quotaheader.GitHub), throttle.WithHooks(throttle.Hooks{
					OnSync:  func(throttle.SyncEvent) { syncs++ },
					OnPause: func(throttle.PauseEvent) { pauses++ },
				}))
			if err != nil {
				b.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "https://api.github.com/search/code?q=x", nil)
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
				n++
			}
			want := 0
			if c.learn.Sync != "" {
				want = n // a store call for every response
			}
			if syncs != want || pauses != 0 {
				b.Fatalf("%d responses: %d syncs (want %d), %d pauses (want 0)", n, syncs, want, pauses)
			}
		})
	}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
