// Package githubquota is a throttle preset for the GitHub API (REST and
// GraphQL): GitHub's published rate limits, written as stacked limits
// ([throttle.Limit]) with the costs GitHub gives, kept in sync with the
// x-ratelimit-* headers of each answer, and pauses learned from its 403
// and 429 answers. Token requests have a lane of their own.
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
// # The model
//
// GitHub counts every request of a token against several limits at once.
// The preset has one rule per primary quota (GitHub's "resource"): the
// REST API ("core"), search, code search and GraphQL. Each rule stacks on
// that quota the secondary limits that apply to its requests, each with
// its own cost, and a request is charged to all of them or to none, in one
// store call. Secondary limits of the same name in several rules are one
// counter per token: a search and a read spend the same REST points.
//
//	limit (name)                        REST   search  code search  GraphQL
//	core: the token's hourly quota       1       -         -          -
//	search: 30 a minute                  -       1         -          -
//	code-search: 9 a minute              -       -         1          -
//	graphql: the token's hourly points   -       -         -      estimate
//	points: 900 a minute                1 / 5    1         1          -
//	graphql-points: 2,000 a minute       -       -         -        1 / 5
//	content-minute: 80 a minute        writes    -         -      mutations
//	content-hour: 500 an hour          writes    -         -      mutations
//	in-flight: 100 at once               1       1         1          1
//
// A write is any method but GET, HEAD and OPTIONS, and costs 5 points (a
// read 1); a GraphQL mutation costs 5 GraphQL points (a query 1). A
// GraphQL request's hourly points are charged an estimate and settled to
// what GitHub reports (see "GraphQL costs").
//
// # Primary limits
//
// Every token has an hourly quota ([Options.Token]): 5,000 requests (and
// 5,000 GraphQL points) for a personal or OAuth token or an App
// installation; 15,000 requests and 10,000 GraphQL points for an App
// installation on GitHub Enterprise Cloud; 1,000 of each per repository
// for the GITHUB_TOKEN of GitHub Actions; 60 requests per IP address
// without a token. Search has its own quota of 30 requests a minute (10
// without a token), code search 9. The preset counts them with exact
// sliding logs (never more than the quota in any window), per token
// (hashed: no token reaches a store or a log). After every answer the
// rule's quota is lowered to what GitHub says remains (x-ratelimit-remaining
// and -reset, [throttle.Learning.Sync]) for its resource ("core",
// "search", "code_search", "graphql"), so a quota shared with other
// clients of the same token is respected; and an answer with no quota
// left pauses that token's resource until the reset.
//
// # GraphQL costs
//
// GitHub charges a GraphQL query the points it computes from the query
// (1 for most, up to hundreds for large connections), and says how many
// only in its answer. The preset charges [Options.GraphQLEstimate] points
// (1 unless set) on [GraphQLLimit] when it admits a query, and settles the
// charge to the data.rateLimit.cost of the answer ([throttle.Rule].Settle
// with [throttle.SettleFromJSON]) when the caller has read the body to its
// end or closed it: a refund or an extra charge, in the store shared by
// the fleet (which must be a [quota.Settler]; both stores are). For an
// exact quota:
//
//   - ask for the cost in every query: query { rateLimit { cost } ... };
//     an answer without it leaves the estimate charged;
//   - set GraphQLEstimate to the largest cost of your queries.
//
// An estimate below a query's cost is corrected only when its answer
// arrives, so the fleet can send GitHub up to (queries in flight) x
// (largest cost - estimate) points more than its quota until then (100 x
// 49 for queries of up to 50 points and the default estimate);
// x-ratelimit-remaining still lowers the count after every answer, and
// GitHub's 403 pauses the token's GraphQL until the reset. Measured
// against the fake GitHub (TestGraphQLFleet: 8 instances of 16 goroutines,
// an hourly quota of 2,000 points, queries of 1 to 50): with an estimate
// of 50 GitHub refused nothing and the fleet used 98.3% of the quota; with
// an estimate of 1 GitHub refused 32 to 53 queries a run.
//
// # Secondary limits
//
//   - 900 points a minute per token for the REST API, shared by all of
//     its endpoints (search included): GET, HEAD and OPTIONS cost 1 point,
//     other methods 5. So 900 reads, or 80 writes and 500 reads, a minute.
//     GitHub's GraphQL has 2,000 points a minute of its own: 1 per query,
//     5 per mutation.
//   - Content creation: 80 a minute and 500 an hour per token. GitHub
//     names no list of "content-generating requests"; the preset counts
//     every REST write and every GraphQL mutation, so none that creates
//     content goes uncounted.
//   - At most 100 requests of a token in flight at once, REST and GraphQL
//     together ([InFlightLimit], a [throttle.Concurrency] limit;
//     Options.MaxInFlight changes it). A slot is held until the response
//     body is closed or read to the end, so always close bodies; a slot
//     whose body is abandoned comes back after [InFlightLease].
//
// A 403 or 429 that says a secondary limit was hit (or a 403 with no quota
// left) pauses the token's requests of that rule: for its Retry-After, or
// 60 seconds when it has none, doubling on repeats. A plain permission 403
// is a response like any other and pauses nothing.
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
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/quotakit/throttle/quotaheader"

	"github.com/quotakit/throttle"
)

