package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Example_quickstart is the README's quickstart on Redis: the in-process
// program of the README (which TestReadmeQuickstartRuns runs as pasted),
// with the lines between the markers in place of the one that builds the
// transport. TestReadmeQuickstart checks that the README shows those
// lines word for word, but for the Redis address.
func Example_quickstart() {
	redisAddr := srv.Addr() // the Redis TestMain started
	cleanQuickstartKeys()
	// A local server stands in for the Slack webhook: it answers 200 OK.
	slack := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer slack.Close()

	policy := throttle.Policy{
		Rules: []throttle.Rule{{
			Name: "slack-notify", Host: "127.0.0.1", // "hooks.slack.com" for the real one
			Limits: []throttle.Limit{
				{Name: "global", Rate: 100, Per: 30 * time.Minute},
				{Name: "category", Rate: 10, Per: 30 * time.Minute, Key: throttle.KeyFromContext("category")},
			},
			Wait: waiters.FailFast(), // or waiters.Block(), or waiters.UpTo(30*time.Second)
		}},
	}
	// quickstart:begin
	rdb := redis.NewClient(&redis.Options{
		Addr:                  redisAddr,
		ContextTimeoutEnabled: true,                  // the transport's call deadline reaches the socket
		DialTimeout:           time.Second,           // default 5 s
		DialerRetries:         1,                     // default 5, 100 ms apart
		MinIdleConns:          8,                     // warm connections
		MaxRetryBackoff:       64 * time.Millisecond, // default 1 s
	})
	defer rdb.Close()
	store, err := redisstore.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Check(context.Background()); err != nil { // a wrong password, address or client kind stops here
		log.Fatal(err)
	}
	policy.Instances = 8 // the fleet's size: each instance's share of the quota while Redis is down
	t, err := throttle.NewTransport(http.DefaultTransport, policy, throttle.WithStore(store))
	// quickstart:end
	if err != nil {
		log.Fatal(err) // the policy is invalid: the error names the rule and the field
	}
	client := &http.Client{Transport: t}

	for i := 1; i <= 11; i++ {
		ctx := throttle.WithKey(context.Background(), "category", "disk-alerts")
		body := strings.NewReader(`{"text":"disk almost full"}`)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, slack.URL+"/services/T0/B0/X", body)
		resp, err := client.Do(req)
		var le *throttle.LimitError
		switch {
		case errors.As(err, &le): // not sent, nothing charged
			fmt.Printf("%d: refused by limit %s, retry in %v\n", i, le.Limit, le.RetryAfter.Round(time.Minute))
		case err != nil:
			log.Fatal(err)
		default:
			resp.Body.Close()
			fmt.Printf("%d: sent, %s\n", i, resp.Status)
		}
	}

	// Output:
	// 1: sent, 200 OK
	// 2: sent, 200 OK
	// 3: sent, 200 OK
	// 4: sent, 200 OK
	// 5: sent, 200 OK
	// 6: sent, 200 OK
	// 7: sent, 200 OK
	// 8: sent, 200 OK
	// 9: sent, 200 OK
	// 10: sent, 200 OK
	// 11: refused by limit category, retry in 3m0s
}

// cleanQuickstartKeys deletes what an earlier run of Example_quickstart
// left in the test Redis (-count=2), so its output stays the same.
func cleanQuickstartKeys() {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	ctx := context.Background()
	keys, err := c.Keys(ctx, redisstore.DefaultPrefix+"v1:{slack-notify}:*").Result()
	if err == nil && len(keys) > 0 {
		_ = c.Del(ctx, keys...).Err()
	}
}

// TestReadmeQuickstart: the README's quickstart on Redis shows
// Example_quickstart's lines between the markers, line for line.
func TestReadmeQuickstart(t *testing.T) {
	src, err := os.ReadFile("quickstart_example_test.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(src), "// quickstart:begin\n")
	require.True(t, ok)
	body, _, ok := strings.Cut(rest, "\t// quickstart:end\n")
	require.True(t, ok)
	var want []string
	for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		want = append(want, strings.TrimPrefix(line, "\t"))
	}
	_, block, ok := strings.Cut(string(readme), "**The same program on a fleet.**")
	require.True(t, ok)
	_, block, ok = strings.Cut(block, "```go\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "\n```")
	require.True(t, ok)
	var got []string
	for _, line := range strings.Split(block, "\n") {
		got = append(got, strings.Replace(line, `"localhost:6379"`, "redisAddr", 1)) // the one difference
	}
	assert.Equal(t, want, got)
}
