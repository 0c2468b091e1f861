package githubquota_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/waiters"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	tokenA = "ghp_aaaaSECRETaaaa"
	tokenB = "ghp_bbbbSECRETbbbb"
)

// clock is a manual clock shared by the fake GitHub, the store and the
// transport, for the hourly limits.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// keyStore records every key a MemoryStore is asked about, and what the
// latest demand charged to each limit.
type keyStore struct {
	*memstore.Store
	mu      sync.Mutex
	keys    []string
	charged map[string]int // of the latest demand: limit name -> cost
}

func (s *keyStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	s.mu.Lock()
	s.charged = map[string]int{}
	for i, b := range d.Limits {
		s.keys = append(s.keys, b.Key)
		s.charged[b.Limit.Name] = d.CostOf(i)
	}
	s.keys = append(s.keys, d.Pauses...)
	s.mu.Unlock()
	return s.Store.Take(ctx, d)
}

// lastCharged returns what the latest demand charged, per limit.
func (s *keyStore) lastCharged() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.charged
}

type fixture struct {
	t      *testing.T
	clock  *clock
	fake   *fakegithub.Server
	store  *keyStore
	client *http.Client
	rules  *rulesSeen // of client

	site site // where the client sends
}

// site is where a fixture's client sends: the REST API's base URL as
// githubquota.Options.BaseURL takes it, GraphQL's URL and the host's root
// (for OAuth tokens). A site whose host is not the fake's reaches the fake
// all the same: the client dials the fake whatever the address.
type site struct {
	name                string
	enterprise          bool // the fake serves GitHub Enterprise Server's paths
	base, graphQL, root string
	redirect            bool
}

// sites are the GitHubs the tests run on: github.com's layout (the fake
// at its root), GitHub Enterprise Server's (/api/v3/) and GHE.com's
// (api.acme.ghe.com, reached on loopback).
func sites() []site {
	return []site{
		{name: "github.com layout"},
		{name: "Enterprise Server", enterprise: true},
		{name: "GHE.com", base: "http://api.acme.ghe.com/", graphQL: "http://api.acme.ghe.com/graphql", root: "http://acme.ghe.com", redirect: true},
	}
}

func newFixture(t *testing.T, po githubquota.Options, fo fakegithub.Options) *fixture {
	return newFixtureAt(t, sites()[0], po, fo)
}

func newFixtureAt(t *testing.T, at site, po githubquota.Options, fo fakegithub.Options) *fixture {
	c := &clock{t: time.Now()}
	fo.Now = c.Now
	fo.Enterprise = at.enterprise
	fake := fakegithub.NewServer(fo)
	t.Cleanup(fake.Close)
	if at.base == "" {
		at.base, at.root = fake.BaseURL(), fake.URL
		at.graphQL = fake.URL + "/graphql"
		if at.enterprise {
			at.graphQL = fake.URL + "/api/graphql"
		}
	}
	f := &fixture{t: t, clock: c, fake: fake, site: at, rules: &rulesSeen{}}
	f.client, f.store = f.newClient(po, throttle.WithHooks(throttle.Hooks{OnDecision: f.rules.add}))
	return f
}

// rulesSeen records the rule of every decision.
type rulesSeen struct {
	mu    sync.Mutex
	rules []string
}

func (r *rulesSeen) add(ev throttle.DecisionEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rules = append(r.rules, ev.Rule)
}

// last returns the rule of the latest decision, and forgets them all.
func (r *rulesSeen) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rules) == 0 {
		return ""
	}
	last := r.rules[len(r.rules)-1]
	r.rules = nil
	return last
}

// newClient is another instance: a transport with a store of its own.
func (f *fixture) newClient(po githubquota.Options, opts ...throttle.Option) (*http.Client, *keyStore) {
	po.BaseURL = f.site.base
	if po.Wait == nil {
		po.Wait = waiters.FailFast()
	}
	store := &keyStore{Store: memstore.New(memstore.WithClock(f.clock.Now))}
	policy, err := githubquota.Policy(po)
	require.NoError(f.t, err)
	base := &http.Transport{}
	if f.site.redirect {
		addr := f.fake.Listener.Addr().String()
		base.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr) // loopback only, whatever the host
		}
	}
	tr, err := throttle.NewTransport(base, policy, append([]throttle.Option{throttle.WithStore(store), throttle.WithClock(f.clock.Now)}, opts...)...)
	require.NoError(f.t, err)
	c := &http.Client{Transport: tr}
	f.t.Cleanup(base.CloseIdleConnections)
	return c, store
}

// url is the URL of path: a REST path ("/search/issues"), "/graphql" or
// "/login/oauth/access_token".
func (f *fixture) url(path string) string {
	switch {
	case path == "/graphql":
		return f.site.graphQL
	case strings.HasPrefix(path, "/login/"):
		return f.site.root + path
	}
	return strings.TrimSuffix(f.site.base, "/") + path
}

type result struct {
	status int
	header http.Header
	le     *throttle.LimitError
}

func (f *fixture) send(c *http.Client, token, method, path, body string) result {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.url(path), rd)
	require.NoError(f.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		var le *throttle.LimitError
		require.ErrorAs(f.t, err, &le)
		require.ErrorIs(f.t, err, throttle.ErrLimited)
		return result{le: le}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(f.t, resp.Body.Close())
	return result{status: resp.StatusCode, header: resp.Header}
}

