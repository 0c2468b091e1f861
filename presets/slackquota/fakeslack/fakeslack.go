// Package fakeslack runs a fake Slack for tests and examples: an
// [httptest.Server] that answers the Web API and incoming webhooks and
// enforces Slack's rate limits as package slack reads them, answering a
// call over a limit like Slack does (HTTP 429, Retry-After in seconds,
// {"ok":false,"error":"ratelimited"}) and counting it.
//
// Limits are enforced per method per workspace (each token is a workspace)
// over a sliding minute: at most a tier's rate plus its burst calls (see
// slackquota.Tier.Limit). chat.postMessage is limited per channel and an
// incoming webhook per URL (and channel), over a sliding second, to
// slackquota.PostRate plus slackquota.PostBurst messages.
package fakeslack

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/quotakit/throttle/presets/slackquota"
)

// Options configure a fake Slack. The zero value enforces the tiers of
// [slackquota.DefaultTiers] (Tier2 for other methods) and the posting limits.
type Options struct {
	// Tiers sets the tier the fake enforces for methods, over
	// slackquota.DefaultTiers; a fake stricter than the preset shows what the
	// preset learns from a 429.
	Tiers map[string]slackquota.Tier

	// NonMarketplace2025 enforces one call a minute on
	// conversations.history and conversations.replies.
	NonMarketplace2025 bool

	// PostPerSecond is how many messages per second a channel (or webhook)
	// takes. Zero means slackquota.PostRate + slackquota.PostBurst.
	PostPerSecond int
}

// Stats are what a fake Slack received.
type Stats struct {
	// Requests is every request received.
	Requests int
	// OK is the requests answered {"ok":true} (or "ok" by a webhook).
	OK int
	// Limited is the requests answered 429: each one a request the
	// client should not have sent.
	Limited int
	// Messages is the messages posted, by chat.postMessage or a webhook.
	Messages int
	// ByMethod is the requests per Web API method ("webhook" for
	// incoming webhooks).
	ByMethod map[string]int
}

// Server is a fake Slack. Its URL + "/api/" is the Web API's base URL and
// [Server.WebhookURL] gives incoming webhook URLs. It is safe for
// concurrent use.
type Server struct {
	*httptest.Server
	tiers  slackquota.Options
	perSec int

	mu    sync.Mutex
	log   map[string][]time.Time // calls per counter, oldest first
	stats Stats
}

// NewServer starts a fake Slack; Close it when done.
func NewServer(o Options) *Server {
	s := &Server{
		tiers:  slackquota.Options{Tiers: o.Tiers, NonMarketplace2025: o.NonMarketplace2025},
		perSec: o.PostPerSecond,
		log:    make(map[string][]time.Time),
		stats:  Stats{ByMethod: make(map[string]int)},
	}
	if s.perSec <= 0 {
		s.perSec = slackquota.PostRate + slackquota.PostBurst
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/api/{method}", s.api)
	mux.HandleFunc("POST /services/", s.webhook)
	s.Server = httptest.NewServer(mux)
	return s
}

// APIURL is the Web API's base URL, ending in "/api/", for slack-go's
// OptionAPIURL and slackquota.Options.APIURL (which then finds the
// webhooks on the same host).
func (s *Server) APIURL() string { return s.URL + "/api/" }

// WebhookURL returns the URL of incoming webhook n.
func (s *Server) WebhookURL(n int) string {
	return fmt.Sprintf("%s/services/T0000FAKE/B%07d/fakesecret%d", s.URL, n, n)
}

// Stats returns a copy of what the server received so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	out.ByMethod = maps.Clone(s.stats.ByMethod)
	return out
}

// take records a call on counter key if fewer than max calls were
// recorded in the last per; else it returns how long until one leaves.
func (s *Server) take(key string, max int, per time.Duration, now time.Time) (bool, time.Duration) {
	calls := s.log[key]
	i := 0
	for i < len(calls) && !calls[i].After(now.Add(-per)) {
		i++
	}
	calls = calls[i:]
	if len(calls) >= max {
		s.log[key] = calls
		return false, calls[len(calls)-max].Add(per).Sub(now)
	}
	s.log[key] = append(calls, now)
	return true, 0
}

