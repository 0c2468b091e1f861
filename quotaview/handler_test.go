package quotaview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaview"
	"github.com/quotakit/throttle/waiters"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a Transport on a memstore, its recorder and page, and a
// vendor that answers 429 with Retry-After: 60 while limited is set.
type fixture struct {
	store   *memstore.Store
	tr      *throttle.Transport
	rec     *quotaview.Recorder
	page    http.Handler
	vendor  *httptest.Server
	limited atomic.Bool
	policy  throttle.Policy
}

func newFixture(t *testing.T, opts ...quotaview.Option) *fixture {
	t.Helper()
	f := &fixture{store: memstore.New(), rec: quotaview.NewRecorder()}
	f.vendor = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.limited.Load() {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(f.vendor.Close)
	f.policy = throttle.Policy{Rules: []throttle.Rule{
		{
			Name: "send", Path: "/send", Wait: waiters.FailFast(),
			Limits: []throttle.Limit{
				{Name: "global", Rate: 100, Per: time.Hour, Algorithm: throttle.FixedWindow},
				{Name: "per-user", Rate: 10, Per: time.Hour, Algorithm: throttle.FixedWindow, Key: throttle.KeyFromHeader("X-User")},
			},
		},
		{
			Name: "token", Path: "/token", Wait: waiters.FailFast(),
			Limits: []throttle.Limit{
				{Name: "per-token", Rate: 5, Per: time.Hour, Algorithm: throttle.SlidingLog, Key: throttle.HashKey(throttle.KeyFromHeader("Authorization"))},
			},
		},
	}}
	var err error
	f.tr, err = throttle.NewTransport(nil, f.policy, throttle.WithStore(f.store), throttle.WithHooks(f.rec.Hooks(throttle.Hooks{})))
	require.NoError(t, err)
	f.page = quotaview.New(f.tr.Limiter(), append([]quotaview.Option{quotaview.WithRecorder(f.rec)}, opts...)...)
	return f
}

// send sends a request to path with header k: v and reports its status
// (0 when the transport refused it).
func (f *fixture) send(t *testing.T, path, k, v string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.vendor.URL+path, nil)
	require.NoError(t, err)
	if k != "" {
		req.Header.Set(k, v)
	}
	resp, err := f.tr.RoundTrip(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// get serves a GET of target and returns the status and body.
func get(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
	return w.Code, w.Body.String()
}

func post(h http.Handler, target string, form url.Values) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	h.ServeHTTP(w, req)
	return w
}

func snapshot(t *testing.T, h http.Handler, query string) quotaview.Snapshot {
	t.Helper()
	code, body := get(t, h, "/debug/throttle/json"+query)
	require.Equal(t, http.StatusOK, code, body)
	var s quotaview.Snapshot
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	return s
}

func counter(s quotaview.Snapshot, limit, key string) (quotaview.CounterView, bool) {
	for _, c := range s.Counters {
		if c.Limit == limit && c.Key == key {
			return c, true
		}
	}
	return quotaview.CounterView{}, false
}

func inspect(t *testing.T, f *fixture, scope, limit, key string) quota.LimitState {
	t.Helper()
	var ls []quota.Limit
	for _, r := range f.policy.Rules {
		if r.Name == scope {
			for _, l := range r.Limits {
				ls = append(ls, l.Quota())
			}
		}
	}
	states, err := f.store.Inspect(context.Background(), scope, ls)
	require.NoError(t, err)
	for _, st := range states {
		if st.Limit == limit && st.Key == key {
			return st
		}
	}
	t.Fatalf("no state for %s %s %q in %v", scope, limit, key, states)
	return quota.LimitState{}
}

func TestPageShowsRulesCountersPausesAndPlots(t *testing.T) {
	f := newFixture(t)
	for range 3 {
		assert.Equal(t, 200, f.send(t, "/send", "X-User", "ann"))
	}
	assert.Equal(t, 200, f.send(t, "/send", "X-User", "bob"))

	code, body := get(t, f.page, "/debug/throttle/")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{`data-rule="send"`, `data-rule="token"`, `data-limit="per-user"`, `fixed-window 10/1h0m0s`, `<svg class="plot" data-series="decisions"`, `id="no-pauses"`} {
		assert.Contains(t, body, want)
	}
	st := inspect(t, f, "send", "per-user", "ann")
	assert.Contains(t, body, fmt.Sprintf(`data-scope="send" data-limit="per-user" data-key="ann" data-remaining="%d"`, st.Remaining))
	assert.EqualValues(t, 7, st.Remaining)
	// The one counter of "global": 4 used of 100.
	assert.Contains(t, body, `data-limit="global" data-key="" data-remaining="96"`)

	s := snapshot(t, f.page, "")
	c, ok := counter(s, "per-user", "bob")
	require.True(t, ok)
	assert.Equal(t, inspect(t, f, "send", "per-user", "bob").Remaining, c.Remaining)
	assert.Equal(t, 4, s.Rules[0].Outcomes["allowed"])
	require.NotNil(t, s.Traffic)
	sum := 0
	for _, st := range s.Traffic.Steps {
		sum += st.Allowed
	}
	assert.Equal(t, 4, sum)

	// A vendor's 429 pauses the rule: the page shows the pause, its cause,
	// and the refusals it causes as bound by it.
	f.limited.Store(true)
	assert.Equal(t, http.StatusTooManyRequests, f.send(t, "/send", "X-User", "ann"))
	f.limited.Store(false)
	assert.Equal(t, 0, f.send(t, "/send", "X-User", "ann"), "refused by the pause")
	code, body = get(t, f.page, "/debug/throttle/")
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `class="pause" data-scope="send" data-key=""`)
	assert.Regexp(t, `HTTP 429 to rule send, \d+s ago: paused 1m`, body)
	s = snapshot(t, f.page, "")
	require.Len(t, s.Pauses, 1)
	assert.InDelta(t, 60, s.Pauses[0].Reset.Seconds(), 5)
	assert.Equal(t, "pause", s.Rules[0].Binding)
	require.NotEmpty(t, s.Rules[0].Why)
	assert.Equal(t, "pause", s.Rules[0].Why[0].Reason)

	// The partial view is the live part alone, for the page's refresh.
	_, part := get(t, f.page, "/debug/throttle/?partial=1")
	assert.Contains(t, part, `data-rule="send"`)
	assert.NotContains(t, part, "<html")
}