func (f *fixture) do(token, method, path, body string) result {
	f.t.Helper()
	return f.send(f.client, token, method, path, body)
}

// upTo sends the request until it is refused, at most n+1 times; it
// returns how many were answered 2xx and the refusal.
func (f *fixture) upTo(n int, token, method, path, body string) (int, *throttle.LimitError) {
	f.t.Helper()
	ok := 0
	for range n + 1 {
		r := f.do(token, method, path, body)
		if r.le != nil {
			return ok, r.le
		}
		require.Equal(f.t, 2, r.status/100, "status %d", r.status)
		ok++
	}
	return ok, nil
}

// The requests of each kind, sent alone until refused: the binding limit's
// rate go, the next is refused by it (or by the pause learned from
// GitHub's "none remains"), and GitHub refuses none.
func TestLimits(t *testing.T) {
	const mutation = `{"query": "mutation { addStar(input: {}) { clientMutationId } }"}`
	cases := []struct {
		name         string
		opts         githubquota.Options
		token        string
		method, path string
		body         string
		admitted     int
		rule, limit  string
		retryAfter   time.Duration
	}{
		{"search", githubquota.Options{}, tokenA, "GET", "/search/issues?q=bug", "", 30, "github-search", githubquota.SearchLimit, 61 * time.Second},
		{"code search", githubquota.Options{}, tokenA, "GET", "/search/code?q=x", "", 9, "github-code-search", githubquota.CodeSearchLimit, 61 * time.Second},
		{"900 points of reads", githubquota.Options{}, tokenA, "GET", "/repos/o/r/issues", "", 900, "github-rest", githubquota.PointsLimit, 61 * time.Second},
		{"content creation per minute", githubquota.Options{}, tokenA, "POST", "/repos/o/r/issues", `{"title":"x"}`, 80, "github-rest", githubquota.ContentMinuteLimit, 61 * time.Second},
		{"every write creates content", githubquota.Options{}, tokenA, "PATCH", "/repos/o/r/issues/1", `{"title":"x"}`, 80, "github-rest", githubquota.ContentMinuteLimit, 61 * time.Second},
		{"GraphQL mutations create content", githubquota.Options{}, tokenA, "POST", "/graphql", mutation, 80, "github-graphql", githubquota.ContentMinuteLimit, 61 * time.Second},
		{"primary, standard token", githubquota.Options{Hourly: 40}, tokenA, "GET", "/user", "", 40, "github-rest", githubquota.CoreLimit, time.Hour + time.Second},
		{"GraphQL primary", githubquota.Options{Hourly: 40}, tokenA, "POST", "/graphql", `{"query":"{ viewer { login } }"}`, 40, "github-graphql", githubquota.GraphQLLimit, time.Hour + time.Second},
		{"unauthenticated", githubquota.Options{}, "", "GET", "/repos/o/r", "", 60, "github-unauthenticated", githubquota.UnauthenticatedLimit, time.Hour + time.Second},
		{"unauthenticated search", githubquota.Options{}, "", "GET", "/search/issues?q=bug", "", 10, "github-unauthenticated-search", githubquota.UnauthenticatedSearchLimit, 61 * time.Second},
	}
	for _, at := range sites() {
		for _, tc := range cases {
			t.Run(at.name+"/"+tc.name, func(t *testing.T) {
				f := newFixtureAt(t, at, tc.opts, fakegithub.Options{Hourly: tc.opts.Hourly})
				ok, le := f.upTo(tc.admitted, tc.token, tc.method, tc.path, tc.body)
				assert.Equal(t, tc.admitted, ok)
				require.NotNil(t, le)
				assert.Equal(t, tc.rule, le.Rule)
				// The limit refuses, or the pause learned from the answer
				// that said nothing remains until the reset (at most a
				// second of jitter later); both name the limit.
				name := le.Limit
				if name == "" {
					name = le.Pause
				}
				assert.Equal(t, tc.limit, name)
				assert.InDelta(t, tc.retryAfter.Seconds(), le.RetryAfter.Seconds(), 2)
				st := f.fake.Stats()
				assert.Zero(t, st.Limited, "GitHub refused a request")
				assert.Equal(t, tc.admitted, st.OK, "every request reached the fake at its path")
				if tc.token != "" {
					r := f.do(tokenB, tc.method, tc.path, tc.body)
					assert.Nil(t, r.le, "another token has its own quota")
				}
			})
		}
	}
}

