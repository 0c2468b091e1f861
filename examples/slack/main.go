// Command slack runs several instances of a Slack bot through throttle's
// Slack preset, with the real slack-go SDK, against a fake Slack that
// enforces Slack's limits and answers 429 like Slack. It prints what was
// sent, waited and refused, and how many 429s Slack answered: 0.
//
//	go run ./examples/slack                 # offline, a fake Slack, ~20 s
//	REDIS_URL=redis://localhost:6379 go run ./examples/slack
//	SLACK_TOKEN=xoxb-... SLACK_CHANNEL=C0123 go run ./examples/slack -duration 10s
//
// Without REDIS_URL the instances share one in-process store (as
// instances in separate processes share Redis). With REDIS_URL they use
// that Redis, so several processes of this example started side by side
// stay within the limits together. With SLACK_TOKEN (and SLACK_CHANNEL)
// they talk to the real Slack instead of the fake.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	slackgo "github.com/slack-go/slack"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/presets/slackquota"
	"github.com/quotakit/throttle/presets/slackquota/fakeslack"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

func main() {
	cfg := config{}
	flag.IntVar(&cfg.instances, "instances", 4, "simulated instances of the bot")
	flag.IntVar(&cfg.channels, "channels", 3, "channels to post to (fake Slack only)")
	flag.DurationVar(&cfg.duration, "duration", 20*time.Second, "how long to run")
	flag.DurationVar(&cfg.progress, "progress", 5*time.Second, "interval of the progress line (0: none)")
	flag.Parse()
	cfg.redisURL, cfg.token, cfg.channel = os.Getenv("REDIS_URL"), os.Getenv("SLACK_TOKEN"), os.Getenv("SLACK_CHANNEL")
	sum, err := run(context.Background(), cfg, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slack:", err)
		os.Exit(1)
	}
	if sum.rateLimited > 0 {
		os.Exit(2)
	}
}

type config struct {
	instances, channels int
	duration, progress  time.Duration
	redisURL            string
	token, channel      string // the real Slack, if token is set

	fake *fakeslack.Server // tests: the fake Slack to use, shared by runs
}

// summary is what a run did. Every API call counts once: sent (waited is
// the part of sent that waited for its slot), refused (not sent: its slot
// was after the run's end), or failed.
type summary struct {
	sent, waited, refused, failed atomic.Int64
	rateLimited                   int64 // 429s slack-go reported
	fakeLimited                   int   // 429s the fake Slack counted
	messages                      int
}

func run(ctx context.Context, cfg config, out io.Writer) (*summary, error) {
	opts := slackquota.Options{}
	apiURL := slackgo.APIURL
	token := cfg.token
	channels := []string{cfg.channel}
	fake := cfg.fake
	if token == "" {
		if fake == nil {
			fake = fakeslack.NewServer(fakeslack.Options{})
			defer fake.Close()
		}
		opts.APIURL = fake.APIURL() // the webhooks are found beside it
		apiURL = fake.APIURL()
		token = "xoxb-fake-workspace-token"
		channels = nil
		for i := range max(cfg.channels, 1) {
			channels = append(channels, fmt.Sprintf("C%07d", i+1))
		}
	} else if cfg.channel == "" {
		return nil, errors.New("SLACK_TOKEN is set: set SLACK_CHANNEL to the channel ID to post to")
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
			fmt.Fprintln(os.Stderr, "slack: not sent:", ev.Err)
		}
	}}
	target := "a fake Slack at " + apiURL
	if fake == nil {
		target = "the real Slack"
	}
	fmt.Fprintf(out, "%d instances, %v, %s, store: %s\n", cfg.instances, cfg.duration, target, where)
	fmt.Fprintf(out, "limits: chat.postMessage 1/s per channel (burst %d); %s; %s; %s\n",
		slackquota.PostBurst, tierLine("conversations.history"), tierLine("users.info"), tierLine("conversations.list"))

	runCtx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var rateLimited atomic.Int64
	var wg sync.WaitGroup
	policy, err := slackquota.Policy(opts)
	if err != nil {
		return nil, err
	}
	for i := range cfg.instances {
		t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store), throttle.WithHooks(hooks))
		if err != nil {
			return nil, err
		}
		httpClient := &http.Client{Transport: t}
		defer httpClient.CloseIdleConnections()
		api := slackgo.New(token, slackgo.OptionHTTPClient(httpClient), slackgo.OptionAPIURL(apiURL))
		for w := range 2 { // two workers per instance
			wg.Add(1)
			go func() {
				defer wg.Done()
				bot(runCtx, api, channels, i*2+w, &rateLimited, sum)
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
			fmt.Fprintf(out, "  %3.0fs: sent %d (waited %d), refused %d, 429s %d\n", time.Since(start).Seconds(),
				sum.sent.Load(), sum.waited.Load(), sum.refused.Load(), rateLimited.Load())
		}
	}
	sum.rateLimited = rateLimited.Load()
	if fake != nil {
		st := fake.Stats()
		sum.fakeLimited, sum.messages = st.Limited, st.Messages
	}
	fmt.Fprintf(out, "\nsent %d (of which waited %d), refused %d, failed %d; 429s received: %d",
		sum.sent.Load(), sum.waited.Load(), sum.refused.Load(), sum.failed.Load(), sum.rateLimited)
	if fake != nil {
		fmt.Fprintf(out, " (the fake Slack counted %d); messages posted: %d to %d channels", sum.fakeLimited, sum.messages, len(channels))
	}
	fmt.Fprintln(out)
	return sum, nil
}

func tierLine(method string) string {
	l := slackquota.Options{}.TierOf(method).Limit()
	return fmt.Sprintf("%s %s (%d/min, burst %d)", method, l.Name, l.Rate, l.Burst)
}

// bot is one worker of an instance: it posts to its channel and now and
// then reads history, looks a user up and lists channels, until ctx ends.
// Calls wait for their slot (the preset's default); one whose slot is
// after the end of the run is refused at once.
func bot(ctx context.Context, api *slackgo.Client, channels []string, n int, rateLimited *atomic.Int64, sum *summary) {
	channel := channels[n%len(channels)]
	for i := 0; ctx.Err() == nil; i++ {
		var err error
		switch {
		case i%4 == 1:
			_, err = api.GetConversationHistoryContext(ctx, &slackgo.GetConversationHistoryParameters{ChannelID: channel, Limit: 15})
		case i%4 == 2:
			_, err = api.GetUserInfoContext(ctx, "U0000001")
		case i%8 == 3:
			_, _, err = api.GetConversationsContext(ctx, &slackgo.GetConversationsParameters{Limit: 100})
		default:
			_, _, err = api.PostMessageContext(ctx, channel, slackgo.MsgOptionText(fmt.Sprintf("message %d from worker %d", i, n), false))
		}
		var rl *slackgo.RateLimitedError
		var le *throttle.LimitError
		switch {
		case errors.As(err, &rl):
			rateLimited.Add(1)
		case errors.As(err, &le):
			// Refused: its slot is after the end of the run. Come back
			// when it could go, which here is never.
			sleep(ctx, le.RetryAfter)
		case err == nil, ctx.Err() != nil:
		default:
			fmt.Fprintln(os.Stderr, "slack:", err)
		}
	}
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
