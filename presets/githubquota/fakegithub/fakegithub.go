// Package fakegithub runs a fake GitHub API for tests and examples: an
// [httptest.Server] that answers a few REST routes, search and GraphQL, and
// enforces GitHub's rate limits as GitHub documents them, answering a
// request over a limit as GitHub does and counting it.
//
// It enforces, per token (no token: one anonymous client):
//
//   - primary limits: a quota per resource in a window that starts at the
//     resource's first request: "core" (the REST API but search) and
//     "graphql", Options.Hourly an hour; "search", 30 a minute;
//     "code_search", 9 a minute. Without a token: "core" 60 an hour,
//     "search" 10 a minute, and code search answers 401, as it requires a
//     token. A request costs 1, a GraphQL request the points
//     Options.GraphQLCost gives it (1 unless set), which the answer reports
//     in data.rateLimit (cost, limit, remaining, used, resetAt) when the
//     query asks for rateLimit, as GitHub does. Every answer reports the
//     request's resource in x-ratelimit-limit, -remaining, -used, -reset
//     (epoch seconds) and -resource. A request whose cost does not fit in
//     what remains: a 403 with x-ratelimit-remaining: 0;
//   - secondary limits over sliding windows of a minute (an hour): 900
//     points a minute shared by every REST request of the token, search
//     included (GET, HEAD and OPTIONS cost 1, other methods 5); 2,000
//     GraphQL points a minute (a query 1, a mutation 5); and content
//     creation, 80 a minute and 500 an hour, counting every REST write
//     (any method but GET, HEAD and OPTIONS, uploads included) and every
//     GraphQL mutation. Over one: a 403 (or Options.SecondaryStatus) whose
//     body speaks of a secondary rate limit, with a Retry-After unless
//     Options.NoRetryAfter;
//   - at most Options.MaxInFlight (100) requests of a token in flight at
//     once, REST and GraphQL together (set Options.Latency so that
//     requests overlap); one more gets the same secondary-limit answer.
//
// A request over a limit is charged to none. Requests for installation
// and OAuth tokens are limited only to 2,000 an hour. A repository named
// "private" answers a plain permission 403.
//
// It serves the API at its root as api.github.com does, or, with
// Options.Enterprise, as GitHub Enterprise Server does: the REST API under
// /api/v3/, GraphQL at /api/graphql, uploads under /api/uploads/.
// [Server.BaseURL] and [Server.UploadURL] give the URLs for the client and
// for githubquota.Options.BaseURL.
package fakegithub

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"
)

// Options configure a fake GitHub.
type Options struct {
	// Hourly is a token's quota of "core" requests and of "graphql"
	// points an hour. Zero means 5,000.
	Hourly int

	// SecondaryStatus is the status of a secondary-limit answer: 403 (the
	// zero value) or 429.
	SecondaryStatus int

	// NoRetryAfter leaves Retry-After out of secondary-limit answers, as
	// GitHub sometimes does; clients should then wait a minute.
	NoRetryAfter bool

	// Now is the server's clock; nil means time.Now. Tests of hourly
	// limits share a fake clock with the client's store.
	Now func() time.Time

	// Latency is how long each request takes to answer, so that requests
	// overlap; zero answers at once.
	Latency time.Duration

	// MaxInFlight is how many requests of one token may be in flight at
	// once; one more is answered with a secondary-limit answer. Zero
	// means 100, as GitHub documents.
	MaxInFlight int

	// GraphQLCost is the points a GraphQL request costs on the token's
	// hourly "graphql" quota, given the request (its body readable);
	// nil, or a result below 1, means 1. It is called under the server's
	// lock, one request at a time, before the request is checked against
	// the quota.
	GraphQLCost func(*http.Request) int

	// Enterprise serves the paths of GitHub Enterprise Server: the REST
	// API under /api/v3/, GraphQL at /api/graphql and uploads under
	// /api/uploads/ (anything else is a 404). False serves them as
	// api.github.com and uploads.github.com do, at the root.
	Enterprise bool
}

// Stats are what a fake GitHub received.
type Stats struct {
	// Requests is every request received.
	Requests int
	// OK is the requests answered with a 2xx status.
	OK int
	// Limited is the requests refused by a primary or secondary limit
	// (403 or 429): each one a request the client should not have sent.
	Limited int
	// Forbidden is the plain permission 403s.
	Forbidden int
	// Created is the content-creating requests accepted: REST writes
	// and GraphQL mutations.
	Created int
	// MaxInFlight is the most requests of one token seen in flight at
	// once.
	MaxInFlight int
	// ByResource is the requests per rate-limit resource ("core",
	// "search", "code_search", "graphql", "tokens").
	ByResource map[string]int
}

