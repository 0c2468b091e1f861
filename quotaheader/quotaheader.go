// Package quotaheader reads what a vendor's answer says about its rate
// limits: Retry-After, the X-RateLimit-* family, the IETF RateLimit
// fields and the OpenAI and Anthropic headers, into a [Feedback]. It needs
// no Transport: a retry loop, a queue consumer or a gRPC adapter that has
// HTTP-like headers can use [Parse] directly. It imports nothing of
// throttle's; the throttle package uses it to learn pauses.
package quotaheader

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultMaxPause caps a pause learned from a response when no MaxPause is
// set: 10 minutes.
const DefaultMaxPause = 10 * time.Minute

// Feedback is what one response says about the vendor's rate limits,
// normalized from whichever header family the vendor uses. Its zero value
// is not "said nothing" (counts are then 0, not -1); use [Parse].
//
// # Headers read
//
//   - Retry-After (RFC 9110): delay-seconds, also fractional ("0.5"), or an
//     HTTP-date in any form [http.ParseTime] accepts (and RFC 3339). A date
//     is read against the response's Date header when it has one, so the
//     vendor's clock skew cancels out. Retry-After-Ms (milliseconds, as
//     sent by Azure OpenAI) is read too; when both are valid the longer
//     wins.
//   - X-RateLimit-Limit, -Remaining, -Reset, -Used, -Resource (GitHub,
//     reset in epoch seconds) and X-RateLimit-Reset-After (Discord, delta
//     seconds).
//   - X-Rate-Limit-Limit, -Remaining, -Reset (Twitter/X, epoch seconds).
//   - RateLimit-Limit, -Remaining, -Reset (IETF drafts up to -06, reset in
//     delta seconds), where the limit may be a list such as "100, 100;w=60",
//     with RateLimit-Policy: 100;w=60 giving the window.
//   - The structured RateLimit and RateLimit-Policy fields of the IETF
//     draft: -08 and later (RateLimit-Policy: "default";q=100;w=60 and
//     RateLimit: "default";r=50;t=30, matched by policy name), and the -07
//     dictionary (RateLimit: limit=100, remaining=50, reset=30 with
//     RateLimit-Policy: 100;w=60).
//   - OpenAI: x-ratelimit-limit-requests, x-ratelimit-remaining-requests,
//     x-ratelimit-reset-requests (a Go duration such as "6m0s" or "12ms"),
//     and the -tokens variants.
//   - Anthropic: anthropic-ratelimit-requests-limit, -remaining, -reset
//     (RFC 3339), and the tokens, input-tokens and output-tokens variants.
//
// # Several quotas in one response
//
// A response may describe several quotas: several IETF policies, OpenAI's
// requests and tokens, or several header families at once. Feedback
// reports one of them, the most restrictive: a quota with nothing
// remaining beats any other (among those, the latest reset); otherwise the
// lowest fraction Remaining/Limit when both limits are known, else the
// lowest Remaining; a quota that gives no Remaining comes last, and ties go
// to the quota listed first (IETF structured fields, then RateLimit-*,
// X-RateLimit-*, X-Rate-Limit-*, OpenAI, Anthropic). A RateLimit-Policy
// entry that no other header speaks of is reported only when nothing else
// is, with just its Limit and Window. Resource names the
// quota reported: the IETF policy name, GitHub's resource, or "requests",
// "tokens", "input-tokens", "output-tokens" for OpenAI and Anthropic.
//
// # Garbage and clamping
//
// Parsing never fails. A header whose values together are longer than
// [MaxHeaderBytes] is ignored, as if absent, unread. A value that does not parse, or is negative, is
// ignored, as if absent; in a list ("120, 120") or in repeated headers the
// first valid value counts. A count that does not fit an int64 is ignored.
// A Retry-After or a reset further away than MaxPause (including numbers
// far too large for a [time.Duration]) is capped at MaxPause, and Capped is
// set: with the default MaxPause, a GitHub response whose hourly window
// resets in 40 minutes reports a Reset 10 minutes from now, and Capped. A
// reset at or before now is reported as the zero Reset: that window has
// already ended.
//
// # Clocks
//
// Every instant in a response (an HTTP-date or RFC 3339 Retry-After or
// reset, an epoch reset) is on the vendor's clock. It is read against the
// response's Date header when there is a valid one, else against now, and
// the delay found is added to now; so a vendor clock ahead or behind ours
// does not matter. Date has whole seconds, so this errs late by less than
// a second, never early. Delays are rounded up to the microsecond.
type Feedback struct {
	// Limit is the quota's size, in requests (or the vendor's unit, see
	// Resource); -1 when the response did not say.
	Limit int64

	// Remaining is how much of the quota is left; -1 when not said.
	Remaining int64

	// Used is how much of the quota is used (GitHub's X-RateLimit-Used);
	// -1 when not said.
	Used int64

	// Reset is when the current quota resets, on the caller's clock (the
	// now given to Parse, plus the delay the response gives), at
	// most now+MaxPause. It is zero when the response did not say, or when
	// the reset is not after now.
	Reset time.Time

	// RetryAfter is how long the response asks to wait, rounded up to the
	// microsecond, in [0, MaxPause]; see HasRetryAfter, since a
	// Retry-After date in the past gives 0.
	RetryAfter time.Duration

	// HasRetryAfter reports whether the response had a valid Retry-After
	// (or Retry-After-Ms).
	HasRetryAfter bool

	// Resource names the quota reported: X-RateLimit-Resource (GitHub:
	// "core", "search", "graphql"...), the IETF policy name, or the unit
	// for OpenAI and Anthropic ("requests", "tokens"...). Empty when not
	// said.
	Resource string

	// Window is the quota's window when the response says it (the IETF
	// w parameter, RateLimit-Policy); else 0. It is not capped.
	Window time.Duration

	// Capped reports that RetryAfter or Reset was further away than
	// MaxPause and was capped to it.
	Capped bool

	// ResetResolution is how finely the vendor wrote Reset: a second for
	// whole seconds ("1700000000", "30", an HTTP-date), a millisecond for
	// epoch milliseconds or three decimals, and so on; zero when Reset is.
	// The vendor's window ends up to this much either side of what it
	// wrote, depending on how it rounds.
	ResetResolution time.Duration

	// ResetInstant is the reset as the instant the vendor wrote (an epoch
	// number, an HTTP-date, RFC 3339), on the vendor's clock, unrounded
	// by Date; zero when the vendor wrote a delay ("30", "6m0s", the IETF
	// t), when Reset is zero, or when it was capped. Two responses' resets
	// differ by exactly the vendor's windows between them, whatever the
	// clocks: this is what learning reads a window's phase from.
	ResetInstant time.Time

	// Date is the response's Date header (whole seconds, on the vendor's
	// clock); zero when it had no valid one.
	Date time.Time

	// maxPause is the cap Parse applied, for PauseFor.
	maxPause time.Duration
}

