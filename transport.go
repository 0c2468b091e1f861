package throttle

import (
	"net/http"
)

// Transport is an [http.RoundTripper] that holds each outbound request to
// the limits of its [Policy] before passing it to Base.
//
// For every request it finds the first matching rule, asks the [quota.Store] to
// decide all of the rule's limits in one atomic step, and then, as the
// rule's [Waiter] allows, sends the request now, waits for a reserved slot
// and sends it then, or returns a [*LimitError] without sending. Responses,
// including a vendor's 429, are returned unchanged with a nil error.
//
// Transport never modifies the caller's request, and closes the request
// body on every path on which it does not send it. It is safe for
// concurrent use.
type Transport struct {
	lim  *Limiter
	base http.RoundTripper
}

// NewTransport returns a Transport that applies policy p to requests
// before sending them with base. A nil base means [http.DefaultTransport].
// It validates p and returns the [Policy.Validate] error if p is invalid,
// and checks that the store can decide every rule (see [NewLimiter]).
func NewTransport(base http.RoundTripper, p Policy, opts ...Option) (*Transport, error) {
	lim, err := NewLimiter(p, opts...)
	if err != nil {
		return nil, err
	}
	return &Transport{lim: lim, base: base}, nil
}

// WrapClient returns a copy of c whose transport is a [Transport] applying
// p on top of c's own transport (an oauth2 transport, say); the copy keeps
// c's Timeout, Jar and CheckRedirect. A nil c means [http.DefaultClient].
// This is how to limit a vendor SDK that takes an *http.Client.
func WrapClient(c *http.Client, p Policy, opts ...Option) (*http.Client, error) {
	if c == nil {
		c = http.DefaultClient
	}
	t, err := NewTransport(c.Transport, p, opts...)
	if err != nil {
		return nil, err
	}
	wrapped := *c
	wrapped.Transport = t
	return &wrapped, nil
}

// RoundTrip implements [http.RoundTripper]: it applies the policy to req,
// then sends it with the base transport, or returns an error without
// sending. The error is a [*LimitError] when a limit or pause refused the
// request or the request's context ended while it waited for its slot.
//
// After a response it learns what the vendor said (see [Learning]) and,
// when the rule asks for it, resends a request that was answered "slow
// down" (see [Retry]). The response returned is the last one received,
// unchanged.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	r, out := t.lim.policy.match(req)
	if r == nil {
		if t.lim.policy.refuse {
			closeBody(req)
			return nil, ErrNoRule
		}
		return t.baseRT().RoundTrip(req)
	}
	ev, d := t.lim.admit(r, out, -1) // admit.go
	if ev.Err != nil {
		closeBody(out) // out.Body is req.Body, or wraps and closes it
		return nil, ev.Err
	}
	resp, err := t.send(r, d, out) // send.go; its slots are released when the body ends (release.go)
	if err != nil {
		return nil, err
	}
	ls := t.lim.learn(out.Context(), r, d, out, resp) // learn.go: the response's one way into learning
	if r.Retry.Max > 0 && ls.limited && !r.Shadow {
		return t.retry(r, out, resp, ls) // retry.go
	}
	return resp, nil
}

func (t *Transport) baseRT() http.RoundTripper {
	if t.base != nil {
		return t.base
	}
	return http.DefaultTransport
}

// CloseIdleConnections closes the idle connections of the base transport,
// if it has such a method, so [http.Client.CloseIdleConnections] works
// through a Transport.
func (t *Transport) CloseIdleConnections() {
	if ci, ok := t.baseRT().(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

func closeBody(r *http.Request) {
	if r.Body != nil {
		_ = r.Body.Close()
	}
}
