package quotaheader_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle/quotaheader"
)

// fuzzHeaders turns "Name: value" lines into headers, as a response
// would carry them (names are canonicalized, repeated names add values).
func fuzzHeaders(raw string) http.Header {
	h := make(http.Header)
	for _, line := range strings.Split(raw, "\n") {
		name, value, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		h.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	return h
}

// FuzzParse checks that Parse never panics and that its
// result keeps these invariants, whatever the headers:
//
//   - RetryAfter is in [0, MaxPause], a whole number of microseconds, and
//     non-zero only with HasRetryAfter;
//   - Reset is zero or in (now, now+MaxPause], a whole number of
//     microseconds after now;
//   - Limit, Remaining and Used are -1 or more, Window is not negative;
//   - Capped implies that RetryAfter or Reset sits exactly at the cap;
//   - PauseFor(now) is in [0, MaxPause], and is RetryAfter when the
//     response gave one;
//   - parsing does not modify the headers and gives the same result twice.
func FuzzParse(f *testing.F) {
	seeds := []string{
		"Retry-After: 120",
		"Retry-After: 0.5",
		"Retry-After: 120, 120",
		"Retry-After: Sun, 01 Jun 2025 11:00:00 GMT",
		"Date: Sun, 01 Jun 2025 11:00:00 GMT\nRetry-After: Sun, 01 Jun 2025 11:00:20 GMT",
		"Retry-After: 99999999999999999999999999",
		"Retry-After-Ms: 1500",
		"X-RateLimit-Limit: 5000\nX-RateLimit-Remaining: 0\nX-RateLimit-Used: 5000\nX-RateLimit-Reset: 1748779500\nX-RateLimit-Resource: core",
		"X-RateLimit-Reset: 1748779245000",
		"X-RateLimit-Reset: 2025-06-01T12:02:00Z",
		"X-RateLimit-Reset-After: 1.5",
		"X-Rate-Limit-Limit: 900\nX-Rate-Limit-Remaining: 899\nX-Rate-Limit-Reset: 1748779290",
		"RateLimit-Limit: 100, 100;w=60\nRateLimit-Remaining: 50\nRateLimit-Reset: 30",
		`RateLimit-Policy: "burst";q=100;w=60, "daily";q=1000;w=86400` + "\n" + `RateLimit: "burst";r=0;t=5, "daily";r=10;t=300`,
		`RateLimit: "default;r=50;t=30`,
		"RateLimit: limit=100, remaining=50, reset=30\nRateLimit-Policy: 100;w=60",
		"X-RateLimit-Limit-Requests: 60\nX-RateLimit-Remaining-Requests: 0\nX-RateLimit-Reset-Requests: 6m0s\nX-RateLimit-Reset-Tokens: 12ms",
		"Anthropic-RateLimit-Requests-Remaining: 0\nAnthropic-RateLimit-Requests-Reset: 2025-06-01T12:00:20Z",
	}
	for i, s := range seeds {
		f.Add(s, int64(0), uint8(i%7))
	}
	f.Add("Retry-After: 90", int64(time.Minute), uint8(0))
	f.Add("X-RateLimit-Reset: 30", int64(1), uint8(3))

	now := time.Date(2025, time.June, 1, 12, 0, 0, 123456789, time.UTC)
	f.Fuzz(func(t *testing.T, raw string, maxPause int64, format uint8) {
		h := fuzzHeaders(raw)
		before := h.Clone()
		o := quotaheader.Options{ResetFormat: quotaheader.ResetFormat(format % 8), MaxPause: time.Duration(maxPause)}
		capAt := o.MaxPause
		if capAt <= 0 {
			capAt = quotaheader.DefaultMaxPause
		}

		fb := quotaheader.Parse(h, now, o)

		if fb.RetryAfter < 0 || fb.RetryAfter > capAt {
			t.Errorf("RetryAfter %v outside [0, %v]", fb.RetryAfter, capAt)
		}
		if fb.RetryAfter%time.Microsecond != 0 && fb.RetryAfter != capAt {
			t.Errorf("RetryAfter %v is not whole microseconds", fb.RetryAfter)
		}
		if fb.RetryAfter != 0 && !fb.HasRetryAfter {
			t.Errorf("RetryAfter %v without HasRetryAfter", fb.RetryAfter)
		}
		if !fb.Reset.IsZero() {
			d := fb.Reset.Sub(now)
			if d <= 0 || d > capAt {
				t.Errorf("Reset %v after now, outside (0, %v]", d, capAt)
			}
			if d%time.Microsecond != 0 && d != capAt {
				t.Errorf("Reset %v after now is not whole microseconds", d)
			}
		}
		if fb.Limit < -1 || fb.Remaining < -1 || fb.Used < -1 || fb.Window < 0 {
			t.Errorf("bad counts or window: %+v", fb)
		}
		if fb.Capped && fb.RetryAfter != capAt && fb.Reset.Sub(now) != capAt {
			t.Errorf("Capped, but neither RetryAfter %v nor Reset %v is at the cap %v", fb.RetryAfter, fb.Reset.Sub(now), capAt)
		}
		p := fb.PauseFor(now)
		if p < 0 || p > capAt {
			t.Errorf("PauseFor %v outside [0, %v]", p, capAt)
		}
		if fb.HasRetryAfter && p != fb.RetryAfter {
			t.Errorf("PauseFor %v, RetryAfter %v", p, fb.RetryAfter)
		}
		for _, at := range []time.Duration{-time.Hour, time.Hour, -1 << 62, 1 << 62} {
			if p := fb.PauseFor(now.Add(at)); p < 0 || p > capAt {
				t.Errorf("PauseFor(now%+v) = %v outside [0, %v]", at, p, capAt)
			}
		}
		if !fb.HasRetryAfter && fb.Remaining == 0 && !fb.Reset.IsZero() {
			if p := fb.PauseFor(now.Add(-1 << 62)); p != capAt {
				t.Errorf("PauseFor long before an exhausted quota's reset = %v, want the cap %v", p, capAt)
			}
		}
		if again := quotaheader.Parse(h, now, o); again != fb {
			t.Errorf("not deterministic: %+v then %+v", fb, again)
		}
		if len(h) != len(before) {
			t.Errorf("headers modified")
		}
		for k, vs := range before {
			if strings.Join(h[k], "\x00") != strings.Join(vs, "\x00") {
				t.Errorf("header %q modified", k)
			}
		}
	})
}
