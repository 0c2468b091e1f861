// Command github runs several instances of a GitHub bot through throttle's
// GitHub preset, with the real go-github SDK, against a fake GitHub that
// enforces GitHub's primary and secondary limits and answers 403/429 like
// GitHub. It prints what was sent, waited and refused, and how many
// rate-limit answers GitHub gave: 0.
//
//	go run ./examples/github                # offline, a fake GitHub, ~20 s
//	REDIS_URL=redis://localhost:6379 go run ./examples/github
//	GITHUB_TOKEN=ghp_... GITHUB_REPO=owner/repo go run ./examples/github -duration 10s
//	GITHUB_API_URL=https://ghe.example.com/api/v3/ GITHUB_TOKEN=... GITHUB_REPO=owner/repo go run ./examples/github
//
// Without REDIS_URL the instances share one in-process store (as
// instances in separate processes share Redis). With REDIS_URL they use
// that Redis, so several processes of this example started side by side
// stay within the limits together. With GITHUB_TOKEN they talk to the real
// GitHub, read-only (issues and search of GITHUB_REPO): no comments are
// posted. GITHUB_API_URL (as GitHub Actions sets it) names another GitHub:
// a GitHub Enterprise Server's https://HOST/api/v3/, or GHE.com's
// https://api.SUBDOMAIN.ghe.com/. The offline fake GitHub serves the paths
// of a GitHub Enterprise Server, reached the same way.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gogithub "github.com/google/go-github/v89/github"
	"github.com/redis/go-redis/v9"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

func main() {
	cfg := config{}
	flag.IntVar(&cfg.instances, "instances", 4, "simulated instances of the bot")
	flag.IntVar(&cfg.workers, "workers", 5, "workers per instance")
	flag.DurationVar(&cfg.duration, "duration", 20*time.Second, "how long to run")
	flag.DurationVar(&cfg.progress, "progress", 5*time.Second, "interval of the progress line (0: none)")
	flag.Parse()
	cfg.redisURL, cfg.token, cfg.repo = os.Getenv("REDIS_URL"), os.Getenv("GITHUB_TOKEN"), os.Getenv("GITHUB_REPO")
	cfg.apiURL = os.Getenv("GITHUB_API_URL")
	sum, err := run(context.Background(), cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "github:", err)
		os.Exit(1)
	}
	if sum.rateLimited > 0 {
		os.Exit(2)
	}
}

type config struct {
	instances, workers int
	duration, progress time.Duration
	redisURL           string
	token, repo        string // the real GitHub, if token is set
	apiURL             string // its REST API's base URL; empty: github.com

	fake *fakegithub.Server // tests: the fake GitHub to use, shared by runs
}

// summary is what a run did. Every API call counts once: sent (waited is
// the part of sent that waited for its slot), refused (not sent: its slot
// was after the run's end), or failed.
type summary struct {
	sent, waited, refused, failed atomic.Int64
	rateLimited                   int64 // rate-limit answers go-github reported
	fake                          fakegithub.Stats
}