// A Token says which hourly quotas GitHub gives the preset's tokens.
type Token int

const (
	// Standard is a personal access token, an OAuth app's token or a
	// GitHub App installation token: 5,000 requests and 5,000 GraphQL
	// points an hour.
	Standard Token = iota
	// EnterpriseCloud is a GitHub App installation on GitHub Enterprise
	// Cloud: 15,000 requests and 10,000 GraphQL points an hour.
	EnterpriseCloud
	// Actions is the GITHUB_TOKEN of a GitHub Actions workflow: 1,000
	// requests and 1,000 GraphQL points an hour per repository.
	Actions
)

// Hourly returns the token's quota of REST requests per hour ("core").
func (t Token) Hourly() int {
	switch t {
	case EnterpriseCloud:
		return 15000
	case Actions:
		return 1000
	}
	return 5000
}

// GraphQLHourly returns the token's quota of GraphQL points per hour.
func (t Token) GraphQLHourly() int {
	switch t {
	case EnterpriseCloud:
		return 10000
	case Actions:
		return 1000
	}
	return 5000
}

// GitHub's documented limits, as the preset uses them.
const (
	UnauthenticatedHourly          = 60   // requests an hour per IP address without a token
	UnauthenticatedSearchPerMinute = 10   // search requests a minute without a token
	SearchPerMinute                = 30   // search requests a minute per token, code search aside
	CodeSearchPerMinute            = 9    // code search requests a minute per token
	RESTPoints                     = 900  // points a minute per token, shared by the REST API's endpoints
	GraphQLPoints                  = 2000 // points a minute per token for GraphQL
	ReadPoints                     = 1    // points of a GET, HEAD or OPTIONS, or of a GraphQL query
	WritePoints                    = 5    // points of any other method, or of a GraphQL mutation
	ContentPerMinute               = 80   // content-creating requests a minute per token
	ContentPerHour                 = 500  // content-creating requests an hour per token
	MaxInFlight                    = 100  // requests of a token in flight at once
	TokenRequestsHourly            = 2000 // access token requests an hour
	SecondaryPause                 = time.Minute
)

// Limit names, as reported by [throttle.LimitError.Limit].
const (
	CoreLimit                  = "core"
	UnauthenticatedLimit       = "unauthenticated"
	UnauthenticatedSearchLimit = "unauthenticated-search"
	SearchLimit                = "search"
	CodeSearchLimit            = "code-search"
	GraphQLLimit               = "graphql"
	PointsLimit                = "points"
	GraphQLPointsLimit         = "graphql-points"
	ContentMinuteLimit         = "content-minute"
	ContentHourLimit           = "content-hour"
	TokenRequestsLimit         = "token-requests"
	InFlightLimit              = "in-flight"
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
	// Token is the kind of token, which sets the hourly quotas.
	Token Token

	// Hourly overrides the token's hourly quotas, of REST requests and
	// of GraphQL points, when positive.
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

	// GraphQLEstimate is the points a GraphQL request is charged on the
	// token's hourly GraphQL quota ([GraphQLLimit]) before GitHub answers;
	// the charge is then settled to the cost the answer reports
	// (data.rateLimit.cost, when the query asks for rateLimit { cost }).
	// Zero means 1, the least a query costs. Set it to the largest cost of
	// your queries for an exact quota: an estimate below a query's cost
	// lets the fleet overshoot GitHub's quota while queries are in flight
	// (docs/policy.md, "When the estimate is too low"). It must not be
	// negative or above the hourly GraphQL quota.
	GraphQLEstimate int
}

// Policy returns a policy of [Rules](o), or the error Rules gives.
func Policy(o Options) (throttle.Policy, error) {
	rules, err := Rules(o)
	if err != nil {
		return throttle.Policy{}, err
	}
	return throttle.Policy{Rules: rules}, nil
}

