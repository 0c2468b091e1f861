// Package githubquota is a throttle preset for the GitHub API (REST and
// GraphQL): its primary limits per token, kept in sync with the
// x-ratelimit-* headers of each resource; its search limits; its secondary
// limits; and pauses learned from its 403 and 429 answers. Token requests
// have a lane of their own.
//
// Use it as the policy of a [throttle.Transport], e.g. under go-github
// (github.com/google/go-github/v89/github):
//
//	policy, err := githubquota.Policy(githubquota.Options{})
//	if err != nil {
//		return err
//	}
//	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
//	if err != nil {
//		return err
//	}
//	gh, err := github.NewClient(
//		github.WithTransport(t),
//		github.WithAuthToken(token),
//		github.WithDisableRateLimitCheck(), // throttle keeps the limits, for the whole fleet
//	)
//
// # Primary limits
//
// Every token has an hourly quota ([Options.Token]): 5,000 requests for a
// personal or OAuth token or an App installation, 15,000 for an App
// installation on GitHub Enterprise Cloud, 1,000 per repository for the
// GITHUB_TOKEN of GitHub Actions, and 60 per IP address without a token.
// The preset counts them with an exact sliding log (never more than the
// quota in any hour), per token (hashed: no token reaches a store or a
// log). After every response the limit is lowered to what GitHub says
// remains (x-ratelimit-remaining and -reset, [throttle.Learning.Sync]),
// for the resource the rule counts ("core", "search", "code_search",
// "graphql"), so a quota shared with other clients of the same token is
// respected; and a response with no quota left pauses that token's
// resource until the reset.
//
// Search has its own quota: 30 requests a minute, code search 9 (GitHub
// documents 10; one is kept in hand).
//
// # Secondary limits
//
//   - 900 points a minute per endpoint, where GET, HEAD and OPTIONS cost 1
//     point and other methods 5. An endpoint is a method and a path
//     template ([EndpointKey]), so the limit reads as 900 reads or 180
//     writes a minute per endpoint and token. GraphQL: 2,000 points a
//     minute, 1 per query and 5 per mutation.
//   - Content creation (REST POSTs): 80 a minute and 500 an hour per
//     token.
//   - At most 100 requests of a token in flight at once ([InFlightLimit],
//     a [throttle.Concurrency] limit shared by every rule of the token's
//     scope; Options.MaxInFlight changes it). A slot is held until the
//     response body is closed or read to the end, so always close bodies;
//     a slot whose body is abandoned comes back after [InFlightLease].
//
// A 403 or 429 that says a secondary limit was hit (or a 403 with no quota
// left) pauses the token's requests: for its Retry-After, or 60 seconds
// when it has none, doubling on repeats. A plain permission 403 is a
// response like any other and pauses nothing.
//
// The windows of the per-minute and per-hour limits are kept longer by
// [Options.Margin] (1 s) than GitHub's, so that requests that reach GitHub
// a little later than they were admitted never land in one of its windows
// together.
//
// # Token requests
//
// Requests for installation access tokens (POST
// /app/installations/{id}/access_tokens) and OAuth tokens (POST
// github.com/login/oauth/access_token) are in a lane of their own (their
// own scope, with GitHub's limit of 2,000 token requests an hour), so they
// never wait behind requests that are waiting for a token.
//
// # Hosts
//
// The zero [Options] are github.com: the REST and GraphQL API on
// api.github.com, OAuth token requests on github.com. [Options.BaseURL]
// points the preset at another GitHub, and takes the base URL given to
// go-github:
//
//   - GitHub Enterprise Server, "https://HOST/api/v3/": the REST API under
//     /api/v3/, GraphQL at /api/graphql, OAuth token requests at
//     /login/oauth/access_token; other paths of HOST (web pages, uploads
//     under /api/uploads/) are not limited.
//   - GHE.com, "https://api.SUBDOMAIN.ghe.com/": the REST and GraphQL API
//     there, OAuth token requests at SUBDOMAIN.ghe.com.
//   - Any other URL, such as a test fake's "http://127.0.0.1:PORT/": the
//     REST API under the URL's path, GraphQL at graphql below it, OAuth
//     token requests at /login/oauth/access_token of its host.
//
// go-github's WithEnterpriseURLs adds api/v3/ to a URL whose host does not
// start with "api." and whose path does not end in /api/v3/: give it, and
// the preset, the whole "https://HOST/api/v3/". Uploads (uploads.github.com,
// /api/uploads/) are not limited by the preset.
//
// A GitHub Enterprise Server limits rates only when its administrator turns
// that on, with quotas of their own: set [Options.Hourly] to theirs. The
// secondary limits are github.com's.
//
// The rules learn from answers as [quotaheader.GitHub] says GitHub speaks,
// whatever the host. For rules of your own that send to a GitHub
// Enterprise Server or a fake, give the transport [Profile]: the same, for
// that host.
package githubquota

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/quotakit/throttle/quotaheader"

	"github.com/quotakit/throttle"
)

