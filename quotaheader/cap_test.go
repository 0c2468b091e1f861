package quotaheader_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quotakit/throttle/quotaheader"
)

// TestParseHeaderCap: a header of exactly MaxHeaderBytes is read; one
// byte more and it is ignored, as if absent, and the others still count.
func TestParseHeaderCap(t *testing.T) {
	// A structured RateLimit field padded with valid-looking policies
	// that no RateLimit-Policy speaks of, to n bytes.
	field := func(n int) string {
		s := `"default";r=7;t=30`
		pad := `, "p";r=1;t=1`
		for len(s)+len(pad) <= n {
			s += pad
		}
		return s + strings.Repeat(" ", n-len(s))
	}
	for _, c := range []struct {
		name      string
		n         int
		remaining int64
	}{
		{"at the cap", quotaheader.MaxHeaderBytes, 1},
		{"over the cap", quotaheader.MaxHeaderBytes + 1, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			h.Set("RateLimit", field(c.n))
			h.Set("X-RateLimit-Remaining", "3")
			assert.Len(t, h.Get("RateLimit"), c.n)
			fb := quotaheader.Parse(h, now, quotaheader.Options{})
			// The padding's r=1 is the most restrictive when read; the
			// X-RateLimit-Remaining alone counts when the field is not.
			assert.Equal(t, c.remaining, fb.Remaining)
		})
	}

	// The cap counts every value of the header together.
	h := http.Header{}
	half := strings.Repeat("1", quotaheader.MaxHeaderBytes/2+1)
	h.Add("X-RateLimit-Limit", half)
	h.Add("X-RateLimit-Limit", half)
	h.Set("X-RateLimit-Remaining", "5")
	fb := quotaheader.Parse(h, now, quotaheader.Options{})
	assert.EqualValues(t, -1, fb.Limit, "two values over the cap together")
	assert.EqualValues(t, 5, fb.Remaining)
}

// TestParseResetEvidence: the reset's resolution, the instant the vendor
// wrote and the Date, which learning reads a window's phase from.
func TestParseResetEvidence(t *testing.T) {
	for _, c := range []struct {
		name    string
		h       map[string]string
		format  quotaheader.ResetFormat
		res     time.Duration
		instant time.Time
	}{
		{"epoch seconds", map[string]string{"X-RateLimit-Reset": epochIn(30 * time.Second)}, quotaheader.ResetEpochSeconds, time.Second, now.Add(30 * time.Second)},
		{"epoch seconds with a fraction", map[string]string{"X-RateLimit-Reset": epochIn(30*time.Second) + ".250"}, quotaheader.ResetAuto, time.Millisecond, now.Add(30250 * time.Millisecond)},
		{"epoch milliseconds", map[string]string{"X-RateLimit-Reset": epochMsIn(1500 * time.Millisecond)}, quotaheader.ResetEpochMillis, time.Millisecond, now.Add(1500 * time.Millisecond)},
		{"delta seconds", map[string]string{"RateLimit-Reset": "30"}, quotaheader.ResetAuto, time.Second, time.Time{}},
		{"IETF t", map[string]string{"RateLimit": `"d";r=1;t=2.5`, "RateLimit-Policy": `"d";q=10;w=3`}, quotaheader.ResetAuto, 100 * time.Millisecond, time.Time{}},
		{"Go duration", map[string]string{"X-RateLimit-Reset-Requests": "1.25s", "X-RateLimit-Remaining-Requests": "1"}, quotaheader.ResetAuto, 10 * time.Millisecond, time.Time{}},
		{"Go duration in ms", map[string]string{"X-RateLimit-Reset-Requests": "12ms", "X-RateLimit-Remaining-Requests": "1"}, quotaheader.ResetAuto, time.Millisecond, time.Time{}},
		{"HTTP-date", map[string]string{"X-RateLimit-Reset": httpDateIn(time.Minute)}, quotaheader.ResetAuto, time.Second, now.Add(time.Minute)},
		{"RFC 3339 with a fraction", map[string]string{"Anthropic-Ratelimit-Requests-Reset": now.Add(time.Minute + 120*time.Millisecond).Format(time.RFC3339Nano), "Anthropic-Ratelimit-Requests-Remaining": "1"}, quotaheader.ResetAuto, 10 * time.Millisecond, now.Add(time.Minute + 120*time.Millisecond)},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range c.h {
				h.Set(k, v)
			}
			fb := quotaheader.Parse(h, now, quotaheader.Options{ResetFormat: c.format})
			assert.False(t, fb.Reset.IsZero())
			assert.Equal(t, c.res, fb.ResetResolution)
			assert.True(t, c.instant.Equal(fb.ResetInstant), "instant %v, want %v", fb.ResetInstant, c.instant)
			assert.True(t, fb.Date.IsZero())
		})
	}
	h := http.Header{"Date": {httpDateIn(-2 * time.Second)}, "X-Ratelimit-Reset": {epochIn(8 * time.Second)}}
	fb := quotaheader.Parse(h, now, quotaheader.Options{ResetFormat: quotaheader.ResetEpochSeconds})
	assert.True(t, now.Add(-2*time.Second).Equal(fb.Date))
	assert.Equal(t, 10*time.Second, fb.Reset.Sub(now), "read against Date")
	assert.True(t, now.Add(8*time.Second).Equal(fb.ResetInstant), "as written")
}