// params reads the request's form (or JSON) fields and its token.
func params(r *http.Request) (url.Values, string) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	v := r.URL.Query()
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt == "application/json" {
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			for k, x := range m {
				if str, ok := x.(string); ok {
					v.Set(k, str)
				}
			}
		}
	} else if f, err := url.ParseQuery(string(body)); err == nil {
		for k, x := range f {
			v[k] = x
		}
	}
	tok := v.Get("token")
	if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		tok = a
	}
	return v, tok
}

func (s *Server) api(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	v, tok := params(r)
	now := time.Now()

	s.mu.Lock()
	s.stats.Requests++
	s.stats.ByMethod[method]++
	if tok == "" {
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"ok": false, "error": "not_authed"})
		return
	}
	var ok bool
	var wait time.Duration
	if method == "chat.postMessage" {
		ok, wait = s.take("post\x00"+tok+"\x00"+v.Get("channel"), s.perSec, time.Second, now)
	} else {
		l := s.tiers.TierOf(method).Limit()
		ok, wait = s.take("api\x00"+tok+"\x00"+method, l.Rate+l.Burst, time.Minute, now)
	}
	if !ok {
		s.stats.Limited++
		s.mu.Unlock()
		limited(w, wait)
		return
	}
	s.stats.OK++
	if method == "chat.postMessage" {
		s.stats.Messages++
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, answer(method, v))
}

func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	v, _ := params(r)
	now := time.Now()
	s.mu.Lock()
	s.stats.Requests++
	s.stats.ByMethod["webhook"]++
	ok, wait := s.take("hook\x00"+r.URL.Path+"\x00"+v.Get("channel"), s.perSec, time.Second, now)
	if !ok {
		s.stats.Limited++
		s.mu.Unlock()
		w.Header().Set("Retry-After", retryAfter(wait))
		http.Error(w, "rate_limited", http.StatusTooManyRequests)
		return
	}
	s.stats.OK++
	s.stats.Messages++
	s.mu.Unlock()
	_, _ = io.WriteString(w, "ok")
}

// limited answers like Slack over a limit.
func limited(w http.ResponseWriter, wait time.Duration) {
	w.Header().Set("Retry-After", retryAfter(wait))
	writeJSON(w, http.StatusTooManyRequests, map[string]any{"ok": false, "error": "ratelimited"})
}

// retryAfter is wait in whole seconds, rounded up, at least 1.
func retryAfter(wait time.Duration) string {
	return fmt.Sprint(max(1, int(math.Ceil(wait.Seconds()))))
}

// answer is a plausible successful answer to method, enough for slack-go.
func answer(method string, v url.Values) map[string]any {
	out := map[string]any{"ok": true}
	switch method {
	case "chat.postMessage":
		out["channel"] = v.Get("channel")
		out["ts"] = fmt.Sprintf("%d.000100", time.Now().Unix())
	case "conversations.history", "conversations.replies":
		out["messages"] = []any{map[string]any{"type": "message", "text": "hello", "ts": "1700000000.000100"}}
		out["has_more"] = false
	case "conversations.list":
		out["channels"] = []any{map[string]any{"id": "C0000001", "name": "general"}}
		out["response_metadata"] = map[string]any{"next_cursor": ""}
	case "users.info":
		out["user"] = map[string]any{"id": v.Get("user"), "name": "fake"}
	case "users.list":
		out["members"] = []any{map[string]any{"id": "U0000001", "name": "fake"}}
		out["response_metadata"] = map[string]any{"next_cursor": ""}
	case "auth.test":
		out["team"], out["team_id"], out["user_id"] = "Fake", "T0000FAKE", "U0000001"
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
