package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
)

// slackLike starts a server that answers like a Slack incoming webhook.
func slackLike() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
}

// The Slack notifier: at most 100 notifications per 30 minutes in all, and
// at most 10 per 30 minutes per event category, decided together.
func ExampleNewTransport() {
	slack := slackLike()
	defer slack.Close()

	global := throttle.Limit{Name: "global", Rate: 100, Per: 30 * time.Minute}
	perCategory := throttle.Limit{Name: "category", Rate: 10, Per: 30 * time.Minute,
		Key: throttle.KeyFromContext("category")}
	t, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{{
		Name: "slack-notify", Host: "127.0.0.1", // "hooks.slack.com" in production
		Limits: []throttle.Limit{global, perCategory},
		Wait:   waiters.FailFast(),
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	defer client.CloseIdleConnections()

	sent, refused := 0, 0
	for i := 0; i < 12; i++ {
		ctx := throttle.WithKey(context.Background(), "category", "errors")
		req, _ := http.NewRequestWithContext(ctx, "POST", slack.URL, strings.NewReader(`{"text":"disk full"}`))
		resp, err := client.Do(req)
		var le *throttle.LimitError
		switch {
		case errors.As(err, &le):
			refused++
			if refused == 1 {
				fmt.Printf("refused by %s; retry in about %v\n", le.Limit, le.RetryAfter.Round(time.Minute))
			}
		case err != nil:
			fmt.Println(err)
		default:
			resp.Body.Close()
			sent++
		}
	}
	fmt.Printf("errors: sent %d, refused %d\n", sent, refused)
	// Output:
	// refused by category; retry in about 3m0s
	// errors: sent 10, refused 2
}

// A refusal comes back from http.Client wrapped in a *url.Error;
// errors.Is and errors.As see through it.
func ExampleLimitError() {
	t, _ := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "search",
		Limits: []throttle.Limit{{Name: "per-minute", Rate: 1, Per: time.Minute}},
		Wait:   waiters.FailFast(),
	}}})
	client := &http.Client{Transport: t}
	srv := slackLike()
	defer srv.Close()
	defer client.CloseIdleConnections()

	if resp, err := client.Get(srv.URL); err == nil {
		resp.Body.Close()
	}
	_, err := client.Get(srv.URL)

	var ue *url.Error
	var le *throttle.LimitError
	fmt.Println(errors.As(err, &ue), errors.Is(err, throttle.ErrLimited))
	if errors.As(err, &le) {
		fmt.Println(le.Rule, le.Limit, le.RetryAfter.Round(time.Second))
	}
	// Output:
	// true true
	// search per-minute 1m0s
}

// WrapClient limits a client that a vendor SDK already built, keeping its
// own transport (here one that adds a token) underneath. The throttle sits
// outside that transport, so it sees requests before the token is added:
// key per-token limits by a context value or a header the caller sets, not
// by the Authorization an inner transport adds.
func ExampleWrapClient() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("vendor got", r.Method, r.URL.Path, "with auth:", r.Header.Get("Authorization") != "")
	}))
	defer srv.Close()

	sdkClient := &http.Client{Timeout: 10 * time.Second, Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer t0ken")
		return http.DefaultTransport.RoundTrip(r)
	})}
	client, err := throttle.WrapClient(sdkClient, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "per-token",
		Limits: []throttle.Limit{{Name: "token", Rate: 5000, Per: time.Hour}},
	}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	resp, err := client.Get(srv.URL + "/user")
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	fmt.Println("timeout kept:", client.Timeout)
	// Output:
	// vendor got GET /user with auth: true
	// timeout kept: 10s
}

// Validate reports every problem of a policy, naming the rule and field.
func ExamplePolicy_Validate() {
	err := throttle.Policy{Rules: []throttle.Rule{{
		Name:   "github",
		Path:   "/repos/{owner",
		Limits: []throttle.Limit{{Name: "core", Rate: 0, Per: time.Hour}},
	}}}.Validate()
	fmt.Println(errors.Is(err, throttle.ErrInvalidPolicy))
	var pe *throttle.PolicyError
	if errors.As(err, &pe) {
		fmt.Println(pe.Rule, pe.Field)
	}
	// Output:
	// true
	// github Path
}

// An interactive request fails fast under a rule whose batch jobs block.
func ExampleWithWaiter() {
	srv := slackLike()
	defer srv.Close()
	t, _ := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "api",
		Limits: []throttle.Limit{{Name: "per-second", Rate: 1, Per: time.Second}},
		Wait:   waiters.Block(),
	}}})
	client := &http.Client{Transport: t}
	defer client.CloseIdleConnections()
	if resp, err := client.Get(srv.URL); err == nil {
		resp.Body.Close()
	}
	ctx := throttle.WithWaiter(context.Background(), waiters.FailFast())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	_, err := client.Do(req)
	fmt.Println(errors.Is(err, throttle.ErrLimited))
	// Output:
	// true
}