// Rules returns the preset's rules, in order: token requests
// (installation and OAuth), search and other requests without a token,
// code search, search, GraphQL, and the rest of the REST API. Each of
// the last four is one of GitHub's primary quotas with the secondary
// limits of its requests stacked on it (the package doc has the table).
// Put your own rules before them to override.
//
// Bad options give an error that matches [throttle.ErrInvalidPolicy]
// and is a [*throttle.PolicyError] naming the field: a BaseURL that does
// not parse, is not http or https, has no host, a host pattern, a
// query, or (on api.github.com and GHE.com) a path; a Token that is
// none of the kinds; a GraphQLEstimate below 0 or above the hourly
// GraphQL quota.
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
	hourly, graphQLHourly := o.Token.Hourly(), o.Token.GraphQLHourly()
	if o.Hourly > 0 {
		hourly, graphQLHourly = o.Hourly, o.Hourly
	}
	if o.GraphQLEstimate < 0 || o.GraphQLEstimate > graphQLHourly {
		return nil, &throttle.PolicyError{Field: "githubquota.Options.GraphQLEstimate",
			Err: fmt.Errorf("%d is not within 0 (for 1) and the hourly GraphQL quota, %d", o.GraphQLEstimate, graphQLHourly)}
	}
	estimate := max(o.GraphQLEstimate, 1)
	perToken := func(name string, rate int, per time.Duration) throttle.Limit {
		return throttle.Limit{Name: name, Rate: rate, Per: per, Algorithm: throttle.SlidingLog, Key: TokenKey}
	}
	core, graphQL := perToken(CoreLimit, hourly, hour), perToken(GraphQLLimit, graphQLHourly, hour)
	if o.Token == Actions {
		core.Key, graphQL.Key = actionsKey(rest), actionsKey(rest)
	}
	// The secondary limits, one counter per token each, whichever rules
	// charge them.
	points := perToken(PointsLimit, RESTPoints, minute)
	points.Cost = restPoints
	graphQLPoints := perToken(GraphQLPointsLimit, GraphQLPoints, minute)
	graphQLPoints.Cost = graphQLCost
	content := func(creates func(*http.Request) bool) []throttle.Limit {
		m, h := perToken(ContentMinuteLimit, ContentPerMinute, minute), perToken(ContentHourLimit, ContentPerHour, hour)
		m.Match, h.Match = creates, creates
		// A cost of their own: a settled GraphQL cost replaces the
		// charge of the limits charged the rule's cost, and a mutation
		// creates one piece of content whatever its points.
		m.Cost, h.Cost = unit, unit
		return []throttle.Limit{m, h}
	}
	var inFlight []throttle.Limit
	if o.MaxInFlight >= 0 {
		inFlight = append(inFlight, throttle.Limit{Name: InFlightLimit, Rate: cmp.Or(o.MaxInFlight, MaxInFlight), Per: InFlightLease,
			Algorithm: throttle.Concurrency, Key: TokenKey})
	}
	stack := func(ls ...[]throttle.Limit) []throttle.Limit {
		var out []throttle.Limit
		for _, l := range append(ls, inFlight) {
			out = append(out, l...)
		}
		return out
	}
	one := func(l throttle.Limit) []throttle.Limit { return []throttle.Limit{l} }
	// learn syncs the rule's primary quota with GitHub's resource, and
	// pauses by it: a pause holds back one token's requests of the rule.
	learn := func(primary, resource string) throttle.Learning {
		return throttle.Learning{
			Limited:      profile.Limited,
			ResetFormat:  profile.ResetFormat,
			DefaultPause: profile.DefaultPause,
			MaxPause:     hour, // a reset is at most an hour away
			Sync:         primary, SyncResource: resource,
			PauseBy: primary,
		}
	}
	tokenRequests := throttle.Limit{Name: TokenRequestsLimit, Rate: TokenRequestsHourly, Per: hour, Algorithm: throttle.SlidingLog}
	anonymous := func(r *http.Request) bool { return r.Header.Get("Authorization") == "" && site.underAPI(r) }
	return []throttle.Rule{
		{
			Name: "github-installation-token", Scope: TokenScope, Host: host, Method: http.MethodPost,
			Path:   rest + "app/installations/{installation_id}/access_tokens",
			Limits: one(tokenRequests), Learn: learn("", ""), Wait: o.Wait,
		},
		{
			Name: "github-oauth-token", Scope: TokenScope, Host: site.oauthHost, Method: http.MethodPost,
			Path:   "/login/oauth/access_token",
			Limits: one(tokenRequests), Learn: learn("", ""), Wait: o.Wait,
		},
		{
			Name: "github-unauthenticated-search", Scope: UnauthenticatedScope, Host: host, Path: rest + "search/", Match: anonymous,
			Limits: one(throttle.Limit{Name: UnauthenticatedSearchLimit, Rate: UnauthenticatedSearchPerMinute, Per: minute, Algorithm: throttle.SlidingLog}),
			Learn:  learn(UnauthenticatedSearchLimit, "search"), Wait: o.Wait,
		},
		{
			Name: "github-unauthenticated", Scope: UnauthenticatedScope, Host: host, Match: anonymous,
			Limits: one(throttle.Limit{Name: UnauthenticatedLimit, Rate: UnauthenticatedHourly, Per: hour, Algorithm: throttle.SlidingLog}),
			Learn:  learn(UnauthenticatedLimit, "core"), Wait: o.Wait,
		},
		{
			Name: "github-code-search", Scope: Scope, Host: host, Path: rest + "search/code",
			Limits: stack(one(perToken(CodeSearchLimit, CodeSearchPerMinute, minute)), one(points)),
			Learn:  learn(CodeSearchLimit, "code_search"), Wait: o.Wait,
		},
		{
			Name: "github-search", Scope: Scope, Host: host, Path: rest + "search/",
			Limits: stack(one(perToken(SearchLimit, SearchPerMinute, minute)), one(points)),
			Learn:  learn(SearchLimit, "search"), Wait: o.Wait,
		},
		{
			// graphql, the only limit charged the rule's cost (the
			// in-flight slot aside), is charged the estimate and settled
			// to the cost GitHub reports.
			Name: "github-graphql", Scope: Scope, Host: host, Path: site.graphQL,
			Limits: stack(one(graphQL), one(graphQLPoints), content(isMutation)),
			Cost:   func(*http.Request) int { return estimate },
			Settle: graphQLSettle,
			Learn:  learn(GraphQLLimit, "graphql"), Wait: o.Wait,
		},
		{
			Name: "github-rest", Scope: Scope, Host: host, Path: rest,
			Limits: stack(one(core), one(points), content(isWrite)),
			Learn:  learn(CoreLimit, "core"), Wait: o.Wait,
		},
	}, nil
}

