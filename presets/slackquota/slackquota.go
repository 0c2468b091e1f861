// Package slackquota is a throttle preset for Slack: the Web API's rate-limit
// tiers, the posting limits of chat.postMessage and incoming webhooks, and
// pauses learned from Slack's 429s that hold back only what Slack limited.
//
// Use it as the policy of a [throttle.Transport], e.g. under slack-go
// (github.com/slack-go/slack):
//
//	policy, err := slackquota.Policy(slackquota.Options{})
//	if err != nil {
//		return err
//	}
//	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
//	if err != nil {
//		return err
//	}
//	api := slack.New(token, slack.OptionHTTPClient(&http.Client{Transport: t}))
//
// # What it limits
//
// Slack counts Web API calls per method, per workspace, per app, in tiers
// ([Tier1] to [Tier4]: 1, 20, 50 and 100 calls per minute, each "+" a
// small burst). [DefaultTiers] gives the tier of the common methods;
// [Options.Tiers] overrides or adds any method, and methods in neither go
// to [Options.DefaultTier]. Each method in each workspace has its own
// counter.
//
// Posting is limited per channel: chat.postMessage (the channel read from
// the form or JSON body) and incoming webhooks (per webhook URL, and per
// channel if the body names one) at one message per second, with a burst
// of [PostBurst].
//
// The workspace is told apart by the request's token (the Authorization
// bearer token, or a "token" form field), which is hashed with SHA-256
// before it becomes part of a key: no token reaches a store or a log.
// [Options.Workspace] replaces this, e.g. with a team ID set on the
// context.
//
// # What it learns
//
// A 429 with Retry-After pauses only the limited method in the limited
// workspace (with [throttle.Learning.PauseBy]), and for posting only that
// channel: other methods, workspaces and channels go on. The pause is
// shared through the transport's store, so with a Redis store every
// instance holds back.
//
// # Non-Marketplace apps
//
// Since 29 May 2025, commercially distributed apps that are not approved
// for the Slack Marketplace may call conversations.history and
// conversations.replies only once a minute (and get at most 15 messages a
// call). Set [Options.NonMarketplace2025] for such apps.
//
// # Hosts
//
// The zero [Options] are slack.com: the Web API at
// https://slack.com/api/ and incoming webhooks at
// https://hooks.slack.com/services/. [Options.APIURL] takes the URL
// given to slack-go's OptionAPIURL: "https://slack-gov.com/api/" for
// GovSlack (webhooks then at hooks.slack-gov.com), or a test fake's
// "http://127.0.0.1:PORT/api/" (webhooks then under /services/ of the
// same host); [Options.WebhookURL] sets the webhooks' apart. Slack needs
// no vendor profile ([github.com/quotakit/throttle/quotaheader.Profile]):
// its 429s and Retry-After are read as they are, on any host.
package slackquota

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotakit/throttle"
)

// A Tier is a Slack Web API rate-limit tier. The zero value means "not
// set" wherever a Tier is optional.
type Tier int

// Slack's tiers, each at least this many calls per minute per method per
// workspace, with a small burst on top (see [Tier.Limit]).
const (
	Tier1 Tier = iota + 1 // 1 per minute
	Tier2                 // 20 per minute
	Tier3                 // 50 per minute
	Tier4                 // 100 per minute
)

// tierRates are Rate and Burst per minute of each tier.
var tierRates = map[Tier][2]int{
	Tier1: {1, 1},
	Tier2: {20, 3},
	Tier3: {50, 5},
	Tier4: {100, 10},
}

// Valid reports whether t is one of Tier1 to Tier4.
func (t Tier) Valid() bool {
	_, ok := tierRates[t]
	return ok
}

// String returns "tier1" to "tier4", the name of the tier's limit.
func (t Tier) String() string {
	if !t.Valid() {
		return fmt.Sprintf("Tier(%d)", int(t))
	}
	return fmt.Sprintf("tier%d", int(t))
}

