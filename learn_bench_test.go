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
func BenchmarkLearn(b *testing.B) {
	answer := func(extra string) http.RoundTripper {
		return rtFunc(func(req *http.Request) (*http.Response, error) {
			now := time.Now()
			h := http.Header{}
			h.Set("Date", now.UTC().Format(http.TimeFormat))
			h.Set("X-RateLimit-Limit", "5000")
			h.Set("X-RateLimit-Remaining", "4999")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(now.Add(30*time.Minute).Unix(), 10))
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
				Limits: []throttle.Limit{{Name: "search", Rate: 1 << 30, Per: time.Hour, Algorithm: throttle.FixedWindow}},
				Learn:  c.learn,
			}}}
			tr, err := throttle.NewTransport(answer(c.extra), policy, throttle.WithStore(memstore.New()),
				throttle.WithProfiles(quotaheader.GitHub))
			if err != nil {
				b.Fatal(err)
			}
			req, _ := http.NewRequest(http.MethodGet, "https://api.github.com/search/code?q=x", nil)
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
