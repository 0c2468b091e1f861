package throttle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// graphQLVendor answers like GitHub's GraphQL endpoint: a JSON body that
// reports the query's cost in data.rateLimit.cost, here the cost the
// request asks for in its X-Cost header ("none": no rateLimit at all).
func graphQLVendor(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if c := r.Header.Get("X-Cost"); c != "none" {
			fmt.Fprintf(w, `{"data":{"rateLimit":{"cost":%s,"remaining":4990},"viewer":{"login":"octocat","bio":"%s"}}}`, c, strings.Repeat("x", 4096))
			return
		}
		fmt.Fprint(w, `{"data":{"viewer":{"login":"octocat"}}}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// settleSetup is a Transport with a rule charging an estimate of 50
// points against 100 an hour and settling from data.rateLimit.cost, on an
// in-process store whose clock stands still, and what its hooks saw.
type settleSetup struct {
	client *http.Client
	store  *memstore.Store
	url    string

	mu     sync.Mutex
	events []throttle.SettleEvent
	calls  atomic.Int64 // of Rule.Settle
}

func newSettleSetup(t *testing.T, settle func(*http.Response) (int, bool)) *settleSetup {
	at := time.Unix(1_700_000_000, 0)
	s := &settleSetup{store: memstore.New(memstore.WithClock(func() time.Time { return at })), url: graphQLVendor(t).URL}
	if settle == nil {
		settle = throttle.SettleFromJSON("data.rateLimit.cost")
	}
	tr, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "graphql",
		Limits: []throttle.Limit{{Name: "points", Rate: 100, Per: time.Hour, Algorithm: throttle.FixedWindow}},
		Cost:   func(*http.Request) int { return 50 },
		Settle: func(resp *http.Response) (int, bool) { s.calls.Add(1); return settle(resp) },
		Wait:   waiters.FailFast(),
	}}}, throttle.WithStore(s.store), throttle.WithClock(func() time.Time { return at }),
		throttle.WithHooks(throttle.Hooks{OnSettle: func(ev throttle.SettleEvent) {
			assert.NotNil(t, ev.Context, "the request's context")
			ev.Context = nil // compared as values below
			s.mu.Lock()
			s.events = append(s.events, ev)
			s.mu.Unlock()
		}}))
	require.NoError(t, err)
	s.client = &http.Client{Transport: tr}
	t.Cleanup(tr.CloseIdleConnections)
	return s
}

// post sends a query whose answer reports cost.
func (s *settleSetup) post(t *testing.T, method, cost string) (*http.Response, error) {
	req, err := http.NewRequest(method, s.url, strings.NewReader(`{"query":"{ rateLimit { cost } viewer { login } }"}`))
	require.NoError(t, err)
	req.Header.Set("X-Cost", cost)
	return s.client.Do(req)
}

// used is what the store counts against the points limit now.
func (s *settleSetup) used(t *testing.T) int64 {
	states, err := s.store.Inspect(t.Context(), "graphql", []quota.Limit{{Name: "points", Rate: 100, Per: time.Hour, Algorithm: quota.FixedWindow}})
	require.NoError(t, err)
	if len(states) == 0 {
		return 0
	}
	return states[0].Used
}

// TestSettleCorrectsTheCharge: a request is charged its estimate when it
// is decided, and the cost its answer reports once the caller is done
// with the body, whichever way it is done with it; the caller reads the
// body whole.
func TestSettleCorrectsTheCharge(t *testing.T) {
	readAll := func(t *testing.T, resp *http.Response) {
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Contains(t, string(body), `"login":"octocat"`, "the caller reads the body whole")
		assert.True(t, strings.HasSuffix(string(body), "}}}") || strings.HasSuffix(string(body), `"octocat"}}}`))
		require.NoError(t, resp.Body.Close())
	}
	for _, tc := range []struct {
		name   string
		method string
		cost   string
		read   func(t *testing.T, resp *http.Response)
		settle func(*http.Response) (int, bool)
		used   int64 // after the body is done with
		event  throttle.SettleEvent
		err    error // the event's
	}{{
		name: "read to the end", method: http.MethodPost, cost: "7", read: readAll,
		used: 7, event: throttle.SettleEvent{Rule: "graphql", Charged: 50, Cost: 7},
	}, {
		name: "read to the end, never closed", method: http.MethodPost, cost: "7",
		read: func(t *testing.T, resp *http.Response) {
			_, err := io.Copy(io.Discard, resp.Body)
			require.NoError(t, err)
		},
		used: 7, event: throttle.SettleEvent{Rule: "graphql", Charged: 50, Cost: 7},
	}, {
		name: "read through a JSON decoder, then closed", method: http.MethodPost, cost: "12",
		read: func(t *testing.T, resp *http.Response) {
			var v struct {
				Data struct{ Viewer struct{ Login string } }
			}
			require.NoError(t, jsonDecode(resp.Body, &v))
			assert.Equal(t, "octocat", v.Data.Viewer.Login)
			require.NoError(t, resp.Body.Close())
		},
		used: 12, event: throttle.SettleEvent{Rule: "graphql", Charged: 50, Cost: 12},
	}, {
		name: "closed unread: the estimate stands", method: http.MethodPost, cost: "7",
		read: func(t *testing.T, resp *http.Response) { require.NoError(t, resp.Body.Close()) },
		used: 50, event: throttle.SettleEvent{Rule: "graphql", Charged: 50},
	}, {
		name: "an answer that reports no cost: the estimate stands", method: http.MethodPost, cost: "none", read: readAll,
		used: 50, event: throttle.SettleEvent{Rule: "graphql", Charged: 50},
	}, {
		name: "a cost below 1 is refused", method: http.MethodPost, cost: "0", read: readAll,
		used: 50, event: throttle.SettleEvent{Rule: "graphql", Charged: 50}, err: throttle.ErrInvalidPolicy,
	}, {
		name: "a cost above the limit is a debt", method: http.MethodPost, cost: "130", read: readAll,
		used: 130, event: throttle.SettleEvent{Rule: "graphql", Charged: 50, Cost: 130},
	}, {
		name: "an answer without a body is settled at once", method: http.MethodHead, cost: "3",
		settle: func(resp *http.Response) (int, bool) {
			n, err := strconv.Atoi(resp.Request.Header.Get("X-Cost"))
			return n, err == nil
		},
		read: func(*testing.T, *http.Response) {},
		used: 3, event: throttle.SettleEvent{Rule: "graphql", Charged: 50, Cost: 3},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSettleSetup(t, tc.settle)
			resp, err := s.post(t, tc.method, tc.cost)
			require.NoError(t, err)
			if tc.method != http.MethodHead {
				assert.EqualValues(t, 50, s.used(t), "charged the estimate until the body is done with")
				assert.Zero(t, s.calls.Load(), "Settle is not called before")
			}
			tc.read(t, resp)
			_ = resp.Body.Close() // a second end changes nothing
			assert.Equal(t, tc.used, s.used(t), "charged after the body is done with")
			assert.EqualValues(t, 1, s.calls.Load(), "Settle calls")
			s.mu.Lock()
			defer s.mu.Unlock()
			require.Len(t, s.events, 1)
			ev := s.events[0]
			if tc.err != nil {
				assert.ErrorIs(t, ev.Err, tc.err)
				ev.Err = nil
			}
			assert.Equal(t, tc.event, ev)
		})
	}
}

func jsonDecode(r io.Reader, v any) error {
	return json.NewDecoder(r).Decode(v)
}

// TestSettleLetsMoreIn: with the estimate settled to the real cost, the
// quota admits what the real costs leave, not what the estimates would.
func TestSettleLetsMoreIn(t *testing.T) {
	s := newSettleSetup(t, nil)
	sent := 0
	for range 20 {
		resp, err := s.post(t, http.MethodPost, "9")
		var le *throttle.LimitError
		if errors.As(err, &le) {
			break
		}
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
		sent++
	}
	// Each is charged 50 until its answer says 9: the sixth finds 45 used
	// and 50 more does not fit in 100.
	assert.Equal(t, 6, sent, "requests sent before one was refused")
	assert.EqualValues(t, 54, s.used(t))
}

// TestPermitSettle: a Limiter's permit is settled by hand, again with
// the same cost or another, and a Cancel after Settle gives nothing back.
func TestPermitSettle(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	store := memstore.New(memstore.WithClock(func() time.Time { return at }))
	limit := throttle.Limit{Name: "tokens", Rate: 1000, Per: time.Minute, Algorithm: throttle.FixedWindow}
	var events []throttle.SettleEvent
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{Name: "llm", Limits: []throttle.Limit{limit}}}},
		throttle.WithStore(store), throttle.WithClock(func() time.Time { return at }),
		throttle.WithHooks(throttle.Hooks{OnSettle: func(ev throttle.SettleEvent) { ev.Context = nil; events = append(events, ev) }}))
	require.NoError(t, err)
	used := func() int64 {
		states, err := store.Inspect(t.Context(), "llm", []quota.Limit{limit.Quota()})
		require.NoError(t, err)
		if len(states) == 0 {
			return 0
		}
		return states[0].Used
	}

	p, err := lim.AllowN(t.Context(), "llm", 400)
	require.NoError(t, err)
	assert.EqualValues(t, 400, used())
	require.NoError(t, p.Settle(t.Context(), 120))
	assert.EqualValues(t, 120, used())
	require.NoError(t, p.Settle(t.Context(), 120))
	assert.EqualValues(t, 120, used(), "the same cost again changes nothing")
	require.NoError(t, p.Settle(t.Context(), 150))
	assert.EqualValues(t, 150, used(), "another cost corrects the first")
	assert.ErrorIs(t, p.Settle(t.Context(), 0), throttle.ErrInvalidPolicy)
	assert.EqualValues(t, 150, used())
	require.NoError(t, p.Cancel(t.Context()))
	assert.EqualValues(t, 150, used(), "Cancel after Settle gives nothing back: the call was made")
	assert.Len(t, events, 4)
	assert.Equal(t, throttle.SettleEvent{Rule: "llm", Charged: 400, Cost: 150}, events[2])

	p, err = lim.AllowN(t.Context(), "llm", 100)
	require.NoError(t, err)
	require.NoError(t, p.Cancel(t.Context()))
	require.NoError(t, p.Settle(t.Context(), 50), "a cancelled permit has nothing to settle")
	assert.EqualValues(t, 150, used())
}

// notSettler is a store that cannot settle.
type notSettler struct{ quota.Store }

func TestSettleNeedsASettler(t *testing.T) {
	_, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name: "graphql", Limits: []throttle.Limit{{Name: "points", Rate: 100, Per: time.Hour}},
		Settle: throttle.SettleFromJSON("data.rateLimit.cost"),
	}}}, throttle.WithStore(notSettler{memstore.New()}))
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Settle", pe.Field)
	assert.Equal(t, "graphql", pe.Rule)
}

// downSettler is a store that is away: every call fails, and it counts
// the settlements that reach it.
type downSettler struct {
	quota.Store
	settles atomic.Int64
}

func (s *downSettler) Take(context.Context, *quota.Demand) (quota.Decision, error) {
	return quota.Decision{}, errDown
}

func (s *downSettler) Settle(context.Context, *quota.Reservation, []int) error {
	s.settles.Add(1)
	return errDown
}

// TestSettleLocalFallback: with the store away, a request decided by the
// local fallback ([throttle.FailLocal]) is settled there.
func TestSettleLocalFallback(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	store := &downSettler{Store: memstore.New()}
	vendor := graphQLVendor(t)
	tr, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "graphql",
		Limits: []throttle.Limit{{Name: "points", Rate: 100, Per: time.Hour, Algorithm: throttle.FixedWindow}},
		Cost:   func(*http.Request) int { return 60 },
		Settle: throttle.SettleFromJSON("data.rateLimit.cost"),
		Wait:   waiters.FailFast(),
	}}}, throttle.WithStore(store), throttle.WithClock(func() time.Time { return at }))
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	post := func() error {
		req, err := http.NewRequest(http.MethodPost, vendor.URL, nil)
		require.NoError(t, err)
		req.Header.Set("X-Cost", "10")
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	require.NoError(t, post())
	// 10 + 60 fits in 100 only if the first was settled to 10 locally.
	require.NoError(t, post(), "the local store settled the first request")
	require.NoError(t, post())
	assert.Zero(t, store.settles.Load(), "no settlement sent to the store that did not grant")
}

func TestSettleFromJSON(t *testing.T) {
	for _, tc := range []struct {
		name, path, body string
		cost             int
		ok               bool
	}{
		{"github graphql", "data.rateLimit.cost", `{"data":{"viewer":{"login":"x","repos":[1,2,{"a":"}"}]},"rateLimit":{"remaining":4000,"cost":17}}}`, 17, true},
		{"openai usage", "usage.total_tokens", `{"id":"c1","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}}`, 42, true},
		{"a fraction is rounded up", "usage.cost", `{"usage":{"cost":2.25}}`, 3, true},
		{"a top-level key", "cost", ` {"cost": 5}`, 5, true},
		{"a missing key", "data.rateLimit.cost", `{"data":{"viewer":{}}}`, 0, false},
		{"not a number", "data.rateLimit.cost", `{"data":{"rateLimit":{"cost":"17"}}}`, 0, false},
		{"not an object on the path", "data.rateLimit.cost", `{"data":[{"rateLimit":{"cost":1}}]}`, 0, false},
		{"not JSON", "data.rateLimit.cost", `<html>slow down</html>`, 0, false},
		{"empty", "data.rateLimit.cost", ``, 0, false},
		{"cut short", "data.rateLimit.cost", `{"data":{"viewer":{"login":"x"`, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{Body: io.NopCloser(strings.NewReader(tc.body))}
			cost, ok := throttle.SettleFromJSON(tc.path)(resp)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.cost, cost)
		})
	}
	cost, ok := throttle.SettleFromJSON("cost")(&http.Response{})
	assert.False(t, ok, "no body")
	assert.Zero(t, cost)
}