// Server is a fake GitHub API. [Server.BaseURL] is the API's base URL. It
// is safe for concurrent use.
type Server struct {
	*httptest.Server
	opts Options

	mu       sync.Mutex
	windows  map[string]*window    // primary quota per token and resource
	logs     map[string][]logEntry // secondary limits per counter
	issues   int
	stats    Stats
	inFlight map[string]int // requests in flight per token
}

type window struct {
	start time.Time
	used  int
}

type logEntry struct {
	at   time.Time
	cost int
}

// NewServer starts a fake GitHub; Close it when done.
func NewServer(o Options) *Server {
	if o.Hourly <= 0 {
		o.Hourly = 5000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 100
	}
	if o.SecondaryStatus == 0 {
		o.SecondaryStatus = http.StatusForbidden
	}
	s := &Server{opts: o, windows: make(map[string]*window), logs: make(map[string][]logEntry), inFlight: make(map[string]int),
		stats: Stats{ByResource: make(map[string]int)}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /repos/{owner}/{repo}", s.limited(func(r *http.Request) (int, any) {
		return 200, map[string]any{"id": 1, "name": r.PathValue("repo"), "full_name": r.PathValue("owner") + "/" + r.PathValue("repo")}
	}))
	mux.HandleFunc("GET /repos/{owner}/{repo}/issues", s.limited(func(*http.Request) (int, any) {
		return 200, []any{map[string]any{"number": 1, "title": "fake issue", "state": "open"}}
	}))
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues", s.limited(func(*http.Request) (int, any) {
		s.issues++
		return 201, map[string]any{"number": s.issues + 1, "title": "created", "state": "open"}
	}))
	mux.HandleFunc("POST /repos/{owner}/{repo}/issues/{number}/comments", s.limited(func(*http.Request) (int, any) {
		return 201, map[string]any{"id": 1, "body": "created"}
	}))
	mux.HandleFunc("PATCH /repos/{owner}/{repo}/issues/{number}", s.limited(func(*http.Request) (int, any) {
		return 200, map[string]any{"number": 1, "title": "edited", "state": "open"}
	}))
	mux.HandleFunc("GET /search/issues", s.limited(searchAnswer))
	mux.HandleFunc("GET /search/code", s.limited(searchAnswer))
	mux.HandleFunc("POST /graphql", s.limited(func(*http.Request) (int, any) {
		return 200, map[string]any{"data": map[string]any{"viewer": map[string]any{"login": "fake"}}}
	}))
	mux.HandleFunc("POST /app/installations/{installation_id}/access_tokens", s.limited(func(*http.Request) (int, any) {
		return 201, map[string]any{"token": "ghs_fakeinstallationtoken", "expires_at": "2099-01-01T00:00:00Z"}
	}))
	mux.HandleFunc("GET /user", s.limited(func(*http.Request) (int, any) { return 200, map[string]any{"login": "fake"} }))
	mux.HandleFunc("POST /repos/{owner}/{repo}/releases/{id}/assets", s.limited(func(r *http.Request) (int, any) {
		return 201, map[string]any{"id": 1, "name": r.URL.Query().Get("name"), "state": "uploaded"}
	}))
	mux.HandleFunc("/", s.limited(func(*http.Request) (int, any) { return 200, map[string]any{} }))
	var h http.Handler = mux
	if o.Enterprise {
		h = enterprise(mux)
	}
	s.Server = httptest.NewServer(h)
	return s
}

// enterprise serves h, which answers at the root, under the paths of
// GitHub Enterprise Server.
func enterprise(h http.Handler) http.Handler {
	api := http.StripPrefix("/api/v3", h)
	uploads := http.StripPrefix("/api/uploads", h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case strings.HasPrefix(p, "/api/v3/"):
			api.ServeHTTP(w, r)
		case strings.HasPrefix(p, "/api/uploads/"):
			uploads.ServeHTTP(w, r)
		case p == "/api/graphql":
			r2 := r.Clone(r.Context())
			r2.URL.Path, r2.URL.RawPath = "/graphql", ""
			h.ServeHTTP(w, r2)
		default:
			http.NotFound(w, r)
		}
	})
}

