package quotaheader_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/quotakit/throttle/quotaheader"
)

// now is the instant every parsing test receives its response at.
var now = time.Date(2025, time.June, 1, 12, 0, 0, 0, time.UTC)

// epochIn returns the epoch seconds d after now, as a header value.
func epochIn(d time.Duration) string { return strconv.FormatInt(now.Add(d).Unix(), 10) }

// epochMsIn returns the epoch milliseconds d after now, as a header value.
func epochMsIn(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }

// httpDateIn returns the IMF-fixdate d after now.
func httpDateIn(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }

// view is what a test compares of a Feedback: ResetIn is Reset-now, or
// 0 for the zero Reset.
type view struct {
	Limit, Remaining, Used int64
	ResetIn                time.Duration
	RetryAfter             time.Duration
	HasRetryAfter          bool
	Resource               string
	Window                 time.Duration
	Capped                 bool
}

func viewOf(f quotaheader.Feedback) view {
	v := view{Limit: f.Limit, Remaining: f.Remaining, Used: f.Used, RetryAfter: f.RetryAfter,
		HasRetryAfter: f.HasRetryAfter, Resource: f.Resource, Window: f.Window, Capped: f.Capped}
	if !f.Reset.IsZero() {
		v.ResetIn = f.Reset.Sub(now)
	}
	return v
}

