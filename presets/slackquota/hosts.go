package slackquota

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/presets/internal/baseurl"
)

// DefaultAPIURL is Slack's Web API, what an empty [Options.APIURL] means.
const DefaultAPIURL = "https://slack.com/api/"

// slackHosts are the hosts of Slack's Web API, each with its incoming
// webhooks' host: slack.com and GovSlack.
var slackHosts = map[string]string{
	"slack.com":     "hooks.slack.com",
	"slack-gov.com": "hooks.slack-gov.com",
}

// site is where one Slack serves the Web API and incoming webhooks, as
// the rules match them.
type site struct {
	apiHost, apiPath   string // the Web API: methods are apiPath + name
	hookHost, hookPath string // incoming webhooks are below hookPath
}

// site reads o.APIURL and o.WebhookURL.
func (o Options) site() (site, error) {
	api, err := parse("APIURL", o.APIURL, DefaultAPIURL)
	if err != nil {
		return site{}, err
	}
	if !strings.HasSuffix(o.APIURL, "/") && o.APIURL != "" {
		return site{}, &throttle.PolicyError{Field: "slackquota.Options.APIURL",
			Err: fmt.Errorf("%q must end in \"/\": slack-go appends a method's name to it as it is", baseurl.Redact(o.APIURL))}
	}
	s := site{apiHost: api.Host, apiPath: api.EscapedPath()}
	name := strings.ToLower(api.Hostname())
	hooks, isSlack := slackHosts[name]
	if isSlack && s.apiPath != "/api/" {
		return site{}, &throttle.PolicyError{Field: "slackquota.Options.APIURL",
			Err: fmt.Errorf("%q: Slack's Web API is at /api/ of %s", baseurl.Redact(o.APIURL), name)}
	}
	if !isSlack {
		hooks = api.Host // a fake serves both
	} else if p := api.Port(); p != "" {
		hooks += ":" + p
	}
	hook, err := parse("WebhookURL", o.WebhookURL, api.Scheme+"://"+hooks+"/services/")
	if err != nil {
		return site{}, err
	}
	s.hookHost, s.hookPath = hook.Host, hook.EscapedPath()
	return s, nil
}

// parse reads the URL of field, def when empty.
func parse(field, raw, def string) (*url.URL, error) {
	if raw == "" {
		raw = def
	}
	u, err := baseurl.Parse(raw)
	if err != nil {
		return nil, &throttle.PolicyError{Field: "slackquota.Options." + field, Err: err}
	}
	return u, nil
}
