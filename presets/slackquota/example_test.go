package slackquota_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/presets/slackquota"
	"github.com/quotakit/throttle/presets/slackquota/fakeslack"
	"github.com/quotakit/throttle/waiters"
)

// The notifier recipe: at most 100 notifications per 30 minutes in all AND
// at most 10 per 30 minutes per event category, decided in one atomic step
// together with Slack's own limit of one message per second per channel.
// Here twelve "errors" go out through six webhooks (two each, the
// channel's burst): the category's limit stops the last two, and a
// "warnings" notification still goes.
func ExamplePolicy_notifier() {
	fake := fakeslack.NewServer(fakeslack.Options{}) // a fake Slack; drop it and APIURL in production
	defer fake.Close()

	policy, err := slackquota.Policy(slackquota.Options{
		Notify: []throttle.Limit{
			{Name: "global", Rate: 100, Per: 30 * time.Minute, Algorithm: throttle.SlidingLog},
			{Name: "category", Rate: 10, Per: 30 * time.Minute, Algorithm: throttle.SlidingLog,
				Key: throttle.KeyFromContext("category")},
		},
		Wait:   waiters.FailFast(),
		APIURL: fake.APIURL(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := throttle.NewTransport(nil, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	defer client.CloseIdleConnections()

	notify := func(category string, webhook int) {
		ctx := throttle.WithKey(context.Background(), "category", category)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fake.WebhookURL(webhook), strings.NewReader(`{"text":"disk full"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		var le *throttle.LimitError
		switch {
		case errors.As(err, &le):
			fmt.Printf("%s: refused by limit %q\n", category, le.Limit)
		case err != nil:
			fmt.Println(err)
		default:
			resp.Body.Close()
			fmt.Printf("%s: %s\n", category, resp.Status)
		}
	}
	for i := range 12 {
		notify("errors", i/2)
	}
	notify("warnings", 6)
	notify("errors", 6) // over the category's limit: refused, and charges nothing
	fmt.Println("429s from Slack:", fake.Stats().Limited)
	// Output:
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: 200 OK
	// errors: refused by limit "category"
	// errors: refused by limit "category"
	// warnings: 200 OK
	// errors: refused by limit "category"
	// 429s from Slack: 0
}

// For GovSlack the preset limits the Web API on slack-gov.com and incoming
// webhooks on hooks.slack-gov.com; an API URL slack-go could not use is
// an error.
func ExampleRules_govSlack() {
	rules, err := slackquota.Rules(slackquota.Options{APIURL: "https://slack-gov.com/api/"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rules[:3] {
		fmt.Printf("%-13s %s%s\n", r.Name, r.Host, r.Path)
	}
	_, err = slackquota.Rules(slackquota.Options{APIURL: "https://slack-gov.com/api"})
	fmt.Println(errors.Is(err, throttle.ErrInvalidPolicy), err)
	// Output:
	// slack-post    slack-gov.com/api/chat.postMessage
	// slack-webhook hooks.slack-gov.com/services/
	// slack-tier1   slack-gov.com/api/{method}
	// true throttle: invalid policy: slackquota.Options.APIURL: "https://slack-gov.com/api" must end in "/": slack-go appends a method's name to it as it is
}
