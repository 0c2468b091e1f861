package slackquota_test

import (
	"context"
	"errors"
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
	"github.com/quotakit/throttle/presets/slackquota"
	"github.com/quotakit/throttle/presets/slackquota/fakeslack"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	tokenA = "xoxb-1111-secret-a"
	tokenB = "xoxb-2222-secret-b"
)

// keyStore is a MemoryStore that records every key it is asked about, to
// check that no token reaches a store.
type keyStore struct {
	*memstore.Store
	mu   sync.Mutex
	keys []string
}

func (s *keyStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	s.mu.Lock()
	for _, b := range d.Limits {
		s.keys = append(s.keys, b.Key)
	}
	s.keys = append(s.keys, d.Pauses...)
	s.mu.Unlock()
	return s.Store.Take(ctx, d)
}

type fixture struct {
	t      *testing.T
	fake   *fakeslack.Server
	store  *keyStore
	client *http.Client
	site   site
}

// site is where a fixture's client sends: the Web API's base URL as
// slackquota.Options.APIURL takes it, and the start of webhook URLs. A
// site whose host is not the fake's reaches the fake all the same: the
// client dials the fake whatever the address.
type site struct {
	name          string
	api, webhooks string
	redirect      bool
}

// sites are the Slacks the tests run on: slack.com's layout (the fake at
// its root) and GovSlack's (slack-gov.com and hooks.slack-gov.com,
// reached on loopback).
func sites() []site {
	return []site{
		{name: "slack.com layout"},
		{name: "GovSlack", api: "http://slack-gov.com/api/", webhooks: "http://hooks.slack-gov.com/services/", redirect: true},
	}
}

func newFixture(t *testing.T, po slackquota.Options, fo fakeslack.Options) *fixture {
	return newFixtureAt(t, sites()[0], po, fo)
}

func newFixtureAt(t *testing.T, at site, po slackquota.Options, fo fakeslack.Options) *fixture {
	return newFixtureClock(t, at, po, fo, nil)
}

// newFixtureClock is newFixtureAt with the store's clock now (nil: the
// real one): a clock that stands still makes a burst's count and the
// retry time exact however slowly the machine sends it.
func newFixtureClock(t *testing.T, at site, po slackquota.Options, fo fakeslack.Options, now func() time.Time) *fixture {
	fake := fakeslack.NewServer(fo)
	t.Cleanup(fake.Close)
	if at.api == "" {
		at.api, at.webhooks = fake.APIURL(), fake.URL+"/services/"
	}
	po.APIURL = at.api // the webhooks are found beside it
	if po.Wait == nil {
		po.Wait = waiters.FailFast()
	}
	store := &keyStore{Store: memstore.New(memstore.WithClock(now))}
	policy, err := slackquota.Policy(po)
	require.NoError(t, err)
	base := &http.Transport{}
	if at.redirect {
		addr := fake.Listener.Addr().String()
		base.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr) // loopback only, whatever the host
		}
	}
	t.Cleanup(base.CloseIdleConnections)
	tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store))
	require.NoError(t, err)
	return &fixture{t: t, fake: fake, store: store, client: &http.Client{Transport: tr}, site: at}
}

// webhookURL is the URL of the fake's incoming webhook n at the site.
func (f *fixture) webhookURL(n int) string {
	return f.site.webhooks + strings.TrimPrefix(f.fake.WebhookURL(n), f.fake.URL+"/services/")
}

// call calls a Web API method with a form body as slack-go does; it
// returns the status (0 if not sent) and the refusal, if any.
func (f *fixture) call(token, method string, form url.Values) (int, *throttle.LimitError) {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.site.api+method, strings.NewReader(form.Encode()))
	require.NoError(f.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	return f.do(req)
}