// Builders for expected views, so each row states only what it is about.
func nothing() view { return view{Limit: -1, Remaining: -1, Used: -1} }
func counts(limit, remaining int64) view {
	return view{Limit: limit, Remaining: remaining, Used: -1}
}
func retry(d time.Duration) view           { return nothing().retry(d) }
func (v view) retry(d time.Duration) view  { v.RetryAfter, v.HasRetryAfter = d, true; return v }
func (v view) reset(d time.Duration) view  { v.ResetIn = d; return v }
func (v view) used(n int64) view           { v.Used = n; return v }
func (v view) res(name string) view        { v.Resource = name; return v }
func (v view) window(d time.Duration) view { v.Window = d; return v }
func (v view) capped() view                { v.Capped = true; return v }
func hdr(kv ...string) http.Header {
	h := make(http.Header)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

const maxP = quotaheader.DefaultMaxPause

func TestParse(t *testing.T) {
	past := -90 * time.Second
	tests := []struct {
		name string
		h    http.Header
		o    quotaheader.Options
		want view
	}{
		// Nothing said.
		{"no headers", hdr(), quotaheader.Options{}, nothing()},
		{"unrelated headers", hdr("Content-Type", "text/plain", "Date", httpDateIn(0)), quotaheader.Options{}, nothing()},
		{"empty values", hdr("Retry-After", "", "X-RateLimit-Limit", "", "RateLimit", "", "RateLimit-Policy", ""), quotaheader.Options{}, nothing()},

		// Retry-After: delay-seconds.
		{"retry-after seconds", hdr("Retry-After", "120"), quotaheader.Options{}, retry(120 * time.Second)},
		{"retry-after zero", hdr("Retry-After", "0"), quotaheader.Options{}, retry(0)},
		{"retry-after spaces", hdr("Retry-After", " 7 "), quotaheader.Options{}, retry(7 * time.Second)},
		{"retry-after leading zeros", hdr("Retry-After", "007"), quotaheader.Options{}, retry(7 * time.Second)},
		{"retry-after 2.0", hdr("Retry-After", "2.0"), quotaheader.Options{}, retry(2 * time.Second)},
		{"retry-after 0.5", hdr("Retry-After", "0.5"), quotaheader.Options{}, retry(500 * time.Millisecond)},
		{"retry-after rounds up to the microsecond", hdr("Retry-After", "0.0000001"), quotaheader.Options{}, retry(time.Microsecond)},
		{"retry-after 1.0000011", hdr("Retry-After", "1.0000011"), quotaheader.Options{}, retry(time.Second + 2*time.Microsecond)},
		{"retry-after trailing zeros do not round up", hdr("Retry-After", "1.000001000"), quotaheader.Options{}, retry(time.Second + time.Microsecond)},
		{"retry-after joined 120, 120", hdr("Retry-After", "120, 120"), quotaheader.Options{}, retry(120 * time.Second)},
		{"retry-after joined, first valid", hdr("Retry-After", "soon, 30, 40"), quotaheader.Options{}, retry(30 * time.Second)},
		{"retry-after repeated lines", hdr("Retry-After", "abc", "Retry-After", "30"), quotaheader.Options{}, retry(30 * time.Second)},
		{"retry-after negative", hdr("Retry-After", "-5"), quotaheader.Options{}, nothing()},
		{"retry-after plus sign", hdr("Retry-After", "+5"), quotaheader.Options{}, nothing()},
		{"retry-after garbage", hdr("Retry-After", "soon"), quotaheader.Options{}, nothing()},
		{"retry-after exponent", hdr("Retry-After", "1e30"), quotaheader.Options{}, nothing()},
		{"retry-after NaN", hdr("Retry-After", "NaN"), quotaheader.Options{}, nothing()},
		{"retry-after Inf", hdr("Retry-After", "Inf"), quotaheader.Options{}, nothing()},
		{"retry-after half a number", hdr("Retry-After", "5."), quotaheader.Options{}, nothing()},
		{"retry-after go duration is not delay-seconds", hdr("Retry-After", "5s"), quotaheader.Options{}, nothing()},
		{"retry-after over max pause", hdr("Retry-After", "700"), quotaheader.Options{}, retry(maxP).capped()},
		{"retry-after at max pause", hdr("Retry-After", "600"), quotaheader.Options{}, retry(maxP)},
		{"retry-after own max pause", hdr("Retry-After", "90"), quotaheader.Options{MaxPause: time.Minute}, retry(time.Minute).capped()},
		{"retry-after negative max pause means default", hdr("Retry-After", "700"), quotaheader.Options{MaxPause: -1}, retry(maxP).capped()},
		{"retry-after beyond int64", hdr("Retry-After", "99999999999999999999999999999999"), quotaheader.Options{}, retry(maxP).capped()},
		{"retry-after beyond duration", hdr("Retry-After", "9223372036854775807"), quotaheader.Options{}, retry(maxP).capped()},
		{"retry-after-ms", hdr("Retry-After-Ms", "1500"), quotaheader.Options{}, retry(1500 * time.Millisecond)},
		{"retry-after-ms fractional", hdr("Retry-After-Ms", "0.5"), quotaheader.Options{}, retry(500 * time.Microsecond)},
		{"retry-after-ms longer than retry-after wins", hdr("Retry-After", "1", "Retry-After-Ms", "1500"), quotaheader.Options{}, retry(1500 * time.Millisecond)},
		{"retry-after longer than retry-after-ms wins", hdr("Retry-After", "2", "Retry-After-Ms", "1500"), quotaheader.Options{}, retry(2 * time.Second)},

		// Retry-After: HTTP-date, against Date when present.
		{"retry-after IMF-fixdate", hdr("Retry-After", httpDateIn(30*time.Second)), quotaheader.Options{}, retry(30 * time.Second)},
		{"retry-after RFC 850 date", hdr("Retry-After", "Sunday, 01-Jun-25 12:00:45 GMT"), quotaheader.Options{}, retry(45 * time.Second)},
		{"retry-after asctime date", hdr("Retry-After", "Sun Jun  1 12:01:00 2025"), quotaheader.Options{}, retry(time.Minute)},
		{"retry-after RFC 3339", hdr("Retry-After", "2025-06-01T12:00:10.5Z"), quotaheader.Options{}, retry(10500 * time.Millisecond)},
		{"retry-after date in the past", hdr("Retry-After", httpDateIn(past)), quotaheader.Options{}, retry(0)},
		{"retry-after date now", hdr("Retry-After", httpDateIn(0)), quotaheader.Options{}, retry(0)},
		{"retry-after date far away", hdr("Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"), quotaheader.Options{}, retry(maxP).capped()},
		{"retry-after date against vendor clock behind", hdr("Date", httpDateIn(-time.Hour), "Retry-After", httpDateIn(-time.Hour+20*time.Second)), quotaheader.Options{}, retry(20 * time.Second)},
		{"retry-after date against vendor clock ahead", hdr("Date", httpDateIn(time.Hour), "Retry-After", httpDateIn(time.Hour+20*time.Second)), quotaheader.Options{}, retry(20 * time.Second)},
		{"retry-after date with garbage Date header", hdr("Date", "yesterday", "Retry-After", httpDateIn(20*time.Second)), quotaheader.Options{}, retry(20 * time.Second)},
		{"retry-after dates joined", hdr("Retry-After", httpDateIn(30*time.Second)+", "+httpDateIn(40*time.Second)), quotaheader.Options{}, retry(30 * time.Second)},
		{"retry-after garbage then date", hdr("Retry-After", "later, "+httpDateIn(30*time.Second)), quotaheader.Options{}, retry(30 * time.Second)},
		{"retry-after broken date", hdr("Retry-After", "Sun, 32 Jun 2025 12:00:00 GMT"), quotaheader.Options{}, nothing()},

		// GitHub: X-RateLimit-*, reset in epoch seconds.
		{"github", hdr("X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "4999", "X-RateLimit-Used", "1",
			"X-RateLimit-Reset", epochIn(5*time.Minute), "X-RateLimit-Resource", "core"), quotaheader.Options{},
			counts(5000, 4999).used(1).reset(5 * time.Minute).res("core")},
		{"github lower case names", hdr("x-ratelimit-limit", "60", "x-ratelimit-remaining", "0", "x-ratelimit-reset", epochIn(time.Minute), "x-ratelimit-resource", "search"),
			quotaheader.Options{}, counts(60, 0).reset(time.Minute).res("search")},
		{"github reset beyond max pause", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(time.Hour)), quotaheader.Options{},
			counts(-1, 0).reset(maxP).capped()},
		{"github reset in the past", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(past)), quotaheader.Options{}, counts(-1, 0)},
		{"github reset against vendor clock ahead", hdr("Date", httpDateIn(time.Hour), "X-RateLimit-Reset", epochIn(time.Hour+time.Minute)), quotaheader.Options{},
			nothing().reset(time.Minute)},
		{"github 403 secondary limit", hdr("Retry-After", "60", "X-RateLimit-Remaining", "4000", "X-RateLimit-Limit", "5000"), quotaheader.Options{},
			counts(5000, 4000).retry(time.Minute)},
		{"github resource with spaces ignored", hdr("X-RateLimit-Resource", "co re"), quotaheader.Options{}, nothing()},
		{"negative counts ignored", hdr("X-RateLimit-Limit", "-1", "X-RateLimit-Remaining", "-5", "X-RateLimit-Used", "-2"), quotaheader.Options{}, nothing()},
		{"fractional counts ignored", hdr("X-RateLimit-Limit", "1.5", "X-RateLimit-Remaining", "abc"), quotaheader.Options{}, nothing()},
		{"count beyond int64 ignored", hdr("X-RateLimit-Remaining", "99999999999999999999"), quotaheader.Options{}, nothing()},
		{"count at int64 max", hdr("X-RateLimit-Remaining", "9223372036854775807"), quotaheader.Options{}, counts(-1, 9223372036854775807)},
		{"discord reset-after", hdr("X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset-After", "1.5"), quotaheader.Options{},
			counts(5, 0).reset(1500 * time.Millisecond)},
		{"discord later of reset and reset-after", hdr("X-RateLimit-Reset", epochIn(time.Second), "X-RateLimit-Reset-After", "0.25"), quotaheader.Options{},
			nothing().reset(time.Second)},
		{"fractional epoch reset", hdr("X-RateLimit-Reset", epochIn(0)+".5"), quotaheader.Options{}, nothing().reset(500 * time.Millisecond)},

		// X-Rate-Limit-* (Twitter/X).
		{"x-rate-limit", hdr("X-Rate-Limit-Limit", "900", "X-Rate-Limit-Remaining", "899", "X-Rate-Limit-Reset", epochIn(90*time.Second)), quotaheader.Options{},
			counts(900, 899).reset(90 * time.Second)},

		// RateLimit-* (IETF drafts up to -06): reset in delta seconds.
		{"ratelimit separate fields", hdr("RateLimit-Limit", "100", "RateLimit-Remaining", "50", "RateLimit-Reset", "30"), quotaheader.Options{},
			counts(100, 50).reset(30 * time.Second)},
		{"ratelimit limit list", hdr("RateLimit-Limit", "100, 100;w=60", "RateLimit-Remaining", "50", "RateLimit-Reset", "30"), quotaheader.Options{},
			counts(100, 50).reset(30 * time.Second).window(time.Minute)},
		{"ratelimit limit list picks the matching window", hdr("RateLimit-Limit", "10, 50;w=60, 10;w=1"), quotaheader.Options{},
			counts(10, -1).window(time.Second)},
		{"ratelimit limit list, no matching window", hdr("RateLimit-Limit", "10, 50;w=60"), quotaheader.Options{},
			counts(10, -1)},
		{"ratelimit no matching policy window", hdr("RateLimit-Limit", "100", "RateLimit-Policy", "10;w=1"), quotaheader.Options{},
			counts(100, -1)},
		{"ratelimit window from policy", hdr("RateLimit-Limit", "100", "RateLimit-Remaining", "1", "RateLimit-Policy", "10;w=1, 100;w=60"), quotaheader.Options{},
			counts(100, 1).window(time.Minute)},
		{"ratelimit window beyond duration ignored", hdr("RateLimit-Limit", "100;w=99999999999999999999"), quotaheader.Options{}, counts(100, -1)},
		{"ratelimit remaining list", hdr("RateLimit-Remaining", "junk, 7"), quotaheader.Options{}, counts(-1, 7)},

		// Resets by shape.
		{"reset delta seconds", hdr("X-RateLimit-Reset", "30"), quotaheader.Options{}, nothing().reset(30 * time.Second)},
		{"reset zero", hdr("X-RateLimit-Reset", "0"), quotaheader.Options{}, nothing()},
		{"reset largest delta", hdr("X-RateLimit-Reset", "999999999"), quotaheader.Options{}, nothing().reset(maxP).capped()},
		{"reset epoch seconds", hdr("X-RateLimit-Reset", epochIn(45*time.Second)), quotaheader.Options{}, nothing().reset(45 * time.Second)},
		{"reset epoch milliseconds", hdr("X-RateLimit-Reset", epochMsIn(4500*time.Millisecond)), quotaheader.Options{}, nothing().reset(4500 * time.Millisecond)},
		{"reset epoch milliseconds in the past", hdr("X-RateLimit-Reset", epochMsIn(past)), quotaheader.Options{}, nothing()},
		{"reset RFC 3339", hdr("X-RateLimit-Reset", "2025-06-01T12:02:00Z"), quotaheader.Options{}, nothing().reset(2 * time.Minute)},
		{"reset RFC 3339 with offset", hdr("X-RateLimit-Reset", "2025-06-01T14:02:00+02:00"), quotaheader.Options{}, nothing().reset(2 * time.Minute)},
		{"reset HTTP-date", hdr("X-RateLimit-Reset", httpDateIn(time.Minute)), quotaheader.Options{}, nothing().reset(time.Minute)},
		{"reset go duration", hdr("X-RateLimit-Reset", "6m0s"), quotaheader.Options{}, nothing().reset(6 * time.Minute)},
		{"reset go duration rounds up", hdr("X-RateLimit-Reset", "1500ns"), quotaheader.Options{}, nothing().reset(2 * time.Microsecond)},
		{"reset negative go duration", hdr("X-RateLimit-Reset", "-5s"), quotaheader.Options{}, nothing()},
		{"reset overflowing go duration", hdr("X-RateLimit-Reset", "9999999999h"), quotaheader.Options{}, nothing()},
		{"reset beyond int64", hdr("X-RateLimit-Reset", "100000000000000000000000000000"), quotaheader.Options{}, nothing().reset(maxP).capped()},
		{"reset exponent", hdr("X-RateLimit-Reset", "1e30"), quotaheader.Options{}, nothing()},
		{"reset negative", hdr("X-RateLimit-Reset", "-30"), quotaheader.Options{}, nothing()},

		// Resets by format.
		{"format epoch seconds", hdr("X-RateLimit-Reset", epochIn(time.Minute)), quotaheader.Options{ResetFormat: quotaheader.ResetEpochSeconds}, nothing().reset(time.Minute)},
		{"format epoch seconds on a small number", hdr("X-RateLimit-Reset", "30"), quotaheader.Options{ResetFormat: quotaheader.ResetEpochSeconds}, nothing()},
		{"format epoch seconds beyond int64", hdr("X-RateLimit-Reset", "99999999999999999999999"), quotaheader.Options{ResetFormat: quotaheader.ResetEpochSeconds}, nothing().reset(maxP).capped()},
		{"format epoch millis", hdr("X-RateLimit-Reset", epochMsIn(1500*time.Millisecond)), quotaheader.Options{ResetFormat: quotaheader.ResetEpochMillis}, nothing().reset(1500 * time.Millisecond)},
		{"format delta seconds on an epoch-sized number", hdr("X-RateLimit-Reset", epochIn(0)), quotaheader.Options{ResetFormat: quotaheader.ResetDeltaSeconds}, nothing().reset(maxP).capped()},
		{"format delta seconds", hdr("RateLimit-Reset", "2.5"), quotaheader.Options{ResetFormat: quotaheader.ResetDeltaSeconds}, nothing().reset(2500 * time.Millisecond)},
		{"format delta millis", hdr("X-RateLimit-Reset", "1500"), quotaheader.Options{ResetFormat: quotaheader.ResetDeltaMillis}, nothing().reset(1500 * time.Millisecond)},
		{"format RFC 3339 ignores numbers", hdr("X-RateLimit-Reset", "30"), quotaheader.Options{ResetFormat: quotaheader.ResetRFC3339}, nothing()},
		{"format RFC 3339", hdr("X-RateLimit-Reset", "2025-06-01T12:00:30Z"), quotaheader.Options{ResetFormat: quotaheader.ResetRFC3339}, nothing().reset(30 * time.Second)},
		{"format still reads durations", hdr("X-RateLimit-Reset", "12ms"), quotaheader.Options{ResetFormat: quotaheader.ResetEpochSeconds}, nothing().reset(12 * time.Millisecond)},

		// IETF structured fields, -08 and later.
		{"ietf", hdr("RateLimit-Policy", `"default";q=100;w=60`, "RateLimit", `"default";r=50;t=30`), quotaheader.Options{},
			counts(100, 50).reset(30 * time.Second).window(time.Minute).res("default")},
		{"ietf token names", hdr("RateLimit-Policy", `default;q=100;w=60`, "RateLimit", `default;r=50;t=30`), quotaheader.Options{},
			counts(100, 50).reset(30 * time.Second).window(time.Minute).res("default")},
		{"ietf partition key and unit ignored", hdr("RateLimit-Policy", `"p";q=10;qu="requests";w=1;pk=:Zm9v:`, "RateLimit", `"p";r=3;t=1;pk=:Zm9v:`), quotaheader.Options{},
			counts(10, 3).reset(time.Second).window(time.Second).res("p")},
		{"ietf lowest fraction remaining wins", hdr("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=90;t=30, "daily";r=10;t=300`), quotaheader.Options{},
			counts(1000, 10).reset(5 * time.Minute).window(24 * time.Hour).res("daily")},
		{"ietf fraction over absolute count", hdr("RateLimit-Policy", `"burst";q=10;w=1, "daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=9;t=1, "daily";r=5;t=300`), quotaheader.Options{},
			counts(1000, 5).reset(5 * time.Minute).window(24 * time.Hour).res("daily")},
		{"ietf exhausted policy wins", hdr("RateLimit-Policy", `"burst";q=100;w=60, "daily";q=1000;w=86400`,
			"RateLimit", `"daily";r=1;t=3000, "burst";r=0;t=5`), quotaheader.Options{},
			counts(100, 0).reset(5 * time.Second).window(time.Minute).res("burst")},
		{"ietf latest reset among exhausted", hdr("RateLimit", `"a";r=0;t=5, "b";r=0;t=50, "c";r=0;t=7`), quotaheader.Options{},
			counts(-1, 0).reset(50 * time.Second).res("b")},
		{"ietf capped reset", hdr("RateLimit", `"daily";r=0;t=86400`), quotaheader.Options{}, counts(-1, 0).reset(maxP).capped().res("daily")},
		{"ietf fields on several lines", hdr("RateLimit-Policy", `"a";q=10;w=1`, "RateLimit-Policy", `"b";q=10;w=2`,
			"RateLimit", `"a";r=5;t=1`, "RateLimit", `"b";r=2;t=2`), quotaheader.Options{},
			counts(10, 2).reset(2 * time.Second).window(2 * time.Second).res("b")},
		{"ietf no matching policy", hdr("RateLimit-Policy", `"other";q=10;w=1`, "RateLimit", `"default";r=5;t=1`), quotaheader.Options{},
			counts(-1, 5).reset(time.Second).res("default")},
		{"ietf policy only", hdr("RateLimit-Policy", `"default";q=100;w=60`), quotaheader.Options{}, counts(100, -1).window(time.Minute).res("default")},
		{"ietf last parameter wins", hdr("RateLimit", `"a";r=1;r=2`), quotaheader.Options{}, counts(-1, 2).res("a")},
		{"ietf escaped name", hdr("RateLimit", `"a\"b";r=1`), quotaheader.Options{}, counts(-1, 1).res(`a"b`)},
		{"ietf unterminated string", hdr("RateLimit", `"default;r=50;t=30`), quotaheader.Options{}, nothing()},
		{"ietf bad escape", hdr("RateLimit", `"a\x";r=1`), quotaheader.Options{}, nothing()},
		{"ietf bad values", hdr("RateLimit", `"default";r=abc;t=-1`), quotaheader.Options{}, nothing().res("default")},
		{"ietf bad member kept apart", hdr("RateLimit", `(inner list);r=1, "ok";r=4;t=2`), quotaheader.Options{},
			counts(-1, 4).reset(2 * time.Second).res("ok")},
		{"ietf dictionary-shaped policy ignored", hdr("RateLimit-Policy", `q=100;w=60`), quotaheader.Options{}, nothing()},
		{"ietf bad parameter key", hdr("RateLimit", `"a";=5, "b";r=6`), quotaheader.Options{}, counts(-1, 6).res("b")},
		{"ietf empty members", hdr("RateLimit", `,,;;,`), quotaheader.Options{}, nothing()},
		{"ietf huge t", hdr("RateLimit", `"a";r=0;t=99999999999999999999999`), quotaheader.Options{}, counts(-1, 0).reset(maxP).capped().res("a")},

		// IETF -07 dictionary.
		{"ietf -07", hdr("RateLimit", "limit=100, remaining=50, reset=30", "RateLimit-Policy", "100;w=60"), quotaheader.Options{},
			counts(100, 50).reset(30 * time.Second).window(time.Minute)},
		{"ietf -07 window of the matching policy", hdr("RateLimit", "limit=100, remaining=50, reset=30", "RateLimit-Policy", "10;w=1, 100;w=60"),
			quotaheader.Options{}, counts(100, 50).reset(30 * time.Second).window(time.Minute)},
		{"ietf -07 no matching policy", hdr("RateLimit", "limit=100, remaining=5", "RateLimit-Policy", "10;w=1"), quotaheader.Options{}, counts(100, 5)},
		{"ietf -07 no limit, first policy", hdr("RateLimit", "remaining=5", "RateLimit-Policy", "10;w=1, 100;w=60"), quotaheader.Options{}, counts(-1, 5).window(time.Second)},
		{"ietf -07 no policy", hdr("RateLimit", "limit=100, remaining=0, reset=3"), quotaheader.Options{}, counts(100, 0).reset(3 * time.Second)},
		{"ietf -07 policy only", hdr("RateLimit-Policy", "100;w=60"), quotaheader.Options{}, counts(100, -1).window(time.Minute)},
		{"ietf -07 garbage values", hdr("RateLimit", "limit=x, remaining=-1, reset=?1, Limit=5"), quotaheader.Options{}, nothing()},

		// OpenAI.
		{"openai requests more restrictive", hdr("X-RateLimit-Limit-Requests", "60", "X-RateLimit-Remaining-Requests", "59", "X-RateLimit-Reset-Requests", "1s",
			"X-RateLimit-Limit-Tokens", "150000", "X-RateLimit-Remaining-Tokens", "149984", "X-RateLimit-Reset-Tokens", "6m0s"), quotaheader.Options{},
			counts(60, 59).reset(time.Second).res("requests")},
		{"openai tokens exhausted", hdr("X-RateLimit-Limit-Requests", "60", "X-RateLimit-Remaining-Requests", "59", "X-RateLimit-Reset-Requests", "1s",
			"X-RateLimit-Limit-Tokens", "150000", "X-RateLimit-Remaining-Tokens", "0", "X-RateLimit-Reset-Tokens", "12ms"), quotaheader.Options{},
			counts(150000, 0).reset(12 * time.Millisecond).res("tokens")},
		{"openai long reset", hdr("X-RateLimit-Remaining-Requests", "0", "X-RateLimit-Reset-Requests", "1h2m"), quotaheader.Options{},
			counts(-1, 0).reset(maxP).capped().res("requests")},
		{"openai garbage reset", hdr("X-RateLimit-Remaining-Requests", "3", "X-RateLimit-Reset-Requests", "soon"), quotaheader.Options{},
			counts(-1, 3).res("requests")},

		// Anthropic: RFC 3339 resets.
		{"anthropic", hdr("Anthropic-RateLimit-Requests-Limit", "50", "Anthropic-RateLimit-Requests-Remaining", "0",
			"Anthropic-RateLimit-Requests-Reset", "2025-06-01T12:00:20Z", "Anthropic-RateLimit-Tokens-Limit", "40000",
			"Anthropic-RateLimit-Tokens-Remaining", "39000", "Anthropic-RateLimit-Tokens-Reset", "2025-06-01T12:00:01Z"), quotaheader.Options{},
			counts(50, 0).reset(20 * time.Second).res("requests")},

		// Several families at once.
		{"most restrictive family", hdr("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "90", "RateLimit-Limit", "100", "RateLimit-Remaining", "10", "RateLimit-Reset", "5"),
			quotaheader.Options{}, counts(100, 10).reset(5 * time.Second)},
		{"equal families: the first listed", hdr("X-RateLimit-Limit", "100", "X-RateLimit-Remaining", "10", "X-RateLimit-Resource", "core",
			"RateLimit-Limit", "100", "RateLimit-Remaining", "10"), quotaheader.Options{}, counts(100, 10)},
		{"a family with remaining beats one without", hdr("RateLimit", `"p";t=5`, "X-RateLimit-Remaining", "3"), quotaheader.Options{},
			counts(-1, 3)},
		{"policies alone only when nothing else speaks", hdr("RateLimit-Policy", `"p";q=5;w=1`, "X-RateLimit-Limit", "100"), quotaheader.Options{},
			counts(100, -1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.h.Clone()
			f := quotaheader.Parse(tt.h, now, tt.o)
			assert.Equal(t, tt.want, viewOf(f))
			assert.Equal(t, before, tt.h, "headers modified")
		})
	}
}

func TestFeedbackPauseFor(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		o    quotaheader.Options
		at   time.Duration // when PauseFor is asked, after now
		want time.Duration
	}{
		{"nothing said", hdr(), quotaheader.Options{}, 0, 0},
		{"retry-after", hdr("Retry-After", "30"), quotaheader.Options{}, 0, 30 * time.Second},
		{"retry-after is not shortened by a later now", hdr("Retry-After", "30"), quotaheader.Options{}, 10 * time.Second, 30 * time.Second},
		{"retry-after in the past", hdr("Retry-After", httpDateIn(-time.Minute)), quotaheader.Options{}, 0, 0},
		{"retry-after before the reset", hdr("Retry-After", "3", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "60"), quotaheader.Options{}, 0, 3 * time.Second},
		{"retry-after capped", hdr("Retry-After", "3600"), quotaheader.Options{MaxPause: time.Minute}, 0, time.Minute},
		{"exhausted until reset", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(45*time.Second)), quotaheader.Options{}, 0, 45 * time.Second},
		{"exhausted, asked later", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(45*time.Second)), quotaheader.Options{}, 15 * time.Second, 30 * time.Second},
		{"exhausted, asked after the reset", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(45*time.Second)), quotaheader.Options{}, time.Minute, 0},
		{"exhausted, asked earlier, still capped", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", epochIn(time.Hour)), quotaheader.Options{MaxPause: time.Minute}, -time.Minute, time.Minute},
		{"exhausted, rounded up to the microsecond", hdr("X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1"), quotaheader.Options{}, time.Nanosecond, time.Second},
		{"exhausted without reset", hdr("X-RateLimit-Remaining", "0"), quotaheader.Options{}, 0, 0},
		{"quota left", hdr("X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "60"), quotaheader.Options{}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := quotaheader.Parse(tt.h, now, tt.o)
			assert.Equal(t, tt.want, f.PauseFor(now.Add(tt.at)))
		})
	}
}

