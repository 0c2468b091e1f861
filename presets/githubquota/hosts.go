package githubquota

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/presets/internal/baseurl"
	"github.com/quotakit/throttle/quotaheader"
)

// DefaultBaseURL is the REST API's base URL on github.com, what an empty
// [Options.BaseURL] means.
const DefaultBaseURL = "https://api.github.com/"

// site is where one GitHub serves its API, as the rules match it.
type site struct {
	apiHost    string // host pattern of the REST and GraphQL API
	restPrefix string // escaped path of the REST API, ending in "/"
	graphQL    string // escaped path of the GraphQL endpoint
	oauthHost  string // host of OAuth token requests
	vendor     bool   // github.com or GHE.com, whose hosts quotaheader.GitHub names
}

// site reads o.BaseURL. GitHub Enterprise Server is told by its /api/v3/
// path, GHE.com by its api.SUBDOMAIN.ghe.com host; any other URL is taken
// as it is (a test fake), with GraphQL and OAuth token requests beside it.
func (o Options) site() (site, error) {
	raw := o.BaseURL
	if raw == "" {
		raw = DefaultBaseURL
	}
	u, err := baseurl.Parse(raw)
	raw = baseurl.Redact(raw)
	if err != nil {
		return site{}, &throttle.PolicyError{Field: "githubquota.Options.BaseURL", Err: err}
	}
	s := site{apiHost: u.Host, restPrefix: u.EscapedPath(), oauthHost: u.Host}
	s.graphQL = s.restPrefix + "graphql"
	name := strings.ToLower(u.Hostname())
	bad := func(format string, args ...any) (site, error) {
		return site{}, &throttle.PolicyError{Field: "githubquota.Options.BaseURL",
			Err: fmt.Errorf("%q: "+format, append([]any{raw}, args...)...)}
	}
	switch sub, ghe := gheSubdomain(name); {
	case name == "api.github.com":
		if s.restPrefix != "/" {
			return bad("GitHub's REST API is at the root of api.github.com, not under %s", u.Path)
		}
		s.vendor = true
		s.oauthHost = "github.com"
	case ghe:
		if s.restPrefix != "/" {
			return bad("GHE.com's REST API is at the root of api.%s.ghe.com, not under %s", sub, u.Path)
		}
		s.vendor = true
		s.oauthHost = sub + ".ghe.com"
		if p := u.Port(); p != "" {
			s.oauthHost += ":" + p
		}
	case strings.HasSuffix(s.restPrefix, "/api/v3/"): // GitHub Enterprise Server
		api := strings.TrimSuffix(s.restPrefix, "v3/")
		s.graphQL = api + "graphql"
	}
	return s, nil
}

// gheSubdomain reports whether host is GHE.com's API host,
// api.SUBDOMAIN.ghe.com, and its subdomain.
func gheSubdomain(host string) (string, bool) {
	rest, ok := strings.CutPrefix(host, "api.")
	if !ok {
		return "", false
	}
	sub, ok := strings.CutSuffix(rest, ".ghe.com")
	if !ok || sub == "" || strings.Contains(sub, ".") {
		return "", false
	}
	return sub, true
}

// underAPI reports whether r is a call of the REST or GraphQL API.
func (s site) underAPI(r *http.Request) bool {
	p := r.URL.EscapedPath()
	return strings.HasPrefix(p, s.restPrefix) || p == s.graphQL
}

// Profile returns how the GitHub that o names speaks about its rate
// limits: [quotaheader.GitHub], for that GitHub's host. The preset's own
// rules need no profile (their [throttle.Learning] says as much); give it
// to the transport with [throttle.WithProfiles] when rules of your own
// send to a GitHub Enterprise Server or a test fake, so that they too read
// its 403s as "slow down" (docs/presets.md shows how). On github.com and
// GHE.com it is quotaheader.GitHub itself, which
// [quotaheader.DefaultProfiles] holds already. An invalid BaseURL gives
// the error [Rules] gives.
func Profile(o Options) (quotaheader.Profile, error) {
	s, err := o.site()
	if err != nil {
		return quotaheader.Profile{}, err
	}
	p := quotaheader.GitHub
	if !s.vendor {
		p.Hosts = []string{s.apiHost} // uploads are on it too
	}
	return p, nil
}
