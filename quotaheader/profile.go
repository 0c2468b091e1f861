package quotaheader

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"time"
)

// A Profile says how one vendor speaks about its rate limits, where that
// differs from the defaults: how it writes its *-Reset headers, which
// answers mean "slow down", and how long to pause after one that gives no
// time. A transport picks the profile by the request's host, first match
// in the order given to throttle.WithProfiles ([DefaultProfiles] unless
// set); a field set in a rule's throttle.Learning overrides the profile's.
type Profile struct {
	// Name identifies the profile in documentation and errors.
	Name string

	// Hosts are the host patterns the profile applies to, in the syntax
	// of throttle.Rule.Host: "api.github.com", "*.ghe.com".
	Hosts []string

	// ResetFormat says how the vendor writes a bare number in a *-Reset
	// header. Zero decides by the value's shape.
	ResetFormat ResetFormat

	// Limited classifies a response as "slow down". Nil means
	// [DefaultLimited].
	Limited func(resp *http.Response, fb Feedback) bool

	// DefaultPause is the first pause after a "slow down" answer with no
	// time in it. Zero means the transport's default (5 seconds).
	DefaultPause time.Duration
}

// GitHub is GitHub's REST and GraphQL API: X-RateLimit-Reset in
// epoch seconds; "slow down" is a 429, or a 403 that says no quota is left
// (x-ratelimit-remaining: 0), carries a Retry-After, or whose body speaks
// of a secondary rate limit; a plain permission 403 is not. GitHub asks
// clients to wait at least a minute after a secondary-limit answer without
// Retry-After.
var GitHub = Profile{
	Name:         "github",
	Hosts:        []string{"api.github.com", "uploads.github.com", "*.ghe.com"},
	ResetFormat:  ResetEpochSeconds,
	Limited:      GitHubLimited,
	DefaultPause: time.Minute,
}

// X is the X (Twitter) API: x-rate-limit-reset in epoch seconds.
var X = Profile{
	Name:        "x",
	Hosts:       []string{"api.twitter.com", "api.x.com"},
	ResetFormat: ResetEpochSeconds,
}

// Discord is Discord's API: X-RateLimit-Reset in epoch seconds
// (with a fraction; X-RateLimit-Reset-After gives the same as a delay).
var Discord = Profile{
	Name:        "discord",
	Hosts:       []string{"discord.com", "discordapp.com"},
	ResetFormat: ResetEpochSeconds,
}

// DefaultProfiles are the profiles a throttle.Transport uses unless
// throttle.WithProfiles says otherwise. Vendors not listed (Slack, OpenAI,
// Anthropic, the IETF RateLimit fields) need none: their headers are read
// by shape.
var DefaultProfiles = []Profile{GitHub, X, Discord}

// DefaultLimited reports a 429, or a 503 with a Retry-After, as "slow
// down".
func DefaultLimited(resp *http.Response, fb Feedback) bool {
	return resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && fb.HasRetryAfter
}

// GitHubLimited reports GitHub's "slow down" answers: a 429; a 403 with
// x-ratelimit-remaining 0 (the primary limit) or with a Retry-After; a 403
// whose body mentions a secondary rate limit; a GraphQL 200 with
// x-ratelimit-remaining 0 whose errors say RATE_LIMITED (GraphQL's
// primary limit). To read the body it peeks at most 64 KiB and puts back
// what it read, so the caller still reads the body whole; a 200 is peeked
// only when its headers say GraphQL has nothing left.
func GitHubLimited(resp *http.Response, fb Feedback) bool {
	switch resp.StatusCode {
	case http.StatusOK:
		return fb.Remaining == 0 && fb.Resource == "graphql" && bodyMentions(resp, "RATE_LIMITED")
	case http.StatusTooManyRequests:
		return true
	case http.StatusForbidden:
		if fb.Remaining == 0 || fb.HasRetryAfter {
			return true
		}
		return bodyMentions(resp, "secondary rate limit")
	}
	return false
}

// maxPeek bounds how much of a response body a Limited function reads.
const maxPeek = 64 << 10

// bodyMentions reports whether the first maxPeek bytes of resp's body
// contain s, case-insensitively, and leaves the body readable in full.
func bodyMentions(resp *http.Response, s string) bool {
	if resp.Body == nil || resp.Body == http.NoBody {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxPeek))
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(head), errReader{err}, resp.Body), c: resp.Body}
	return bytes.Contains(bytes.ToLower(head), []byte(strings.ToLower(s)))
}

// peekedBody is a response body whose head was read and put back.
type peekedBody struct {
	io.Reader
	c io.Closer
}

func (b *peekedBody) Close() error { return b.c.Close() }

// Underlying returns the body that was peeked at, so that a wrapper
// below it (the throttle Transport's, holding an in-flight slot) can be
// found again.
func (b *peekedBody) Underlying() io.Closer { return b.c }

// errReader returns err (if not nil) where the peek stopped, so a read
// error is not lost by peeking.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	return 0, io.EOF
}