// What each kind of request is charged, limit by limit: the package
// doc's table, read from the demands the store receives.
func TestStackedModel(t *testing.T) {
	const query, mutation = `{"query":"{ viewer { login } }"}`, `{"query":"mutation { addStar(input: {}) { clientMutationId } }"}`
	inFlight := githubquota.InFlightLimit
	cases := []struct {
		method, path, body string
		charged            map[string]int
	}{
		{"GET", "/repos/o/r/issues", "", map[string]int{"core": 1, "points": 1, inFlight: 1}},
		{"HEAD", "/repos/o/r", "", map[string]int{"core": 1, "points": 1, inFlight: 1}},
		{"POST", "/repos/o/r/issues", `{"title":"x"}`, map[string]int{"core": 1, "points": 5, "content-minute": 1, "content-hour": 1, inFlight: 1}},
		{"PUT", "/user/starred/o/r", "", map[string]int{"core": 1, "points": 5, "content-minute": 1, "content-hour": 1, inFlight: 1}},
		{"DELETE", "/repos/o/r/issues/comments/1", "", map[string]int{"core": 1, "points": 5, "content-minute": 1, "content-hour": 1, inFlight: 1}},
		{"GET", "/search/issues?q=x", "", map[string]int{"search": 1, "points": 1, inFlight: 1}},
		{"GET", "/search/code?q=x", "", map[string]int{"code-search": 1, "points": 1, inFlight: 1}},
		{"POST", "/graphql", query, map[string]int{"graphql": 1, "graphql-points": 1, inFlight: 1}},
		{"POST", "/graphql", mutation, map[string]int{"graphql": 1, "graphql-points": 5, "content-minute": 1, "content-hour": 1, inFlight: 1}},
	}
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	for _, tc := range cases {
		r := f.do(tokenA, tc.method, tc.path, tc.body)
		require.Nil(t, r.le, "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.charged, f.store.lastCharged(), "%s %s %s", tc.method, tc.path, tc.body)
	}
	assert.Zero(t, f.fake.Stats().Limited)
}

// sendN sends the request n times and requires a 2xx for each.
func (f *fixture) sendN(n int, token, method, path, body string) {
	f.t.Helper()
	for i := range n {
		r := f.do(token, method, path, body)
		require.Nil(f.t, r.le, "%s %s #%d", method, path, i)
		require.Equal(f.t, 2, r.status/100, "%s %s #%d: status %d", method, path, i, r.status)
	}
}

// GitHub's 900 points a minute are one counter per token, shared by every
// REST endpoint: 80 comments at 5 points and 500 reads of two endpoints
// spend them. The 901st point is refused by the preset whatever the
// endpoint, a search too, and never reaches the fake; GraphQL's points
// are another counter. An instance that does not share the counter (a
// store of its own) sends a 901st, and the fake refuses it.
func TestPointsAreSharedByEndpoints(t *testing.T) {
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	f.sendN(githubquota.ContentPerMinute, tokenA, "POST", "/repos/o/r/issues/1/comments", `{"body":"x"}`)
	f.sendN(250, tokenA, "GET", "/repos/o/r", "")
	f.sendN(250, tokenA, "GET", "/repos/o/r/issues", "")
	for _, path := range []string{"/user", "/repos/o/r", "/repos/other/repo/pulls", "/search/issues?q=x", "/search/code?q=x"} {
		r := f.do(tokenA, "GET", path, "")
		require.NotNil(t, r.le, "%s: the 901st point", path)
		assert.Equal(t, githubquota.PointsLimit, r.le.Limit, path)
		assert.InDelta(t, 61, r.le.RetryAfter.Seconds(), 0.001, path)
	}
	st := f.fake.Stats()
	assert.Zero(t, st.Limited)
	assert.Equal(t, 580, st.Requests, "the refused requests never reached GitHub")
	assert.Nil(t, f.do(tokenA, "POST", "/graphql", `{"query":"{ viewer { login } }"}`).le, "GraphQL's points are its own")
	assert.Nil(t, f.do(tokenB, "GET", "/user", "").le, "another token's points")

	b, _ := f.newClient(githubquota.Options{})
	r := f.send(b, tokenA, "GET", "/user", "")
	require.Nil(t, r.le)
	assert.Equal(t, http.StatusForbidden, r.status, "GitHub refuses the 901st point")
	assert.Equal(t, 1, f.fake.Stats().Limited)
}

// A search is charged its own primary quota and the REST points, not the
// core quota: with core spent searches go, and with the points spent they
// are refused by the points.
func TestSearchStackedOnPointsNotCore(t *testing.T) {
	t.Run("core spent", func(t *testing.T) {
		f := newFixture(t, githubquota.Options{Hourly: 5}, fakegithub.Options{Hourly: 5})
		f.sendN(5, tokenA, "GET", "/user", "")
		r := f.do(tokenA, "GET", "/user", "")
		require.NotNil(t, r.le)
		assert.Equal(t, githubquota.CoreLimit, r.le.Pause)
		f.sendN(githubquota.SearchPerMinute, tokenA, "GET", "/search/issues?q=x", "")
		f.sendN(githubquota.CodeSearchPerMinute, tokenA, "GET", "/search/code?q=x", "")
		st := f.fake.Stats()
		assert.Zero(t, st.Limited)
		assert.Equal(t, map[string]int{"core": 5, "search": 30, "code_search": 9}, st.ByResource)
	})
	t.Run("points spent", func(t *testing.T) {
		f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
		f.sendN(880, tokenA, "GET", "/repos/o/r", "")
		f.sendN(githubquota.CodeSearchPerMinute, tokenA, "GET", "/search/code?q=x", "")
		f.sendN(11, tokenA, "GET", "/search/issues?q=x", "") // 900 points
		r := f.do(tokenA, "GET", "/search/issues?q=x", "")
		require.NotNil(t, r.le, "19 searches of the 30 are left, but no point")
		assert.Equal(t, "github-search", r.le.Rule)
		assert.Equal(t, githubquota.PointsLimit, r.le.Limit)
		assert.Zero(t, f.fake.Stats().Limited)
	})
}

// Content creation is one counter per token for REST writes of every
// method and GraphQL mutations; the fake counts them so too.
func TestContentSharedByRESTAndGraphQL(t *testing.T) {
	const mutation = `{"query":"mutation { addComment(input: {}) { clientMutationId } }"}`
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	f.sendN(30, tokenA, "POST", "/repos/o/r/issues", `{"title":"x"}`)
	f.sendN(20, tokenA, "PATCH", "/repos/o/r/issues/1", `{"title":"y"}`)
	f.sendN(10, tokenA, "DELETE", "/repos/o/r/issues/comments/1", "")
	f.sendN(20, tokenA, "POST", "/graphql", mutation)
	for _, req := range [][3]string{{"POST", "/repos/o/r/issues", `{"title":"x"}`}, {"POST", "/graphql", mutation}} {
		r := f.do(tokenA, req[0], req[1], req[2])
		require.NotNil(t, r.le, "the 81st")
		assert.Equal(t, githubquota.ContentMinuteLimit, r.le.Limit)
	}
	assert.Nil(t, f.do(tokenA, "POST", "/graphql", `{"query":"{ viewer { login } }"}`).le, "a query creates nothing")
	st := f.fake.Stats()
	assert.Zero(t, st.Limited)
	assert.Equal(t, githubquota.ContentPerMinute, st.Created)

	b, _ := f.newClient(githubquota.Options{})
	r := f.send(b, tokenA, "POST", "/graphql", mutation)
	require.Nil(t, r.le)
	assert.Equal(t, http.StatusForbidden, r.status, "GitHub counts the mutation as the 81st")
}

func TestContentCreationPerHour(t *testing.T) {
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	sent := 0
	for round := 0; sent < githubquota.ContentPerHour; round++ {
		ok, le := f.upTo(githubquota.ContentPerMinute, tokenA, "POST", "/repos/o/r/issues/1/comments", `{"body":"x"}`)
		sent += ok
		require.NotNil(t, le)
		if sent < githubquota.ContentPerHour {
			assert.Equal(t, githubquota.ContentMinuteLimit, le.Limit, "round %d", round)
		} else {
			assert.Equal(t, githubquota.ContentHourLimit, le.Limit, "round %d", round)
			// The hour's first comments leave the window an hour (and the
			// margin) after they were sent, 6 rounds of 61 s ago.
			assert.Equal(t, time.Hour+time.Second-6*61*time.Second, le.RetryAfter)
		}
		f.clock.Add(61 * time.Second)
	}
	assert.Equal(t, githubquota.ContentPerHour, sent)
	st := f.fake.Stats()
	assert.Zero(t, st.Limited)
	assert.Equal(t, githubquota.ContentPerHour, st.Created)
}

func TestPrimarySyncedWithHeaders(t *testing.T) {
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	f.fake.Use(tokenA, "core", 4990) // another service used the token
	ok, le := f.upTo(20, tokenA, "GET", "/user", "")
	assert.Equal(t, 10, ok, "what GitHub said remained, not our own 5000")
	require.NotNil(t, le)
	assert.Equal(t, "github-rest", le.Rule)
	assert.Equal(t, githubquota.CoreLimit, le.Pause, "remaining 0 pauses the token's core quota until the reset")
	assert.Zero(t, f.fake.Stats().Limited)

	assert.Nil(t, f.do(tokenA, "GET", "/search/issues?q=x", "").le, "search is another resource")
	assert.Nil(t, f.do(tokenB, "GET", "/user", "").le, "another token")
}

func TestPrimaryExhaustedBy403PausesUntilReset(t *testing.T) {
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{Hourly: 3})
	// Our preset believes in 5,000 and GitHub enforces 3: the 4th request
	// gets GitHub's 403 with remaining 0. Sync lowers the counter on the
	// way, so it is the preset that stops first.
	ok, le := f.upTo(10, tokenA, "GET", "/user", "")
	assert.Equal(t, 3, ok)
	require.NotNil(t, le)
	assert.Equal(t, githubquota.CoreLimit, le.Pause)
	assert.InDelta(t, time.Hour.Seconds(), le.RetryAfter.Seconds(), 2)
	assert.Zero(t, f.fake.Stats().Limited)
}

