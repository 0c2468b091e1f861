package githubquota_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/waiters"
)

// Search is limited to 30 requests a minute per token: the 31st is
// refused before it is sent, and GitHub refuses nothing. GitHub's answer
// to the 30th said no search quota remains, so the token's search is
// paused until GitHub's reset (the limit would refuse it too).
func ExamplePolicy() {
	fake := fakegithub.NewServer(fakegithub.Options{}) // a fake GitHub; drop it and BaseURL in production
	defer fake.Close()

	policy, err := githubquota.Policy(githubquota.Options{
		BaseURL: fake.BaseURL(),
		Wait:    waiters.FailFast(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := throttle.NewTransport(nil, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	defer client.CloseIdleConnections()

	sent := 0
	for range 31 {
		req, _ := http.NewRequest(http.MethodGet, fake.BaseURL()+"search/issues?q=is:open", nil)
		req.Header.Set("Authorization", "Bearer ghp_example")
		resp, err := client.Do(req)
		var le *throttle.LimitError
		if errors.As(err, &le) {
			fmt.Printf("refused by rule %s (limit %q, pause %q)\n", le.Rule, le.Limit, le.Pause)
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		sent++
	}
	fmt.Println("sent:", sent)
	fmt.Println("refused by GitHub:", fake.Stats().Limited)
	// Output:
	// refused by rule github-search (limit "", pause "search")
	// sent: 30
	// refused by GitHub: 0
}

// Each rule is one of GitHub's primary quotas with the limits stacked on
// it; a request is charged to those that apply (a write to the content
// limits, a read not), each its own cost, all or none. Limits of one name
// are one counter per token, whichever rule charges them.
func ExampleRules() {
	rules, err := githubquota.Rules(githubquota.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rules {
		var limits []string
		for _, l := range r.Limits {
			name := fmt.Sprintf("%s %d/%v", l.Name, l.Rate, l.Per)
			if l.Algorithm == throttle.Concurrency {
				name = fmt.Sprintf("%s %d at once", l.Name, l.Rate)
			}
			if l.Match != nil {
				name += " (some)"
			}
			limits = append(limits, name)
		}
		fmt.Printf("%s: %s\n", r.Name, strings.Join(limits, ", "))
	}
	// Output:
	// github-installation-token: token-requests 2000/1h0m1s
	// github-oauth-token: token-requests 2000/1h0m1s
	// github-unauthenticated-search: unauthenticated-search 10/1m1s
	// github-unauthenticated: unauthenticated 60/1h0m1s
	// github-code-search: code-search 9/1m1s, points 900/1m1s, in-flight 100 at once
	// github-search: search 30/1m1s, points 900/1m1s, in-flight 100 at once
	// github-graphql: graphql 5000/1h0m1s, graphql-points 2000/1m1s, content-minute 80/1m1s (some), content-hour 500/1h0m1s (some), in-flight 100 at once
	// github-rest: core 5000/1h0m1s, points 900/1m1s, content-minute 80/1m1s (some), content-hour 500/1h0m1s (some), in-flight 100 at once
}

// On a GitHub Enterprise Server the preset limits the REST API under
// /api/v3/ and GraphQL at /api/graphql, and finds OAuth token requests on
// the same host; the rest of the host is no rule's.
func ExampleRules_enterpriseServer() {
	rules, err := githubquota.Rules(githubquota.Options{BaseURL: "https://ghe.example.com/api/v3/"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rules {
		fmt.Printf("%-29s %s%s\n", r.Name, r.Host, r.Path)
	}
	_, err = githubquota.Rules(githubquota.Options{BaseURL: "https://*.example.com/api/v3/"})
	fmt.Println(errors.Is(err, throttle.ErrInvalidPolicy), err)
	// Output:
	// github-installation-token     ghe.example.com/api/v3/app/installations/{installation_id}/access_tokens
	// github-oauth-token            ghe.example.com/login/oauth/access_token
	// github-unauthenticated-search ghe.example.com/api/v3/search/
	// github-unauthenticated        ghe.example.com
	// github-code-search            ghe.example.com/api/v3/search/code
	// github-search                 ghe.example.com/api/v3/search/
	// github-graphql                ghe.example.com/api/graphql
	// github-rest                   ghe.example.com/api/v3/
	// true throttle: invalid policy: githubquota.Options.BaseURL: "https://*.example.com/api/v3/": the host must be one name, not a pattern
}

// Profile is GitHub's vendor profile for the preset's host, for rules of
// your own on a GitHub Enterprise Server or a fake; on github.com and
// GHE.com it is quotaheader.GitHub, which the transport has already.
func ExampleProfile() {
	for _, base := range []string{"", "https://api.acme.ghe.com/", "https://ghe.example.com/api/v3/", "http://127.0.0.1:8080/"} {
		p, err := githubquota.Profile(githubquota.Options{BaseURL: base})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%q: %s profile for %v\n", base, p.Name, p.Hosts)
	}
	// Output:
	// "": github profile for [api.github.com uploads.github.com *.ghe.com]
	// "https://api.acme.ghe.com/": github profile for [api.github.com uploads.github.com *.ghe.com]
	// "https://ghe.example.com/api/v3/": github profile for [ghe.example.com]
	// "http://127.0.0.1:8080/": github profile for [127.0.0.1:8080]
}

// A GraphQL query is charged Options.GraphQLEstimate points of the token's
// hourly GraphQL quota (here 100) when it is admitted, and settled to the
// cost GitHub reports in data.rateLimit.cost, which the query asks for:
// here every query costs 30. The third query could cost 50, which the 40
// points left cannot pay: it is refused before it is sent.
func ExampleOptions_graphQLEstimate() {
	fake := fakegithub.NewServer(fakegithub.Options{Hourly: 100, GraphQLCost: func(*http.Request) int { return 30 }})
	defer fake.Close()

	policy, err := githubquota.Policy(githubquota.Options{
		BaseURL:         fake.BaseURL(),
		Hourly:          100,
		GraphQLEstimate: 50, // the most our queries cost
		Wait:            waiters.FailFast(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := throttle.NewTransport(nil, policy, throttle.WithHooks(throttle.Hooks{
		OnSettle: func(ev throttle.SettleEvent) { fmt.Printf("charged %d, settled to %d\n", ev.Charged, ev.Cost) },
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	defer client.CloseIdleConnections()

	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, fake.URL+"/graphql",
			strings.NewReader(`{"query":"query { rateLimit { cost } viewer { login } }"}`))
		req.Header.Set("Authorization", "Bearer ghp_example")
		resp, err := client.Do(req)
		var le *throttle.LimitError
		if errors.As(err, &le) {
			fmt.Printf("refused by limit %s\n", le.Limit)
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body) // settled when read to the end, or closed
		resp.Body.Close()
	}
	fmt.Println("GitHub counted:", fake.Used("ghp_example", "graphql"))
	// Output:
	// charged 50, settled to 30
	// charged 50, settled to 30
	// refused by limit graphql
	// GitHub counted: 60
}