// BaseURL is the REST API's base URL: the server's URL and "/", or with
// Options.Enterprise "/api/v3/". Give it to the client (go-github's
// WithURLs or WithEnterpriseURLs) and to githubquota.Options.BaseURL.
func (s *Server) BaseURL() string {
	if s.opts.Enterprise {
		return s.URL + "/api/v3/"
	}
	return s.URL + "/"
}

// UploadURL is the uploads API's base URL: the server's URL and "/", or
// with Options.Enterprise "/api/uploads/".
func (s *Server) UploadURL() string {
	if s.opts.Enterprise {
		return s.URL + "/api/uploads/"
	}
	return s.URL + "/"
}

// Stats returns a copy of what the server received so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	out.ByResource = maps.Clone(s.stats.ByResource)
	return out
}

// Used returns how much of the token's quota for resource its current
// window has used: requests, or GraphQL points.
func (s *Server) Used(token, resource string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.window(token, resource, s.opts.Now()).used
}

// Use spends n of the token's quota for resource, as another client of
// the same token would.
func (s *Server) Use(token, resource string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.window(token, resource, s.opts.Now())
	w.used += n
}

func searchAnswer(*http.Request) (int, any) {
	return 200, map[string]any{"total_count": 0, "incomplete_results": false, "items": []any{}}
}

// resource is the rate-limit resource of a request.
func resource(r *http.Request) string {
	switch p := r.URL.Path; {
	case strings.HasPrefix(p, "/search/code"):
		return "code_search"
	case strings.HasPrefix(p, "/search/"):
		return "search"
	case p == "/graphql":
		return "graphql"
	case strings.HasSuffix(p, "/access_tokens"), p == "/login/oauth/access_token":
		return "tokens"
	}
	return "core"
}

// quota is a resource's limit and window for a token.
func (s *Server) quota(token, res string) (int, time.Duration) {
	switch {
	case res == "search" && token == "":
		return 10, time.Minute
	case res == "search":
		return 30, time.Minute
	case res == "code_search":
		return 9, time.Minute
	case res == "tokens":
		return 2000, time.Hour
	case token == "":
		return 60, time.Hour
	}
	return s.opts.Hourly, time.Hour
}

func (s *Server) window(token, res string, now time.Time) *window {
	_, per := s.quota(token, res)
	k := token + "\x00" + res
	w := s.windows[k]
	if w == nil || !now.Before(w.start.Add(per)) {
		w = &window{start: now}
		s.windows[k] = w
	}
	return w
}

// room reports whether counter key has room for cost more within the last
// per, and if not, when it will.
func (s *Server) room(key string, cost, max int, per time.Duration, now time.Time) (bool, time.Duration) {
	log := s.logs[key]
	i := 0
	for i < len(log) && !log[i].at.After(now.Add(-per)) {
		i++
	}
	log = log[i:]
	s.logs[key] = log
	sum := 0
	for _, e := range log {
		sum += e.cost
	}
	if sum+cost <= max {
		return true, 0
	}
	// Wait until enough has left the window.
	for _, e := range log {
		sum -= e.cost
		if sum+cost <= max {
			return false, e.at.Add(per).Sub(now)
		}
	}
	return false, per
}

func (s *Server) charge(key string, cost int, now time.Time) {
	s.logs[key] = append(s.logs[key], logEntry{at: now, cost: cost})
}

type check struct {
	key       string
	cost, max int
	per       time.Duration
}