func TestSecondaryLimitAnswers(t *testing.T) {
	cases := []struct {
		name  string
		fake  fakegithub.Options
		pause time.Duration
	}{
		{"403 with Retry-After", fakegithub.Options{}, 61 * time.Second},
		{"429 with Retry-After", fakegithub.Options{SecondaryStatus: http.StatusTooManyRequests}, 61 * time.Second},
		{"403 without Retry-After: a minute", fakegithub.Options{NoRetryAfter: true}, time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, githubquota.Options{}, tc.fake)
			// Instance A creates 80 comments; instance B, with a store of
			// its own (no Redis), does not know and creates one more.
			ok, _ := f.upTo(githubquota.ContentPerMinute, tokenA, "POST", "/repos/o/r/issues", `{"title":"x"}`)
			require.Equal(t, githubquota.ContentPerMinute, ok)
			b, _ := f.newClient(githubquota.Options{})
			r := f.send(b, tokenA, "POST", "/repos/o/r/issues", `{"title":"x"}`)
			require.Nil(t, r.le)
			want := tc.fake.SecondaryStatus
			if want == 0 {
				want = http.StatusForbidden
			}
			assert.Equal(t, want, r.status)
			assert.Equal(t, 1, f.fake.Stats().Limited)

			// B now holds back every request of that token...
			r = f.send(b, tokenA, "GET", "/user", "")
			require.NotNil(t, r.le, "the token is paused")
			assert.Equal(t, githubquota.CoreLimit, r.le.Pause)
			assert.GreaterOrEqual(t, r.le.RetryAfter, tc.pause-time.Second)
			assert.LessOrEqual(t, r.le.RetryAfter, tc.pause+time.Second, "at most a second of jitter")
			// ...but not other tokens.
			assert.Nil(t, f.send(b, tokenB, "GET", "/user", "").le)
			assert.Equal(t, 1, f.fake.Stats().Limited)
		})
	}
}

