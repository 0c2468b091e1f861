package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	slackgo "github.com/slack-go/slack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/presets/slackquota"
	"github.com/quotakit/throttle/presets/slackquota/fakeslack"
	"github.com/quotakit/throttle/waiters"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// maxMessages is the most the preset lets through to one channel in d:
// the burst, then one a second.
func maxMessages(channels int, d time.Duration) int {
	return channels * (slackquota.PostBurst + int(d/time.Second) + 1)
}

func TestRunOffline(t *testing.T) {
	cfg := config{instances: 3, channels: 2, duration: 3 * time.Second, progress: time.Second}
	sum, err := run(context.Background(), cfg, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, sum.rateLimited, "slack-go saw 429s")
	assert.Zero(t, sum.fakeLimited, "the fake Slack answered 429s")
	assert.Positive(t, sum.sent.Load())
	assert.GreaterOrEqual(t, sum.messages, 2*slackquota.PostBurst, "every channel's burst went")
	assert.LessOrEqual(t, sum.messages, maxMessages(2, cfg.duration))
}

// Two processes of the example side by side, sharing a Redis and the
// Slack they talk to, stay within Slack's limits together.
func TestRunsShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	fake := fakeslack.NewServer(fakeslack.Options{})
	defer fake.Close()
	cfg := config{instances: 2, channels: 2, duration: 3 * time.Second, redisURL: "redis://" + srv.Addr(), fake: fake}
	var wg sync.WaitGroup
	sums := make([]*summary, 2)
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			sums[i], err = run(context.Background(), cfg, io.Discard)
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	st := fake.Stats()
	assert.Zero(t, st.Limited, "the fake Slack answered 429s")
	for _, s := range sums {
		require.NotNil(t, s)
		assert.Zero(t, s.rateLimited)
		assert.Positive(t, s.sent.Load())
	}
	assert.LessOrEqual(t, st.Messages, maxMessages(2, cfg.duration), "both processes together")
}

// host is a Slack the real slack-go client reaches on loopback: the fake
// as slack.com is laid out, or as GovSlack (slack-gov.com and
// hooks.slack-gov.com, dialed to the fake whatever the address).
type host struct {
	name     string
	govSlack bool
}

var hosts = []host{{name: "slack.com layout"}, {name: "GovSlack", govSlack: true}}

// client returns slack-go through the preset's transport, pointed at
// fake as h says, with its HTTP client (for webhooks) and the URL of the
// fake's webhook n.
func (h host) client(t *testing.T, fake *fakeslack.Server) (*slackgo.Client, *http.Client, func(n int) string) {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	apiURL, hooks := fake.APIURL(), fake.URL+"/services/"
	if h.govSlack {
		apiURL, hooks = "http://slack-gov.com/api/", "http://hooks.slack-gov.com/services/"
		addr := fake.Listener.Addr().String()
		base.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr) // loopback only
		}
	}
	policy, err := slackquota.Policy(slackquota.Options{APIURL: apiURL, Wait: waiters.FailFast()})
	require.NoError(t, err)
	tr, err := throttle.NewTransport(base, policy)
	require.NoError(t, err)
	hc := &http.Client{Transport: tr}
	webhook := func(n int) string {
		return hooks + strings.TrimPrefix(fake.WebhookURL(n), fake.URL+"/services/")
	}
	return slackgo.New("xoxb-test-token", slackgo.OptionHTTPClient(hc), slackgo.OptionAPIURL(apiURL)), hc, webhook
}

// The real slack-go client, through the preset's transport, on every
// host: the limits apply, and it learns from the fake's 429s.
func TestSlackGoOnEachHost(t *testing.T) {
	for _, h := range hosts {
		t.Run(h.name, func(t *testing.T) {
			fake := fakeslack.NewServer(fakeslack.Options{Tiers: map[string]slackquota.Tier{"conversations.info": slackquota.Tier1}})
			defer fake.Close()
			api, hc, webhook := h.client(t, fake)
			ctx := context.Background()

			// chat.postMessage: the channel's burst, then refused before
			// sending.
			for range slackquota.PostBurst {
				ch, _, err := api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText("hi", false))
				require.NoError(t, err)
				assert.Equal(t, "C1", ch)
			}
			_, _, err := api.PostMessageContext(ctx, "C1", slackgo.MsgOptionText("hi", false))
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrLimited, "slack-go passes our error through")
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, slackquota.ChannelLimit, le.Limit)
			_, _, err = api.PostMessageContext(ctx, "C2", slackgo.MsgOptionText("hi", false))
			assert.NoError(t, err, "another channel")

			// An incoming webhook, found beside the API URL: its burst,
			// then refused.
			for range slackquota.PostBurst {
				require.NoError(t, slackgo.PostWebhookCustomHTTPContext(ctx, webhook(1), hc, &slackgo.WebhookMessage{Text: "hi"}))
			}
			err = slackgo.PostWebhookCustomHTTPContext(ctx, webhook(1), hc, &slackgo.WebhookMessage{Text: "hi"})
			require.ErrorAs(t, err, &le)
			assert.Equal(t, slackquota.WebhookLimit, le.Limit)

			// Other methods, with slack-go's own request encoding.
			_, err = api.GetConversationHistoryContext(ctx, &slackgo.GetConversationHistoryParameters{ChannelID: "C1"})
			assert.NoError(t, err)
			u, err := api.GetUserInfoContext(ctx, "U1")
			require.NoError(t, err)
			assert.Equal(t, "U1", u.ID)

			// A 429 from Slack (the fake is stricter for
			// conversations.info): slack-go reports it, and the preset
			// pauses conversations.info in this workspace.
			info := func() error {
				_, err := api.GetConversationInfoContext(ctx, &slackgo.GetConversationInfoInput{ChannelID: "C1"})
				return err
			}
			var rl *slackgo.RateLimitedError
			for range 3 { // the fake takes 2 a minute, the preset's Tier 3 a burst of 5
				err = info()
				if errors.As(err, &rl) {
					break
				}
				require.NoError(t, err)
			}
			require.NotNil(t, rl, "slack-go saw the fake's 429")
			assert.Equal(t, 60*time.Second, rl.RetryAfter)
			err = info()
			assert.ErrorIs(t, err, throttle.ErrLimited, "paused before sending")
			require.ErrorAs(t, err, &le)
			assert.Equal(t, "tier3", le.Pause)
			_, err = api.GetUserInfoContext(ctx, "U1")
			assert.NoError(t, err, "other methods go on")
			st := fake.Stats()
			assert.Equal(t, 1, st.Limited)
			assert.Equal(t, 2*slackquota.PostBurst+1, st.Messages, "C1's and the webhook's bursts, and one to C2")
			assert.Equal(t, 3, st.ByMethod["conversations.info"], "two, and the one answered 429")
		})
	}
}
