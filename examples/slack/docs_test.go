package main

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/snippettest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/presets/slackquota"
	"github.com/quotakit/throttle/presets/slackquota/fakeslack"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

// The Slack snippets of docs/presets.md and of slackquota's package doc
// are the regions below, word for word; the tests below run them.
func TestDocsSnippets(t *testing.T) {
	snippettest.Check(t, "slack", []string{"../../docs/presets.md", "../../README.md"}, []string{"docs_test.go"},
		map[string]string{"../../presets/slackquota/slackquota.go": "slack"})
}

func docsSlack(store quota.Store, token string, out **slack.Client) error {
	// snippet slack
	policy, err := slackquota.Policy(slackquota.Options{})
	if err != nil {
		return err
	}
	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	if err != nil {
		return err
	}
	api := slack.New(token, slack.OptionHTTPClient(&http.Client{Transport: t}))
	// snippet end
	*out = api
	return nil
}

func docsNotifier(ctx context.Context) (throttle.Policy, context.Context, error) {
	// snippet slack-notifier
	policy, err := slackquota.Policy(slackquota.Options{Notify: []throttle.Limit{
		{Name: "global", Rate: 100, Per: 30 * time.Minute, Algorithm: throttle.SlidingLog},
		{Name: "category", Rate: 10, Per: 30 * time.Minute, Algorithm: throttle.SlidingLog,
			Key: throttle.KeyFromContext("category")},
	}})
	ctx = throttle.WithKey(ctx, "category", "errors") // per notification
	// snippet end
	return policy, ctx, err
}

func docsGovSlack(store quota.Store, token string, out **slack.Client, rules *[]throttle.Rule) error {
	// snippet slack-govslack
	const apiURL = "https://slack-gov.com/api/" // the same for the preset and slack-go
	policy, err := slackquota.Policy(slackquota.Options{APIURL: apiURL})
	if err != nil {
		return err
	}
	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	if err != nil {
		return err
	}
	api := slack.New(token, slack.OptionHTTPClient(&http.Client{Transport: t}), slack.OptionAPIURL(apiURL))
	// snippet end
	*out, *rules = api, policy.Rules
	return nil
}

func docsFake(t *testing.T) {
	// snippet slack-fake
	fake := fakeslack.NewServer(fakeslack.Options{})
	defer fake.Close()
	policy, err := slackquota.Policy(slackquota.Options{APIURL: fake.APIURL()})
	require.NoError(t, err)
	tr, err := throttle.NewTransport(nil, policy)
	require.NoError(t, err)
	api := slack.New("xoxb-test", slack.OptionHTTPClient(&http.Client{Transport: tr}), slack.OptionAPIURL(fake.APIURL()))
	// snippet end
	defer tr.CloseIdleConnections()
	// The preset's default waiter blocks; these calls fail fast instead.
	ctx := throttle.WithWaiter(context.Background(), waiters.FailFast())
	for range slackquota.PostBurst {
		_, _, err := api.PostMessageContext(ctx, "C1", slack.MsgOptionText("hi", false))
		require.NoError(t, err)
	}
	_, _, err = api.PostMessageContext(ctx, "C1", slack.MsgOptionText("hi", false))
	assert.ErrorIs(t, err, throttle.ErrLimited, "the channel's burst is spent")
	assert.Equal(t, slackquota.PostBurst, fake.Stats().Messages)
	assert.Zero(t, fake.Stats().Limited)
}

// Each snippet builds what it says.
func TestDocsSnippetsRun(t *testing.T) {
	store := memstore.New()
	var api *slack.Client
	require.NoError(t, docsSlack(store, "xoxb-x", &api))
	require.NotNil(t, api)

	policy, ctx, err := docsNotifier(context.Background())
	require.NoError(t, err)
	require.NoError(t, policy.Validate())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://hooks.slack.com/services/x", nil)
	require.NoError(t, err)
	category, err := throttle.KeyFromContext("category")(req)
	require.NoError(t, err)
	assert.Equal(t, "errors", category)

	var rules []throttle.Rule
	require.NoError(t, docsGovSlack(store, "xoxb-x", &api, &rules))
	hosts := map[string]string{}
	for _, r := range rules {
		hosts[r.Name] = r.Host
	}
	assert.Equal(t, "slack-gov.com", hosts[slackquota.PostRule])
	assert.Equal(t, "hooks.slack-gov.com", hosts[slackquota.WebhookRule])

	t.Run("fake", docsFake)
}