func TestPermission403IsNotAPause(t *testing.T) {
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	r := f.do(tokenA, "GET", "/repos/o/private", "")
	require.Nil(t, r.le)
	assert.Equal(t, http.StatusForbidden, r.status)
	r = f.do(tokenA, "GET", "/repos/o/private", "")
	assert.Nil(t, r.le, "a permission 403 pauses nothing")
	assert.Equal(t, http.StatusForbidden, r.status)
	st := f.fake.Stats()
	assert.Equal(t, 2, st.Forbidden)
	assert.Zero(t, st.Limited)
}

func TestTokenRequestsHaveTheirOwnLane(t *testing.T) {
	f := newFixture(t, githubquota.Options{Hourly: 1}, fakegithub.Options{Hourly: 1})
	require.Nil(t, f.do(tokenA, "GET", "/user", "").le)
	r := f.do(tokenA, "GET", "/user", "")
	require.NotNil(t, r.le, "the token's quota is spent and it is paused")
	// A request for a new installation token, signed with the App's JWT,
	// goes at once.
	r = f.do("app.jwt.value", "POST", "/app/installations/42/access_tokens", "")
	require.Nil(t, r.le)
	assert.Equal(t, http.StatusCreated, r.status)
	// So it does even when the whole GitHub scope is paused.
	require.NoError(t, f.store.Pause(context.Background(), githubquota.Scope, "", time.Hour))
	r = f.do(tokenA, "POST", "/app/installations/42/access_tokens", "")
	assert.Nil(t, r.le)
	assert.Zero(t, f.fake.Stats().Limited)
}

func TestActionsTokenPerRepository(t *testing.T) {
	f := newFixture(t, githubquota.Options{Token: githubquota.Actions, Hourly: 4}, fakegithub.Options{Hourly: 100})
	for i, tok := range []string{"ghs_run1", "ghs_run2", "ghs_run1", "ghs_run2"} {
		require.Nil(t, f.do(tok, "GET", "/repos/o/r/issues", "").le, "request %d", i)
	}
	r := f.do("ghs_run3", "GET", "/repos/o/r", "")
	require.NotNil(t, r.le, "every token of the repository shares its 1,000 (here 4) an hour")
	assert.Equal(t, githubquota.CoreLimit, r.le.Limit)
	assert.Nil(t, f.do("ghs_run3", "GET", "/repos/o/other", "").le, "another repository")
}

func TestTokenKinds(t *testing.T) {
	assert.Equal(t, 5000, githubquota.Standard.Hourly())
	assert.Equal(t, 15000, githubquota.EnterpriseCloud.Hourly())
	assert.Equal(t, 1000, githubquota.Actions.Hourly())
	for _, tok := range []githubquota.Token{githubquota.Standard, githubquota.EnterpriseCloud, githubquota.Actions} {
		p, err := githubquota.Policy(githubquota.Options{Token: tok})
		require.NoError(t, err)
		require.NoError(t, p.Validate())
	}
	f := newFixture(t, githubquota.Options{Token: githubquota.EnterpriseCloud}, fakegithub.Options{Hourly: 15000})
	r := f.do(tokenA, "GET", "/user", "")
	require.Nil(t, r.le)
	assert.Equal(t, "15000", r.header.Get("X-Ratelimit-Limit"))
}