// limited wraps a route's handler with the rate limits.
func (s *Server) limited(h func(*http.Request) (int, any)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		token := r.Header.Get("Authorization")
		for _, scheme := range []string{"Bearer ", "bearer ", "token ", "Token "} {
			token = strings.TrimPrefix(token, scheme)
		}
		res := resource(r)

		s.mu.Lock()
		s.inFlight[token]++
		n := s.inFlight[token]
		s.stats.MaxInFlight = max(s.stats.MaxInFlight, n)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.inFlight[token]--
			s.mu.Unlock()
		}()
		if s.opts.Latency > 0 {
			time.Sleep(s.opts.Latency)
		}
		now := s.opts.Now()

		s.mu.Lock()
		defer s.mu.Unlock()
		s.stats.Requests++
		s.stats.ByResource[res]++

		limit, per := s.quota(token, res)
		win := s.window(token, res, now)
		reset := int64(math.Ceil(float64(win.start.Add(per).UnixNano()) / 1e9))
		setQuota := func(used int) {
			h := w.Header()
			h.Set("X-Ratelimit-Limit", fmt.Sprint(limit))
			h.Set("X-Ratelimit-Remaining", fmt.Sprint(max(limit-used, 0)))
			h.Set("X-Ratelimit-Used", fmt.Sprint(used))
			h.Set("X-Ratelimit-Reset", fmt.Sprint(reset))
			h.Set("X-Ratelimit-Resource", res)
		}
		if res == "code_search" && token == "" {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"message": "Requires authentication",
				"documentation_url": "https://docs.github.com/rest/search/search#search-code"})
			return
		}
		cost := 1
		if res == "graphql" && s.opts.GraphQLCost != nil {
			r2 := r.Clone(r.Context())
			r2.Body = io.NopCloser(bytes.NewReader(body))
			cost = max(s.opts.GraphQLCost(r2), 1)
		}
		if win.used+cost > limit {
			s.stats.Limited++
			setQuota(win.used)
			w.Header().Set("X-Ratelimit-Remaining", "0")
			if res == "graphql" {
				// GraphQL answers its primary limit with a 200 whose
				// errors say RATE_LIMITED, and charges nothing.
				writeJSON(w, http.StatusOK, map[string]any{"data": nil, "errors": []any{map[string]any{
					"type": "RATE_LIMITED", "message": "API rate limit exceeded for user ID 1."}}})
				return
			}
			writeJSON(w, http.StatusForbidden, map[string]any{"message": "API rate limit exceeded for this token.",
				"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"})
			return
		}

		read := r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions
		var checks []check
		creates := false
		switch res {
		case "graphql":
			cost := 1
			if creates = isMutation(body); creates {
				cost = 5
			}
			checks = append(checks, check{token + "\x00graphql-points", cost, 2000, time.Minute})
		case "core", "search", "code_search":
			cost := 1
			if creates = !read; creates {
				cost = 5
			}
			checks = append(checks, check{token + "\x00points", cost, 900, time.Minute})
		}
		if creates {
			checks = append(checks, check{token + "\x00content-minute", 1, 80, time.Minute},
				check{token + "\x00content-hour", 1, 500, time.Hour})
		}
		secondary := func(wait time.Duration) {
			s.stats.Limited++
			setQuota(win.used)
			if !s.opts.NoRetryAfter {
				w.Header().Set("Retry-After", fmt.Sprint(max(1, int(math.Ceil(wait.Seconds())))))
			}
			writeJSON(w, s.opts.SecondaryStatus, map[string]any{
				"message":           "You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
				"documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"})
		}
		if n > s.opts.MaxInFlight {
			secondary(time.Second) // too many concurrent requests
			return
		}
		for _, c := range checks {
			if ok, wait := s.room(c.key, c.cost, c.max, c.per, now); !ok {
				secondary(wait)
				return
			}
		}
		for _, c := range checks {
			s.charge(c.key, c.cost, now)
		}
		win.used += cost
		setQuota(win.used)
		if r.PathValue("repo") == "private" {
			s.stats.Forbidden++
			writeJSON(w, http.StatusForbidden, map[string]any{"message": "Resource not accessible by integration"})
			return
		}
		status, v := h(r)
		answer, _ := v.(map[string]any)
		if data, ok := answer["data"].(map[string]any); ok && res == "graphql" && asksRateLimit(body) {
			data["rateLimit"] = map[string]any{"cost": cost, "limit": limit, "remaining": limit - win.used,
				"used": win.used, "resetAt": time.Unix(reset, 0).UTC().Format(time.RFC3339)}
		}
		if status/100 == 2 {
			s.stats.OK++
			if creates {
				s.stats.Created++
			}
		}
		writeJSON(w, status, v)
	}
}

// isMutation reports whether a GraphQL request body's query is a
// mutation.
func isMutation(body []byte) bool {
	var req struct{ Query string }
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	return strings.HasPrefix(strings.TrimSpace(req.Query), "mutation")
}

// asksRateLimit reports whether a GraphQL request body's query asks for
// rateLimit.
func asksRateLimit(body []byte) bool {
	var req struct{ Query string }
	return json.Unmarshal(body, &req) == nil && strings.Contains(req.Query, "rateLimit")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