// Limit returns the tier's limit, without a key: a GCRA of the tier's
// calls per minute, with a burst of 1, 3, 5 and 10 calls for Tier1 to
// Tier4. Over any minute it admits at most rate plus burst calls, which is
// how Slack's "50+ per minute" is read here. An invalid tier gives the
// zero Limit, which a policy rejects.
func (t Tier) Limit() throttle.Limit {
	r, ok := tierRates[t]
	if !ok {
		return throttle.Limit{}
	}
	return throttle.Limit{Name: t.String(), Rate: r[0], Per: time.Minute, Burst: r[1]}
}

// DefaultTiers gives the tier of common Web API methods, from Slack's
// method reference. Override or extend it with [Options.Tiers]; do not
// modify it.
var DefaultTiers = map[string]Tier{
	"apps.connections.open": Tier1,
	"rtm.connect":           Tier1,

	"conversations.create": Tier2,
	"conversations.list":   Tier2,
	"emoji.list":           Tier2,
	"files.list":           Tier2,
	"files.upload":         Tier2,
	"pins.add":             Tier2,
	"reactions.list":       Tier2,
	"reminders.add":        Tier2,
	"search.all":           Tier2,
	"search.files":         Tier2,
	"search.messages":      Tier2,
	"team.accessLogs":      Tier2,
	"users.list":           Tier2,
	"usergroups.list":      Tier2,

	"chat.delete":              Tier3,
	"chat.getPermalink":        Tier3,
	"chat.scheduleMessage":     Tier3,
	"chat.update":              Tier3,
	"conversations.archive":    Tier3,
	"conversations.history":    Tier3,
	"conversations.info":       Tier3,
	"conversations.invite":     Tier3,
	"conversations.join":       Tier3,
	"conversations.kick":       Tier3,
	"conversations.mark":       Tier3,
	"conversations.members":    Tier3,
	"conversations.open":       Tier3,
	"conversations.rename":     Tier3,
	"conversations.replies":    Tier3,
	"conversations.setPurpose": Tier3,
	"conversations.setTopic":   Tier3,
	"dnd.info":                 Tier3,
	"reactions.add":            Tier3,
	"reactions.get":            Tier3,
	"reactions.remove":         Tier3,
	"team.info":                Tier3,
	"users.conversations":      Tier3,
	"users.lookupByEmail":      Tier3,
	"users.profile.set":        Tier3,

	"auth.test":                    Tier4,
	"chat.postEphemeral":           Tier4,
	"files.completeUploadExternal": Tier4,
	"files.getUploadURLExternal":   Tier4,
	"users.info":                   Tier4,
	"users.profile.get":            Tier4,
	"views.open":                   Tier4,
	"views.publish":                Tier4,
	"views.push":                   Tier4,
	"views.update":                 Tier4,
}

// nonMarketplace2025 are the methods limited to once a minute for
// non-Marketplace commercial apps since 29 May 2025.
var nonMarketplace2025 = []string{"conversations.history", "conversations.replies"}

// PostRate and PostBurst are the posting limit: one message per second
// per channel, with a burst of two.
const (
	PostRate  = 1
	PostBurst = 2
)

// Names of the posting limits, for [throttle.LimitError.Limit].
const (
	// ChannelLimit is chat.postMessage's per-channel limit.
	ChannelLimit = "channel"
	// WebhookLimit is an incoming webhook's per-channel limit.
	WebhookLimit = "webhook"
)

