package throttle_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/waiters"
)

// scriptedVendor answers like a rate-limited API, in memory so tests can
// run in a synctest bubble: each request gets the next scripted answer (the
// last one repeats). It records when each request arrived and its body.
type scriptedVendor struct {
	start   time.Time
	answers []func(h http.Header) int // sets headers, returns the status

	// echoBodyHeader makes an answer's X-Test-Body header its body.
	echoBodyHeader bool

	mu     sync.Mutex
	n      int
	at     []time.Duration
	bodies []string
}

func newScriptedVendor(answers ...func(h http.Header) int) *scriptedVendor {
	return &scriptedVendor{start: time.Now(), answers: answers}
}

func (v *scriptedVendor) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		_ = req.Body.Close()
	}
	v.mu.Lock()
	answer := v.answers[min(v.n, len(v.answers)-1)]
	v.n++
	v.at = append(v.at, time.Since(v.start))
	v.bodies = append(v.bodies, string(body))
	v.mu.Unlock()
	h := make(http.Header)
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	status := answer(h)
	out := "{}"
	if v.echoBodyHeader && h.Get("X-Test-Body") != "" {
		out = h.Get("X-Test-Body")
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(out)), Request: req}, nil
}

func (v *scriptedVendor) arrivals() []time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]time.Duration(nil), v.at...)
}

func ok200(http.Header) int { return http.StatusOK }

func tooMany(retryAfter string) func(http.Header) int {
	return func(h http.Header) int {
		if retryAfter != "" {
			h.Set("Retry-After", retryAfter)
		}
		return http.StatusTooManyRequests
	}
}

// learningPolicy is a loose limit, so only pauses hold requests back.
func learningPolicy(w throttle.Waiter, learn throttle.Learning, retry throttle.Retry) throttle.Policy {
	if learn.Jitter == 0 {
		learn.Jitter = -1 // exact instants in tests
	}
	return throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor", Limits: []throttle.Limit{{Name: "rps", Rate: 1000, Per: time.Second}},
		Wait: w, Learn: learn, Retry: retry,
	}}}
}

func TestRetryAfterPausesEveryInstance(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("2"), ok200)
		store := memstore.New() // shared by the instances, as Redis would be
		var pauses []throttle.PauseEvent
		a, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{}),
			throttle.WithStore(store), throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { pauses = append(pauses, e) }}))
		require.NoError(t, err)

		req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
		resp, err := a.RoundTrip(req)
		require.NoError(t, err, "a 429 is a response")
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
		assert.Equal(t, "2", resp.Header.Get("Retry-After"), "returned unchanged")
		require.NoError(t, resp.Body.Close())
		require.Len(t, pauses, 1)
		assert.Equal(t, 2*time.Second, pauses[0].Pause)

		// Seven other instances, each with its own transport on the store.
		var wg sync.WaitGroup
		for range 7 {
			other, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{}), throttle.WithStore(store))
			require.NoError(t, err)
			ff := throttle.WithWaiter(context.Background(), waiters.FailFast())
			var le *throttle.LimitError
			require.ErrorAs(t, send(ff, other), &le, "fail-fast callers are refused during the pause")
			assert.Equal(t, 2*time.Second, le.RetryAfter)
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, send(context.Background(), other))
			}()
		}
		wg.Wait()
		got := vendor.arrivals()
		require.Len(t, got, 8)
		assert.Equal(t, time.Duration(0), got[0])
		for i, at := range got[1:] {
			assert.Equal(t, 2*time.Second, at, "instance %d sent nothing before the pause ended", i+1)
		}
	})
}

func TestRemainingZeroPausesUntilReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reset := time.Now().Add(30 * time.Second).Unix()
		vendor := newScriptedVendor(func(h http.Header) int {
			h.Set("X-RateLimit-Limit", "5000")
			h.Set("X-RateLimit-Remaining", "0")
			h.Set("X-RateLimit-Reset", strconv.FormatInt(reset, 10))
			return http.StatusOK
		}, ok200)
		store := memstore.New()
		p := learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{})
		a, err := throttle.NewTransport(vendor, p, throttle.WithStore(store))
		require.NoError(t, err)
		b, err := throttle.NewTransport(vendor, p, throttle.WithStore(store))
		require.NoError(t, err)

		require.NoError(t, send(context.Background(), a))
		require.NoError(t, send(context.Background(), b))
		assert.Equal(t, []time.Duration{0, 30 * time.Second}, vendor.arrivals(),
			"the other instance waited for the reset before any 429")
	})
}

func TestSlowDownWithoutTimeBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany(""), tooMany(""), tooMany(""), ok200)
		var pauses []time.Duration
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.Block(), throttle.Learning{DefaultPause: 10 * time.Second}, throttle.Retry{}),
			throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { pauses = append(pauses, e.Pause) }}))
		require.NoError(t, err)
		for range 4 {
			require.NoError(t, send(context.Background(), tr))
		}
		require.Len(t, pauses, 3)
		// 10s, then 20s and 40s; jitter (off here) only ever adds.
		assert.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second}, pauses)
		at := vendor.arrivals()
		assert.Equal(t, at[1], pauses[0])
		assert.Equal(t, at[3], pauses[0]+pauses[1]+pauses[2])
	})
}

func TestMaxPauseCapsAbsurdRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("999999999"), ok200)
		var pauses []throttle.PauseEvent
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.FailFast(), throttle.Learning{MaxPause: time.Minute}, throttle.Retry{}),
			throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { pauses = append(pauses, e) }}))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))
		require.Len(t, pauses, 1)
		assert.Equal(t, time.Minute, pauses[0].Pause)
	})
}

func TestRetryGoesThroughTheLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("1"), ok200)
		var events []throttle.DecisionEvent
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{Max: 3}),
			throttle.WithHooks(throttle.Hooks{OnDecision: func(e throttle.DecisionEvent) { events = append(events, e) }}))
		require.NoError(t, err)

		const payload = `{"text":"hello"}`
		req, _ := http.NewRequest(http.MethodPost, "http://api.example.com/x", strings.NewReader(payload))
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "the caller sees the successful resend")
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, []time.Duration{0, time.Second}, vendor.arrivals(), "the resend waited out the pause")
		assert.Equal(t, []string{payload, payload}, vendor.bodies, "the body was replayed whole")
		require.Len(t, events, 2, "the resend was decided (and charged) like any request")
		assert.Equal(t, throttle.Waited, events[1].Outcome)
	})
}

func TestRetryGivesUpAndReturnsTheAnswer(t *testing.T) {
	t.Run("body cannot be replayed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vendor := newScriptedVendor(tooMany("1"), ok200)
			tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{Max: 3}))
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodPost, "http://api.example.com/x", io.NopCloser(strings.NewReader("x")))
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Len(t, vendor.arrivals(), 1)
		})
	})
	t.Run("pause beyond the waiter", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vendor := newScriptedVendor(tooMany("60"), ok200)
			tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.UpTo(time.Second), throttle.Learning{}, throttle.Retry{Max: 3}))
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			body, _ := io.ReadAll(resp.Body)
			assert.Equal(t, "{}", string(body), "the answer is returned unread")
			assert.Len(t, vendor.arrivals(), 1)
		})
	})
	t.Run("attempts are capped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			vendor := newScriptedVendor(tooMany("1"))
			tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{Max: 2}))
			require.NoError(t, err)
			req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
			assert.Equal(t, []time.Duration{0, time.Second, 2 * time.Second}, vendor.arrivals())
		})
	})
}

// pauseLosingStore is a shared store that loses every pause, as a Redis
// restart would.
type pauseLosingStore struct{ *memstore.Store }

func (pauseLosingStore) Pause(context.Context, string, string, time.Duration) error {
	return errors.New("connection reset")
}

func TestLocalPauseSurvivesStoreLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("3"), ok200)
		var perr error
		tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{}),
			throttle.WithStore(pauseLosingStore{memstore.New()}),
			throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { perr = e.Err }}))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))
		assert.Error(t, perr, "the store could not record the pause")
		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, []time.Duration{0, 3 * time.Second}, vendor.arrivals(), "this instance's own copy held")
	})
}

func TestLearningOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("30"), ok200)
		tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.FailFast(), throttle.Learning{Off: true}, throttle.Retry{}))
		require.NoError(t, err)
		require.NoError(t, send(context.Background(), tr))
		require.NoError(t, send(context.Background(), tr))
		assert.Equal(t, []time.Duration{0, 0}, vendor.arrivals())
	})
}

// githubAnswer is a GitHub-like answer: status, x-ratelimit-* headers
// and a JSON message body.
func githubAnswer(status int, remaining int, reset time.Time, msg string) func(http.Header) int {
	return func(h http.Header) int {
		h.Set("X-RateLimit-Limit", "5000")
		h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(reset.Unix(), 10))
		h.Set("X-RateLimit-Resource", "core")
		if msg != "" {
			h.Set("X-Test-Body", `{"message":"`+msg+`"}`)
		}
		return status
	}
}

func TestGitHubProfile(t *testing.T) {
	cases := []struct {
		name      string
		answer    func(now time.Time) func(http.Header) int
		wantPause time.Duration // 0: none
	}{
		{"primary limit: 403 with remaining 0 pauses until the reset", func(now time.Time) func(http.Header) int {
			return githubAnswer(http.StatusForbidden, 0, now.Add(40*time.Second), "API rate limit exceeded")
		}, 40 * time.Second},
		{"secondary limit without Retry-After pauses a minute", func(now time.Time) func(http.Header) int {
			return githubAnswer(http.StatusForbidden, 4000, now.Add(time.Hour), "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
		}, time.Minute},
		{"secondary limit with Retry-After pauses that long", func(now time.Time) func(http.Header) int {
			a := githubAnswer(http.StatusForbidden, 4000, now.Add(time.Hour), "You have exceeded a secondary rate limit.")
			return func(h http.Header) int { h.Set("Retry-After", "7"); return a(h) }
		}, 7 * time.Second},
		{"429 is a pause", func(now time.Time) func(http.Header) int {
			a := githubAnswer(http.StatusTooManyRequests, 4000, now.Add(time.Hour), "")
			return func(h http.Header) int { h.Set("Retry-After", "3"); return a(h) }
		}, 3 * time.Second},
		{"a plain permission 403 is not", func(now time.Time) func(http.Header) int {
			return githubAnswer(http.StatusForbidden, 4000, now.Add(time.Hour), "Resource not accessible by integration")
		}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				vendor := newScriptedVendor(tc.answer(time.Now()), ok200)
				vendor.echoBodyHeader = true
				var pauses []time.Duration
				tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{}),
					throttle.WithHooks(throttle.Hooks{OnPause: func(e throttle.PauseEvent) { pauses = append(pauses, e.Pause) }}))
				require.NoError(t, err)
				req, _ := http.NewRequest(http.MethodGet, "https://api.github.com/repos/o/r/issues", nil)
				resp, err := tr.RoundTrip(req)
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				want := resp.Header.Get("X-Test-Body")
				if want == "" {
					want = "{}"
				}
				assert.Equal(t, want, string(body), "the body reads whole after the peek")
				if tc.wantPause == 0 {
					assert.Empty(t, pauses)
				} else {
					assert.Equal(t, []time.Duration{tc.wantPause}, pauses)
				}
				require.NoError(t, send(context.Background(), tr))
				assert.Equal(t, []time.Duration{0, tc.wantPause}, vendor.arrivals())
			})
		})
	}
}

func TestProfileIsPickedByHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The same 403 from another host is not a pause: only GitHub's
		// profile reads it as one.
		vendor := newScriptedVendor(githubAnswer(http.StatusForbidden, 0, time.Now().Add(40*time.Second), ""), ok200)
		tr, err := throttle.NewTransport(vendor, learningPolicy(waiters.FailFast(), throttle.Learning{}, throttle.Retry{}))
		require.NoError(t, err)
		req, _ := http.NewRequest(http.MethodGet, "https://api.example.com/x", nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		// remaining 0 with a reset still pauses, whatever the host.
		var le *throttle.LimitError
		require.ErrorAs(t, send(context.Background(), tr), &le)
		assert.Equal(t, 40*time.Second, le.RetryAfter)

		_, err = throttle.NewTransport(vendor, learningPolicy(waiters.FailFast(), throttle.Learning{}, throttle.Retry{}),
			throttle.WithProfiles(quotaheader.Profile{Name: "bad", Hosts: []string{"a b"}}))
		assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	})
}

func TestHeaderSyncLowersTheSharedBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Our model: 60 per minute. The vendor, whose quota another client
		// also spends, says only 2 remain for the next 30 s.
		vendor := newScriptedVendor(func(h http.Header) int {
			h.Set("RateLimit-Limit", "60")
			h.Set("RateLimit-Remaining", "2")
			h.Set("RateLimit-Reset", "30")
			return http.StatusOK
		}, ok200)
		var syncs []throttle.SyncEvent
		p := throttle.Policy{Rules: []throttle.Rule{{
			Name: "vendor", Limits: []throttle.Limit{{Name: "rpm", Rate: 60, Per: time.Minute}},
			Wait: waiters.FailFast(), Learn: throttle.Learning{Sync: "rpm"},
		}}}
		store := memstore.New()
		a, err := throttle.NewTransport(vendor, p, throttle.WithStore(store),
			throttle.WithHooks(throttle.Hooks{OnSync: func(e throttle.SyncEvent) { syncs = append(syncs, e) }}))
		require.NoError(t, err)
		b, err := throttle.NewTransport(vendor, p, throttle.WithStore(store))
		require.NoError(t, err)

		require.NoError(t, send(context.Background(), a))
		require.Len(t, syncs, 1)
		assert.Equal(t, throttle.SyncEvent{Rule: "vendor", Limit: "rpm", Remaining: 2, Reset: 30 * time.Second}, syncs[0])
		// The 2 that remain come at 29 s and 30 s (one per second, the
		// limit's pace), so the other instance is refused until then.
		var le *throttle.LimitError
		require.ErrorAs(t, send(context.Background(), b), &le)
		assert.Equal(t, 29*time.Second, le.RetryAfter)
		assert.Equal(t, "rpm", le.Limit)
	})
}

func TestHeaderSyncValidation(t *testing.T) {
	p := throttle.Policy{Rules: []throttle.Rule{{
		Name: "vendor", Limits: []throttle.Limit{{Name: "rpm", Rate: 60, Per: time.Minute}},
		Learn: throttle.Learning{Sync: "nope"},
	}}}
	_, err := throttle.NewTransport(nil, p)
	var pe *throttle.PolicyError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Learn.Sync", pe.Field)

	p.Rules[0].Learn.Sync = "rpm"
	_, err = throttle.NewTransport(nil, p, throttle.WithStore(pauseLosingStore{memstore.New()}))
	require.NoError(t, err, "an embedded MemoryStore syncs")
	_, err = throttle.NewTransport(nil, p, throttle.WithStore(plainStore{memstore.New()}))
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "Learn.Sync", pe.Field)
}

// plainStore is a Store that is not a Syncer.
type plainStore struct{ s *memstore.Store }

func (p plainStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	return p.s.Take(ctx, d)
}
func (p plainStore) Cancel(ctx context.Context, r *quota.Reservation) error {
	return p.s.Cancel(ctx, r)
}
func (p plainStore) Pause(ctx context.Context, scope, key string, d time.Duration) error {
	return p.s.Pause(ctx, scope, key, d)
}