// A Token says which hourly quota GitHub gives the preset's tokens.
type Token int

const (
	// Standard is a personal access token, an OAuth app's token or a
	// GitHub App installation token: 5,000 requests an hour.
	Standard Token = iota
	// EnterpriseCloud is a GitHub App installation on GitHub Enterprise
	// Cloud: 15,000 requests an hour.
	EnterpriseCloud
	// Actions is the GITHUB_TOKEN of a GitHub Actions workflow: 1,000
	// requests an hour per repository.
	Actions
)

// Hourly returns the token's quota of requests per hour.
func (t Token) Hourly() int {
	switch t {
	case EnterpriseCloud:
		return 15000
	case Actions:
		return 1000
	}
	return 5000
}

// GitHub's documented limits, as the preset uses them.
const (
	UnauthenticatedHourly = 60   // requests an hour per IP without a token
	SearchPerMinute       = 30   // search requests a minute
	CodeSearchPerMinute   = 9    // code search requests a minute (GitHub: 10)
	EndpointPoints        = 900  // points a minute per REST endpoint
	ReadPoints            = 1    // points of a GET, HEAD or OPTIONS
	WritePoints           = 5    // points of any other method
	GraphQLPoints         = 2000 // points a minute for GraphQL
	ContentPerMinute      = 80   // content-creating requests a minute
	ContentPerHour        = 500  // content-creating requests an hour
	TokenRequestsHourly   = 2000 // access token requests an hour
	SecondaryPause        = time.Minute
)

// Limit names, as reported by [throttle.LimitError.Limit].
const (
	CoreLimit            = "core"
	UnauthenticatedLimit = "unauthenticated"
	SearchLimit          = "search"
	CodeSearchLimit      = "code-search"
	GraphQLLimit         = "graphql"
	GraphQLPointsLimit   = "graphql-points"
	ReadPointsLimit      = "endpoint-read"
	WritePointsLimit     = "endpoint-write"
	ContentMinuteLimit   = "content-minute"
	ContentHourLimit     = "content-hour"
	TokenRequestsLimit   = "token-requests"
	InFlightLimit        = "in-flight"
)

// InFlightLease is the lease time of an in-flight slot: a request renews
// its slot while it runs, and an instance that dies gives its slots back
// this long after its last renewal.
const InFlightLease = 30 * time.Second

// Scopes of the preset's rules: every token's requests share Scope; the
// token lane and unauthenticated requests have their own.
const (
	Scope                = "github"
	TokenScope           = "github-tokens"
	UnauthenticatedScope = "github-anonymous"
)