// A ResetFormat says how to read a bare number in a *-Reset header
// (X-RateLimit-Reset, X-Rate-Limit-Reset, RateLimit-Reset and the OpenAI
// and Anthropic resets), which vendors write as epoch seconds, epoch
// milliseconds or seconds from now. Text is never ambiguous and is read by
// its shape whatever the format: an HTTP-date or RFC 3339 timestamp is an
// instant, a Go duration ("6m0s", "12ms") a delay. Headers whose unit is
// fixed by their definition (the IETF RateLimit field's t and reset,
// X-RateLimit-Reset-After, Retry-After) ignore it.
type ResetFormat int

const (
	// ResetAuto reads a number by its size: at least 1e12 is epoch
	// milliseconds, at least 1e9 is epoch seconds (2001 onwards), anything
	// smaller is seconds from now. When the clock the reset is read
	// against (the response's Date, else now) is earlier than 2001, as in a
	// testing/synctest bubble, which starts in 2000, the bounds are half
	// its epoch seconds, but at least 1e8 (and a thousand times that), so
	// a reset near that clock still reads as an epoch.
	ResetAuto ResetFormat = iota

	// ResetEpochSeconds reads a number as seconds since the Unix epoch, as
	// GitHub and Twitter do.
	ResetEpochSeconds

	// ResetEpochMillis reads a number as milliseconds since the Unix epoch.
	ResetEpochMillis

	// ResetDeltaSeconds reads a number as seconds from now, as the IETF
	// drafts' RateLimit-Reset does.
	ResetDeltaSeconds

	// ResetDeltaMillis reads a number as milliseconds from now.
	ResetDeltaMillis

	// ResetRFC3339 says the vendor writes timestamps (RFC 3339, or an
	// HTTP-date); a bare number is ignored.
	ResetRFC3339
)

// Options tunes [Parse].
type Options struct {
	// ResetFormat says how to read a bare number in a *-Reset header,
	// usually from a vendor profile. The zero value is ResetAuto.
	ResetFormat ResetFormat

	// MaxPause caps RetryAfter and Reset-now. Zero or negative means
	// [DefaultMaxPause].
	MaxPause time.Duration
}

