package throttle

import (
	"io"
	"net/http"
	"time"

	"github.com/quotakit/throttle/quotaheader"
)

// Retry makes a [Rule] resend a request that was answered "slow down".
// Each resend goes through the limiter again, waiting out the pause the
// answer caused, within MaxWait; the caller gets the "slow down" answer
// itself when the body cannot be replayed or the limiter will not admit
// the resend in time.
type Retry struct {
	// Max is the most resends per request. Zero disables retries.
	Max int
	// MaxWait caps the time spent waiting for resends, in all. Zero means
	// [DefaultMaxPause].
	MaxWait time.Duration
	// Decide, if set, is asked before each resend (octokit's onRateLimit)
	// and resends only when it returns true. It must not read the body.
	Decide func(RetryEvent) bool
}

// A RetryEvent is what [Retry.Decide] sees before a resend.
type RetryEvent struct {
	Rule     string
	Request  *http.Request        // answered "slow down"; do not modify it
	Response *http.Response       // that answer, its body unread
	Feedback quotaheader.Feedback // read from the answer's headers
	Attempt  int                  // the resend this would be: 1 for the first
	Wait     time.Duration        // how long the pause it caused still holds
}

// retry resends req, which got the "slow down" answer resp, from which
// learning took ls, up to the rule's Retry.Max times, each time through
// the limiter and, for its answer, through learning.
func (t *Transport) retry(r *rule, req *http.Request, resp *http.Response, ls lesson) (*http.Response, error) {
	ctx := req.Context()
	budget := r.Retry.MaxWait
	if budget <= 0 {
		budget = DefaultMaxPause
	}
	deadline := t.lim.now().Add(budget)
	for attempt := 0; attempt < r.Retry.Max; attempt++ {
		if r.Retry.Decide != nil && !r.Retry.Decide(t.retryEvent(r, req, resp, ls, attempt+1)) {
			return resp, nil
		}
		next := req.Clone(ctx)
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return resp, nil // the body cannot be replayed
			}
			body, err := req.GetBody()
			if err != nil {
				return resp, nil
			}
			next.Body = body
		}
		// Admit the resend before letting go of the answer in hand: if the
		// limiter refuses it, the caller gets that answer unchanged. Its
		// Concurrency slots go first, or the resend would wait for them.
		releaseResponse(resp)
		ev, d := t.lim.admit(r, next, max(deadline.Sub(t.lim.now()), 0))
		if ev.Err != nil {
			closeBody(next)
			return resp, nil
		}
		drainAndClose(resp.Body)
		var err error
		resp, err = t.send(r, d, next)
		if err != nil {
			return nil, err
		}
		if ls = t.lim.learn(ctx, r, d, next, resp); !ls.limited {
			break
		}
	}
	return resp, nil
}

// retryEvent describes resend attempt of req, answered resp, from which
// learning took ls, for Retry.Decide.
func (t *Transport) retryEvent(r *rule, req *http.Request, resp *http.Response, ls lesson, attempt int) RetryEvent {
	return RetryEvent{
		Rule: r.id, Request: req, Response: resp, Attempt: attempt,
		Feedback: ls.fb, Wait: ls.wait(t.lim.now()),
	}
}

// maxDrain bounds how much of a response body is read before it is
// closed, so its connection can be reused.
const maxDrain = 64 << 10

func drainAndClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}