// TestRetryDecide: Retry.Decide sees each answer before its resend, with
// the attempt and the pause it caused, and stops the resends when it says
// no: the caller then gets that answer.
func TestRetryDecide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("1"), tooMany("5"), ok200)
		var seen []throttle.RetryEvent
		decide := func(ev throttle.RetryEvent) bool {
			seen = append(seen, ev)
			return ev.Wait <= 2*time.Second // not worth a long pause
		}
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.Block(), throttle.Learning{}, throttle.Retry{Max: 3, Decide: decide}))
		require.NoError(t, err)

		req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the caller gets the answer Decide did not resend")
		assert.Equal(t, "5", resp.Header.Get("Retry-After"))
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, []time.Duration{0, time.Second}, vendor.arrivals(), "one resend, after the first pause")

		require.Len(t, seen, 2)
		for i, want := range []time.Duration{time.Second, 5 * time.Second} {
			assert.Equal(t, "vendor", seen[i].Rule)
			assert.Equal(t, i+1, seen[i].Attempt)
			assert.Equal(t, want, seen[i].Wait)
			assert.Equal(t, want, seen[i].Feedback.RetryAfter)
			assert.Equal(t, http.StatusTooManyRequests, seen[i].Response.StatusCode)
		}
	})
}

// TestRetryDecideNoPause: Retry.Decide sees the answer's feedback as
// learning read it, and a Wait of zero when the answer paused nothing (a
// Retry-After of 0), then the backoff's pause when the next said nothing
// of when to resume.
func TestRetryDecideNoPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("0"), tooMany(""), ok200)
		var seen []throttle.RetryEvent
		decide := func(ev throttle.RetryEvent) bool {
			seen = append(seen, ev)
			return true
		}
		tr, err := throttle.NewTransport(vendor,
			learningPolicy(waiters.Block(), throttle.Learning{DefaultPause: time.Second}, throttle.Retry{Max: 3, Decide: decide}))
		require.NoError(t, err)

		req, _ := http.NewRequest(http.MethodGet, "http://api.example.com/x", nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, []time.Duration{0, 0, time.Second}, vendor.arrivals(), "no pause after Retry-After: 0, the default pause after no time")

		require.Len(t, seen, 2)
		assert.Equal(t, time.Duration(0), seen[0].Wait)
		assert.True(t, seen[0].Feedback.HasRetryAfter)
		assert.Equal(t, time.Duration(0), seen[0].Feedback.RetryAfter)
		assert.Equal(t, time.Second, seen[1].Wait)
		assert.False(t, seen[1].Feedback.HasRetryAfter)
	})
}

// TestRetryDecidePauseByBody: with Learning.PauseBy on a limit keyed by
// the request body, Retry.Decide's Wait is the pause of the request's
// own key, as admission decided it, although the body has been sent.
func TestRetryDecidePauseByBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		vendor := newScriptedVendor(tooMany("2"), ok200)
		var seen []throttle.RetryEvent
		decide := func(ev throttle.RetryEvent) bool {
			seen = append(seen, ev)
			return true
		}
		p := learningPolicy(waiters.Block(), throttle.Learning{PauseBy: "channel"}, throttle.Retry{Max: 1, Decide: decide})
		p.Rules[0].Limits = append(p.Rules[0].Limits,
			throttle.Limit{Name: "channel", Rate: 100, Per: time.Second, Key: throttle.KeyFromBody("channel")})
		tr, err := throttle.NewTransport(vendor, p)
		require.NoError(t, err)

		body := `{"channel":"C1","text":"hi"}`
		req, _ := http.NewRequest(http.MethodPost, "http://api.example.com/x", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, []time.Duration{0, 2 * time.Second}, vendor.arrivals(), "the resend waits out its channel's pause")
		require.Len(t, seen, 1)
		assert.Equal(t, 2*time.Second, seen[0].Wait, "the pause of the request's channel")
	})
}