// TokenKey is the key of a token's limits: the Authorization header's
// credentials (without the "Bearer " or "token " scheme, so both spellings
// of one token share a counter), hashed with SHA-256. A request without
// one fails with an error wrapping [throttle.ErrMissingKey]; the preset
// sends those to its rules for unauthenticated requests first.
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

// isRead reports whether r reads: GET (or no method: net/http sends GET),
// HEAD or OPTIONS.
func isRead(r *http.Request) bool {
	switch r.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		return true
	}
	return false
}

// isWrite reports whether r is a REST write, which the preset counts as
// content creation: any method but GET, HEAD and OPTIONS.
func isWrite(r *http.Request) bool { return !isRead(r) }

// restPoints is a REST request's secondary-limit points.
func restPoints(r *http.Request) int {
	if isRead(r) {
		return ReadPoints
	}
	return WritePoints
}

// unit is the cost of a limit charged 1 whatever the rule's cost.
func unit(*http.Request) int { return 1 }

// graphQLCost is a GraphQL request's secondary-limit points: 5 for a
// mutation, else 1.
func graphQLCost(r *http.Request) int {
	if isMutation(r) {
		return WritePoints
	}
	return ReadPoints
}

// isMutation reports whether r is a GraphQL mutation. It peeks at most 64
// KiB of the body and puts the body back whole, as [throttle.KeyFromBody]
// does, and remembers the answer in it: the limits of one request ask
// again, and read the body once.
func isMutation(r *http.Request) bool {
	if b, ok := r.Body.(*peekedBody); ok {
		return b.mutation
	}
	if r.Body == nil || r.Body == http.NoBody {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	b := &peekedBody{Reader: io.MultiReader(bytes.NewReader(head), errReader{err}, r.Body), Closer: r.Body, mutation: mutationQuery(head)}
	r.Body = b
	return b.mutation
}

// mutationQuery reports whether a GraphQL request body's query is a
// mutation: {"query":"mutation ..."}, after any whitespace, escaped or not.
func mutationQuery(body []byte) bool {
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

// peekedBody is a GraphQL request's body put back after isMutation read
// its start: the bytes read, then the rest, closing the original.
type peekedBody struct {
	io.Reader
	io.Closer
	mutation bool
}

// errReader returns err (if not nil) where the peek stopped.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	return 0, io.EOF
}

// graphQLReportedCost reads the data.rateLimit.cost of a GraphQL answer.
var graphQLReportedCost = throttle.SettleFromJSON("data.rateLimit.cost")

// graphQLSettle is the GraphQL rule's Settle: the data.rateLimit.cost
// the answer reports, or 1 for an answer whose errors say RATE_LIMITED:
// GitHub ran the query and charged nothing, and 1 is the least a
// settlement can be (the estimate, up to Options.GraphQLEstimate, would
// stay otherwise).
func graphQLSettle(resp *http.Response) (int, bool) {
	if resp.Body == nil {
		return 0, false
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, false
	}
	var answer struct {
		Errors []struct{ Type string }
	}
	if json.Unmarshal(body, &answer) == nil {
		for _, e := range answer.Errors {
			if e.Type == "RATE_LIMITED" {
				return 1, true
			}
		}
	}
	r := *resp
	r.Body = io.NopCloser(bytes.NewReader(body))
	return graphQLReportedCost(&r)
}