// TestSettleStackedLimits: the settled cost replaces the estimate on the
// limits charged the rule's cost; a limit with a Cost of its own keeps
// it, and a limit that does not apply to the request is not touched.
func TestSettleStackedLimits(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	store := memstore.New(memstore.WithClock(func() time.Time { return at }))
	points := throttle.Limit{Name: "points", Rate: 1000, Per: time.Hour, Algorithm: throttle.FixedWindow}
	requests := throttle.Limit{Name: "requests", Rate: 1000, Per: time.Hour, Algorithm: throttle.FixedWindow,
		Cost: func(*http.Request) int { return 1 }}
	mutations := throttle.Limit{Name: "mutations", Rate: 1000, Per: time.Hour, Algorithm: throttle.FixedWindow,
		Cost:  func(*http.Request) int { return 5 },
		Match: func(r *http.Request) bool { return r.Header.Get("X-Mutation") != "" }}
	tr, err := throttle.NewTransport(nil, throttle.Policy{Rules: []throttle.Rule{{
		Name:   "graphql",
		Limits: []throttle.Limit{mutations, points, requests},
		Cost:   func(*http.Request) int { return 50 },
		Settle: throttle.SettleFromJSON("data.rateLimit.cost"),
	}}}, throttle.WithStore(store), throttle.WithClock(func() time.Time { return at }))
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	vendor := graphQLVendor(t)
	send := func(mutation bool) {
		req, err := http.NewRequest(http.MethodPost, vendor.URL, nil)
		require.NoError(t, err)
		req.Header.Set("X-Cost", "3")
		if mutation {
			req.Header.Set("X-Mutation", "1")
		}
		resp, err := c.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		require.NoError(t, resp.Body.Close())
	}
	send(false)
	send(true)
	states, err := store.Inspect(t.Context(), "graphql", []quota.Limit{mutations.Quota(), points.Quota(), requests.Quota()})
	require.NoError(t, err)
	used := map[string]int64{}
	for _, st := range states {
		used[st.Limit] = st.Used
	}
	assert.Equal(t, map[string]int64{"points": 6, "requests": 2, "mutations": 5}, used)
}