func TestTypedKey(t *testing.T) {
	f := newFixture(t)
	f.send(t, "/send", "X-User", "ann")
	f.send(t, "/send", "X-User", "annie")
	s := snapshot(t, f.page, "?key=ann")
	var keys []string
	for _, c := range s.Counters {
		keys = append(keys, c.Limit+"/"+c.Key)
	}
	assert.ElementsMatch(t, []string{"per-user/ann", "per-user/annie", "per-token/ann"}, keys)
	c, _ := counter(s, "per-token", "ann")
	assert.True(t, c.Fresh, "a key the store holds nothing for is full")
	assert.EqualValues(t, 5, c.Remaining)
}

func TestReadOnlyByDefault(t *testing.T) {
	f := newFixture(t)
	f.send(t, "/send", "X-User", "ann")
	reset := url.Values{"scope": {"send"}, "limit": {"per-user"}, "key": {"ann"}}
	clear := url.Values{"scope": {"send"}, "key": {""}}

	_, body := get(t, f.page, "/debug/throttle/")
	assert.NotContains(t, body, `name="token"`, "no forms on a read-only page")
	assert.Contains(t, body, "read-only")
	for _, path := range []string{"/debug/throttle/reset", "/debug/throttle/clear"} {
		w := post(f.page, path, reset)
		assert.Equal(t, http.StatusForbidden, w.Code, path)
		code, _ := get(t, f.page, path)
		assert.Equal(t, http.StatusMethodNotAllowed, code, path)
	}
	assert.EqualValues(t, 9, inspect(t, f, "send", "per-user", "ann").Remaining, "nothing reset")

	// With actions: still refused without the token, or with a wrong one.
	f2 := newFixture(t, quotaview.WithActions())
	f2.send(t, "/send", "X-User", "ann")
	assert.Equal(t, http.StatusForbidden, post(f2.page, "/debug/throttle/reset", reset).Code)
	bad := url.Values{"token": {"guess"}}
	for k, v := range reset {
		bad[k] = v
	}
	assert.Equal(t, http.StatusForbidden, post(f2.page, "/debug/throttle/reset", bad).Code)
	assert.EqualValues(t, 9, inspect(t, f2, "send", "per-user", "ann").Remaining)

	// With the page's token, the reset is done.
	_, body = get(t, f2.page, "/debug/throttle/")
	m := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(body)
	require.NotNil(t, m, "the page has action forms")
	reset.Set("token", m[1])
	w := post(f2.page, "/debug/throttle/reset", reset)
	assert.Equal(t, http.StatusSeeOther, w.Code, w.Body.String())
	s := snapshot(t, f2.page, "?key=ann")
	c, ok := counter(s, "per-user", "ann")
	require.True(t, ok)
	assert.True(t, c.Fresh, "reset")

	f2.limited.Store(true)
	f2.send(t, "/send", "X-User", "ann")
	f2.limited.Store(false)
	require.Len(t, snapshot(t, f2.page, "").Pauses, 1)
	assert.Equal(t, http.StatusForbidden, post(f2.page, "/debug/throttle/clear", clear).Code, "no token")
	require.Len(t, snapshot(t, f2.page, "").Pauses, 1)
	clear.Set("token", m[1])
	assert.Equal(t, http.StatusSeeOther, post(f2.page, "/debug/throttle/clear", clear).Code)
	assert.Empty(t, snapshot(t, f2.page, "").Pauses)

	// Two pages have two tokens.
	_, other := get(t, newFixture(t, quotaview.WithActions()).page, "/debug/throttle/")
	assert.NotContains(t, other, m[1])
}