// BenchmarkParse measures Parse on a GitHub answer, an answer that says
// nothing of its quota (Slack's, but for a 429), a large structured IETF
// field and a field over the cap; the last must cost about what the
// first does, not what its size would (compare the ratios).
func BenchmarkParse(b *testing.B) {
	github := http.Header{
		"Date":                  {httpDateIn(0)},
		"X-Ratelimit-Limit":     {"30"},
		"X-Ratelimit-Remaining": {"12"},
		"X-Ratelimit-Reset":     {epochIn(40 * time.Second)},
		"X-Ratelimit-Used":      {"18"},
		"X-Ratelimit-Resource":  {"search"},
	}
	big := func(n int) http.Header {
		s := `"default";r=7;t=30` + strings.Repeat(`, "p";r=1;t=1`, n/13)
		return http.Header{"Ratelimit": {s[:n]}, "Ratelimit-Policy": {`"default";q=10;w=60`}}
	}
	for _, c := range []struct {
		name string
		h    http.Header
	}{
		{"github", github},
		{"silent", http.Header{
			"Date":                      {httpDateIn(0)},
			"Content-Type":              {"application/json; charset=utf-8"},
			"Server":                    {"Apache"},
			"X-Slack-Req-Id":            {"0b9e1d5c2f"},
			"X-Oauth-Scopes":            {"chat:write"},
			"Strict-Transport-Security": {"max-age=31536000"},
			"Vary":                      {"Accept-Encoding"},
		}},
		{"github-full", func() http.Header {
			h := github.Clone()
			for _, k := range []string{"Server", "Content-Type", "Cache-Control", "Vary", "Etag", "Last-Modified", "X-Oauth-Scopes",
				"X-Accepted-Oauth-Scopes", "X-Github-Media-Type", "X-Github-Api-Version-Selected", "Access-Control-Expose-Headers",
				"Access-Control-Allow-Origin", "Strict-Transport-Security", "X-Frame-Options", "X-Content-Type-Options",
				"X-Xss-Protection", "Referrer-Policy", "Content-Security-Policy", "X-Github-Request-Id"} {
				h.Set(k, "v")
			}
			return h
		}()},
		{"ietf-at-cap", big(quotaheader.MaxHeaderBytes)},
		{"ietf-4MiB", big(4 << 20)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				quotaheader.Parse(c.h, now, quotaheader.Options{})
			}
		})
	}
}