// TestParseEarlyClock reads epoch resets against a clock set before
// 2001, the 1e9 bound of ResetAuto: testing/synctest bubbles start at
// 2000-01-01.
func TestParseEarlyClock(t *testing.T) {
	early := time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		h     http.Header
		now   time.Time
		reset time.Duration // want Reset - now; 0 for the zero Reset
	}{
		{"epoch seconds", hdr("X-RateLimit-Reset", strconv.FormatInt(early.Add(30*time.Second).Unix(), 10)), early, 30 * time.Second},
		{"epoch milliseconds", hdr("X-RateLimit-Reset", strconv.FormatInt(early.Add(1500*time.Millisecond).UnixMilli(), 10)), early, 1500 * time.Millisecond},
		{"against Date", hdr("Date", early.Format(http.TimeFormat), "X-RateLimit-Reset", strconv.FormatInt(early.Add(20*time.Second).Unix(), 10)), now, 20 * time.Second},
		{"delta seconds", hdr("X-RateLimit-Reset", "30"), early, 30 * time.Second},
		{"1970: fixed bounds", hdr("X-RateLimit-Reset", "30"), time.Unix(40, 0), 30 * time.Second},
		{"before 1970: fixed bounds", hdr("X-RateLimit-Reset", "30"), time.Time{}, 30 * time.Second},
		{"after 2001: fixed bounds", hdr("X-RateLimit-Reset", "999999999"), now, quotaheader.DefaultMaxPause},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := quotaheader.Parse(tt.h, tt.now, quotaheader.Options{})
			var got time.Duration
			if !f.Reset.IsZero() {
				got = f.Reset.Sub(tt.now)
			}
			assert.Equal(t, tt.reset, got)
		})
	}
}

func TestFeedbackZeroValuePauseFor(t *testing.T) {
	// A Feedback built by hand, not by Parse, caps at DefaultMaxPause.
	f := quotaheader.Feedback{Remaining: 0, Reset: now.Add(time.Hour), Limit: -1, Used: -1}
	assert.Equal(t, quotaheader.DefaultMaxPause, f.PauseFor(now))
	assert.Equal(t, time.Duration(0), quotaheader.Feedback{}.PauseFor(now))
}
