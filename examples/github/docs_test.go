package main

import (
	"context"
	"net/url"
	"testing"

	"github.com/google/go-github/v89/github"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/snippettest"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"
	"github.com/quotakit/throttle/waiters"
)

// The GitHub snippets of docs/presets.md and of githubquota's package doc
// are the regions below, word for word; the tests below run them.
func TestDocsSnippets(t *testing.T) {
	snippettest.Check(t, "github", []string{"../../docs/presets.md", "../../README.md"}, []string{"docs_test.go"},
		map[string]string{"../../presets/githubquota/githubquota.go": "github"})
}

func docsGitHub(store quota.Store, token string, out **github.Client) error {
	// snippet github
	policy, err := githubquota.Policy(githubquota.Options{})
	if err != nil {
		return err
	}
	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	if err != nil {
		return err
	}
	gh, err := github.NewClient(
		github.WithTransport(t),
		github.WithAuthToken(token),
		github.WithDisableRateLimitCheck(), // throttle keeps the limits, for the whole fleet
	)
	// snippet end
	*out = gh
	return err
}

func docsEnterpriseServer(store quota.Store, token string, out **github.Client, rules *[]throttle.Rule) error {
	// snippet github-enterprise-server
	const baseURL = "https://ghe.example.com/api/v3/" // the same for the preset and go-github
	policy, err := githubquota.Policy(githubquota.Options{
		BaseURL: baseURL,
		Hourly:  10000, // the quota your administrator set, if any
	})
	if err != nil {
		return err
	}
	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	if err != nil {
		return err
	}
	gh, err := github.NewClient(
		github.WithTransport(t),
		github.WithAuthToken(token),
		github.WithDisableRateLimitCheck(),
		github.WithEnterpriseURLs(baseURL, "https://ghe.example.com/api/uploads/"),
	)
	// snippet end
	*out, *rules = gh, policy.Rules
	return err
}

func docsGHECom(store quota.Store, token string, out **github.Client, rules *[]throttle.Rule) error {
	// snippet github-ghe-com
	policy, err := githubquota.Policy(githubquota.Options{
		BaseURL: "https://api.acme.ghe.com/",
		Token:   githubquota.EnterpriseCloud, // an App installation: 15,000 an hour
	})
	if err != nil {
		return err
	}
	t, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
	if err != nil {
		return err
	}
	gh, err := github.NewClient(
		github.WithTransport(t),
		github.WithAuthToken(token),
		github.WithDisableRateLimitCheck(),
		github.WithEnterpriseURLs("https://api.acme.ghe.com/", "https://uploads.acme.ghe.com/"),
	)
	// snippet end
	*out, *rules = gh, policy.Rules
	return err
}

func docsFake(t *testing.T) {
	// snippet github-fake
	fake := fakegithub.NewServer(fakegithub.Options{Enterprise: true}) // or a fake of your own on loopback
	defer fake.Close()
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: fake.BaseURL()})
	require.NoError(t, err)
	tr, err := throttle.NewTransport(nil, policy)
	require.NoError(t, err)
	gh, err := github.NewClient(
		github.WithTransport(tr),
		github.WithAuthToken("ghp_test"),
		github.WithDisableRateLimitCheck(),
		github.WithEnterpriseURLs(fake.BaseURL(), fake.UploadURL()),
	)
	require.NoError(t, err)
	// snippet end
	defer tr.CloseIdleConnections()
	// The preset's default waiter blocks; these calls fail fast instead.
	ctx := throttle.WithWaiter(context.Background(), waiters.FailFast())
	for range githubquota.SearchPerMinute {
		_, _, err := gh.Search.Issues(ctx, "is:open", nil)
		require.NoError(t, err)
	}
	_, _, err = gh.Search.Issues(ctx, "is:open", nil)
	assert.ErrorIs(t, err, throttle.ErrLimited, "the 31st search is not sent")
	st := fake.Stats()
	assert.Equal(t, githubquota.SearchPerMinute, st.ByResource["search"])
	assert.Zero(t, st.Limited)
}

func docsProfile(opts githubquota.Options, rules []throttle.Rule) (*throttle.Transport, error) {
	// snippet github-profile
	profile, err := githubquota.Profile(opts) // opts as given to githubquota.Rules
	if err != nil {
		return nil, err
	}
	t, err := throttle.NewTransport(nil, throttle.Policy{Rules: rules},
		throttle.WithProfiles(append([]quotaheader.Profile{profile}, quotaheader.DefaultProfiles...)...))
	// snippet end
	return t, err
}

// Each snippet builds a client whose URLs agree with the preset's rules.
func TestDocsSnippetsRun(t *testing.T) {
	store := memstore.New()
	var gh *github.Client
	require.NoError(t, docsGitHub(store, "ghp_x", &gh))
	assert.Equal(t, githubquota.DefaultBaseURL, gh.BaseURL())

	// searchPath is the path of the preset's search rule, which must be
	// below the client's base URL.
	searchPath := func(rules []throttle.Rule) (host, path string) {
		for _, r := range rules {
			if r.Name == "github-search" {
				return r.Host, r.Path
			}
		}
		t.Fatal("no search rule")
		return "", ""
	}
	var rules []throttle.Rule
	require.NoError(t, docsEnterpriseServer(store, "ghp_x", &gh, &rules))
	base, err := url.Parse(gh.BaseURL())
	require.NoError(t, err)
	host, path := searchPath(rules)
	assert.Equal(t, base.Host, host)
	assert.Equal(t, base.Path+"search/", path)

	require.NoError(t, docsGHECom(store, "ghp_x", &gh, &rules))
	base, err = url.Parse(gh.BaseURL())
	require.NoError(t, err)
	host, path = searchPath(rules)
	assert.Equal(t, base.Host, host)
	assert.Equal(t, base.Path+"search/", path)

	t.Run("fake", docsFake)

	rules, err = githubquota.Rules(githubquota.Options{BaseURL: "https://ghe.example.com/api/v3/"})
	require.NoError(t, err)
	tr, err := docsProfile(githubquota.Options{BaseURL: "https://ghe.example.com/api/v3/"}, rules)
	require.NoError(t, err)
	tr.CloseIdleConnections()
	assert.Equal(t, quotaheader.GitHub.Hosts, quotaheader.DefaultProfiles[0].Hosts, "DefaultProfiles untouched")
}