// Options configure the preset. The zero value is github.com with
// standard tokens and requests that wait for their turn.
type Options struct {
	// Token is the kind of token, which sets the hourly quota.
	Token Token

	// Hourly overrides the token's hourly quota when positive.
	Hourly int

	// BaseURL is the REST API's base URL, the one the client sends to
	// (go-github's WithEnterpriseURLs or WithURLs, and Client.BaseURL);
	// empty means [DefaultBaseURL]. GitHub Enterprise Server:
	// "https://HOST/api/v3/" (GraphQL at /api/graphql, OAuth tokens at
	// /login/oauth/access_token of HOST); GHE.com:
	// "https://api.SUBDOMAIN.ghe.com/" (OAuth tokens at SUBDOMAIN.ghe.com);
	// a test fake: its URL (GraphQL at graphql below it, OAuth tokens on
	// its host). The package doc's "Hosts" has the details.
	BaseURL string

	// Endpoint gives a request's endpoint for the per-endpoint secondary
	// limit; nil means [EndpointKey].
	Endpoint throttle.KeyFunc

	// Margin lengthens the windows of the per-minute and per-hour limits
	// beyond GitHub's. Zero means one second; negative, none.
	Margin time.Duration

	// Wait is the waiter of every rule; nil means block until the quota
	// allows (or the request's context ends).
	Wait throttle.Waiter

	// MaxInFlight is how many requests of one token may be in flight at
	// once. Zero means GitHub's 100; negative, no such limit (for a store
	// that does not implement [quota.LeaseStore]).
	MaxInFlight int
}

// Policy returns a policy of [Rules](o), or the error Rules gives.
func Policy(o Options) (throttle.Policy, error) {
	rules, err := Rules(o)
	if err != nil {
		return throttle.Policy{}, err
	}
	return throttle.Policy{Rules: rules}, nil
}

