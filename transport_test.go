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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

// vendor is an httptest server that answers like a webhook endpoint and
// counts what it received, per category header and in all.
type vendor struct {
	*httptest.Server
	mu     sync.Mutex
	total  int
	byCat  map[string]int
	bodies []string
	status int // reply status; 0 means 200
}

func newVendor(t *testing.T) *vendor {
	v := &vendor{byCat: make(map[string]int)}
	v.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		v.mu.Lock()
		v.total++
		v.byCat[r.Header.Get("X-Category")]++
		v.bodies = append(v.bodies, string(body))
		status := v.status
		v.mu.Unlock()
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "30")
			http.Error(w, "rate_limited", status)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(v.Close)
	return v
}

func (v *vendor) counts() (int, map[string]int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	m := make(map[string]int, len(v.byCat))
	for k, n := range v.byCat {
		m[k] = n
	}
	return v.total, m
}

// notifierPolicy is the Slack notifier case: global and per category.
func notifierPolicy(global, perCategory int, w throttle.Waiter) throttle.Policy {
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "slack-notify", Host: "127.0.0.1",
		Limits: []throttle.Limit{
			{Name: "global", Rate: global, Per: 30 * time.Minute},
			{Name: "category", Rate: perCategory, Per: 30 * time.Minute, Key: throttle.KeyFromContext("category")},
		},
		Wait: w,
	}}}
}