// Options configure the preset. The zero value is slack.com with [DefaultTiers], Tier2 for other methods, the workspace
// told apart by token, and requests that wait for their turn.
type Options struct {
	// Tiers sets the tier of methods, over DefaultTiers.
	Tiers map[string]Tier

	// DefaultTier is the tier of methods in neither Tiers nor
	// DefaultTiers. Zero means Tier2 (most of Slack's methods are Tier 2
	// or better).
	DefaultTier Tier

	// NonMarketplace2025 limits conversations.history and
	// conversations.replies to one call a minute (Tier1), as Slack does
	// for commercially distributed non-Marketplace apps since 29 May
	// 2025. Tiers still overrides it.
	NonMarketplace2025 bool

	// Workspace gives a request's workspace key. Nil means
	// [TokenWorkspace]. A key function over a secret must hash it
	// ([throttle.HashKey]).
	Workspace throttle.KeyFunc

	// Notify are further limits decided together with the posting limit
	// of chat.postMessage and incoming webhooks, in one atomic step: the
	// notifier recipe (see the package example) puts "100 per 30 minutes
	// in all" and "10 per 30 minutes per category" here.
	Notify []throttle.Limit

	// APIURL is the Web API's base URL, as slack-go's OptionAPIURL takes
	// it (ending in "/"); empty means [DefaultAPIURL]. GovSlack:
	// "https://slack-gov.com/api/"; a test fake: its URL and "/api/".
	APIURL string

	// WebhookURL is where incoming webhooks' URLs start. Empty means
	// Slack's beside APIURL: "https://hooks.slack.com/services/" for
	// slack.com, "https://hooks.slack-gov.com/services/" for GovSlack,
	// and for any other host (a test fake) "/services/" on that host.
	WebhookURL string

	// Wait is the waiter of every rule; nil means block until the quota
	// allows (or the request's context ends).
	Wait throttle.Waiter
}

// Rule and scope names of the preset.
const (
	PostRule    = "slack-post"    // chat.postMessage
	WebhookRule = "slack-webhook" // incoming webhooks
	PostScope   = "slack-post"    // the scope of both posting rules
)

// TierRule returns the name of the rule of methods in tier t
// ("slack-tier3"); it is also the rule's scope.
func TierRule(t Tier) string { return "slack-" + t.String() }

// Policy returns a policy of [Rules](o), or the error Rules gives.
func Policy(o Options) (throttle.Policy, error) {
	rules, err := Rules(o)
	if err != nil {
		return throttle.Policy{}, err
	}
	return throttle.Policy{Rules: rules}, nil
}

// Rules returns the preset's rules, in order: chat.postMessage, incoming
// webhooks, then one rule per tier for every other Web API method. Put
// your own rules before them to override; validate the result with
// [throttle.Policy.Validate] (NewTransport does).
//
// Bad options give an error that matches [throttle.ErrInvalidPolicy]
// and is a [*throttle.PolicyError] naming the field: an APIURL or
// WebhookURL that does not parse, is not http or https, has no host, a
// host pattern, a query, or does not end in "/"; a Slack host's APIURL
// not at /api/; a tier in Tiers or DefaultTier that is none of Tier1 to
// Tier4.
func Rules(o Options) ([]throttle.Rule, error) {
	s, err := o.site()
	if err != nil {
		return nil, err
	}
	if o.DefaultTier != 0 && !o.DefaultTier.Valid() {
		return nil, &throttle.PolicyError{Field: "slackquota.Options.DefaultTier", Err: fmt.Errorf("%v is none of Tier1 to Tier4", o.DefaultTier)}
	}
	for _, m := range slices.Sorted(maps.Keys(o.Tiers)) {
		if t := o.Tiers[m]; !t.Valid() {
			return nil, &throttle.PolicyError{Field: fmt.Sprintf("slackquota.Options.Tiers[%q]", m), Err: fmt.Errorf("%v is none of Tier1 to Tier4", t)}
		}
	}
	ws := o.Workspace
	if ws == nil {
		ws = TokenWorkspace
	}
	tiers := o.tiers()

	post := throttle.Limit{Name: ChannelLimit, Rate: PostRate, Per: time.Second, Burst: PostBurst,
		Key: throttle.JoinKeys(ws, throttle.KeyFromBody("channel"))}
	hook := throttle.Limit{Name: WebhookLimit, Rate: PostRate, Per: time.Second, Burst: PostBurst,
		Key: throttle.JoinKeys(throttle.HashKey(webhookPath), optionalBodyField("channel"))}
	rules := []throttle.Rule{
		{
			Name: PostRule, Scope: PostScope, Host: s.apiHost, Path: s.apiPath + "chat.postMessage",
			Limits: append([]throttle.Limit{post}, o.Notify...),
			Learn:  throttle.Learning{PauseBy: ChannelLimit},
			Wait:   o.Wait,
		},
		{
			Name: WebhookRule, Scope: PostScope, Host: s.hookHost, Path: s.hookPath,
			Limits: append([]throttle.Limit{hook}, o.Notify...),
			Learn:  throttle.Learning{PauseBy: WebhookLimit},
			Wait:   o.Wait,
		},
	}
	for t := Tier1; t <= Tier4; t++ {
		l := t.Limit()
		l.Key = throttle.JoinKeys(ws, throttle.KeyFromPath("method"))
		rules = append(rules, throttle.Rule{
			Name: TierRule(t), Host: s.apiHost, Path: s.apiPath + "{method}",
			Match: func(r *http.Request) bool {
				return tiers.of(r.PathValue("method")) == t
			},
			Limits: []throttle.Limit{l},
			Learn:  throttle.Learning{PauseBy: l.Name},
			Wait:   o.Wait,
		})
	}
	return rules, nil
}