// Rules returns the preset's rules, in order: token requests, requests
// without a token, code search, search, GraphQL, REST POSTs, other REST
// writes, REST reads. Put your own rules before them to override.
//
// Bad options give an error that matches [throttle.ErrInvalidPolicy]
// and is a [*throttle.PolicyError] naming the field: a BaseURL that does
// not parse, is not http or https, has no host, a host pattern, a
// query, or (on api.github.com and GHE.com) a path; a Token that is
// none of the kinds.
func Rules(o Options) ([]throttle.Rule, error) {
	site, err := o.site()
	if err != nil {
		return nil, err
	}
	if o.Token < Standard || o.Token > Actions {
		return nil, &throttle.PolicyError{Field: "githubquota.Options.Token",
			Err: fmt.Errorf("%d is none of Standard, EnterpriseCloud and Actions", o.Token)}
	}
	profile := quotaheader.GitHub // how GitHub speaks, whatever its host
	host, rest := site.apiHost, site.restPrefix
	margin := max(cmp.Or(o.Margin, time.Second), 0)
	minute, hour := time.Minute+margin, time.Hour+margin
	hourly := o.Token.Hourly()
	if o.Hourly > 0 {
		hourly = o.Hourly
	}
	endpoint := o.Endpoint
	if endpoint == nil {
		endpoint = EndpointKey
	}
	perToken := func(name string, rate int, per time.Duration) throttle.Limit {
		return throttle.Limit{Name: name, Rate: rate, Per: per, Algorithm: throttle.SlidingLog, Key: TokenKey}
	}
	core := perToken(CoreLimit, hourly, hour)
	if o.Token == Actions {
		core.Key = actionsKey(rest)
	}
	perEndpoint := func(name string, rate int) throttle.Limit {
		l := perToken(name, rate, minute)
		l.Key = throttle.JoinKeys(TokenKey, endpoint)
		return l
	}
	// Limits every request of a token passes, whatever its resource.
	var everyRequest []throttle.Limit
	if o.MaxInFlight >= 0 {
		n := o.MaxInFlight
		if n == 0 {
			n = 100
		}
		everyRequest = append(everyRequest, throttle.Limit{Name: InFlightLimit, Rate: n, Per: InFlightLease,
			Algorithm: throttle.Concurrency, Key: TokenKey})
	}
	limits := func(ls ...throttle.Limit) []throttle.Limit { return append(ls, everyRequest...) }
	learn := func(sync, resource, pauseBy string) throttle.Learning {
		return throttle.Learning{
			Limited:      profile.Limited,
			ResetFormat:  profile.ResetFormat,
			DefaultPause: profile.DefaultPause,
			MaxPause:     hour, // a reset is at most an hour away
			Sync:         sync, SyncResource: resource,
			PauseBy: pauseBy,
		}
	}
	tokenRequests := throttle.Limit{Name: TokenRequestsLimit, Rate: TokenRequestsHourly, Per: hour, Algorithm: throttle.SlidingLog}
	isWrite := func(r *http.Request) bool {
		return r.Method == http.MethodPatch || r.Method == http.MethodPut || r.Method == http.MethodDelete
	}
	return []throttle.Rule{
		{
			Name: "github-installation-token", Scope: TokenScope, Host: host, Method: http.MethodPost,
			Path:   rest + "app/installations/{installation_id}/access_tokens",
			Limits: []throttle.Limit{tokenRequests}, Learn: learn("", "", ""), Wait: o.Wait,
		},
		{
			Name: "github-oauth-token", Scope: TokenScope, Host: site.oauthHost, Method: http.MethodPost,
			Path:   "/login/oauth/access_token",
			Limits: []throttle.Limit{tokenRequests}, Learn: learn("", "", ""), Wait: o.Wait,
		},
		{
			Name: "github-unauthenticated", Scope: UnauthenticatedScope, Host: host,
			Match:  func(r *http.Request) bool { return r.Header.Get("Authorization") == "" && site.underAPI(r) },
			Limits: []throttle.Limit{{Name: UnauthenticatedLimit, Rate: UnauthenticatedHourly, Per: hour, Algorithm: throttle.SlidingLog}},
			Learn:  learn(UnauthenticatedLimit, "core", UnauthenticatedLimit), Wait: o.Wait,
		},
		{
			Name: "github-code-search", Scope: Scope, Host: host, Path: rest + "search/code",
			Limits: limits(perToken(CodeSearchLimit, CodeSearchPerMinute, minute)),
			Learn:  learn(CodeSearchLimit, "code_search", CodeSearchLimit), Wait: o.Wait,
		},
		{
			Name: "github-search", Scope: Scope, Host: host, Path: rest + "search/",
			Limits: limits(perToken(SearchLimit, SearchPerMinute, minute)),
			Learn:  learn(SearchLimit, "search", SearchLimit), Wait: o.Wait,
		},
		{
			Name: "github-graphql", Scope: Scope, Host: host, Path: site.graphQL,
			Limits: limits(perToken(GraphQLLimit, hourly, hour), perToken(GraphQLPointsLimit, GraphQLPoints, minute)),
			Cost:   graphQLCost,
			Learn:  learn(GraphQLLimit, "graphql", GraphQLLimit), Wait: o.Wait,
		},
		{
			Name: "github-create", Scope: Scope, Host: host, Path: rest, Method: http.MethodPost,
			Limits: limits(core, perEndpoint(WritePointsLimit, EndpointPoints/WritePoints),
				perToken(ContentMinuteLimit, ContentPerMinute, minute), perToken(ContentHourLimit, ContentPerHour, hour)),
			Learn: learn(CoreLimit, "core", CoreLimit), Wait: o.Wait,
		},
		{
			Name: "github-write", Scope: Scope, Host: host, Path: rest, Match: isWrite,
			Limits: limits(core, perEndpoint(WritePointsLimit, EndpointPoints/WritePoints)),
			Learn:  learn(CoreLimit, "core", CoreLimit), Wait: o.Wait,
		},
		{
			Name: "github-read", Scope: Scope, Host: host, Path: rest,
			Limits: limits(core, perEndpoint(ReadPointsLimit, EndpointPoints/ReadPoints)),
			Learn:  learn(CoreLimit, "core", CoreLimit), Wait: o.Wait,
		},
	}, nil
}

// TokenKey is the key of a token's limits: the Authorization header's
// credentials (without the "Bearer " or "token " scheme, so both spellings
// of one token share a counter), hashed with SHA-256. A request without
// one fails with an error wrapping [throttle.ErrMissingKey]; the preset
// sends those to its rule for unauthenticated requests first.
var TokenKey throttle.KeyFunc = throttle.HashKey(credentials)

func credentials(r *http.Request) (string, error) {
	a := r.Header.Get("Authorization")
	if a == "" {
		return throttle.KeyFromHeader("Authorization")(r) // the missing-key error
	}
	for _, scheme := range []string{"Bearer ", "bearer ", "token ", "Token "} {
		if c, ok := strings.CutPrefix(a, scheme); ok {
			return strings.TrimSpace(c), nil
		}
	}
	return a, nil
}

