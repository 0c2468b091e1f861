package throttle_test

import (
	"context"
	"log"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/snippettest"
	"github.com/quotakit/throttle/otelthrottle"
	"github.com/quotakit/throttle/policyfile"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/quotaview"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/retryable"
	"github.com/quotakit/throttle/waiters"
)

// TestDocSnippets: every Go block of docs/ and of the README that no other
// check covers is a region of this file, which the build compiles, shown
// word for word.
func TestDocSnippets(t *testing.T) {
	pages := []string{"README.md", "docs/learning.md", "docs/operations.md", "docs/policy.md", "docs/sentinel.md", "docs/when-redis-fails.md", "docs/quotaview.md"}
	snippettest.Check(t, "docs-", pages, []string{"docs_snippets_test.go"}, nil)

	// Every Go block of docs/ is named (this file's regions, or the
	// examples' for docs/presets.md), so none goes unchecked.
	docs, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	for _, page := range docs {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		prev := ""
		for n, line := range strings.Split(string(text), "\n") {
			if line == "```go" && !strings.HasPrefix(prev, "<!-- snippet ") {
				t.Errorf("%s:%d: a Go block that no snippet comment names, so no test compiles it", page, n+1)
			}
			if strings.TrimSpace(line) != "" {
				prev = line
			}
		}
	}
}

// The functions below are compiled, never run: each holds regions.
var _ = []any{snippetLearning, snippetOperations, snippetPolicy, snippetRedis, snippetOutsideHTTP, snippetQuotaview}

func snippetLearning(policy throttle.Policy, store quota.Store, url string) (*http.Response, error) {
	_ = throttle.Rule{
		// snippet docs-retry-decide
		Retry: throttle.Retry{Max: 3, Decide: func(ev throttle.RetryEvent) bool {
			return ev.Wait <= 10*time.Second // a longer pause goes back to the caller as the 429
		}},
		// snippet end
	}
	// snippet docs-retryable
	t, _ := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	client := retryable.NewClient(t, retryable.Policy{MaxWait: time.Minute})
	resp, err := client.Get(url) // or client.StandardClient() as an *http.Client
	// snippet end
	return resp, err
}

func snippetOperations(ctx context.Context, policy throttle.Policy, rule throttle.Rule, store *redisstore.Store) error {
	// snippet docs-otel
	hooks, err := otelthrottle.Hooks(otel.GetMeterProvider(), otelthrottle.SpanHooks(throttle.Hooks{}))
	if err != nil {
		return err
	}
	t, err := throttle.NewTransport(nil, policy, throttle.WithHooks(hooks))
	if err != nil {
		return err
	}
	gauges, err := otelthrottle.Gauges(otel.GetMeterProvider(), t.Limiter()) // pending and in-flight requests
	if err != nil {
		return err
	}
	defer gauges.Unregister() // when the transport is retired

	client := &http.Client{Transport: t} // under otelhttp.NewTransport(t), the events go on its spans
	// snippet end
	_ = client

	// snippet docs-inspect
	// *redisstore.Store and *memstore.Store are both Inspectors.
	var in quota.Inspector = store
	limits := []quota.Limit{rule.Limits[0].Quota(), rule.Limits[1].Quota()} // what the store sees: no Key
	states, err := in.Inspect(ctx, "slack-notify", limits)                  // scope: Rule.Scope, or the rule's name
	if err != nil {
		return err
	}
	for _, s := range states {
		_ = s // s.Limit ("" for a pause), s.Key, s.Used, s.Remaining, s.Reset
	}
	if err := in.ResetLimit(ctx, "slack-notify", limits[1], "errors"); err != nil { // forget one counter
		return err
	}
	return in.ClearPause(ctx, "slack-notify", "") // end the scope-wide pause
	// snippet end
}