func TestKeysInTheStoresForm(t *testing.T) {
	f := newFixture(t)
	const secret = "Bearer s3cr3t-t0ken"
	const odd = "a b/c<script>"
	f.send(t, "/token", "Authorization", secret)
	f.send(t, "/send", "X-User", odd)

	s := snapshot(t, f.page, "")
	var tokenKey, oddKey string
	for _, c := range s.Counters {
		switch c.Limit {
		case "per-token":
			tokenKey = c.Key
		case "per-user":
			oddKey = c.Key
		}
	}
	assert.Regexp(t, `^sha256:[0-9a-f]{32}$`, tokenKey)
	assert.Equal(t, "a%20b%2Fc%3Cscript%3E", oddKey)
	inspect(t, f, "token", "per-token", tokenKey) // the store holds the same form
	inspect(t, f, "send", "per-user", oddKey)

	_, page := get(t, f.page, "/debug/throttle/")
	_, js := get(t, f.page, "/debug/throttle/json")
	for _, body := range []string{page, js} {
		assert.NotContains(t, body, "s3cr3t")
		assert.NotContains(t, body, "a b/c")
		assert.NotContains(t, body, "<script>a")
		assert.Contains(t, body, tokenKey)
		assert.Contains(t, body, oddKey)
	}
}

func TestWhyNamesTheBindingLimit(t *testing.T) {
	f := newFixture(t)
	for range 10 {
		require.Equal(t, 200, f.send(t, "/send", "X-User", "bob"))
	}
	require.Equal(t, 0, f.send(t, "/send", "X-User", "bob"), "the 11th: per-user is spent")
	s := snapshot(t, f.page, "")
	require.Len(t, s.Rules[0].Why, 1)
	w := s.Rules[0].Why[0]
	assert.Equal(t, "refused", w.Outcome)
	assert.Equal(t, "per-user", w.Limit)
	assert.Equal(t, "limit per-user", w.Reason)
	assert.Equal(t, "per-user", s.Rules[0].Binding)
	assert.False(t, s.Rules[0].BindingInferred)
	assert.Positive(t, w.Wait, "until it could succeed")
	_, body := get(t, f.page, "/debug/throttle/")
	assert.Regexp(t, `<tr class="why"><td>[0-9:]+</td><td>refused</td><td>limit per-user</td>`, body)
}

// storeOnly hides every method of a store but quota.Store's.
type storeOnly struct{ quota.Store }

func TestStoreWithoutInspector(t *testing.T) {
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name: "r", Limits: []throttle.Limit{{Name: "l", Rate: 1, Per: time.Second}},
	}}}, throttle.WithStore(storeOnly{memstore.New()}))
	require.NoError(t, err)
	page := quotaview.New(lim, quotaview.WithActions())
	code, body := get(t, page, "/debug/throttle/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "is not a quota.Inspector")
	assert.Contains(t, body, `data-rule="r"`)
	s := snapshot(t, page, "")
	assert.False(t, s.Store.Inspector)
	assert.Empty(t, s.Counters)
	token := regexp.MustCompile(`name="token" value="([^"]+)"`).FindStringSubmatch(body)
	assert.Nil(t, token, "no counter, no form")
}