func run(ctx context.Context, cfg config, out io.Writer) (*summary, error) {
	token, owner, repo, write := cfg.token, "octo", "hello", true
	apiURL := cfg.apiURL
	fake := cfg.fake
	if token == "" {
		if fake == nil {
			fake = fakegithub.NewServer(fakegithub.Options{Enterprise: true})
			defer fake.Close()
		}
		apiURL = fake.BaseURL()
		token = "ghp_fake_example_token"
	} else {
		var ok bool
		if owner, repo, ok = strings.Cut(cfg.repo, "/"); !ok {
			return nil, errors.New("GITHUB_TOKEN is set: set GITHUB_REPO to owner/repo to read")
		}
		write = false
	}
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: apiURL})
	if err != nil {
		return nil, fmt.Errorf("GITHUB_API_URL: %w", err)
	}

	store, where, closeStore, err := newStore(ctx, cfg.redisURL)
	if err != nil {
		return nil, err
	}
	defer closeStore()

	sum := &summary{}
	hooks := throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
		switch ev.Outcome {
		case throttle.Allowed:
			sum.sent.Add(1)
		case throttle.Waited:
			sum.sent.Add(1)
			sum.waited.Add(1)
		case throttle.Refused, throttle.GaveUp:
			sum.refused.Add(1)
		case throttle.Failed:
			if errors.Is(ev.Err, context.DeadlineExceeded) {
				sum.refused.Add(1) // the run ended while the store decided
				return
			}
			fallthrough
		default:
			sum.failed.Add(1)
			fmt.Fprintln(os.Stderr, "github: not sent:", ev.Err)
		}
	}}
	target := "the real GitHub (read-only)"
	if fake != nil {
		target = "a fake GitHub Enterprise Server at " + apiURL
	} else if apiURL != "" {
		target = "the GitHub at " + apiURL + " (read-only)"
	}
	fmt.Fprintf(out, "%d instances x %d workers, %v, %s, store: %s\n", cfg.instances, cfg.workers, cfg.duration, target, where)
	fmt.Fprintf(out, "limits per token: %d/h; search %d/min; code search %d/min; %d points/min for the whole REST API (a read %d, a write %d); content creation %d/min, %d/h\n",
		githubquota.Standard.Hourly(), githubquota.SearchPerMinute, githubquota.CodeSearchPerMinute, githubquota.RESTPoints, githubquota.ReadPoints, githubquota.WritePoints,
		githubquota.ContentPerMinute, githubquota.ContentPerHour)

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var rateLimited atomic.Int64
	var wg sync.WaitGroup
	for i := range cfg.instances {
		t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store), throttle.WithHooks(hooks))
		if err != nil {
			return nil, err
		}
		defer t.CloseIdleConnections()
		opts := []gogithub.ClientOptionsFunc{
			gogithub.WithTransport(t),
			gogithub.WithAuthToken(token),
			gogithub.WithDisableRateLimitCheck(), // throttle keeps the limits, fleet-wide
		}
		if apiURL != "" {
			opts = append(opts, gogithub.WithEnterpriseURLs(apiURL, uploadURL(apiURL)))
		}
		gh, err := gogithub.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		if want := strings.TrimSuffix(apiURL, "/") + "/"; apiURL != "" && gh.BaseURL() != want {
			// WithEnterpriseURLs adds api/v3/ to a GitHub Enterprise
			// Server's bare URL; the preset must be given the same URL.
			return nil, fmt.Errorf("GITHUB_API_URL: go-github reads %s as %s: give that", apiURL, gh.BaseURL())
		}
		for w := range cfg.workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				bot(runCtx, gh, owner, repo, write, i*cfg.workers+w, &rateLimited)
			}()
		}
	}
	start := time.Now()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	var tick <-chan time.Time
	if cfg.progress > 0 {
		tk := time.NewTicker(cfg.progress)
		defer tk.Stop()
		tick = tk.C
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-tick:
			fmt.Fprintf(out, "  %3.0fs: sent %d (waited %d), refused %d, 403/429s %d\n", time.Since(start).Seconds(),
				sum.sent.Load(), sum.waited.Load(), sum.refused.Load(), rateLimited.Load())
		}
	}
	sum.rateLimited = rateLimited.Load()
	fmt.Fprintf(out, "\nsent %d (of which waited %d), refused %d, failed %d; rate-limit 403/429s received: %d\n",
		sum.sent.Load(), sum.waited.Load(), sum.refused.Load(), sum.failed.Load(), sum.rateLimited)
	if fake != nil {
		sum.fake = fake.Stats()
		r := sum.fake.ByResource
		fmt.Fprintf(out, "the fake GitHub counted %d rate-limit answers; accepted %d requests: core %d (comments created %d), search %d, code search %d\n",
			sum.fake.Limited, sum.fake.OK, r["core"], sum.fake.Created, r["search"], r["code_search"])
	}
	return sum, nil
}

// bot is one worker of an instance: by its number, it lists issues, gets
// the repository, comments (unless read-only), searches issues or
// searches code, again and again until ctx ends. Calls wait for their
// slot (the preset's default); one whose slot is after the end of the run
// is refused at once, and the worker then waits for that slot.
func bot(ctx context.Context, gh *gogithub.Client, owner, repo string, write bool, n int, rateLimited *atomic.Int64) {
	for i := 0; ctx.Err() == nil; i++ {
		var err error
		switch n % 5 {
		case 0:
			_, _, err = gh.Issues.ListByRepo(ctx, owner, repo, &gogithub.IssueListByRepoOptions{State: "open"})
		case 1:
			_, _, err = gh.Repositories.Get(ctx, owner, repo)
		case 2:
			if write {
				_, _, err = gh.Issues.CreateComment(ctx, owner, repo, 1, &gogithub.IssueComment{Body: gogithub.Ptr(fmt.Sprintf("comment %d from worker %d", i, n))})
			} else {
				_, _, err = gh.Repositories.Get(ctx, owner, repo)
			}
		case 3:
			_, _, err = gh.Search.Issues(ctx, "is:open repo:"+owner+"/"+repo, nil)
		case 4:
			_, _, err = gh.Search.Code(ctx, "throttle repo:"+owner+"/"+repo, nil)
		}
		var rl *gogithub.RateLimitError
		var al *gogithub.AbuseRateLimitError
		var le *throttle.LimitError
		switch {
		case errors.As(err, &rl), errors.As(err, &al):
			rateLimited.Add(1)
		case errors.As(err, &le):
			sleep(ctx, le.RetryAfter)
		case err == nil, ctx.Err() != nil:
		default:
			fmt.Fprintln(os.Stderr, "github:", err)
		}
	}
}

// uploadURL is the uploads API's base URL beside apiURL: /api/uploads/ on
// a GitHub Enterprise Server, else apiURL (the example uploads nothing).
func uploadURL(apiURL string) string {
	if api, ok := strings.CutSuffix(apiURL, "/api/v3/"); ok {
		return api + "/api/uploads/"
	}
	return apiURL
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// newStore returns the Redis store of url, or without url one in-process
// store for all instances.
func newStore(ctx context.Context, url string) (quota.Store, string, func(), error) {
	if url == "" {
		return memstore.New(), "in-process, shared by the instances", func() {}, nil
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	client := redis.NewClient(o)
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, "", nil, fmt.Errorf("redis at %s: %w", o.Addr, err)
	}
	s, err := redisstore.New(client)
	if err != nil {
		_ = client.Close()
		return nil, "", nil, err
	}
	return s, "redis at " + o.Addr, func() { _ = client.Close() }, nil
}
