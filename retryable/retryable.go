// Package retryable stacks hashicorp/go-retryablehttp on a throttle
// [throttle.Transport], so that its retries respect the limiter instead of
// fighting it.
//
// Left to its defaults, go-retryablehttp handles a throttle transport
// badly in two ways: it retries a [*throttle.LimitError] refusal blindly
// after its own backoff (one second, then two...), whatever the refusal's
// RetryAfter says, and it sleeps for a vendor's Retry-After however long it
// is (a "Retry-After: 86400" holds the goroutine for a day). [Policy]
// replaces its CheckRetry and Backoff:
//
//   - a refusal is retried only after its RetryAfter, and only when that is
//     within MaxWait and the request's deadline; otherwise the caller gets
//     the refusal (errors.Is(err, throttle.ErrLimited) still holds through
//     go-retryablehttp's wrapping). A request that gave up while waiting
//     for quota, and a request the policy cannot decide (a missing key, a
//     cost above the limit, no rule) are never retried;
//   - a "slow down" response (429, 503 with Retry-After, or any answer after
//     which the transport paused the rule, such as GitHub's 403 for a spent
//     quota) is retried after the longer of its Retry-After (read with
//     [quotaheader.Parse], so every format and the response's Date are
//     understood) and the pause the transport learned for the request's
//     rule; when that is longer than MaxWait, the response is returned to
//     the caller at once instead;
//   - everything else is decided by go-retryablehttp's own policy.
//
// Each retry is a new request through the transport: it is charged like any
// other and waits out any pause recorded by any instance.
//
// # Stacking
//
//	t, _ := throttle.NewTransport(nil, policy, throttle.WithStore(store))
//	client := retryable.NewClient(t, retryable.Policy{MaxWait: time.Minute})
//	resp, err := client.Get(url) // client.StandardClient() for an *http.Client
//
// The transport's own [throttle.Retry] and go-retryablehttp both resend
// "slow down" answers; use one of the two, not both (the retries would
// multiply).
package retryable

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/quotakit/throttle"
)

// Policy holds the retry decisions for a go-retryablehttp client in front
// of a throttle transport. Use its CheckRetry and Backoff methods as the
// client's CheckRetry and Backoff, or call [NewClient]. The zero value is
// ready to use. A Policy is safe for concurrent use.
type Policy struct {
	// MaxWait is the longest wait before a retry: a refusal's RetryAfter or
	// a response's Retry-After beyond it ends the retries. Zero means
	// [throttle.DefaultMaxPause].
	MaxWait time.Duration

	// Transport, when set, is asked for the pause it learned for a
	// response's request (see [throttle.Transport.LearnedPause]), so that a
	// retry after a 429 without a Retry-After still waits for the pause the
	// transport recorded.
	Transport *throttle.Transport

	// Next decides what this Policy does not: errors that are not
	// refusals, and responses that are not "slow down" answers. Nil means
	// [retryablehttp.DefaultRetryPolicy].
	Next retryablehttp.CheckRetry

	// Now is the clock for Retry-After dates; nil means [time.Now].
	Now func() time.Time
}

// NewClient returns a go-retryablehttp client that sends through t with p's
// CheckRetry and Backoff, p.Transport set to t when unset, and otherwise
// go-retryablehttp's defaults, except that it logs nothing (its default
// logger writes every request to stderr).
func NewClient(t *throttle.Transport, p Policy) *retryablehttp.Client {
	if p.Transport == nil {
		p.Transport = t
	}
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: t}
	c.Logger = nil
	c.CheckRetry = p.CheckRetry
	c.Backoff = p.Backoff
	return c
}

// CheckRetry implements [retryablehttp.CheckRetry] for a throttle
// transport; see the package documentation. A refusal that will be retried
// is waited out here, within ctx, before CheckRetry returns.
func (p Policy) CheckRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	var le *throttle.LimitError
	switch {
	case errors.As(err, &le):
		return p.retryRefusal(ctx, le, err)
	case errors.Is(err, throttle.ErrMissingKey), errors.Is(err, quota.ErrCostTooHigh),
		errors.Is(err, throttle.ErrNoRule), errors.Is(err, throttle.ErrInvalidPolicy):
		return false, err // the same request would fail the same way
	case err == nil && resp != nil && p.slowDown(resp):
		if p.responseWait(resp) > p.maxWait() {
			return false, nil // the caller gets the response itself
		}
		return true, nil
	}
	next := p.Next
	if next == nil {
		next = retryablehttp.DefaultRetryPolicy
	}
	return next(ctx, resp, err)
}

// retryRefusal waits out a refusal's RetryAfter when it is worth it.
func (p Policy) retryRefusal(ctx context.Context, le *throttle.LimitError, err error) (bool, error) {
	if le.Err != nil {
		return false, err // it waited already, and its context ended
	}
	wait := le.RetryAfter
	if wait > p.maxWait() {
		return false, err
	}
	if deadline, ok := ctx.Deadline(); ok && p.now().Add(wait).After(deadline) {
		return false, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false, err
	case <-timer.C:
		return true, nil
	}
}

// Backoff implements [retryablehttp.Backoff]. For a "slow down" response it
// waits the longer of the response's Retry-After (capped at MaxWait) and
// the transport's learned pause; otherwise it backs off exponentially from
// min to max as go-retryablehttp does. After a refusal (resp is nil),
// CheckRetry has already waited for the refusal's RetryAfter, and Backoff
// adds only the exponential backoff; keep the client's RetryWaitMin small.
func (p Policy) Backoff(minWait, maxWait time.Duration, attempt int, resp *http.Response) time.Duration {
	if resp != nil && p.slowDown(resp) {
		if d := p.responseWait(resp); d > 0 {
			return min(d, p.maxWait())
		}
	}
	// No response to go by: go-retryablehttp's own exponential backoff
	// (its Retry-After handling is what this Policy replaces).
	return retryablehttp.DefaultBackoff(minWait, maxWait, attempt, nil)
}

// responseWait is how long resp asks to wait: its Retry-After or reset, or
// the pause the transport learned from it, whichever is longer. It is
// capped just above MaxWait, so that a longer wait is seen as one.
func (p Policy) responseWait(resp *http.Response) time.Duration {
	now := p.now()
	fb := quotaheader.Parse(resp.Header, now, quotaheader.Options{MaxPause: p.maxWait() + time.Second})
	d := fb.PauseFor(now)
	if p.Transport != nil && resp.Request != nil {
		d = max(d, p.Transport.LearnedPause(resp.Request))
	}
	return d
}

func (p Policy) maxWait() time.Duration {
	if p.MaxWait > 0 {
		return p.MaxWait
	}
	return throttle.DefaultMaxPause
}

func (p Policy) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// slowDown reports whether resp asks the client to slow down: a 429, a 503
// with Retry-After, or any answer after which the transport paused the
// request's rule (a GitHub 403 for a spent quota, say; see
// [quotaheader.Profile]).
func (p Policy) slowDown(resp *http.Response) bool {
	if resp.StatusCode == http.StatusTooManyRequests ||
		resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "" {
		return true
	}
	return p.Transport != nil && resp.Request != nil && p.Transport.LearnedPause(resp.Request) > 0
}