// Parse reads h, the headers of a response received at now (see
// [Feedback] for the headers read). It never fails: garbage, negative or
// absurd values are ignored, or capped at o.MaxPause with Capped set. It
// does not modify h, and is safe for concurrent use.
func Parse(h http.Header, now time.Time, o Options) Feedback {
	return parse(h, now, o, present(h))
}

// parse is Parse reading only the families has of h's headers.
func parse(h http.Header, now time.Time, o Options, has families) Feedback {
	p := parser{h: h, format: o.ResetFormat, maxPause: o.MaxPause, has: has}
	if p.maxPause <= 0 {
		p.maxPause = DefaultMaxPause
	}
	p.ref = now
	var dated bool
	if d, ok := date(p.values("Date")); ok {
		p.ref, dated = d, true
	}

	f := Feedback{Limit: -1, Remaining: -1, Used: -1, maxPause: p.maxPause}
	if dated {
		f.Date = p.ref
	}
	f.RetryAfter, f.HasRetryAfter, f.Capped = p.retryAfter()

	var best quota
	found := false
	for _, q := range p.quotas() {
		if !found || q.moreRestrictive(best) {
			best, found = q, true
		}
	}
	if found {
		f.Limit, f.Remaining, f.Used = best.limit, best.remaining, best.used
		f.Resource, f.Window = best.resource, best.window
		if best.reset.ok {
			if best.reset.capped {
				f.Capped = true
			}
			if best.reset.delay > 0 {
				f.Reset = now.Add(best.reset.delay)
				f.ResetResolution = best.reset.res
				if !best.reset.capped {
					f.ResetInstant = best.reset.at
				}
			}
		}
	}
	return f
}

// PauseFor returns how long a caller should hold off after this response,
// from now: RetryAfter if the response gave one (even 0, as GitHub
// documents: Retry-After comes before the reset), else the time until
// Reset when Remaining is 0, else 0. The result is in [0, MaxPause], the
// MaxPause given to Parse ([DefaultMaxPause] for a Feedback built
// by hand); Capped reports whether Parse had to cap.
func (f Feedback) PauseFor(now time.Time) time.Duration {
	maxPause := f.maxPause
	if maxPause <= 0 {
		maxPause = DefaultMaxPause
	}
	var d time.Duration
	switch {
	case f.HasRetryAfter:
		d = f.RetryAfter
	case f.Remaining == 0 && !f.Reset.IsZero():
		d = f.Reset.Sub(now) // saturates
		if d >= maxPause {
			return maxPause
		}
		if r := d % time.Microsecond; r > 0 {
			d += time.Microsecond - r // never early
		}
	}
	return max(0, min(d, maxPause))
}

// MaxHeaderBytes caps what [Parse] reads of one header: a header whose
// values together are longer is ignored, as if absent. Rate-limit headers
// are tens of bytes (a few hundred for a list of IETF policies), so 4 KiB
// loses nothing real, and a response that sends megabytes (a broken proxy,
// a hostile server) costs no more to read than this.
const MaxHeaderBytes = 4 << 10

// families is a set of the header families Parse reads, by the prefix
// of their names: a family absent from a response is not looked up,
// header by header.
type families uint8

const (
	retryFamily     families = 1 << iota // Retry-After, Retry-After-Ms
	ietfFamily                           // RateLimit, RateLimit-*
	xFamily                              // X-RateLimit-* (GitHub, OpenAI, Discord)
	xDashFamily                          // X-Rate-Limit-*
	anthropicFamily                      // Anthropic-RateLimit-*
)

// present returns the families h holds a header of, in one pass over
// its names. Parse looks headers up by their canonical names (values), so
// only those count here: a name is matched by its canonical prefix.
func present(h http.Header) families {
	var fs families
	for k := range h {
		if len(k) < 9 {
			continue // shorter than every family's names
		}
		switch k[0] {
		case 'R':
			switch {
			case strings.HasPrefix(k, "Retry-After"):
				fs |= retryFamily
			case strings.HasPrefix(k, "Ratelimit"):
				fs |= ietfFamily
			}
		case 'X':
			switch {
			case strings.HasPrefix(k, "X-Ratelimit"):
				fs |= xFamily
			case strings.HasPrefix(k, "X-Rate-Limit"):
				fs |= xDashFamily
			}
		case 'A':
			if strings.HasPrefix(k, "Anthropic-Ratelimit") {
				fs |= anthropicFamily
			}
		}
	}
	return fs
}

// values returns the values of the header key (in canonical form), or
// nil when together they are longer than MaxHeaderBytes.
func (p *parser) values(key string) []string {
	vals := p.h[key]
	n := 0
	for _, v := range vals {
		if n += len(v); n > MaxHeaderBytes {
			return nil
		}
	}
	return vals
}

