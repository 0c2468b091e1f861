package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gogithub "github.com/google/go-github/v89/github"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/internal/redisweather"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/redisstore"
)

// A call is one kind of go-github call of the fleet test.
type call struct {
	kind string // "read", "write", "search" or "code"
	do   func(context.Context, *gogithub.Client) error
}

var (
	callList = call{"read", func(ctx context.Context, gh *gogithub.Client) error {
		_, _, err := gh.Issues.ListByRepo(ctx, "o", "r", nil)
		return err
	}}
	callGet = call{"read", func(ctx context.Context, gh *gogithub.Client) error {
		_, _, err := gh.Repositories.Get(ctx, "o", "r")
		return err
	}}
	callComment = call{"write", func(ctx context.Context, gh *gogithub.Client) error {
		_, _, err := gh.Issues.CreateComment(ctx, "o", "r", 1, &gogithub.IssueComment{Body: gogithub.Ptr("x")})
		return err
	}}
	callEdit = call{"write", func(ctx context.Context, gh *gogithub.Client) error {
		_, _, err := gh.Issues.Edit(ctx, "o", "r", 1, &gogithub.IssueRequest{Title: gogithub.Ptr("x")})
		return err
	}}
	callSearch = call{"search", func(ctx context.Context, gh *gogithub.Client) error {
		_, _, err := gh.Search.Issues(ctx, "is:open", nil)
		return err
	}}
	callCode = call{"code", func(ctx context.Context, gh *gogithub.Client) error {
		_, _, err := gh.Search.Code(ctx, "throttle", nil)
		return err
	}}
)

// TestGoGitHubFleet: 8 instances of 16 goroutines, each instance with its
// own Redis client, store, Transport and go-github client, against the
// fake GitHub Enterprise Server, with five tokens whose demand is above
// their quota: one reads (the points bind: 900), one writes (content
// creation binds: 80), one searches (30), one searches code (9), one mixes
// all four (the shared points bind: 900). Each goroutine calls its
// token's kinds in turn until each kind is refused: calls wait for their
// slot (the preset's default), and one whose slot is after the run's end
// is refused at once.
//
// As githubquota's TestFleet, what it asserts holds on any machine: the
// run ends well within GitHub's minute, so GitHub refuses none and no
// limit is charged over its rate; when every goroutine stopped on a
// refusal, each binding limit is used to the unit; a machine too loaded
// to make the ~1,500 calls before the run's end uses less, logged, with
// a lenient floor.
//
// It runs once in each weather of Redis (internal/redisweather): prompt;
// a tenth of its replies 150-350 ms late; stopped (SIGSTOP) for a second
// from 0.25 s into the traffic; one spinning process per core beside the
// fleet. Each is slow,
// not down: Redis decides every call, and the same holds. Then killed
// (SIGKILL) 0.25 s in: the instances decide alone on their local shares
// (throttle.LocalShare), and GitHub refuses at most what those sent.
func TestGoGitHubFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleets of 128 goroutines on a real Redis")
	}
	for _, w := range redisweather.All() {
		t.Run(w.Name, func(t *testing.T) {
			srv, px := w.Begin(t)
			goGitHubFleet(t, px.Addr(), func() { w.Fault(t, srv) }, w.Down)
		})
	}
}