func TestTokensAreHashed(t *testing.T) {
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	f.do(tokenA, "GET", "/repos/o/r/issues", "")
	f.do(tokenA, "POST", "/graphql", `{"query":"{ viewer { login } }"}`)
	// "token X" and "Bearer X" are one token.
	req, _ := http.NewRequest("GET", f.url("/user"), nil)
	req.Header.Set("Authorization", "token "+tokenA)
	resp, err := f.client.Do(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	tokenKeys := map[string]bool{}
	for _, k := range f.store.keys {
		assert.NotContains(t, k, "SECRET")
		assert.NotContains(t, k, "ghp_")
		if strings.HasPrefix(k, "sha256:") && !strings.Contains(k, "%") {
			tokenKeys[k] = true
		}
	}
	assert.Len(t, tokenKeys, 1, "one hashed key for both spellings of the token")
}

// GraphQL's 2,000 points a minute: 80 mutations at 5 and 1,600 queries at
// 1; the next query is refused, and REST's points are untouched.
func TestGraphQLPoints(t *testing.T) {
	f := newFixture(t, githubquota.Options{}, fakegithub.Options{})
	f.sendN(githubquota.ContentPerMinute, tokenA, "POST", "/graphql", `{"query":"\n  mutation { x }"}`)
	ok, le := f.upTo(1600, tokenA, "POST", "/graphql", `{"query":"query { viewer { login } }"}`)
	assert.Equal(t, 1600, ok)
	require.NotNil(t, le)
	assert.Equal(t, githubquota.GraphQLPointsLimit, le.Limit)
	assert.Nil(t, f.do(tokenA, "GET", "/user", "").le)
	assert.Zero(t, f.fake.Stats().Limited)
}

func TestInFlightLimit(t *testing.T) {
	burst := func(t *testing.T, po githubquota.Options) fakegithub.Stats {
		po.Wait = waiters.Block()
		f := newFixture(t, po, fakegithub.Options{Latency: 200 * time.Millisecond})
		var wg sync.WaitGroup
		for i := range 150 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Reads, searches and GraphQL queries: one token's
				// slots, whichever rule.
				method, path, body := http.MethodGet, "/repos/o/r"+strings.Repeat("x", i%3), ""
				switch i % 10 {
				case 0:
					path = "/search/issues?q=x"
				case 1:
					method, path, body = http.MethodPost, "/graphql", `{"query":"{ viewer { login } }"}`
				}
				req, err := http.NewRequest(method, f.url(path), strings.NewReader(body))
				if !assert.NoError(t, err) {
					return
				}
				req.Header.Set("Authorization", "Bearer "+tokenA)
				resp, err := f.client.Do(req)
				if !assert.NoError(t, err) {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				assert.NoError(t, resp.Body.Close())
			}()
		}
		wg.Wait()
		return f.fake.Stats()
	}

	t.Run("limited", func(t *testing.T) {
		st := burst(t, githubquota.Options{})
		assert.LessOrEqual(t, st.MaxInFlight, 100, "never more than 100 of a token in flight")
		assert.Equal(t, 0, st.Limited, "no secondary-limit answers")
		assert.Equal(t, 150, st.OK, "every request went through")
	})
	t.Run("without the limit the fake GitHub refuses some", func(t *testing.T) {
		st := burst(t, githubquota.Options{MaxInFlight: -1})
		assert.Greater(t, st.MaxInFlight, 100)
		assert.Positive(t, st.Limited)
	})
}

// Every GitHub sends each kind of request to its rule, at its paths; a
// page of the host outside the API is no rule's.
func TestHostsMatchTheirRules(t *testing.T) {
	cases := []struct {
		token, method, path, body string
		rule                      string
	}{
		{tokenA, "GET", "/repos/o/r/issues", "", "github-rest"},
		{tokenA, "PATCH", "/repos/o/r/issues/1", `{"title":"x"}`, "github-rest"},
		{tokenA, "POST", "/repos/o/r/issues", `{"title":"x"}`, "github-rest"},
		{tokenA, "GET", "/search/issues?q=x", "", "github-search"},
		{tokenA, "GET", "/search/code?q=x", "", "github-code-search"},
		{tokenA, "POST", "/graphql", `{"query":"{ viewer { login } }"}`, "github-graphql"},
		{"", "GET", "/repos/o/r", "", "github-unauthenticated"},
		{"", "GET", "/search/issues?q=x", "", "github-unauthenticated-search"},
		{"app.jwt", "POST", "/app/installations/42/access_tokens", "", "github-installation-token"},
		{"", "POST", "/login/oauth/access_token", "client_id=x", "github-oauth-token"},
	}
	for _, at := range sites() {
		t.Run(at.name, func(t *testing.T) {
			f := newFixtureAt(t, at, githubquota.Options{}, fakegithub.Options{})
			for _, tc := range cases {
				r := f.do(tc.token, tc.method, tc.path, tc.body)
				require.Nil(t, r.le, tc.path)
				assert.Equal(t, tc.rule, f.rules.last(), "%s %s", tc.method, tc.path)
			}
			if at.enterprise {
				// GitHub Enterprise Server's web pages and uploads are
				// not the API's: no rule decides them.
				for _, path := range []string{"/o/r", "/api/uploads/repos/o/r/releases/1/assets?name=a"} {
					req, err := http.NewRequest(http.MethodPost, f.fake.URL+path, strings.NewReader("x"))
					require.NoError(t, err)
					req.Header.Set("Authorization", "Bearer "+tokenA)
					resp, err := f.client.Do(req)
					require.NoError(t, err)
					require.NoError(t, resp.Body.Close())
					assert.Empty(t, f.rules.last(), path)
				}
			}
			assert.Zero(t, f.fake.Stats().Limited)
		})
	}
}

// Learning follows the host: on every GitHub, what the fake's headers say
// remains lowers the preset's counter, and a secondary-limit 403 without
// Retry-After pauses the token for GitHub's minute.
func TestLearningOnEveryHost(t *testing.T) {
	for _, at := range sites() {
		t.Run(at.name, func(t *testing.T) {
			f := newFixtureAt(t, at, githubquota.Options{}, fakegithub.Options{NoRetryAfter: true})
			f.fake.Use(tokenA, "core", 4990) // another service used the token
			ok, le := f.upTo(20, tokenA, "GET", "/user", "")
			assert.Equal(t, 10, ok, "what GitHub said remained")
			require.NotNil(t, le)
			assert.Equal(t, githubquota.CoreLimit, le.Pause)

			// Instance B, with a store of its own, creates one comment
			// more than GitHub takes in a minute.
			sent, _ := f.upTo(githubquota.ContentPerMinute, tokenB, "POST", "/repos/o/r/issues", `{"title":"x"}`)
			require.Equal(t, githubquota.ContentPerMinute, sent)
			b, _ := f.newClient(githubquota.Options{})
			r := f.send(b, tokenB, "POST", "/repos/o/r/issues", `{"title":"x"}`)
			require.Nil(t, r.le)
			assert.Equal(t, http.StatusForbidden, r.status)
			r = f.send(b, tokenB, "GET", "/user", "")
			require.NotNil(t, r.le, "B paused the token")
			assert.Equal(t, githubquota.CoreLimit, r.le.Pause)
			assert.InDelta(t, githubquota.SecondaryPause.Seconds(), r.le.RetryAfter.Seconds(), 1)
			assert.Equal(t, 1, f.fake.Stats().Limited, "only the one B sent")
		})
	}
}