// parser holds what every header of one response is read against.
type parser struct {
	h        http.Header
	has      families  // the families of headers h holds
	ref      time.Time // the response's Date, else now: instants are read against it
	format   ResetFormat
	maxPause time.Duration
}

// delay is a delay read from a header: ok when the header said one,
// delay in [0, maxPause] in whole microseconds, capped when it was longer.
type delay struct {
	delay  time.Duration
	ok     bool
	capped bool
	res    time.Duration // how finely the value was written; 0: a microsecond or unknown
	at     time.Time     // the instant written, for an instant; else zero
}

// quota is one quota a response describes.
type quota struct {
	limit, remaining, used int64
	reset                  delay
	window                 time.Duration
	resource               string
}

// said reports whether q holds anything.
func (q quota) said() bool {
	return q.limit >= 0 || q.remaining >= 0 || q.used >= 0 || q.reset.ok ||
		q.window > 0 || q.resource != ""
}

// moreRestrictive reports whether q ranks strictly before r (see
// Feedback, "Several quotas in one response").
func (q quota) moreRestrictive(r quota) bool {
	qHas, rHas := q.remaining >= 0, r.remaining >= 0
	if qHas != rHas {
		return qHas
	}
	if !qHas {
		return false
	}
	qOut, rOut := q.remaining == 0, r.remaining == 0
	if qOut != rOut {
		return qOut
	}
	if qOut {
		return q.reset.ok && (!r.reset.ok || q.reset.delay > r.reset.delay)
	}
	if q.limit > 0 && r.limit > 0 {
		// q.remaining/q.limit < r.remaining/r.limit; float64 is precise
		// enough to rank, and cannot overflow.
		a := float64(q.remaining) * float64(r.limit)
		b := float64(r.remaining) * float64(q.limit)
		if a != b {
			return a < b
		}
	}
	return q.remaining < r.remaining
}

// retryAfter reads Retry-After and Retry-After-Ms.
func (p *parser) retryAfter() (time.Duration, bool, bool) {
	var got delay
	if p.has&retryFamily == 0 {
		return 0, false, false
	}
	first(p.values("Retry-After"), func(s string) bool {
		if n, ok := parseNumber(s); ok {
			got = p.clamp(n.micros(1_000_000))
			return true
		}
		if t, ok := parseTime(s); ok {
			got = p.until(t)
			return true
		}
		return false
	})
	first(p.values("Retry-After-Ms"), func(s string) bool {
		n, ok := parseNumber(s)
		if !ok {
			return false
		}
		if d := p.clamp(n.micros(1000)); !got.ok || d.delay > got.delay {
			got = d
		}
		return true
	})
	return got.delay, got.ok, got.capped
}