// tierTable resolves a method's tier.
type tierTable struct {
	m   map[string]Tier
	def Tier
}

func (tt tierTable) of(method string) Tier {
	if t, ok := tt.m[method]; ok {
		return t
	}
	return tt.def
}

// tiers merges DefaultTiers, the 2025 switch and o.Tiers. Invalid tiers
// (which Rules refuses) give the default tier.
func (o Options) tiers() tierTable {
	tt := tierTable{m: make(map[string]Tier, len(DefaultTiers)+len(o.Tiers)), def: o.DefaultTier}
	if !tt.def.Valid() {
		tt.def = Tier2
	}
	for m, t := range DefaultTiers {
		tt.m[m] = t
	}
	if o.NonMarketplace2025 {
		for _, m := range nonMarketplace2025 {
			tt.m[m] = Tier1
		}
	}
	for m, t := range o.Tiers {
		if !t.Valid() {
			t = tt.def
		}
		tt.m[m] = t
	}
	return tt
}

// TierOf returns the tier the preset with options o gives method. With
// options that [Rules] refuses for a tier that is none of Tier1 to Tier4,
// it gives the default tier instead.
func (o Options) TierOf(method string) Tier { return o.tiers().of(method) }

// TokenWorkspace is the default workspace key: the request's token,
// hashed with SHA-256. The token is the Authorization header's bearer
// token (as slack-go sends it), else a "token" field of the form body or
// query (Slack's older style). A request without a token fails with an
// error wrapping [throttle.ErrMissingKey].
func TokenWorkspace(r *http.Request) (string, error) {
	return hashedToken(r)
}

var hashedToken = throttle.HashKey(token)

// token returns the request's Slack token, unhashed; only hashedToken
// uses it.
func token(r *http.Request) (string, error) {
	if a := r.Header.Get("Authorization"); a != "" {
		if tok, ok := strings.CutPrefix(a, "Bearer "); ok {
			return strings.TrimSpace(tok), nil
		}
		return a, nil
	}
	tok, err := throttle.KeyFromBody("token")(r)
	if err != nil {
		return "", fmt.Errorf("slack: no token in the Authorization header or the body: %w", err)
	}
	return tok, nil
}

// webhookPath is an incoming webhook's key before hashing: its URL path,
// which holds the webhook's secret.
func webhookPath(r *http.Request) (string, error) { return r.URL.Path, nil }

// optionalBodyField reads a body field like [throttle.KeyFromBody], but
// gives "" when the request has no such field.
func optionalBodyField(name string) throttle.KeyFunc {
	f := throttle.KeyFromBody(name)
	return func(r *http.Request) (string, error) {
		k, err := f(r)
		if errors.Is(err, throttle.ErrMissingKey) {
			return "", nil
		}
		return k, err
	}
}