func snippetPolicy(ctx context.Context, store quota.Store, logger *slog.Logger) error {
	// snippet docs-github-rule
	writes := func(r *http.Request) bool { return r.Method != "GET" && r.Method != "HEAD" }
	under := func(p string) func(*http.Request) bool {
		return func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, p) }
	}
	token := throttle.KeyFromHeader("Authorization")
	github := throttle.Rule{Name: "github", Host: "api.github.com", Limits: []throttle.Limit{
		{Name: "primary", Rate: 5000, Per: time.Hour, Key: token},
		{Name: "points", Rate: 900, Per: time.Minute, Key: token, Algorithm: throttle.SlidingLog,
			Cost: throttle.CostByMethod(5, map[string]int{"GET": 1, "HEAD": 1, "OPTIONS": 1})},
		{Name: "content-minute", Rate: 80, Per: time.Minute, Key: token, Match: writes},
		{Name: "content-hour", Rate: 500, Per: time.Hour, Key: token, Match: writes},
		{Name: "search", Rate: 30, Per: time.Minute, Key: token, Match: under("/search/")},
		{Name: "code-search", Rate: 9, Per: time.Minute, Key: token, Match: under("/search/code")},
		{Name: "in-flight", Rate: 100, Per: time.Minute, Key: token, Algorithm: throttle.Concurrency},
	}}
	// snippet end
	_ = github
	{
		// snippet docs-inflight
		rule := throttle.Rule{
			Name: "github", Host: "api.github.com",
			Limits: []throttle.Limit{
				{Name: "hourly", Rate: 5000, Per: time.Hour},
				// At most 100 in flight. Per is the lease time: a slot that is
				// not renewed for 30 s is reclaimed.
				{Name: "inflight", Rate: 100, Per: 30 * time.Second, Algorithm: throttle.Concurrency},
			},
			Wait: waiters.UpTo(10 * time.Second),
		}
		// snippet end
		_ = rule
	}
	{
		// snippet docs-settle
		rule := throttle.Rule{
			Name: "github-graphql", Host: "api.github.com", Path: "/graphql",
			Limits: []throttle.Limit{{Name: "points", Rate: 5000, Per: time.Hour, Algorithm: throttle.FixedWindow}},
			Cost:   func(*http.Request) int { return 50 },          // the most a query may cost here
			Settle: throttle.SettleFromJSON("data.rateLimit.cost"), // what it did cost
		}
		// snippet end
		_ = rule
	}
	// snippet docs-classes
	policy := throttle.Policy{
		Classes: []throttle.Class{{Name: "interactive"}, {Name: "bulk", Headroom: 0.2}},
		Rules: []throttle.Rule{{
			Name: "slack", Host: "slack.com", Class: "bulk", // the sync's class, the rule's default
			Limits: []throttle.Limit{{Name: "posts", Rate: 100, Per: 10 * time.Second, Burst: 10}},
		}},
	}
	ctx = throttle.WithClass(ctx, "interactive") // a user clicked
	// snippet end
	_ = policy

	// snippet docs-reload
	r, err := policyfile.NewReloader("/etc/myapp/throttle.yaml", nil, throttle.WithStore(store))
	if err != nil {
		return err // the file is invalid or unreadable: every problem with its line
	}
	client := &http.Client{Transport: r}
	go r.Watch(ctx, 5*time.Second, func(err error) {
		if err != nil {
			logger.Warn("throttle policy not reloaded", "err", err) // the old policy stays
		} else {
			logger.Info("throttle policy reloaded")
		}
	})
	// snippet end
	_ = client
	return nil
}

func snippetRedis(ctx context.Context) {
	// snippet docs-sentinel
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            "mymaster",                                   // as in "sentinel monitor mymaster ..."
		SentinelAddrs:         []string{"s1:26379", "s2:26379", "s3:26379"}, // every Sentinel, not just one
		Password:              os.Getenv("REDIS_PASSWORD"),                  // the master's; SentinelPassword for the Sentinels
		ContextTimeoutEnabled: true,
		DialTimeout:           time.Second,
		DialerRetries:         1,
		MinIdleConns:          8,
		MaxRetryBackoff:       64 * time.Millisecond,
	})
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Check(ctx); err != nil {
		log.Fatal(err) // a wrong password, master name or Sentinel address stops here
	}
	// snippet end

	_ = &redis.Options{
		// snippet docs-client-options
		ContextTimeoutEnabled: true,                  // the transport's call deadline reaches the socket
		DialTimeout:           time.Second,           // default 5 s: a dead address is found sooner
		DialerRetries:         1,                     // default 5 attempts, 100 ms apart
		MinIdleConns:          8,                     // connections kept open (Check opens them at start-up)
		MaxRetryBackoff:       64 * time.Millisecond, // default 1 s
		// ReadTimeout, WriteTimeout: leave the defaults (5 s). Never set them below the transport's
		// budget (Breaker.CallTimeout, 2 s): a read that times out turns a slow answer into a failure.
		// MaxRetries: the default (3) is safe; a call sent again is never charged twice (below).
		// snippet end
	}
}

func snippetQuotaview(policy throttle.Policy, store quota.Store, mux *http.ServeMux) error {
	// snippet docs-quotaview
	rec := quotaview.NewRecorder()
	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store),
		throttle.WithHooks(rec.Hooks(throttle.Hooks{}))) // chains: rec.Hooks(otelHooks)
	if err != nil {
		return err
	}
	mux.Handle("/debug/throttle/", quotaview.New(t.Limiter(), quotaview.WithRecorder(rec)))
	// snippet end
	return nil
}

func snippetOutsideHTTP(ctx context.Context, policy throttle.Policy, store quota.Store,
	send func(context.Context) error, isRateLimited func(error) bool, retryAfter func(error) time.Duration) error {
	// snippet docs-outside-http
	lim, err := throttle.NewLimiter(policy, throttle.WithStore(store))
	if err != nil {
		return err // the policy is invalid, or the store cannot decide a rule
	}
	ctx = throttle.WithKey(ctx, "account", "acme")
	p, err := lim.Wait(ctx, "email") // or Allow, AllowN, Reserve(ctx, rule, n)
	if err != nil {
		return err // *throttle.LimitError: RetryAfter, the limit
	}
	defer p.Done() // frees in-flight slots; p.Cancel(ctx) if you do not call
	err = send(ctx)
	p.Report(ctx, isRateLimited(err), quotaheader.Feedback{Limit: -1, Remaining: -1, Used: -1,
		RetryAfter: retryAfter(err), HasRetryAfter: retryAfter(err) > 0}) // a pause for every instance
	// snippet end
	return err
}