// goGitHubFleet runs TestGoGitHubFleet's fleet on the Redis at addr,
// calling fault 0.25 s into the traffic, and checks it; down: Redis is
// gone from then on.
func goGitHubFleet(t *testing.T, addr string, fault func(), down bool) {
	const (
		instances, goroutines = 8, 16
		run                   = 30 * time.Second
	)
	prefix := redistest.Prefix(t)
	fake := fakegithub.NewServer(fakegithub.Options{Enterprise: true})
	defer fake.Close()
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: fake.BaseURL()})
	require.NoError(t, err)
	policy.Instances = instances

	tokens := []struct {
		name  string
		calls []call
	}{
		{"reads", []call{callList, callGet}},
		{"writes", []call{callComment, callEdit}},
		{"search", []call{callSearch}},
		{"code", []call{callCode}},
		{"mixed", []call{callGet, callComment, callList, callSearch, callGet, callCode, callList, callEdit}},
	}
	var mu sync.Mutex
	ok := map[string]map[string]int{}       // token -> kind -> calls answered 2xx
	var local, refusedByGitHub atomic.Int64 // requests sent on a local share; GitHub's refusals go-github reported
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for range instances {
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: goroutines})
		defer c.Close()
		store, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		base := &http.Transport{MaxIdleConnsPerHost: goroutines}
		defer base.CloseIdleConnections()
		tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store), throttle.WithHooks(throttle.Hooks{
			OnDecision: func(ev throttle.DecisionEvent) {
				if ev.Fallback == throttle.FailLocal && (ev.Outcome == throttle.Allowed || ev.Outcome == throttle.Waited) {
					local.Add(1)
				}
			},
		}))
		require.NoError(t, err)
		clients := map[string]*gogithub.Client{} // go-github takes one token per client
		for _, tok := range tokens {
			gh, err := gogithub.NewClient(
				gogithub.WithTransport(tr),
				gogithub.WithAuthToken(tok.name),
				gogithub.WithDisableRateLimitCheck(),
				gogithub.WithEnterpriseURLs(fake.BaseURL(), fake.UploadURL()),
			)
			require.NoError(t, err)
			clients[tok.name] = gh
		}
		for g := range goroutines {
			tok := tokens[g%len(tokens)]
			gh := clients[tok.name]
			kinds := map[string]bool{}
			for _, c := range tok.calls {
				kinds[c.kind] = true
			}
			wg.Go(func() {
				spent := map[string]bool{}
				for i := g; len(spent) < len(kinds) && ctx.Err() == nil; i++ {
					c := tok.calls[i%len(tok.calls)]
					if spent[c.kind] {
						continue
					}
					err := c.do(ctx, gh)
					var le *throttle.LimitError
					var rl *gogithub.RateLimitError
					var al *gogithub.AbuseRateLimitError
					switch {
					case errors.As(err, &le):
						spent[c.kind] = true // its slot is after the run's end
					case down && (errors.As(err, &rl) || errors.As(err, &al)):
						// GitHub refused a request that a local share
						// sent; the transport learned its pause.
						refusedByGitHub.Add(1)
					case err != nil:
						if ctx.Err() == nil {
							t.Errorf("token %s, %s: %v", tok.name, c.kind, err)
						}
					default:
						mu.Lock()
						if ok[tok.name] == nil {
							ok[tok.name] = map[string]int{}
						}
						ok[tok.name][c.kind]++
						mu.Unlock()
					}
				}
			})
		}
	}
	time.Sleep(250 * time.Millisecond) // the fault's schedule, not an assertion
	fault()
	wg.Wait()
	finished := ctx.Err() == nil
	st := fake.Stats()
	t.Logf("finished before the run's end: %v, after %v; GitHub received %d, refused %d",
		finished, time.Since(start).Round(time.Millisecond), st.Requests, st.Limited)
	if down {
		// The instances decided alone from the kill on: GitHub refuses
		// only what their local shares sent beyond what Redis had
		// granted, and the transports learned each refusal's pause.
		t.Logf("Redis killed: %d requests sent on local shares; GitHub refused %d (go-github reported %d)",
			local.Load(), st.Limited, refusedByGitHub.Load())
		assert.Positive(t, local.Load(), "no request was decided by a local share: the kill did not bite")
		assert.LessOrEqual(t, int64(st.Limited), local.Load(), "GitHub's refusals, against the requests local shares sent")
		return
	}
	assert.Zero(t, st.Limited, "GitHub refused requests")
	assert.Zero(t, local.Load(), "requests sent on a local share: a slow store is not a down one")

	type use struct {
		limit     string
		used, max int
	}
	binding := map[string]string{"reads": githubquota.PointsLimit, "writes": githubquota.ContentMinuteLimit,
		"search": githubquota.SearchLimit, "code": githubquota.CodeSearchLimit, "mixed": githubquota.PointsLimit}
	for _, tok := range tokens {
		n := ok[tok.name]
		uses := []use{
			{githubquota.PointsLimit, n["read"] + n["search"] + n["code"] + githubquota.WritePoints*n["write"], githubquota.RESTPoints},
			{githubquota.ContentMinuteLimit, n["write"], githubquota.ContentPerMinute},
			{githubquota.SearchLimit, n["search"], githubquota.SearchPerMinute},
			{githubquota.CodeSearchLimit, n["code"], githubquota.CodeSearchPerMinute},
		}
		for _, u := range uses {
			assert.LessOrEqual(t, u.used, u.max, "token %s: limit %s over its rate in one window", tok.name, u.limit)
			if u.limit != binding[tok.name] {
				continue
			}
			t.Logf("token %-6s %s %d of %d (%.1f%%); %v", tok.name, u.limit, u.used, u.max, 100*float64(u.used)/float64(u.max), n)
			if finished {
				assert.Equal(t, u.max, u.used, "token %s: its binding limit %s not used to the unit", tok.name, u.limit)
			} else {
				assert.GreaterOrEqual(t, float64(u.used), 0.6*float64(u.max), "token %s: limit %s used below 60%%", tok.name, u.limit)
			}
		}
	}
}