func post(t *testing.T, c *http.Client, u, category string) (*http.Response, error) {
	ctx := throttle.WithKey(context.Background(), "category", category)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"text":"hi"}`))
	require.NoError(t, err)
	req.Header.Set("X-Category", category)
	resp, err := c.Do(req)
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

func TestTransportNotifierAllOrNothing(t *testing.T) {
	v := newVendor(t)
	tr, err := throttle.NewTransport(http.DefaultTransport, notifierPolicy(100, 10, waiters.FailFast()))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	// 12 rounds over 10 categories: rounds 11 and 12 are refused by the
	// category limit and must not use up the global quota.
	for round := 0; round < 12; round++ {
		for cat := 0; cat < 10; cat++ {
			_, err := post(t, c, v.URL, fmt.Sprint("cat", cat))
			if round < 10 {
				require.NoError(t, err, "round %d category %d", round, cat)
				continue
			}
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le, "round %d category %d", round, cat)
			assert.ErrorIs(t, err, throttle.ErrLimited)
			assert.Equal(t, "category", le.Limit)
			assert.Equal(t, "slack-notify", le.Rule)
			// GCRA: 10 per 30 minutes frees one slot every 3 minutes.
			assert.LessOrEqual(t, le.RetryAfter, 3*time.Minute)
			assert.Greater(t, le.RetryAfter, 3*time.Minute-10*time.Second)
			var ue *url.Error
			assert.ErrorAs(t, err, &ue, "http.Client wraps it in *url.Error")
		}
	}
	total, byCat := v.counts()
	assert.Equal(t, 100, total)
	for cat := 0; cat < 10; cat++ {
		assert.Equal(t, 10, byCat[fmt.Sprint("cat", cat)])
	}

	// A new category has room of its own, but the global quota is spent.
	_, err = post(t, c, v.URL, "new")
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "global", le.Limit)
	total, _ = v.counts()
	assert.Equal(t, 100, total)
}

func TestTransportConcurrentExactCount(t *testing.T) {
	v := newVendor(t)
	const global, perCategory, categories, goroutines, each = 50, 10, 8, 64, 4
	tr, err := throttle.NewTransport(nil, notifierPolicy(global, perCategory, waiters.FailFast()))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()

	var ok, limited, other atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				_, err := post(t, c, v.URL, fmt.Sprint("cat", g%categories))
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, throttle.ErrLimited):
					limited.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	total, byCat := v.counts()
	assert.Equal(t, int64(global), ok.Load())
	assert.Equal(t, int64(goroutines*each-global), limited.Load())
	assert.Zero(t, other.Load())
	assert.Equal(t, global, total, "the vendor saw exactly the global quota")
	for cat, n := range byCat {
		assert.LessOrEqual(t, n, perCategory, "category %s", cat)
	}
}

// countingBody is a request body that counts Close calls.
type countingBody struct {
	io.Reader
	closes atomic.Int32
}

func newBody(s string) *countingBody { return &countingBody{Reader: strings.NewReader(s)} }

func (b *countingBody) Close() error { b.closes.Add(1); return nil }

// failingStore is a Store whose backend is down.
type failingStore struct{ err error }

func (s failingStore) Take(context.Context, *quota.Demand) (quota.Decision, error) {
	return quota.Decision{}, s.err
}
func (s failingStore) Cancel(context.Context, *quota.Reservation) error { return s.err }
func (s failingStore) Pause(context.Context, string, string, time.Duration) error {
	return s.err
}

func TestTransportClosesBodyOnEveryPath(t *testing.T) {
	v := newVendor(t)
	errDown := errors.New("connection refused")
	one := throttle.Limit{Name: "one", Rate: 1, Per: time.Hour}
	rule := func(mod func(*throttle.Rule)) throttle.Policy {
		r := throttle.Rule{Name: "r", Host: "127.0.0.1", Limits: []throttle.Limit{one}, Wait: waiters.FailFast()}
		if mod != nil {
			mod(&r)
		}
		return throttle.Policy{Rules: []throttle.Rule{r}}
	}
	tests := []struct {
		name   string
		policy throttle.Policy
		opts   []throttle.Option
		prime  bool   // send one request first, to use up the limit
		body   string // default: small JSON
		sent   bool
		check  func(t *testing.T, err error)
	}{
		{name: "sent", policy: rule(nil), sent: true},
		{name: "unmatched passes through", policy: throttle.Policy{Rules: []throttle.Rule{{Name: "r", Host: "example.com", Limits: []throttle.Limit{one}}}}, sent: true},
		{name: "refused by limit", policy: rule(nil), prime: true, check: func(t *testing.T, err error) {
			assert.ErrorIs(t, err, throttle.ErrLimited)
		}},
		{name: "unmatched refused", policy: throttle.Policy{RefuseUnmatched: true}, check: func(t *testing.T, err error) {
			assert.ErrorIs(t, err, throttle.ErrNoRule)
		}},
		{name: "missing key", policy: rule(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{{Name: "k", Rate: 1, Per: time.Hour, Key: throttle.KeyFromContext("nope")}}
		}), check: func(t *testing.T, err error) {
			assert.ErrorIs(t, err, throttle.ErrMissingKey)
			assert.ErrorContains(t, err, "rule r: limit k")
		}},
		{name: "cost too high", policy: rule(func(r *throttle.Rule) { r.Cost = func(*http.Request) int { return 2 } }), check: func(t *testing.T, err error) {
			assert.ErrorIs(t, err, quota.ErrCostTooHigh)
		}},
		{name: "cost zero", policy: rule(func(r *throttle.Rule) { r.Cost = func(*http.Request) int { return 0 } }), check: func(t *testing.T, err error) {
			assert.ErrorContains(t, err, "cost must be at least 1")
		}},
		{name: "store down, fail closed", policy: rule(func(r *throttle.Rule) { r.OnStoreFailure = throttle.FailClosed }), opts: []throttle.Option{throttle.WithStore(failingStore{errDown})}, check: func(t *testing.T, err error) {
			assert.ErrorIs(t, err, errDown)
			assert.ErrorIs(t, err, throttle.ErrStoreUnavailable)
			assert.NotErrorIs(t, err, throttle.ErrLimited)
		}},
		{name: "body too large for a body key", policy: rule(func(r *throttle.Rule) {
			r.Limits = []throttle.Limit{{Name: "ch", Rate: 1, Per: time.Hour, Key: throttle.KeyFromBody("channel")}}
		}), body: strings.Repeat("x", 2<<20), check: func(t *testing.T, err error) {
			assert.ErrorContains(t, err, "larger than")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := throttle.NewTransport(nil, tt.policy, tt.opts...)
			require.NoError(t, err)
			c := &http.Client{Transport: tr}
			defer c.CloseIdleConnections()
			if tt.prime {
				_, err := post(t, c, v.URL, "x")
				require.NoError(t, err)
			}
			content := tt.body
			if content == "" {
				content = `{"channel":"C1"}`
			}
			body := newBody(content)
			req, err := http.NewRequest(http.MethodPost, v.URL, body)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if tt.sent {
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
				// The base transport closes the body once it has written it,
				// possibly after the response arrived.
				assert.Eventually(t, func() bool { return body.closes.Load() == 1 }, 5*time.Second, time.Millisecond)
				return
			}
			assert.Nil(t, resp)
			require.Error(t, err)
			tt.check(t, err)
			assert.Equal(t, int32(1), body.closes.Load(), "body closed exactly once")
		})
	}
}

func TestTransportDoesNotModifyRequest(t *testing.T) {
	// With path wildcards the rule's functions see a deep copy (Clone);
	// without, a shallow one (WithContext): the caller's request is
	// untouched either way, its Body field too, though KeyFromBody reads
	// the body and puts it back on the copy.
	for _, tc := range []struct {
		name string
		path string
		keys []throttle.Limit
	}{
		{"path wildcards", "/api/{method}", []throttle.Limit{
			{Name: "method", Rate: 10, Per: time.Minute, Key: throttle.KeyFromPath("method")},
			{Name: "channel", Rate: 10, Per: time.Minute, Key: throttle.KeyFromBody("channel")},
		}},
		{"no wildcards", "", []throttle.Limit{
			{Name: "channel", Rate: 10, Per: time.Minute, Key: throttle.KeyFromBody("channel")},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVendor(t)
			p := throttle.Policy{Rules: []throttle.Rule{{Name: "post", Host: "127.0.0.1", Path: tc.path, Limits: tc.keys}}}
			tr, err := throttle.NewTransport(nil, p)
			require.NoError(t, err)
			const payload = "channel=C123&text=hello+world"
			body := newBody(payload)
			req, err := http.NewRequest(http.MethodPost, v.URL+"/api/chat.postMessage", body)
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			before, url := req.Header.Clone(), *req.URL
			ctx := req.Context()

			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())

			assert.Same(t, body, req.Body, "the caller's Body field is untouched")
			assert.Equal(t, before, req.Header)
			assert.Equal(t, url, *req.URL)
			assert.Equal(t, ctx, req.Context())
			assert.Empty(t, req.PathValue("method"), "wildcards are set on a copy only")
			v.mu.Lock()
			assert.Equal(t, []string{payload}, v.bodies, "the body read for the key is sent whole")
			v.mu.Unlock()
			tr.CloseIdleConnections()
		})
	}
}

func TestTransportReturnsVendorResponsesUnchanged(t *testing.T) {
	v := newVendor(t)
	v.status = http.StatusTooManyRequests
	tr, err := throttle.NewTransport(nil, notifierPolicy(100, 10, nil))
	require.NoError(t, err)
	c := &http.Client{Transport: tr}
	defer c.CloseIdleConnections()
	resp, err := post(t, c, v.URL, "errors")
	require.NoError(t, err, "a 429 is a response, not an error")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "30", resp.Header.Get("Retry-After"))
}

// headerTransport stands for a transport a vendor SDK's client brings, like
// an oauth2 transport that sets Authorization.
type headerTransport struct{ base http.RoundTripper }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Category", "from-inner-transport")
	return h.base.RoundTrip(r)
}

func TestWrapClientKeepsClientSettings(t *testing.T) {
	v := newVendor(t)
	jar := &fakeJar{}
	orig := &http.Client{Timeout: 7 * time.Second, Jar: jar, Transport: headerTransport{http.DefaultTransport}}
	c, err := throttle.WrapClient(orig, throttle.Policy{Rules: []throttle.Rule{{
		Name: "one", Limits: []throttle.Limit{{Name: "one", Rate: 1, Per: time.Hour}}, Wait: waiters.FailFast(),
	}}})
	require.NoError(t, err)
	defer c.CloseIdleConnections()
	assert.Equal(t, 7*time.Second, c.Timeout)
	assert.Same(t, jar, c.Jar)
	assert.IsType(t, headerTransport{}, orig.Transport, "the original client is untouched")

	resp, err := c.Get(v.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, err = c.Get(v.URL)
	assert.ErrorIs(t, err, throttle.ErrLimited)
	_, byCat := v.counts()
	assert.Equal(t, map[string]int{"from-inner-transport": 1}, byCat, "the inner transport still runs")

	_, err = throttle.WrapClient(nil, throttle.Policy{Rules: []throttle.Rule{{}}})
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
}

type fakeJar struct{}

func (*fakeJar) SetCookies(*url.URL, []*http.Cookie) {}
func (*fakeJar) Cookies(*url.URL) []*http.Cookie     { return nil }

func TestNewTransportRejectsInvalidPolicy(t *testing.T) {
	_, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name: "bad", Limits: []throttle.Limit{{Name: "x", Rate: 0, Per: time.Second}},
	}}})
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "bad", pe.Rule)
	assert.Equal(t, "Limits[0].Rate", pe.Field)
}

func TestTransportStoreContextError(t *testing.T) {
	tr, err := throttle.NewTransport(nil, notifierPolicy(1, 1, nil))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(throttle.WithKey(context.Background(), "category", "a"))
	cancel()
	body := newBody("x")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:1/", body)
	require.NoError(t, err)
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, int32(1), body.closes.Load())
}