// A rule of your own in front of the preset's learns GitHub's way on a
// GitHub Enterprise Server, or a fake, only with the preset's Profile:
// without it a secondary-limit 403 with no Retry-After is a response like
// any other, and the next request gets another.
func TestProfileForRulesOfYourOwn(t *testing.T) {
	for _, withProfile := range []bool{true, false} {
		t.Run(fmt.Sprint("profile ", withProfile), func(t *testing.T) {
			fake := fakegithub.NewServer(fakegithub.Options{Enterprise: true, NoRetryAfter: true})
			defer fake.Close()
			po := githubquota.Options{BaseURL: fake.BaseURL(), Wait: waiters.FailFast()}
			rules, err := githubquota.Rules(po)
			require.NoError(t, err)
			host := strings.TrimPrefix(fake.URL, "http://")
			mine := throttle.Rule{Name: "uploads", Host: host, Path: "/api/uploads/", Wait: waiters.FailFast()} // no limits of its own
			var opts []throttle.Option
			if withProfile {
				profile, err := githubquota.Profile(po)
				require.NoError(t, err)
				assert.Equal(t, []string{host}, profile.Hosts)
				opts = append(opts, throttle.WithProfiles(append([]quotaheader.Profile{profile}, quotaheader.DefaultProfiles...)...))
			}
			tr, err := throttle.NewTransport(nil, throttle.Policy{Rules: append([]throttle.Rule{mine}, rules...)}, opts...)
			require.NoError(t, err)
			client := &http.Client{Transport: tr}
			defer client.CloseIdleConnections()
			post := func(url string) (int, error) {
				req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"title":"x"}`))
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+tokenA)
				resp, err := client.Do(req)
				if err != nil {
					return 0, err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp.StatusCode, resp.Body.Close()
			}
			for range githubquota.ContentPerMinute {
				status, err := post(fake.BaseURL() + "repos/o/r/issues")
				require.NoError(t, err)
				require.Equal(t, http.StatusCreated, status)
			}
			// The fake counts an upload as content created: the 81st.
			upload := fake.UploadURL() + "repos/o/r/releases/1/assets?name=a.txt"
			status, err := post(upload)
			require.NoError(t, err)
			assert.Equal(t, http.StatusForbidden, status)
			status, err = post(upload)
			if withProfile {
				assert.ErrorIs(t, err, throttle.ErrLimited, "the 403 paused the rule")
				assert.Equal(t, 1, fake.Stats().Limited)
			} else {
				require.NoError(t, err)
				assert.Equal(t, http.StatusForbidden, status, "sent again")
				assert.Equal(t, 2, fake.Stats().Limited)
			}
		})
	}
}

func TestProfile(t *testing.T) {
	for _, base := range []string{"", githubquota.DefaultBaseURL, "https://api.acme.ghe.com/", "https://API.Acme.GHE.com:8443/"} {
		p, err := githubquota.Profile(githubquota.Options{BaseURL: base})
		require.NoError(t, err)
		assert.Equal(t, quotaheader.GitHub.Hosts, p.Hosts, "%q: quotaheader.GitHub covers it", base)
	}
	p, err := githubquota.Profile(githubquota.Options{BaseURL: "https://ghe.example.com:8443/api/v3/"})
	require.NoError(t, err)
	assert.Equal(t, []string{"ghe.example.com:8443"}, p.Hosts)
	assert.Equal(t, quotaheader.GitHub.Name, p.Name)
	assert.Equal(t, quotaheader.GitHub.ResetFormat, p.ResetFormat)
	assert.Equal(t, githubquota.SecondaryPause, p.DefaultPause)
	assert.NotNil(t, p.Limited)
	_, err = githubquota.Profile(githubquota.Options{BaseURL: "ftp://ghe.example.com/"})
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
}

// Where each GitHub's rules match, read from the rules themselves.
func TestRulesOfEachHost(t *testing.T) {
	type where struct{ host, path string }
	cases := []struct {
		base                        string
		rest, graphQL, oauth, token where
	}{
		{"", where{"api.github.com", "/"}, where{"api.github.com", "/graphql"}, where{"github.com", "/login/oauth/access_token"},
			where{"api.github.com", "/app/installations/{installation_id}/access_tokens"}},
		{"https://api.acme.ghe.com", where{"api.acme.ghe.com", "/"}, where{"api.acme.ghe.com", "/graphql"}, where{"acme.ghe.com", "/login/oauth/access_token"},
			where{"api.acme.ghe.com", "/app/installations/{installation_id}/access_tokens"}},
		{"https://ghe.example.com/api/v3", where{"ghe.example.com", "/api/v3/"}, where{"ghe.example.com", "/api/graphql"}, where{"ghe.example.com", "/login/oauth/access_token"},
			where{"ghe.example.com", "/api/v3/app/installations/{installation_id}/access_tokens"}},
		{"https://example.com:8443/github/api/v3/", where{"example.com:8443", "/github/api/v3/"}, where{"example.com:8443", "/github/api/graphql"}, where{"example.com:8443", "/login/oauth/access_token"},
			where{"example.com:8443", "/github/api/v3/app/installations/{installation_id}/access_tokens"}},
		{"http://127.0.0.1:8080/", where{"127.0.0.1:8080", "/"}, where{"127.0.0.1:8080", "/graphql"}, where{"127.0.0.1:8080", "/login/oauth/access_token"},
			where{"127.0.0.1:8080", "/app/installations/{installation_id}/access_tokens"}},
		{"http://[::1]:8080/fake/", where{"[::1]:8080", "/fake/"}, where{"[::1]:8080", "/fake/graphql"}, where{"[::1]:8080", "/login/oauth/access_token"},
			where{"[::1]:8080", "/fake/app/installations/{installation_id}/access_tokens"}},
	}
	for _, tc := range cases {
		rules, err := githubquota.Rules(githubquota.Options{BaseURL: tc.base})
		require.NoError(t, err, tc.base)
		require.NoError(t, throttle.Policy{Rules: rules}.Validate())
		got := map[string]where{}
		for _, r := range rules {
			got[r.Name] = where{r.Host, r.Path}
		}
		assert.Equal(t, map[string]where{
			"github-installation-token":     tc.token,
			"github-oauth-token":            tc.oauth,
			"github-unauthenticated-search": {tc.rest.host, tc.rest.path + "search/"},
			"github-unauthenticated":        {tc.rest.host, ""},
			"github-code-search":            {tc.rest.host, tc.rest.path + "search/code"},
			"github-search":                 {tc.rest.host, tc.rest.path + "search/"},
			"github-graphql":                tc.graphQL,
			"github-rest":                   tc.rest,
		}, got, tc.base)
	}
}

// Bad options fail at construction with an error naming the field, never
// a panic and never a preset that matches some other host.
func TestBadOptions(t *testing.T) {
	cases := []struct {
		opts  githubquota.Options
		field string
		says  string
	}{
		{githubquota.Options{BaseURL: "://ghe"}, "BaseURL", "missing protocol scheme"},
		{githubquota.Options{BaseURL: "ghe.example.com/api/v3/"}, "BaseURL", "scheme must be https"},
		{githubquota.Options{BaseURL: "ftp://ghe.example.com/"}, "BaseURL", "scheme must be https"},
		{githubquota.Options{BaseURL: "https:///api/v3/"}, "BaseURL", "no host"},
		{githubquota.Options{BaseURL: "https:ghe.example.com"}, "BaseURL", "no host"},
		{githubquota.Options{BaseURL: "https://*.ghe.com/"}, "BaseURL", "one name, not a pattern"},
		{githubquota.Options{BaseURL: "https://ghe.example.com:x/"}, "BaseURL", "invalid port"},
		{githubquota.Options{BaseURL: "https://user:secret@ghe.example.com/api/v3/"}, "BaseURL", "credentials"},
		{githubquota.Options{BaseURL: "https://ghe.example.com/api/v3/?x=1"}, "BaseURL", "no query"},
		{githubquota.Options{BaseURL: "https://ghe.example.com/api/v3/#top"}, "BaseURL", "no query or fragment"},
		{githubquota.Options{BaseURL: "https://ghe.example.com/{org}/api/v3/"}, "BaseURL", "{ or }"},
		{githubquota.Options{BaseURL: "https://api.github.com/api/v3/"}, "BaseURL", "root of api.github.com"},
		{githubquota.Options{BaseURL: "https://api.acme.ghe.com/api/v3/"}, "BaseURL", "root of api.acme.ghe.com"},
		{githubquota.Options{Token: githubquota.Actions + 1}, "Token", "none of Standard"},
		{githubquota.Options{Token: -1}, "Token", "none of Standard"},
		{githubquota.Options{GraphQLEstimate: -1}, "GraphQLEstimate", "-1 is not within 0"},
		{githubquota.Options{GraphQLEstimate: 5001}, "GraphQLEstimate", "the hourly GraphQL quota, 5000"},
		{githubquota.Options{Hourly: 40, GraphQLEstimate: 41}, "GraphQLEstimate", "the hourly GraphQL quota, 40"},
	}
	for _, tc := range cases {
		_, err := githubquota.Rules(tc.opts)
		require.Error(t, err, "%+v", tc.opts)
		assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
		var pe *throttle.PolicyError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "githubquota.Options."+tc.field, pe.Field)
		assert.ErrorContains(t, err, tc.says)
		if tc.opts.BaseURL != "" {
			assert.ErrorContains(t, err, "githubquota.Options.BaseURL")
			assert.NotContains(t, err.Error(), "secret", "no credentials in errors")
		}
		_, perr := githubquota.Policy(tc.opts)
		assert.Equal(t, err, perr, "Policy gives the error Rules gives")
	}
	var ue *url.Error
	_, err := githubquota.Rules(githubquota.Options{BaseURL: "://ghe"})
	assert.ErrorAs(t, err, &ue, "the parse error is wrapped")
}

func TestSecondaryPauseIsGitHubsProfile(t *testing.T) {
	assert.Equal(t, quotaheader.GitHub.DefaultPause, githubquota.SecondaryPause)
}