// actionsKey counts a GITHUB_TOKEN's requests per repository, whatever the
// token (each workflow run has a new one); requests outside a repository
// per token. rest is the REST API's path, "/" on github.com.
func actionsKey(rest string) throttle.KeyFunc {
	return func(r *http.Request) (string, error) {
		path := strings.TrimPrefix(r.URL.EscapedPath(), strings.TrimSuffix(rest, "/"))
		seg := strings.Split(strings.Trim(path, "/"), "/")
		if len(seg) >= 3 && seg[0] == "repos" {
			return "repo:" + strings.ToLower(seg[1]+"/"+seg[2]), nil
		}
		return TokenKey(r)
	}
}

// EndpointKey is the default endpoint of a request for the per-endpoint
// secondary limit: its method and its path with identifiers replaced by
// placeholders, e.g. "POST /repos/{owner}/{repo}/issues/{n}/comments".
// Owner and repository names, user, organization and enterprise names,
// numbers and commit SHAs become placeholders, and everything after
// /contents/ or /git/refs/ is one path. It is a heuristic: a rule of your
// own before the preset's can use a key function of your own (Options.Endpoint).
func EndpointKey(r *http.Request) (string, error) {
	seg := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	out := make([]string, 0, len(seg))
	for i := 0; i < len(seg); i++ {
		s := seg[i]
		out = append(out, placeholder(s))
		var names []string
		switch s {
		case "repos":
			names = []string{"{owner}", "{repo}"}
		case "users", "orgs", "enterprises":
			names = []string{"{name}"}
		case "contents", "refs", "ref":
			if i+1 < len(seg) {
				out = append(out, "{path...}")
			}
			i = len(seg)
		}
		for _, n := range names {
			if i+1 < len(seg) {
				out = append(out, n)
				i++
			}
		}
	}
	method := r.Method
	if method == "" {
		method = http.MethodGet
	}
	return method + " /" + strings.Join(out, "/"), nil
}

// placeholder replaces a number or a commit SHA with a placeholder.
func placeholder(s string) string {
	if s == "" {
		return s
	}
	digits, hexes := true, true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			digits = false
			if !('a' <= c && c <= 'f') {
				hexes = false
			}
		}
	}
	switch {
	case digits:
		return "{n}"
	case hexes && len(s) >= 40:
		return "{sha}"
	}
	return s
}

// graphQLCost is a GraphQL request's secondary-limit points: 5 for a
// mutation, else 1. It peeks at most 64 KiB of the body and puts it back.
func graphQLCost(r *http.Request) int {
	if r.Body == nil || r.Body == http.NoBody {
		return ReadPoints
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	r.Body = readCloser{io.MultiReader(bytes.NewReader(head), errReader{err}, r.Body), r.Body}
	if isMutation(head) {
		return WritePoints
	}
	return ReadPoints
}

// isMutation reports whether a GraphQL request body's query is a
// mutation: {"query":"mutation ..."}, after any whitespace, escaped or not.
func isMutation(body []byte) bool {
	i := bytes.Index(body, []byte(`"query"`))
	if i < 0 {
		return false
	}
	rest := bytes.TrimLeft(body[i+len(`"query"`):], " \t\r\n")
	rest, ok := bytes.CutPrefix(rest, []byte(":"))
	if !ok {
		return false
	}
	rest = bytes.TrimLeft(rest, " \t\r\n")
	rest, ok = bytes.CutPrefix(rest, []byte(`"`))
	if !ok {
		return false
	}
	for {
		trimmed := bytes.TrimLeft(rest, " ")
		for _, esc := range []string{`\n`, `\r`, `\t`} {
			trimmed = bytes.TrimPrefix(trimmed, []byte(esc))
		}
		if len(trimmed) == len(rest) {
			break
		}
		rest = trimmed
	}
	return bytes.HasPrefix(rest, []byte("mutation"))
}

type readCloser struct {
	io.Reader
	io.Closer
}

// errReader returns err (if not nil) where the peek stopped.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}