// quotas returns every quota the response describes, in the order of
// precedence for ties.
func (p *parser) quotas() []quota {
	var qs []quota
	add := func(q quota) {
		if q.said() {
			qs = append(qs, q)
		}
	}
	var ietf, policiesOnly []quota
	if p.has&ietfFamily != 0 {
		ietf, policiesOnly = p.ietfStructured()
		for _, q := range ietf {
			add(q)
		}
		add(p.family("Ratelimit-Limit", "Ratelimit-Remaining", "Ratelimit-Reset", "", "", true))
	}
	if p.has&xFamily != 0 {
		gh := p.family("X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "X-Ratelimit-Used", "X-Ratelimit-Resource", false)
		if after := p.fixedDelay(p.values("X-Ratelimit-Reset-After"), 1_000_000); after.ok &&
			(!gh.reset.ok || after.delay > gh.reset.delay) {
			gh.reset = after
		}
		add(gh)
	}
	if p.has&xDashFamily != 0 {
		add(p.family("X-Rate-Limit-Limit", "X-Rate-Limit-Remaining", "X-Rate-Limit-Reset", "", "", false))
	}
	for _, u := range units {
		if u.openAI[0] == "" || p.has&xFamily == 0 {
			continue
		}
		q := p.family(u.openAI[0], u.openAI[1], u.openAI[2], "", "", false)
		if q.said() {
			q.resource = u.name
			add(q)
		}
	}
	for _, u := range units {
		if p.has&anthropicFamily == 0 {
			break
		}
		q := p.family(u.anthropic[0], u.anthropic[1], u.anthropic[2], "", "", false)
		if q.said() {
			q.resource = u.name
			add(q)
		}
	}
	if len(qs) == 0 {
		// Policies that no other header speaks of: report their size.
		for _, q := range policiesOnly {
			add(q)
		}
	}
	return qs
}

// units lists the per-unit header families of OpenAI and Anthropic, with
// names already in canonical form so that lookups do not allocate.
var units = [...]struct {
	name      string
	openAI    [3]string // limit, remaining, reset
	anthropic [3]string
}{
	{"requests",
		[3]string{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
		[3]string{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"}},
	{"tokens",
		[3]string{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
		[3]string{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"}},
	{"input-tokens", [3]string{},
		[3]string{"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"}},
	{"output-tokens", [3]string{},
		[3]string{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"}},
}

// family reads one family of separate headers. The limit may be a list
// whose members carry a w parameter ("100, 100;w=60"); with policyWindow,
// RateLimit-Policy items such as "100;w=60" give the window too.
func (p *parser) family(limitKey, remainingKey, resetKey, usedKey, resourceKey string, policyWindow bool) quota {
	q := quota{limit: -1, remaining: -1, used: -1}
	q.limit, q.window = countList(p.values(limitKey))
	q.remaining, _ = countList(p.values(remainingKey))
	if usedKey != "" {
		q.used, _ = countList(p.values(usedKey))
	}
	q.reset = p.reset(p.values(resetKey))
	if resourceKey != "" {
		first(p.values(resourceKey), func(s string) bool {
			if isToken(s) {
				q.resource = s
				return true
			}
			return false
		})
	}
	if policyWindow && q.window == 0 && q.limit >= 0 {
		q.window = p.policyWindow(q.limit)
	}
	return q
}

// policyWindow returns the window of the first RateLimit-Policy item of
// the form "limit;w=seconds" (drafts up to -07) whose number is limit, or
// of the first such item when limit is unknown (-1). A policy of another
// size is another quota, whose window says nothing of this one.
func (p *parser) policyWindow(limit int64) time.Duration {
	for _, m := range parseList(p.values("Ratelimit-Policy")) {
		n, ok := m.count()
		if !ok {
			continue
		}
		if w := m.window(); w > 0 && (n == limit || limit < 0) {
			return w
		}
	}
	return 0
}

// ietfStructured reads the structured RateLimit and RateLimit-Policy
// fields: the -08+ items "name";r=..;t=.. matched to policies
// "name";q=..;w=.., and the -07 dictionary limit=.., remaining=.., reset=..
// with integer policies "100;w=60". Policies that no RateLimit member
// speaks of are returned apart, as quotas with only a limit and a window.
func (p *parser) ietfStructured() (quotas, policiesOnly []quota) {
	rl := parseList(p.values("Ratelimit"))
	policies := parseList(p.values("Ratelimit-Policy"))
	if len(rl) == 0 && len(policies) == 0 {
		return nil, nil
	}
	type policy struct {
		name   string
		limit  int64
		window time.Duration
		used   bool
	}
	var named []policy
	for _, m := range policies {
		if m.key != "" || m.isNumber() {
			continue // a -07 policy is read with the dictionary below
		}
		pol := policy{name: m.bare, limit: -1, window: m.window()}
		if q, ok := m.param("q"); ok {
			if n, ok := parseCount(q); ok {
				pol.limit = n
			}
		}
		named = append(named, pol)
	}

	var qs []quota
	dict := quota{limit: -1, remaining: -1, used: -1}
	for _, m := range rl {
		if m.key != "" { // -07 dictionary member
			switch m.key {
			case "limit":
				if n, ok := parseCount(m.bare); ok {
					dict.limit = n
				}
			case "remaining":
				if n, ok := parseCount(m.bare); ok {
					dict.remaining = n
				}
			case "reset":
				if d := p.fixedDelay([]string{m.bare}, 1_000_000); d.ok {
					dict.reset = d
				}
			}
			continue
		}
		if m.isNumber() {
			continue
		}
		q := quota{limit: -1, remaining: -1, used: -1, resource: m.bare}
		if r, ok := m.param("r"); ok {
			if n, ok := parseCount(r); ok {
				q.remaining = n
			}
		}
		if t, ok := m.param("t"); ok {
			q.reset = p.fixedDelay([]string{t}, 1_000_000)
		}
		for i := range named {
			if named[i].name == m.bare {
				q.limit, q.window = named[i].limit, named[i].window
				named[i].used = true
				break
			}
		}
		qs = append(qs, q)
	}
	for _, pol := range named {
		if !pol.used {
			policiesOnly = append(policiesOnly, quota{limit: pol.limit, remaining: -1, used: -1, window: pol.window, resource: pol.name})
		}
	}
	if dict.said() {
		dict.window = p.policyWindow(dict.limit)
		qs = append(qs, dict)
	} else {
		// A -07 policy ("100;w=60") alone: the first one.
		for _, m := range policies {
			if n, ok := m.count(); ok {
				policiesOnly = append(policiesOnly, quota{limit: n, remaining: -1, used: -1, window: m.window()})
				break
			}
		}
	}
	return qs, policiesOnly
}

// reset reads a *-Reset header under the parser's ResetFormat.
func (p *parser) reset(vals []string) delay {
	var got delay
	first(vals, func(s string) bool {
		if n, ok := parseNumber(s); ok {
			var d delay
			switch p.format {
			case ResetEpochSeconds:
				d = p.epoch(n, 1_000_000)
			case ResetEpochMillis:
				d = p.epoch(n, 1000)
			case ResetDeltaSeconds:
				d = p.clamp(n.micros(1_000_000))
				d.res = n.resolution(1_000_000)
			case ResetDeltaMillis:
				d = p.clamp(n.micros(1000))
				d.res = n.resolution(1000)
			case ResetRFC3339:
				return false
			default:
				epochSeconds := int64(1e9)
				if ref := p.ref.Unix(); ref < 1e9 {
					epochSeconds = max(ref/2, 1e8) // a clock before 2001 (synctest)
				}
				switch {
				case n.huge || n.whole >= epochSeconds*1000:
					d = p.epoch(n, 1000)
				case n.whole >= epochSeconds:
					d = p.epoch(n, 1_000_000)
				default:
					d = p.clamp(n.micros(1_000_000))
					d.res = n.resolution(1_000_000)
				}
			}
			got = d
			return true
		}
		if us, ok := parseDuration(s); ok {
			got = p.clamp(us, false)
			got.res = durationResolution(s)
			return true
		}
		if t, ok := parseTime(s); ok {
			got = p.until(t)
			got.res, got.at = timeResolution(s), t
			return true
		}
		return false
	})
	return got
}

// epoch reads n as an instant in units of unit microseconds since the
// epoch.
func (p *parser) epoch(n number, unit int64) delay {
	us, huge := n.micros(unit)
	d := p.untilMicros(us, huge)
	d.res = n.resolution(unit)
	if !huge {
		d.at = time.UnixMicro(us)
	}
	return d
}

// fixedDelay reads a delay whose unit is fixed (unit microseconds per
// unit of the number).
func (p *parser) fixedDelay(vals []string, unit int64) delay {
	var got delay
	first(vals, func(s string) bool {
		n, ok := parseNumber(s)
		if ok {
			got = p.clamp(n.micros(unit))
			got.res = n.resolution(unit)
		}
		return ok
	})
	return got
}

// until returns the delay until t, an instant on the vendor's clock: it is
// measured from the response's Date, else from now.
func (p *parser) until(t time.Time) delay {
	d := t.Sub(p.ref) // saturates rather than overflows
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++ // never early
	}
	return p.clamp(us, false)
}

// untilMicros is until for an instant given in microseconds since the
// epoch; huge (as from [number.micros]) means too far away to represent.
// The reference's sub-microsecond part is dropped, which lengthens the
// delay: never early.
func (p *parser) untilMicros(us int64, huge bool) delay {
	if huge {
		return p.clamp(0, true)
	}
	ref := p.ref.UnixMicro()
	// us - ref, saturating: both fit an int64, the difference may not.
	d, overflow := us-ref, false
	if (ref < 0 && d < us) || (ref > 0 && d > us) {
		overflow = true
	}
	if overflow {
		if ref < 0 {
			return p.clamp(0, true)
		}
		return delay{ok: true}
	}
	return p.clamp(d, false)
}

// clamp turns a delay in microseconds into an delay in [0, maxPause];
// huge means larger than an int64 of microseconds.
func (p *parser) clamp(us int64, huge bool) delay {
	maxUs := int64(p.maxPause / time.Microsecond)
	switch {
	case huge || us > maxUs:
		return delay{delay: p.maxPause, ok: true, capped: true}
	case us <= 0:
		return delay{ok: true}
	}
	return delay{delay: time.Duration(us) * time.Microsecond, ok: true}
}

// first calls try with each candidate value in vals, in order, until try
// returns true: each whole value, then each comma-separated member, and
// each pair of neighbouring members joined again by their comma (an
// HTTP-date such as "Sun, 06 Nov 1994 08:49:37 GMT" contains one).
// Parameters (";w=60") are cut off. It reports whether try accepted one.
func first(vals []string, try func(string) bool) bool {
	for _, v := range vals {
		if try(bare(v)) {
			return true
		}
		parts := strings.Split(v, ",")
		if len(parts) == 1 {
			continue
		}
		for i, part := range parts {
			if try(bare(part)) {
				return true
			}
			if i+1 < len(parts) && try(bare(part+","+parts[i+1])) {
				return true
			}
		}
	}
	return false
}

// bare trims s and cuts off any parameters.
func bare(s string) string {
	s, _, _ = strings.Cut(s, ";")
	return strings.TrimSpace(s)
}

// date reads a Date header.
func date(vals []string) (time.Time, bool) {
	var t time.Time
	ok := first(vals, func(s string) bool {
		var ok bool
		t, ok = parseTime(s)
		return ok
	})
	return t, ok
}

// parseTime reads an HTTP-date in any form [http.ParseTime] accepts, or
// an RFC 3339 timestamp.
func parseTime(s string) (time.Time, bool) {
	if len(s) < 10 || len(s) > 64 {
		return time.Time{}, false
	}
	if t, err := http.ParseTime(s); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// parseDuration reads a non-negative Go duration such as "6m0s" or
// "12ms", rounded up to whole microseconds.
func parseDuration(s string) (int64, bool) {
	if s == "" || !(s[0] >= '0' && s[0] <= '9' || s[0] == '.') {
		return 0, false // no sign: negative delays are garbage
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, false
	}
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us, true
}

// number is a non-negative decimal number as written in a header: 1*DIGIT
// ["." 1*DIGIT]. whole is its integer part, frac the digits after the
// point; huge means whole does not fit in 18 digits.
type number struct {
	whole int64
	frac  string
	huge  bool
}

// parseNumber reads a non-negative decimal number. Signs, exponents,
// NaN, Inf and empty parts are garbage.
func parseNumber(s string) (number, bool) {
	whole, frac, hasPoint := strings.Cut(s, ".")
	if !digits(whole) || hasPoint && !digits(frac) {
		return number{}, false
	}
	whole = strings.TrimLeft(whole, "0")
	if len(whole) > 18 {
		return number{huge: true}, true
	}
	n, _ := strconv.ParseInt("0"+whole, 10, 64) // at most 18 digits: fits
	return number{whole: n, frac: frac}, true
}

// micros returns n*unit rounded up to a whole number, for unit a power of
// ten (1_000_000 for seconds, 1000 for milliseconds, 1 for microseconds);
// huge when the result does not fit an int64.
func (n number) micros(unit int64) (int64, bool) {
	if n.huge || n.whole > math.MaxInt64/unit {
		return 0, true
	}
	us := n.whole * unit
	var frac int64
	digits := n.frac
	for u := unit; u > 1; u /= 10 {
		d := int64(0)
		if digits != "" {
			d = int64(digits[0] - '0')
			digits = digits[1:]
		}
		frac = frac*10 + d
	}
	if strings.Trim(digits, "0") != "" {
		frac++ // digits beyond the unit's precision: round up, never early
	}
	if us > math.MaxInt64-frac {
		return 0, true
	}
	return us + frac, false
}

// resolution returns how finely n was written in units of unit
// microseconds: unit for a whole number, a tenth of it per decimal, at
// least a microsecond.
func (n number) resolution(unit int64) time.Duration {
	for range len(n.frac) {
		if unit <= 1 {
			break
		}
		unit /= 10
	}
	return time.Duration(max(unit, 1)) * time.Microsecond
}

// durationResolution returns how finely a Go duration such as "6m0s",
// "1.5s" or "12ms" was written: its last unit, divided by ten per
// decimal of the number before it.
func durationResolution(s string) time.Duration {
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	unit, err := time.ParseDuration("1" + s[i:])
	if err != nil || unit <= 0 {
		return time.Microsecond
	}
	j := i
	for j > 0 && (s[j-1] >= '0' && s[j-1] <= '9' || s[j-1] == '.') {
		j--
	}
	if _, frac, ok := strings.Cut(s[j:i], "."); ok {
		for range len(frac) {
			unit /= 10
		}
	}
	return max(unit, time.Microsecond)
}

// timeResolution returns how finely a timestamp was written: a second,
// or a tenth of it per decimal of an RFC 3339 fraction.
func timeResolution(s string) time.Duration {
	res := time.Second
	if i := strings.IndexByte(s, '.'); i >= 0 && strings.IndexByte(s, 'T') >= 0 {
		for j := i + 1; j < len(s) && s[j] >= '0' && s[j] <= '9' && res > time.Microsecond; j++ {
			res /= 10
		}
	}
	return res
}

// digits reports whether s is one or more ASCII digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseCount reads a non-negative integer that fits an int64.
func parseCount(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if !digits(s) {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// countList reads a count header that may be a list, such as
// "100, 100;w=60" (IETF drafts up to -03: the current limit, then the
// quota policies): the first member that is a count gives the count, and
// the w parameter of the first member with the same count gives the
// window.
func countList(vals []string) (int64, time.Duration) {
	n := int64(-1)
	var window time.Duration
	for _, m := range parseList(vals) {
		c, ok := m.count()
		if !ok {
			continue
		}
		if n < 0 {
			n = c
		}
		if w := m.window(); w > 0 && c == n && window == 0 {
			window = w
		}
	}
	return n, window
}

// member is one member of a structured-field list or dictionary (RFC
// 9651), read leniently: a member that does not parse is dropped, the rest
// of the field is kept.
type member struct {
	key      string // dictionary key; empty for a list item
	bare     string // the item: a token, a number, or an unquoted string
	isString bool
	params   []param
}

// param is one ";key=value" parameter; a bare key has value "?1".
type param struct{ key, value string }

// param returns the value of the last parameter named key (RFC 9651: the
// last one wins).
func (m member) param(key string) (string, bool) {
	for i := len(m.params) - 1; i >= 0; i-- {
		if m.params[i].key == key {
			return m.params[i].value, true
		}
	}
	return "", false
}

// isNumber reports whether the item is a bare number.
func (m member) isNumber() bool {
	_, ok := parseNumber(m.bare)
	return ok && !m.isString && m.key == ""
}

// count returns the item as a count.
func (m member) count() (int64, bool) {
	if m.isString || m.key != "" {
		return 0, false
	}
	return parseCount(m.bare)
}

// window returns the w parameter as a duration; 0 if absent, invalid, or
// too long for a time.Duration.
func (m member) window() time.Duration {
	w, ok := m.param("w")
	if !ok {
		return 0
	}
	n, ok := parseNumber(w)
	if !ok {
		return 0
	}
	us, huge := n.micros(1_000_000)
	if huge || us > int64(math.MaxInt64/time.Microsecond) {
		return 0
	}
	return time.Duration(us) * time.Microsecond
}

// parseList splits the field values vals (joined, as RFC 9110 allows)
// into members.
func parseList(vals []string) []member {
	var out []member
	for _, v := range vals {
		for _, raw := range split(v, ',') {
			if m, ok := parseMember(raw); ok {
				out = append(out, m)
			}
		}
	}
	return out
}

// parseMember reads one member: [key "="] item *(";" key ["=" value]).
func parseMember(raw string) (member, bool) {
	parts := split(raw, ';')
	var m member
	head := strings.TrimSpace(parts[0])
	if k, v, ok := cutEq(head); ok {
		if !isKey(k) {
			return member{}, false
		}
		m.key, head = k, v
	}
	if head == "" {
		return member{}, false
	}
	if head[0] == '"' {
		s, ok := unquote(head)
		if !ok {
			return member{}, false
		}
		m.bare, m.isString = s, true
	} else if isToken(head) {
		m.bare = head
	} else {
		return member{}, false
	}
	for _, raw := range parts[1:] {
		raw = strings.TrimSpace(raw)
		k, v, ok := cutEq(raw)
		if !ok {
			k, v = raw, "?1"
		}
		k = strings.ToLower(k)
		if !isKey(k) {
			return member{}, false
		}
		if strings.HasPrefix(v, `"`) {
			if v, ok = unquote(v); !ok {
				return member{}, false
			}
		} else if !isToken(v) {
			return member{}, false
		}
		m.params = append(m.params, param{key: k, value: v})
	}
	return m, true
}

// cutEq cuts s at its first "=" outside a quoted string, trimming both
// sides.
func cutEq(s string) (string, string, bool) {
	i := strings.IndexByte(s, '=')
	if i < 0 || strings.IndexByte(s[:i], '"') >= 0 {
		return s, "", false
	}
	return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:]), true
}

// split splits s at sep outside quoted strings.
func split(s string, sep byte) []string {
	var out []string
	start, quoted := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// unquote reads a whole sf-string: a quoted string with \" and \\
// escapes and printable ASCII only.
func unquote(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	var b strings.Builder
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
			if i >= len(s)-1 || s[i] != '"' && s[i] != '\\' {
				return "", false
			}
			b.WriteByte(s[i])
		case c == '"' || c < 0x20 || c > 0x7e:
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// isKey reports whether s is a structured-field key: lower-case letters,
// digits, "_", "-", ".", "*", starting with a letter or "*".
func isKey(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '*') {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || strings.IndexByte("_-.*", c) >= 0) {
			return false
		}
	}
	return true
}

// isToken reports whether s is a non-empty run of visible ASCII without
// delimiters: a token, a number, or a resource name. It is deliberately
// looser than RFC 9651's sf-token, since vendors are.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte(`",;=()<>@[]{}\`, c) >= 0 {
			return false
		}
	}
	return true
}