func (f *fixture) do(req *http.Request) (int, *throttle.LimitError) {
	f.t.Helper()
	resp, err := f.client.Do(req)
	if err != nil {
		var le *throttle.LimitError
		require.ErrorAs(f.t, err, &le)
		require.ErrorIs(f.t, err, throttle.ErrLimited)
		return 0, le
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(f.t, resp.Body.Close())
	return resp.StatusCode, nil
}

// burst calls method n times; it returns how many were sent, and the
// first refusal.
func (f *fixture) burst(token, method string, n int) (int, *throttle.LimitError) {
	f.t.Helper()
	sent := 0
	var first *throttle.LimitError
	for range n {
		status, le := f.call(token, method, url.Values{"channel": {"C1"}})
		if le != nil {
			if first == nil {
				first = le
			}
			continue
		}
		require.Equal(f.t, http.StatusOK, status)
		sent++
	}
	return sent, first
}

func TestTiers(t *testing.T) {
	cases := []struct {
		name    string
		opts    slackquota.Options
		method  string
		tier    slackquota.Tier
		burst   int
		nextIn  time.Duration // when the next call could go
		ruleFor string
	}{
		{"tier1", slackquota.Options{}, "rtm.connect", slackquota.Tier1, 1, time.Minute, "slack-tier1"},
		{"tier2", slackquota.Options{}, "users.list", slackquota.Tier2, 3, 3 * time.Second, "slack-tier2"},
		{"tier3", slackquota.Options{}, "conversations.history", slackquota.Tier3, 5, 1200 * time.Millisecond, "slack-tier3"},
		{"tier4", slackquota.Options{}, "users.info", slackquota.Tier4, 10, 600 * time.Millisecond, "slack-tier4"},
		{"unknown method: default tier 2", slackquota.Options{}, "admin.foo.bar", slackquota.Tier2, 3, 3 * time.Second, "slack-tier2"},
		{"default tier set", slackquota.Options{DefaultTier: slackquota.Tier4}, "admin.foo.bar", slackquota.Tier4, 10, 600 * time.Millisecond, "slack-tier4"},
		{"override", slackquota.Options{Tiers: map[string]slackquota.Tier{"users.list": slackquota.Tier4}}, "users.list", slackquota.Tier4, 10, 600 * time.Millisecond, "slack-tier4"},
		{"non-Marketplace 2025: history", slackquota.Options{NonMarketplace2025: true}, "conversations.history", slackquota.Tier1, 1, time.Minute, "slack-tier1"},
		{"non-Marketplace 2025: replies", slackquota.Options{NonMarketplace2025: true}, "conversations.replies", slackquota.Tier1, 1, time.Minute, "slack-tier1"},
		{"non-Marketplace 2025, overridden", slackquota.Options{NonMarketplace2025: true, Tiers: map[string]slackquota.Tier{"conversations.replies": slackquota.Tier3}}, "conversations.replies", slackquota.Tier3, 5, 1200 * time.Millisecond, "slack-tier3"},
	}
	for _, at := range sites() {
		for _, tc := range cases {
			t.Run(at.name+"/"+tc.name, func(t *testing.T) {
				assert.Equal(t, tc.tier, tc.opts.TierOf(tc.method))
				still := time.Now()
				f := newFixtureClock(t, at, tc.opts, fakeslack.Options{Tiers: tc.opts.Tiers, NonMarketplace2025: tc.opts.NonMarketplace2025}, func() time.Time { return still })
				sent, le := f.burst(tokenA, tc.method, tc.burst+3)
				assert.Equal(t, tc.burst, sent, "a burst, then the tier's pace")
				require.NotNil(t, le)
				assert.Equal(t, tc.ruleFor, le.Rule)
				assert.Equal(t, tc.tier.String(), le.Limit)
				assert.Equal(t, tc.nextIn, le.RetryAfter)

				// Per method per workspace: another workspace, and another
				// method of the same tier, have their own counters.
				sent, _ = f.burst(tokenB, tc.method, tc.burst)
				assert.Equal(t, tc.burst, sent, "another workspace")
				sent, _ = f.burst(tokenA, tc.method+"x", 1)
				assert.Equal(t, 1, sent, "another method")

				st := f.fake.Stats()
				assert.Zero(t, st.Limited, "Slack answered 429")
				assert.Equal(t, 2*tc.burst, st.ByMethod[tc.method])
			})
		}
	}
}

func TestTierValues(t *testing.T) {
	for tier, want := range map[slackquota.Tier][3]int{slackquota.Tier1: {1, 1}, slackquota.Tier2: {20, 3}, slackquota.Tier3: {50, 5}, slackquota.Tier4: {100, 10}} {
		l := tier.Limit()
		assert.Equal(t, [3]int{want[0], want[1], int(time.Minute / time.Second)}, [3]int{l.Rate, l.Burst, int(l.Per / time.Second)}, tier.String())
		assert.True(t, tier.Valid())
	}
	assert.False(t, slackquota.Tier(0).Valid())
	assert.Equal(t, "Tier(9)", slackquota.Tier(9).String())
	assert.Zero(t, slackquota.Tier(9).Limit())
	// Rules refuses an invalid override; TierOf gives the default tier.
	o := slackquota.Options{Tiers: map[string]slackquota.Tier{"users.info": 7}}
	assert.Equal(t, slackquota.Tier2, o.TierOf("users.info"))
	_, err := slackquota.Rules(o)
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	p, err := slackquota.Policy(slackquota.Options{})
	require.NoError(t, err)
	require.NoError(t, p.Validate())
}

func TestPostMessagePerChannel(t *testing.T) {
	f := newFixture(t, slackquota.Options{}, fakeslack.Options{})
	post := func(token, channel string, json bool) (int, *throttle.LimitError) {
		var req *http.Request
		var err error
		if json {
			req, err = http.NewRequest(http.MethodPost, f.site.api+"chat.postMessage", strings.NewReader(`{"channel":"`+channel+`","text":"hi"}`))
			req.Header.Set("Content-Type", "application/json; charset=utf-8")
		} else {
			req, err = http.NewRequest(http.MethodPost, f.site.api+"chat.postMessage", strings.NewReader(url.Values{"channel": {channel}, "text": {"hi"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		return f.do(req)
	}
	for _, json := range []bool{false, true} {
		ch := "C-form"
		if json {
			ch = "C-json"
		}
		for i := range slackquota.PostBurst {
			status, le := post(tokenA, ch, json)
			require.Nil(t, le, "message %d", i)
			assert.Equal(t, http.StatusOK, status)
		}
		_, le := post(tokenA, ch, json)
		require.NotNil(t, le, "the channel's burst is spent")
		assert.Equal(t, slackquota.PostRule, le.Rule)
		assert.Equal(t, slackquota.ChannelLimit, le.Limit)
		assert.InDelta(t, 1, le.RetryAfter.Seconds(), 0.1)
	}
	// Another channel, the same channel in another workspace: their own.
	_, le := post(tokenA, "C-other", false)
	assert.Nil(t, le)
	_, le = post(tokenB, "C-form", true)
	assert.Nil(t, le)
	// No channel: the request cannot be decided and is not sent.
	req, _ := http.NewRequest(http.MethodPost, f.site.api+"chat.postMessage", strings.NewReader("text=hi"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+tokenA)
	_, err := f.client.Do(req)
	assert.ErrorIs(t, err, throttle.ErrMissingKey)

	st := f.fake.Stats()
	assert.Zero(t, st.Limited)
	assert.Equal(t, 2*slackquota.PostBurst+2, st.Messages)
}

func TestWebhookPerURLAndChannel(t *testing.T) {
	for _, at := range sites() {
		t.Run(at.name, func(t *testing.T) { testWebhookPerURLAndChannel(t, at) })
	}
}

func testWebhookPerURLAndChannel(t *testing.T, at site) {
	f := newFixtureAt(t, at, slackquota.Options{}, fakeslack.Options{})
	hook := func(n int, body string) *throttle.LimitError {
		req, err := http.NewRequest(http.MethodPost, f.webhookURL(n), strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		status, le := f.do(req)
		if le == nil {
			assert.Equal(t, http.StatusOK, status)
		}
		return le
	}
	for range slackquota.PostBurst {
		require.Nil(t, hook(1, `{"text":"hi"}`))
	}
	le := hook(1, `{"text":"hi"}`)
	require.NotNil(t, le)
	assert.Equal(t, slackquota.WebhookRule, le.Rule)
	assert.Equal(t, slackquota.WebhookLimit, le.Limit)
	assert.Nil(t, hook(2, `{"text":"hi"}`), "another webhook")
	assert.Nil(t, hook(1, `{"text":"hi","channel":"#ops"}`), "a channel named in the body")
	st := f.fake.Stats()
	assert.Zero(t, st.Limited)
	assert.Equal(t, slackquota.PostBurst+2, st.Messages)
}

func TestTokensAreHashed(t *testing.T) {
	f := newFixture(t, slackquota.Options{}, fakeslack.Options{})
	f.call(tokenA, "users.info", url.Values{"user": {"U1"}})
	f.call(tokenA, "chat.postMessage", url.Values{"channel": {"C1"}, "text": {"x"}})
	// The older style: the token in the form body.
	req, _ := http.NewRequest(http.MethodPost, f.site.api+"users.info", strings.NewReader(url.Values{"token": {tokenB}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	status, le := f.do(req)
	require.Nil(t, le)
	assert.Equal(t, http.StatusOK, status)

	f.store.mu.Lock()
	defer f.store.mu.Unlock()
	require.NotEmpty(t, f.store.keys)
	hashed := 0
	for _, k := range f.store.keys {
		for _, secret := range []string{"secret", "1111", "2222", "xoxb"} {
			assert.NotContains(t, k, secret)
		}
		if strings.Contains(k, "sha256") {
			hashed++
		}
	}
	assert.Positive(t, hashed)

	// No token at all: not sent.
	req, _ = http.NewRequest(http.MethodPost, f.site.api+"users.info", strings.NewReader("user=U1"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	_, err := f.client.Do(req)
	assert.ErrorIs(t, err, throttle.ErrMissingKey)
	assert.NotContains(t, err.Error(), "xoxb")
}

// The fake is stricter than the preset for users.list (Tier1 against the
// preset's Tier2: the fake takes 1+1 calls a minute, the preset sends a
// burst of 3), so the preset's third call gets a 429; the pause it learns
// holds back users.list in that workspace only.
func TestRateLimitedPausesMethodInWorkspace(t *testing.T) {
	for _, at := range sites() {
		t.Run(at.name, func(t *testing.T) { testRateLimitedPausesMethodInWorkspace(t, at) })
	}
}

func testRateLimitedPausesMethodInWorkspace(t *testing.T, at site) {
	f := newFixtureAt(t, at, slackquota.Options{}, fakeslack.Options{Tiers: map[string]slackquota.Tier{"users.list": slackquota.Tier1}})
	for range 2 {
		status, le := f.call(tokenA, "users.list", nil)
		require.Nil(t, le)
		assert.Equal(t, http.StatusOK, status)
	}
	status, le := f.call(tokenA, "users.list", nil)
	require.Nil(t, le, "the preset allows a Tier 2 burst")
	assert.Equal(t, http.StatusTooManyRequests, status, "a 429 is returned as a response")

	_, le = f.call(tokenA, "users.list", nil)
	require.NotNil(t, le, "users.list is paused in workspace A")
	assert.Equal(t, "tier2", le.Pause, "the pause names the limit, not the key")
	assert.InDelta(t, 60, le.RetryAfter.Seconds(), 7, "Retry-After, plus at most a second of jitter")

	status, le = f.call(tokenA, "conversations.list", nil)
	assert.Nil(t, le, "another method of the same tier in the same workspace")
	assert.Equal(t, http.StatusOK, status)
	status, le = f.call(tokenB, "users.list", nil)
	assert.Nil(t, le, "the same method in another workspace")
	assert.Equal(t, http.StatusOK, status)

	st := f.fake.Stats()
	assert.Equal(t, 1, st.Limited, "exactly the one 429 that taught the pause")
	assert.Equal(t, 4, st.ByMethod["users.list"])
}

func TestRateLimitedPausesPostingChannel(t *testing.T) {
	for _, at := range sites() {
		t.Run(at.name, func(t *testing.T) { testRateLimitedPausesPostingChannel(t, at) })
	}
}

func testRateLimitedPausesPostingChannel(t *testing.T, at site) {
	f := newFixtureAt(t, at, slackquota.Options{}, fakeslack.Options{PostPerSecond: 1})
	form := func(ch string) url.Values { return url.Values{"channel": {ch}, "text": {"hi"}} }
	status, _ := f.call(tokenA, "chat.postMessage", form("C1"))
	assert.Equal(t, http.StatusOK, status)
	status, _ = f.call(tokenA, "chat.postMessage", form("C1"))
	assert.Equal(t, http.StatusTooManyRequests, status)

	_, le := f.call(tokenA, "chat.postMessage", form("C1"))
	require.NotNil(t, le, "channel C1 is paused")
	assert.Equal(t, slackquota.ChannelLimit, le.Pause)
	status, le = f.call(tokenA, "chat.postMessage", form("C2"))
	assert.Nil(t, le, "channel C2 is not")
	assert.Equal(t, http.StatusOK, status)
	status, le = f.call(tokenA, "users.info", url.Values{"user": {"U1"}})
	assert.Nil(t, le, "nor is any other method")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, 1, f.fake.Stats().Limited)
}

func TestWaitingKeepsUnderTheLimit(t *testing.T) {
	f := newFixture(t, slackquota.Options{Wait: waiters.UpTo(5 * time.Second)}, fakeslack.Options{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, f.site.api+"chat.postMessage",
				strings.NewReader(url.Values{"channel": {"C" + string(rune('0'+i%2))}, "text": {"hi"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Authorization", "Bearer "+tokenA)
			resp, err := f.client.Do(req)
			if err != nil {
				assert.True(t, errors.Is(err, throttle.ErrLimited))
				return
			}
			_ = resp.Body.Close()
			mu.Lock()
			sent++
			mu.Unlock()
		}()
	}
	wg.Wait()
	assert.Equal(t, 8, sent, "4 messages on each of 2 channels wait at most 2 s each")
	assert.Zero(t, f.fake.Stats().Limited)
}

// Where each Slack's rules match, read from the rules themselves.
func TestRulesOfEachHost(t *testing.T) {
	type where struct{ host, path string }
	cases := []struct {
		api, webhooks string
		post, tier    where
		hook          where
	}{
		{"", "", where{"slack.com", "/api/chat.postMessage"}, where{"slack.com", "/api/{method}"}, where{"hooks.slack.com", "/services/"}},
		{slackquota.DefaultAPIURL, "", where{"slack.com", "/api/chat.postMessage"}, where{"slack.com", "/api/{method}"}, where{"hooks.slack.com", "/services/"}},
		{"https://slack-gov.com/api/", "", where{"slack-gov.com", "/api/chat.postMessage"}, where{"slack-gov.com", "/api/{method}"}, where{"hooks.slack-gov.com", "/services/"}},
		{"http://127.0.0.1:8080/api/", "", where{"127.0.0.1:8080", "/api/chat.postMessage"}, where{"127.0.0.1:8080", "/api/{method}"}, where{"127.0.0.1:8080", "/services/"}},
		{"http://[::1]:8080/slack/api/", "http://[::1]:9090/hooks", where{"[::1]:8080", "/slack/api/chat.postMessage"}, where{"[::1]:8080", "/slack/api/{method}"}, where{"[::1]:9090", "/hooks/"}},
		{"", "https://proxy.example.com/slack-hooks/", where{"slack.com", "/api/chat.postMessage"}, where{"slack.com", "/api/{method}"}, where{"proxy.example.com", "/slack-hooks/"}},
	}
	for _, tc := range cases {
		rules, err := slackquota.Rules(slackquota.Options{APIURL: tc.api, WebhookURL: tc.webhooks})
		require.NoError(t, err, tc.api)
		require.NoError(t, throttle.Policy{Rules: rules}.Validate())
		got := map[string]where{}
		for _, r := range rules {
			got[r.Name] = where{r.Host, r.Path}
		}
		want := map[string]where{slackquota.PostRule: tc.post, slackquota.WebhookRule: tc.hook}
		for tier := slackquota.Tier1; tier <= slackquota.Tier4; tier++ {
			want[slackquota.TierRule(tier)] = tc.tier
		}
		assert.Equal(t, want, got, "%s %s", tc.api, tc.webhooks)
	}
}

// Bad options fail at construction with an error naming the field, never
// a panic and never a preset that matches some other host.
func TestBadOptions(t *testing.T) {
	cases := []struct {
		opts  slackquota.Options
		field string
		says  string
	}{
		{slackquota.Options{APIURL: "://slack"}, "APIURL", "missing protocol scheme"},
		{slackquota.Options{APIURL: "slack.com/api/"}, "APIURL", "scheme must be https"},
		{slackquota.Options{APIURL: "wss://slack.com/api/"}, "APIURL", "scheme must be https"},
		{slackquota.Options{APIURL: "https:///api/"}, "APIURL", "no host"},
		{slackquota.Options{APIURL: "https://*.slack.com/api/"}, "APIURL", "one name, not a pattern"},
		{slackquota.Options{APIURL: "https://xoxb:secret@slack.example.com/api/"}, "APIURL", "credentials"},
		{slackquota.Options{APIURL: "https://slack.example.com/api/?team=T1"}, "APIURL", "no query"},
		{slackquota.Options{APIURL: "https://slack.example.com/api"}, "APIURL", `must end in "/"`},
		{slackquota.Options{APIURL: "https://slack.com/"}, "APIURL", "at /api/ of slack.com"},
		{slackquota.Options{APIURL: "https://slack-gov.com/v2/api/"}, "APIURL", "at /api/ of slack-gov.com"},
		{slackquota.Options{WebhookURL: "hooks.slack.com/services/"}, "WebhookURL", "scheme must be https"},
		{slackquota.Options{WebhookURL: "https://hooks.slack.com:port/services/"}, "WebhookURL", "invalid port"},
		{slackquota.Options{DefaultTier: 5}, "DefaultTier", "Tier(5) is none of Tier1 to Tier4"},
		{slackquota.Options{Tiers: map[string]slackquota.Tier{"users.info": slackquota.Tier3, "users.list": -1}}, `Tiers["users.list"]`, "Tier(-1) is none"},
	}
	for _, tc := range cases {
		_, err := slackquota.Rules(tc.opts)
		require.Error(t, err, "%+v", tc.opts)
		assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
		var pe *throttle.PolicyError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "slackquota.Options."+tc.field, pe.Field)
		assert.ErrorContains(t, err, tc.says)
		assert.NotContains(t, err.Error(), "secret", "no credentials in errors")
		_, perr := slackquota.Policy(tc.opts)
		assert.Equal(t, err, perr, "Policy gives the error Rules gives")
	}
	var ue *url.Error
	_, err := slackquota.Rules(slackquota.Options{APIURL: "://slack"})
	assert.ErrorAs(t, err, &ue, "the parse error is wrapped")
}
