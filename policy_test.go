package throttle_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

func TestPolicyValidate(t *testing.T) {
	ok := throttle.Limit{Name: "ok", Rate: 1, Per: time.Second}
	tests := []struct {
		name   string
		policy throttle.Policy
		want   []string // "rule field" of every expected *PolicyError, in order
	}{
		{name: "empty policy is valid", policy: throttle.Policy{}},
		{name: "valid rule", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "a", Host: "*.slack.com", Method: "POST", Path: "/api/{method}", Limits: []throttle.Limit{ok}}}}},
		{name: "rule without limits is valid", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "exempt", Path: "/login"}}}},
		{name: "missing rule name", policy: throttle.Policy{Rules: []throttle.Rule{{Limits: []throttle.Limit{ok}}}}, want: []string{"#0 Name"}},
		{name: "bad rule name", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "a b"}}}, want: []string{"a b Name"}},
		{name: "duplicate rule names", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "a"}, {Name: "a"}}}, want: []string{"a Name"}},
		{name: "zero rate", policy: one(throttle.Limit{Name: "l", Per: time.Second}), want: []string{"r Limits[0].Rate"}},
		{name: "negative rate", policy: one(throttle.Limit{Name: "l", Rate: -1, Per: time.Second}), want: []string{"r Limits[0].Rate"}},
		{name: "zero period", policy: one(throttle.Limit{Name: "l", Rate: 1}), want: []string{"r Limits[0].Per"}},
		{name: "negative period", policy: one(throttle.Limit{Name: "l", Rate: 1, Per: -time.Second}), want: []string{"r Limits[0].Per"}},
		{name: "sub-microsecond period", policy: one(throttle.Limit{Name: "l", Rate: 1, Per: time.Nanosecond}), want: []string{"r Limits[0].Per"}},
		{name: "negative burst", policy: one(throttle.Limit{Name: "l", Rate: 1, Per: time.Second, Burst: -1}), want: []string{"r Limits[0].Burst"}},
		{name: "burst on a window", policy: one(throttle.Limit{Name: "l", Rate: 1, Per: time.Second, Burst: 5, Algorithm: throttle.FixedWindow}), want: []string{"r Limits[0].Burst"}},
		{name: "unknown algorithm", policy: one(throttle.Limit{Name: "l", Rate: 1, Per: time.Second, Algorithm: 42}), want: []string{"r Limits[0].Algorithm"}},
		{name: "rate above quota.MaxRate", policy: one(throttle.Limit{Name: "l", Rate: 1 << 40, Per: 24 * time.Hour}), want: []string{"r Limits[0].Rate"}},
		{name: "10^9 per 31 days is valid", policy: one(throttle.Limit{Name: "l", Rate: 1_000_000_000, Per: 31 * 24 * time.Hour})},
		{name: "10^7 a second is valid", policy: one(throttle.Limit{Name: "l", Rate: 10_000_000, Per: time.Second, Algorithm: throttle.SlidingWindow})},
		{name: "more than one unit a nanosecond", policy: one(throttle.Limit{Name: "l", Rate: 2_000_000, Per: time.Millisecond}), want: []string{"r Limits[0].Rate"}},
		{name: "period above quota.MaxPer", policy: one(throttle.Limit{Name: "l", Rate: 1, Per: 200 * 365 * 24 * time.Hour}), want: []string{"r Limits[0].Per"}},
		{name: "burst replenished over more than quota.MaxPer", policy: one(throttle.Limit{Name: "l", Rate: 1, Per: 365 * 24 * time.Hour, Burst: 101}), want: []string{"r Limits[0].Burst"}},
		{name: "sliding log above quota.MaxSlidingLogRate", policy: one(throttle.Limit{Name: "l", Rate: 2_000_000, Per: time.Hour, Algorithm: throttle.SlidingLog}), want: []string{"r Limits[0].Rate"}},
		{name: "limit without name", policy: one(throttle.Limit{Rate: 1, Per: time.Second}), want: []string{"r Limits[0].Name"}},
		{name: "duplicate limit in rule", policy: one(ok, ok), want: []string{"r Limits[1].Name"}},
		{name: "bad method", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "r", Method: "GET /x"}}}, want: []string{"r Method"}},
		{name: "lower-case method", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "r", Method: "post"}}}, want: []string{"r Method"}},
		{name: "mixed-case method", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "r", Method: "Post"}}}, want: []string{"r Method"}},
		{name: "bad path", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "r", Path: "api/{x"}}}, want: []string{"r Path"}},
		{name: "bad host", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "r", Host: "https://x.com"}}}, want: []string{"r Host"}},
		{name: "bad scope", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "r", Scope: "{tag}"}}}, want: []string{"r Scope"}},
		{name: "shared limit across scopes", policy: throttle.Policy{Rules: []throttle.Rule{
			{Name: "a", Limits: []throttle.Limit{ok}}, {Name: "b", Limits: []throttle.Limit{ok}},
		}}, want: []string{"b Limits[0].Name"}},
		{name: "shared limit in one scope", policy: throttle.Policy{Rules: []throttle.Rule{
			{Name: "a", Scope: "vendor", Limits: []throttle.Limit{ok}}, {Name: "b", Scope: "vendor", Limits: []throttle.Limit{ok}},
		}}},
		{name: "shared limit with other parameters", policy: throttle.Policy{Rules: []throttle.Rule{
			{Name: "a", Scope: "s", Limits: []throttle.Limit{ok}},
			{Name: "b", Scope: "s", Limits: []throttle.Limit{{Name: "ok", Rate: 2, Per: time.Second}}},
		}}, want: []string{"b Limits[0]"}},
		{name: "path key on the rule's wildcard", policy: pathKeyRule("/repos/{owner}/{repo}", throttle.KeyFromPath("owner"), nil)},
		{name: "path key without its wildcard", policy: pathKeyRule("/repos/{owner}", throttle.KeyFromPath("repo"), nil), want: []string{"r Limits[0].Key"}},
		{name: "path key on a rule without a path", policy: pathKeyRule("", throttle.KeyFromPath("owner"), nil), want: []string{"r Limits[0].Key"}},
		{name: "path key inside HashKey", policy: pathKeyRule("/a/{b}", throttle.HashKey(throttle.KeyFromPath("c")), nil), want: []string{"r Limits[0].Key"}},
		{name: "path key after a header key in JoinKeys", policy: pathKeyRule("/a/{b}", throttle.JoinKeys(throttle.KeyFromHeader("X-Team"), throttle.KeyFromPath("c")), nil), want: []string{"r Limits[0].Key"}},
		{name: "path tenant without its wildcard", policy: pathKeyRule("/a/{b}", nil, throttle.KeyFromPath("team")), want: []string{"r Limits[0].Tenant"}},
		{name: "path key of a bad path reports the path only", policy: pathKeyRule("/a/{b", throttle.KeyFromPath("c"), nil), want: []string{"r Path"}},
		{name: "user KeyFunc that panics on a bare request", policy: pathKeyRule("/a", func(r *http.Request) (string, error) { return r.Header["X"][0], nil }, nil)},
		{name: "every problem is reported", policy: throttle.Policy{Rules: []throttle.Rule{
			{Name: "a", Path: "x", Limits: []throttle.Limit{{Name: "l", Rate: 0, Per: 0}}},
			{Name: "b", Host: "a*.com"},
		}}, want: []string{"a Path", "a Limits[0].Rate", "b Host"}},
	}
	err := throttle.Policy{Rules: []throttle.Rule{{Name: "r", Method: "post"}}}.Validate()
	assert.ErrorContains(t, err, `"post" is not upper case; methods are case-sensitive, so it would never match "POST"`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.policy.Validate()
			if len(tt.want) == 0 {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var got []string
			for _, e := range unjoin(err) {
				var pe *throttle.PolicyError
				require.ErrorAs(t, e, &pe)
				got = append(got, pe.Rule+" "+pe.Field)
				assert.Contains(t, e.Error(), "rule "+pe.Rule+": "+pe.Field)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func pathKeyRule(path string, key, tenant throttle.KeyFunc) throttle.Policy {
	return throttle.Policy{Rules: []throttle.Rule{{Name: "r", Path: path, Limits: []throttle.Limit{{Name: "l", Rate: 1, Per: time.Second, Key: key, Tenant: tenant}}}}}
}

// TestPathKeyWithoutWildcardFailsAtConstruction: a KeyFromPath naming a
// wildcard its rule's Path lacks would fail every request; NewTransport and
// NewLimiter refuse it and say which rule, which field and what to add.
func TestPathKeyWithoutWildcardFailsAtConstruction(t *testing.T) {
	p := throttle.Policy{Rules: []throttle.Rule{{Name: "repos", Path: "/repos/{owner}", Limits: []throttle.Limit{
		{Name: "per-repo", Rate: 10, Per: time.Minute, Key: throttle.JoinKeys(throttle.KeyFromPath("owner"), throttle.KeyFromPath("repo"))},
	}}}}
	const want = `throttle: invalid policy: rule repos: Limits[0].Key: KeyFromPath("repo") names no wildcard of the rule's Path "/repos/{owner}"; add {repo} to it or read another wildcard`
	_, err := throttle.NewTransport(nil, p)
	require.Error(t, err)
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	assert.ErrorContains(t, err, want)
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Limits[0].Key", pe.Field)

	_, err = throttle.NewLimiter(p)
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	assert.ErrorContains(t, err, want)

	p.Rules[0].Path = "/repos/{owner}/{repo}"
	_, err = throttle.NewLimiter(p)
	assert.NoError(t, err)
}

func one(limits ...throttle.Limit) throttle.Policy {
	return throttle.Policy{Rules: []throttle.Rule{{Name: "r", Limits: limits}}}
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func TestParseAlgorithm(t *testing.T) {
	for _, a := range []throttle.Algorithm{throttle.GCRA, throttle.FixedWindow, throttle.SlidingLog, throttle.SlidingWindow} {
		got, err := quota.ParseAlgorithm(a.String())
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	_, err := quota.ParseAlgorithm("leaky")
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	assert.Equal(t, "Algorithm(9)", throttle.Algorithm(9).String())
}

// TestRuleMatching sends requests through a transport whose rules each
// allow one request and fail fast, and reads which rule decided from the
// LimitError of a second request.
func TestRuleMatching(t *testing.T) {
	rules := []throttle.Rule{
		{Name: "issues", Host: "api.github.com", Method: "POST", Path: "/repos/{owner}/{repo}/issues"},
		{Name: "search", Host: "api.github.com", Path: "/search/"},
		{Name: "slack", Host: "*.slack.com", Path: "/api/{method}"},
		{Name: "port", Host: "localhost:8080"},
		{Name: "beta", Host: "api.example.com", Match: func(r *http.Request) bool { return r.Header.Get("X-Beta") == "1" }},
		{Name: "github", Host: "api.github.com"},
	}
	for i := range rules {
		rules[i].Limits = []throttle.Limit{{Name: "l" + rules[i].Name, Rate: 1, Per: time.Hour}}
		rules[i].Wait = waiters.FailFast()
	}
	tests := []struct {
		method, url string
		header      string
		want        string // rule name, or "" for no rule
	}{
		{"POST", "https://api.github.com/repos/a/b/issues", "", "issues"},
		{"GET", "https://api.github.com/repos/a/b/issues", "", "github"},
		{"POST", "https://api.github.com/repos/a/b/issues/1", "", "github"},
		{"GET", "https://api.github.com/search/code?q=x", "", "search"},
		{"GET", "https://API.GitHub.com/search/", "", "search"},
		{"POST", "https://hooks.slack.com/api/chat.postMessage", "", "slack"},
		{"POST", "https://slack.com/api/chat.postMessage", "", ""},
		{"GET", "http://localhost:8080/x", "", "port"},
		{"GET", "http://localhost:9090/x", "", ""},
		{"GET", "https://api.example.com/x", "1", "beta"},
		{"GET", "https://api.example.com/x", "", ""},
		{"GET", "https://example.org/", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.url, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			defer srv.Close()
			defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
			// Every request goes to the test server; the rules see the
			// original URL.
			base := redirectTo(srv.URL)
			tr, err := throttle.NewTransport(base, throttle.Policy{Rules: rules})
			require.NoError(t, err)
			do := func() error {
				req := httptest.NewRequest(tt.method, tt.url, nil)
				req.RequestURI = ""
				if tt.header != "" {
					req.Header.Set("X-Beta", tt.header)
				}
				resp, err := tr.RoundTrip(req)
				if err == nil {
					_ = resp.Body.Close()
				}
				return err
			}
			require.NoError(t, do())
			err = do()
			if tt.want == "" {
				assert.NoError(t, err, "no rule: never limited")
				return
			}
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, tt.want, le.Rule)
		})
	}
}

// redirectTo is a base transport that sends every request to addr.
func redirectTo(addr string) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		u := *r.URL
		r.URL = &u
		r.URL.Scheme, r.URL.Host = "http", addr[len("http://"):]
		return http.DefaultTransport.RoundTrip(r)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestCostByMethod(t *testing.T) {
	cost := throttle.CostByMethod(5, map[string]int{"get": 1, "HEAD": 1})
	for method, want := range map[string]int{"GET": 1, "HEAD": 1, "POST": 5, "DELETE": 5} {
		assert.Equal(t, want, cost(httptest.NewRequest(method, "/", nil)), method)
	}
	assert.Equal(t, 1, cost(&http.Request{URL: &url.URL{Path: "/"}}), "no method is a GET, as net/http sends it")
}
