package pattern

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParsePathPatternErrors(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		want    string // a part of the message
	}{
		{"empty", "", "empty path pattern"},
		{"no leading slash", "a/b", "host is not allowed"},
		{"single word", "api", `must start with "/"`},
		{"method", "GET /x", "method is not allowed"},
		{"method with tab", "POST\t/x", "method is not allowed"},
		{"host", "example.com/x", "host is not allowed"},
		{"method and host", "GET example.com/x", "method is not allowed"},
		{"scheme", "https://example.com/x", "scheme is not allowed"},
		{"space inside", "/a b", "whitespace"},
		{"newline", "/a\n", "whitespace or control"},
		{"control", "/a\x01", "control character"},
		{"invalid utf8", "/a\xff", "invalid UTF-8"},
		{"query", "/a?x=1", "query"},
		{"fragment", "/a#top", "fragment"},
		{"wildcard not whole segment prefix", "/a{x}", "whole segment"},
		{"wildcard not whole segment suffix", "/{x}a", "whole segment"},
		{"unclosed wildcard", "/{x", "whole segment"},
		{"two wildcards in a segment", "/{x}{y}", "whole segment"},
		{"nested brace", "/{{x}}", "whole segment"},
		{"empty wildcard", "/{}", "has no name"},
		{"empty multi wildcard", "/{...}", "has no name"},
		{"name not identifier", "/{1x}", "not a Go identifier"},
		{"name with dash", "/{a-b}", "not a Go identifier"},
		{"dollar dots", "/{$...}", "not a Go identifier"},
		{"duplicate name", "/{x}/a/{x}", "used twice"},
		{"duplicate with multi", "/{x}/{x...}", "used twice"},
		{"multi not last", "/{x...}/a", "must come last"},
		{"multi before slash", "/{x...}/", "must come last"},
		{"dollar not last", "/{$}/a", "must come last"},
		{"dollar before slash", "/a/{$}/", "must come last"},
		{"bad escape", "/a%zz", "bad percent-escape"},
		{"truncated escape", "/a%2", "bad percent-escape"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePath(tt.pattern)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), "pattern "+strconv.Quote(tt.pattern)+": ")
		})
	}
}

func TestPathPatternMatch(t *testing.T) {
	type match struct {
		path   string // u.Path, or the raw path when it has escapes (see rawURL)
		ok     bool
		values []string
	}
	tests := []struct {
		name    string
		pattern string
		names   []string
		matches []match
	}{
		{"root subtree", "/", nil, []match{
			{"/", true, nil},
			{"/a", true, nil},
			{"/a/b/", true, nil},
			{"", true, nil}, // an empty path is sent as "/"
		}},
		{"root only", "/{$}", nil, []match{
			{"/", true, nil},
			{"", true, nil},
			{"/a", false, nil},
			{"//", false, nil},
		}},
		{"exact", "/a/b", nil, []match{
			{"/a/b", true, nil},
			{"/a/b/", false, nil},
			{"/a", false, nil},
			{"/a/b/c", false, nil},
			{"/a/bc", false, nil},
			{"/A/B", false, nil},
			{"a/b", false, nil},
		}},
		{"subtree", "/api/", nil, []match{
			{"/api/", true, nil},
			{"/api/x", true, nil},
			{"/api/x/y", true, nil},
			{"/api", false, nil},
			{"/apix/y", false, nil},
			{"/", false, nil},
		}},
		{"trailing slash exact with dollar", "/api/{$}", nil, []match{
			{"/api/", true, nil},
			{"/api/x", false, nil},
			{"/api", false, nil},
			{"/api//", false, nil},
		}},
		{"not cleaned", "/b", nil, []match{
			{"/b", true, nil},
			{"/a/../b", false, nil},
			{"/./b", false, nil},
			{"//b", false, nil},
		}},
		{"dot segments are literals", "/a/../b", nil, []match{
			{"/a/../b", true, nil},
			{"/b", false, nil},
		}},
		{"github issues", "/repos/{owner}/{repo}/issues", []string{"owner", "repo"}, []match{
			{"/repos/golang/go/issues", true, []string{"golang", "go"}},
			{"/repos/golang/go/issues/", false, nil},
			{"/repos/golang/go/pulls", false, nil},
			{"/repos/golang/issues", false, nil},
			{"/repos//go/issues", false, nil}, // a wildcard needs a non-empty segment
			{"/repos/golang//issues", false, nil},
			{"/repos/a%2Fb/go/issues", true, []string{"a/b", "go"}}, // %2F does not split
			{"/repos/a%20b/g%C3%B6/issues", true, []string{"a b", "gö"}},
			{"/repos/a/b/c/issues", false, nil},
		}},
		{"wildcard then subtree", "/u/{id}/", []string{"id"}, []match{
			{"/u/7/", true, []string{"7"}},
			{"/u/7/x/y", true, []string{"7"}},
			{"/u/7", false, nil},
			{"/u//x", false, nil},
		}},
		{"wildcard then dollar", "/u/{id}/{$}", []string{"id"}, []match{
			{"/u/7/", true, []string{"7"}},
			{"/u/7/x", false, nil},
			{"/u/7", false, nil},
		}},
		{"multi", "/files/{p...}", []string{"p"}, []match{
			{"/files/", true, []string{""}},
			{"/files/a", true, []string{"a"}},
			{"/files/a/b/c", true, []string{"a/b/c"}},
			{"/files/a/b/", true, []string{"a/b/"}},
			{"/files/a%2Fb/c%20d", true, []string{"a/b/c d"}},
			{"/files/a%zz/b c", true, []string{"a%zz/b c"}}, // Path, not a raw path: "%" is a character
			{"/files", false, nil},
			{"/filesx/a", false, nil},
		}},
		{"multi at root", "/{rest...}", []string{"rest"}, []match{
			{"/", true, []string{""}},
			{"/a/b", true, []string{"a/b"}},
		}},
		{"single and multi", "/{a}/x/{b...}", []string{"a", "b"}, []match{
			{"/1/x/2/3", true, []string{"1", "2/3"}},
			{"/1/x/", true, []string{"1", ""}},
			{"/1/y/2", false, nil},
		}},
		{"encoded literal", "/a%20b/c", nil, []match{
			{"/a%20b/c", true, nil},
			{"/a%20B/c", false, nil},
			{"/a%2", false, nil},
		}},
		{"escaped literal in pattern", "/a%2Fb/c", nil, []match{
			{"/a%2Fb/c", true, nil},
			{"/a%2fb/c", true, nil},
			{"/a/b/c", false, nil}, // two segments, not one
		}},
		{"escaped letters in request", "/abc", nil, []match{
			{"/%61b%63", true, nil},
			{"/%61b%63d", false, nil},
			{"/%61b", false, nil},
		}},
		{"unicode literal", "/héllo/{x}", []string{"x"}, []match{
			{"/h%C3%A9llo/1", true, []string{"1"}},
			{"/hello/1", false, nil},
		}},
		{"empty literal segment", "/a//b", nil, []match{
			{"/a//b", true, nil},
			{"/a/b", false, nil},
		}},
		{"closing brace is a literal", "/a}", nil, []match{
			{"/a%7D", true, nil},
		}},
		{"unicode wildcard name", "/{naïve}", []string{"naïve"}, []match{
			{"/x", true, []string{"x"}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParsePath(tt.pattern)
			require.NoError(t, err)
			assert.Equal(t, tt.names, p.Wildcards())
			assert.Equal(t, tt.pattern, p.String())
			for _, m := range tt.matches {
				u := requestURL(t, m.path)
				names, values, ok := p.Match(u)
				assert.Equal(t, m.ok, ok, "path %q", m.path)
				if m.ok && len(tt.names) > 0 {
					assert.Equal(t, tt.names, names, "path %q", m.path)
					assert.Equal(t, m.values, values, "path %q", m.path)
				} else {
					assert.Nil(t, names, "path %q", m.path)
					assert.Nil(t, values, "path %q", m.path)
				}
			}
		})
	}
}

// requestURL returns a URL whose EscapedPath is path, as a client's request
// URL would be after url.Parse.
func requestURL(t *testing.T, path string) *url.URL {
	t.Helper()
	if strings.Contains(path, "%zz") || strings.HasSuffix(path, "%2") {
		// url.Parse refuses bad escapes; build the URL by hand, as a
		// caller may. EscapedPath then escapes the "%" itself.
		u := &url.URL{Scheme: "https", Host: "example.com", Path: path}
		return u
	}
	u, err := url.Parse("https://example.com" + path)
	require.NoError(t, err)
	if !strings.HasPrefix(path, "/") && path != "" {
		u = &url.URL{Path: path}
	}
	return u
}

func TestPathPatternMatchEdges(t *testing.T) {
	p, err := ParsePath("/a/{x}")
	require.NoError(t, err)

	t.Run("nil URL", func(t *testing.T) {
		_, _, ok := p.Match(nil)
		assert.False(t, ok)
	})
	t.Run("opaque URL", func(t *testing.T) {
		u, err := url.Parse("mailto:a/x")
		require.NoError(t, err)
		_, _, ok := p.Match(u)
		assert.False(t, ok)
	})
	t.Run("nil pattern matches all", func(t *testing.T) {
		var np *Path
		names, values, ok := np.Match(&url.URL{Path: "/anything"})
		assert.True(t, ok)
		assert.Nil(t, names)
		assert.Nil(t, values)
		assert.Nil(t, np.Wildcards())
	})
	t.Run("Path with a slash that RawPath escapes", func(t *testing.T) {
		u := &url.URL{Path: "/a/b/c", RawPath: "/a/b%2Fc"}
		_, values, ok := p.Match(u)
		require.True(t, ok)
		assert.Equal(t, []string{"b/c"}, values)
	})
	t.Run("Path with a slash, no RawPath", func(t *testing.T) {
		_, _, ok := p.Match(&url.URL{Path: "/a/b/c"})
		assert.False(t, ok)
	})
	t.Run("wildcards is a copy", func(t *testing.T) {
		w := p.Wildcards()
		w[0] = "changed"
		assert.Equal(t, []string{"x"}, p.Wildcards())
	})
	t.Run("many wildcards", func(t *testing.T) {
		var pat, path strings.Builder
		var want []string
		for i := range 12 {
			pat.WriteString("/{w" + string(rune('a'+i)) + "}")
			path.WriteString("/" + string(rune('A'+i)))
			want = append(want, string(rune('A'+i)))
		}
		q, err := ParsePath(pat.String())
		require.NoError(t, err)
		names, values, ok := q.Match(&url.URL{Path: path.String()})
		require.True(t, ok)
		assert.Len(t, names, 12)
		assert.Equal(t, want, values)
	})
	t.Run("values work with SetPathValue", func(t *testing.T) {
		q, err := ParsePath("/repos/{owner}/{repo}/issues")
		require.NoError(t, err)
		r := httptest.NewRequest(http.MethodGet, "https://api.github.com/repos/golang/go/issues", nil)
		names, values, ok := q.Match(r.URL)
		require.True(t, ok)
		for i := range names {
			r.SetPathValue(names[i], values[i])
		}
		assert.Equal(t, "golang", r.PathValue("owner"))
		assert.Equal(t, "go", r.PathValue("repo"))
	})
}

func TestSegmentEqual(t *testing.T) {
	tests := []struct {
		name     string
		seg, lit string
		want     bool
	}{
		{"plain equal", "abc", "abc", true},
		{"plain differ", "abc", "abd", false},
		{"escape equal", "a%20b", "a b", true},
		{"lower hex", "%2f", "/", true},
		{"escape longer", "a%20b", "a ", false},
		{"escape shorter", "a%20", "a b", false},
		{"bad escape raw equal", "a%zz", "a%zz", true},
		{"bad escape decoded never equal", "%20%zz", " %zz", false},
		{"bad escape after mismatch raw equal", "%41%z", "%41%z", true},
		{"truncated", "a%2", "a%2", true},
		{"empty", "", "", true},
		{"empty vs escape", "%41", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, segmentEqual(tt.seg, tt.lit))
			// segmentEqual must agree with decoding then comparing.
			assert.Equal(t, unescapeSegment(tt.seg) == tt.lit, segmentEqual(tt.seg, tt.lit))
		})
	}
}

func TestParseHostPatternErrors(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		want    string
	}{
		{"empty", "", "empty host pattern"},
		{"scheme", "https://api.github.com", "scheme is not allowed"},
		{"path", "x.com/a", "path is not allowed"},
		{"trailing slash", "x.com/", "path is not allowed"},
		{"space", "api .github.com", "whitespace"},
		{"leading space", " api.github.com", "whitespace"},
		{"control", "a\x00.com", "control character"},
		{"invalid utf8", "a\xff.com", "invalid UTF-8"},
		{"empty label", "api..github.com", "empty label"},
		{"leading dot", ".github.com", "empty label"},
		{"only dot", ".", "empty host name"},
		{"star in label", "a*.b.com", `"*" is allowed only as the whole first label`},
		{"star not first", "x.*.com", `"*" is allowed only as the whole first label`},
		{"star last", "example.*", `"*" is allowed only as the whole first label`},
		{"double star", "**.b.com", `"*" is allowed only as the whole first label`},
		{"star alone", "*", `must be followed by a domain`},
		{"star alone with port", "*:80", `must be followed by a domain`},
		{"empty port", "localhost:", "empty port"},
		{"port not number", "localhost:http", "not a number"},
		{"port sign", "localhost:+80", "not a number"},
		{"port zero", "localhost:0", "out of range"},
		{"port too big", "localhost:65536", "out of range"},
		{"port huge", "localhost:99999999999999999999", "out of range"},
		{"empty name with port", ":8080", "empty host name"},
		{"unbracketed IPv6", "::1", "must be in brackets"},
		{"two colons", "a:1:2", "must be in brackets"},
		{"unclosed bracket", "[::1", `missing "]"`},
		{"bad IPv6", "[::g]", "invalid IPv6 address"},
		{"IPv4 in brackets", "[127.0.0.1]", "only for IPv6"},
		{"junk after bracket", "[::1]x", `unexpected "x"`},
		{"bad port after IPv6", "[::1]:x", "not a number"},
		{"empty port after IPv6", "[::1]:", "empty port"},
		{"user info", "user@example.com", "invalid character '@'"},
		{"query", "example.com?x", "invalid character '?'"},
		{"percent", "ex%41mple.com", "invalid character '%'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHost(tt.pattern)
			require.Error(t, err)
			assert.Equal(t, Host{}, h)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), "pattern "+strconv.Quote(tt.pattern)+": ")
		})
	}
}

func TestHostPatternMatch(t *testing.T) {
	tests := []struct {
		name    string
		pattern string
		hosts   map[string]bool
	}{
		{"exact name", "api.github.com", map[string]bool{
			"api.github.com":        true,
			"API.GitHub.COM":        true,
			"api.github.com:443":    true,
			"api.github.com:8080":   true,
			"api.github.com.":       true, // trailing dot ignored
			"api.github.com.:443":   true,
			"github.com":            false,
			"x.api.github.com":      false,
			"api.github.com.evil":   false,
			"api.github.co":         false,
			"":                      false,
			"api.github.com:x":      false, // malformed port
			"api.github.com:1:2":    false,
			"[::1]":                 false,
			"api.github.com..":      false,
			"api.github.com.:":      true, // empty port is no port
			"api.github.com:0443":   true,
			"evilapi.github.com":    false,
			"api.github.com:443:44": false,
		}},
		{"pattern case and trailing dot", "API.GitHub.com.", map[string]bool{
			"api.github.com": true,
			"Api.Github.Com": true,
		}},
		{"wildcard", "*.example.com", map[string]bool{
			"a.example.com":        true,
			"A.EXAMPLE.COM":        true,
			"a.b.example.com":      true,
			"a.example.com:8443":   true,
			"a.example.com.":       true,
			"example.com":          false,
			".example.com":         false,
			"a..example.com":       false,
			"aexample.com":         false,
			"a.example.com.evil":   false,
			"a.example.org":        false,
			"notexample.com":       false,
			"[::1]":                false,
			"xn--bcher-kva.com":    false,
			"a.example.com:443:1":  false,
			"a.example.com:port":   false,
			"a.sub.example.com:80": true,
		}},
		{"wildcard with port", "*.example.com:443", map[string]bool{
			"a.example.com:443":  true,
			"a.example.com:0443": true,
			"a.example.com:8443": false,
			"a.example.com":      false, // the scheme's default port is not known here
			"example.com:443":    false,
		}},
		{"name with port", "localhost:8080", map[string]bool{
			"localhost:8080":  true,
			"LOCALHOST:8080":  true,
			"localhost.:8080": true,
			"localhost:808":   false,
			"localhost:80800": false,
			"localhost":       false,
			"localhost:":      false,
			"127.0.0.1:8080":  false,
		}},
		{"IPv4", "127.0.0.1", map[string]bool{
			"127.0.0.1":          true,
			"127.0.0.1:8080":     true,
			"127.0.0.2":          false,
			"[::ffff:127.0.0.1]": false,
		}},
		{"IPv6", "[::1]", map[string]bool{
			"[::1]":             true,
			"[::1]:8080":        true,
			"[0:0:0:0:0:0:0:1]": true, // any spelling
			"[0::1]:443":        true,
			"[::2]":             false,
			"::1":               false,
			"[::1":              false,
			"[::1]x":            false,
			"[::1]:x":           false,
			"[nonsense]":        false,
			"localhost":         false,
			"[::1]:8080:9":      false,
		}},
		{"IPv6 upper case", "[2001:DB8::1]:8080", map[string]bool{
			"[2001:db8::1]:8080": true,
			"[2001:DB8::1]:8080": true,
			"[2001:db8::1]:8081": false,
			"[2001:db8::1]":      false,
		}},
		{"IPv6 zone", "[fe80::1%25eth0]", map[string]bool{
			"[fe80::1%25eth0]":      true,
			"[fe80::1%25eth0]:8080": true,
			"[fe80::1%25eth1]":      false,
			"[fe80::1]":             false,
		}},
		{"IPv4-mapped IPv6", "[::ffff:127.0.0.1]", map[string]bool{
			"[::ffff:127.0.0.1]": true,
			"[::ffff:7f00:1]":    true,
			"127.0.0.1":          false,
		}},
		{"single label", "localhost", map[string]bool{
			"localhost":      true,
			"localhost:1":    true,
			"localhost.":     true,
			"localhostx":     false,
			"x.localhost":    false,
			"localhost:9999": true,
		}},
		{"wildcard on a TLD", "*.com", map[string]bool{
			"a.com":   true,
			"a.b.com": true,
			"com":     false,
		}},
		{"underscore and dash", "my_svc-1.internal", map[string]bool{
			"MY_SVC-1.internal": true,
		}},
		{"unicode name", "bücher.de", map[string]bool{
			"bücher.de": true,
			"BÜCHER.de": true,
			"bucher.de": false,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHost(tt.pattern)
			require.NoError(t, err)
			assert.Equal(t, tt.pattern, h.String())
			for host, want := range tt.hosts {
				assert.Equal(t, want, h.Match(host), "host %q", host)
			}
		})
	}
}

func TestHostPatternMatchesParsedURLs(t *testing.T) {
	// The host handed to match is URL.Host as url.Parse leaves it.
	tests := []struct {
		name    string
		pattern string
		rawURL  string
		want    bool
	}{
		{"name", "api.github.com", "https://API.github.com/x", true},
		{"port", "localhost:8080", "http://localhost:8080/", true},
		{"IPv6 with port", "[::1]:8080", "http://[::1]:8080/x", true},
		{"IPv6 other port", "[::1]:8080", "http://[::1]:8081/x", false},
		{"IPv6 zone", "[fe80::1%25en0]", "http://[fe80::1%25en0]:80/", true},
		{"wildcard", "*.slack.com", "https://hooks.slack.com/services/x", true},
		{"wildcard apex", "*.slack.com", "https://slack.com/api/x", false},
		{"user info is not the host", "example.com", "https://user:pw@example.com/", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := ParseHost(tt.pattern)
			require.NoError(t, err)
			u, err := url.Parse(tt.rawURL)
			require.NoError(t, err)
			assert.Equal(t, tt.want, h.Match(u.Host))
		})
	}
}

func TestHostPatternZeroValue(t *testing.T) {
	var h Host
	assert.False(t, h.Match("example.com"))
	assert.True(t, h.Match(""))
}

// FuzzPathPattern checks that parsing and matching never panic, that a
// match's names and values line up with the pattern's wildcards, and, for
// requests whose paths net/http.ServeMux neither cleans nor redirects, that
// matching agrees with ServeMux on the same pattern.
func FuzzPathPattern(f *testing.F) {
	for _, s := range [][2]string{
		{"/", "/"},
		{"/{$}", "/"},
		{"/a/b", "/a/b"},
		{"/api/", "/api/x/y"},
		{"/api/{$}", "/api/"},
		{"/repos/{owner}/{repo}/issues", "/repos/golang/go/issues"},
		{"/files/{p...}", "/files/"},
		{"/files/{p...}", "/files/a%2Fb/c"},
		{"/a%2Fb", "/a%2fb"},
		{"/a{x}", "/ax"},
		{"GET /x", "/x"},
		{"/{x}/{x}", "/a/b"},
		{"/{x}", "/%zz"},
		{"/{é}", "/%C3%A9"},
	} {
		f.Add(s[0], s[1])
	}
	f.Add("//", "/0/")
	f.Fuzz(func(t *testing.T, pattern, path string) {
		p, err := ParsePath(pattern)
		if err != nil {
			if p != nil {
				t.Fatalf("ParsePath(%q) returned a pattern and an error", pattern)
			}
			return
		}
		wild := p.Wildcards()
		urls := []*url.URL{{Path: path}}
		if u, err := url.Parse(path); err == nil {
			urls = append(urls, u)
		}
		for _, u := range urls {
			names, values, ok := p.Match(u)
			if !ok {
				if names != nil || values != nil {
					t.Fatalf("no match of %q on %q, but names %q values %q", pattern, path, names, values)
				}
				continue
			}
			if len(wild) == 0 {
				if names != nil || values != nil {
					t.Fatalf("match of %q on %q has no wildcards, but names %q values %q", pattern, path, names, values)
				}
				continue
			}
			if strings.Join(names, "\x00") != strings.Join(wild, "\x00") || len(values) != len(names) {
				t.Fatalf("match of %q on %q: names %q values %q, wildcards %q", pattern, path, names, values, wild)
			}
		}
		// ServeMux files an empty literal segment ("/a//b") under the same
		// key as a wildcard, so it matches any segment there; ours matches
		// only an empty one. Leave such patterns out of the comparison.
		if servemuxComparable(path) && !strings.Contains(pattern, "//") {
			got, gotValues := servemuxMatch(pattern, path)
			if got == nil {
				return // ServeMux refuses the pattern
			}
			names, values, ok := p.Match(&url.URL{Path: path})
			if ok != *got {
				t.Fatalf("pattern %q, path %q: match %v, ServeMux %v", pattern, path, ok, *got)
			}
			if ok {
				for i, n := range names {
					if values[i] != gotValues[n] {
						t.Fatalf("pattern %q, path %q: %s=%q, ServeMux %q", pattern, path, n, values[i], gotValues[n])
					}
				}
			}
		}
	})
}

// servemuxComparable reports whether ServeMux would route path as it is:
// it is clean (no empty, "." or ".." segments but for a trailing slash) and
// plain, so ServeMux neither redirects nor needs to unescape it.
func servemuxComparable(path string) bool {
	if !strings.HasPrefix(path, "/") || len(path) > 200 {
		return false
	}
	for _, c := range []byte(path) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '/' || c == '_' || c == '-') {
			return false
		}
	}
	segs := strings.Split(path[1:], "/")
	for i, s := range segs {
		if s == "" && i != len(segs)-1 {
			return false
		}
	}
	return true
}

// servemuxMatch reports whether a ServeMux with the single pattern routes
// a GET of path to it (a redirect is no match), and the wildcard values it
// sets. It returns nil if ServeMux refuses the pattern.
func servemuxMatch(pattern, path string) (matched *bool, values map[string]string) {
	mux := http.NewServeMux()
	names := mustParsePath(pattern).Wildcards()
	var hit bool
	if !func() (registered bool) {
		defer func() {
			if recover() != nil {
				registered = false
			}
		}()
		mux.HandleFunc(pattern, func(_ http.ResponseWriter, r *http.Request) {
			hit = true
			values = map[string]string{}
			for _, n := range names {
				values[n] = r.PathValue(n)
			}
		})
		return true
	}() {
		return nil, nil
	}
	r := &http.Request{Method: http.MethodGet, URL: &url.URL{Path: path}, Host: "example.com", Header: http.Header{}}
	mux.ServeHTTP(httptest.NewRecorder(), r)
	return &hit, values
}

func mustParsePath(s string) *Path {
	p, err := ParsePath(s)
	if err != nil {
		panic(err)
	}
	return p
}

// TestPathPatternAgreesWithServeMux runs the ServeMux comparison of
// FuzzPathPattern on a fixed grid, so plain `go test` covers it.
func TestPathPatternAgreesWithServeMux(t *testing.T) {
	patterns := []string{
		"/", "/{$}", "/a", "/a/", "/a/{$}", "/a/b", "/a/{x}", "/a/{x}/", "/a/{x}/{$}",
		"/a/{x...}", "/{x...}", "/{x}/b", "/{x}/{y}", "/{x}/{y...}", "/a/{x}/c/{y...}",
	}
	paths := []string{
		"/", "/a", "/a/", "/a/b", "/a/b/", "/a/b/c", "/a/b/c/", "/a/b/c/d", "/b", "/b/b", "/x/b/",
	}
	for _, pat := range patterns {
		p := mustParsePath(pat)
		for _, path := range paths {
			got, want := servemuxMatch(pat, path)
			require.NotNil(t, got, "ServeMux refused %q", pat)
			names, values, ok := p.Match(&url.URL{Path: path})
			if !assert.Equal(t, *got, ok, "pattern %q, path %q", pat, path) || !ok {
				continue
			}
			for i, n := range names {
				assert.Equal(t, want[n], values[i], "pattern %q, path %q, wildcard %q", pat, path, n)
			}
		}
	}
}

// BenchmarkPathPatternMatch measures match on a GitHub-like pattern and
// reports its time as a ratio to ServeMux routing the same request to the
// same pattern, measured in the same run.
func BenchmarkPathPatternMatch(b *testing.B) {
	const pattern = "/repos/{owner}/{repo}/issues"
	p := mustParsePath(pattern)
	u, err := url.Parse("https://api.github.com/repos/golang/go/issues")
	require.NoError(b, err)

	mux := http.NewServeMux()
	mux.HandleFunc(pattern, func(http.ResponseWriter, *http.Request) {})
	r := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{}}
	start := time.Now()
	for range b.N {
		if _, pat := mux.Handler(r); pat != pattern {
			b.Fatalf("ServeMux matched %q", pat)
		}
	}
	baseline := time.Since(start)

	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, _, ok := p.Match(u); !ok {
			b.Fatal("no match")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed())/float64(baseline), "x_servemux")
}

// BenchmarkHostPatternMatch measures match of a wildcard host pattern.
func BenchmarkHostPatternMatch(b *testing.B) {
	h, err := ParseHost("*.example.com:443")
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		if !h.Match("API.example.com:443") {
			b.Fatal("no match")
		}
	}
}

func TestUnescapeRest(t *testing.T) {
	// EscapedPath never yields a bad escape, but match must not depend on
	// that: a bad escape stays as it is, segment by segment.
	tests := []struct{ name, in, want string }{
		{"plain", "a/b", "a/b"},
		{"escapes", "a%2Fb/c%20d", "a/b/c d"},
		{"bad escape in one segment", "a%zz/b%20c", "a%zz/b c"},
		{"truncated escape", "a%2", "a%2"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, unescapeRest(tt.in))
		})
	}
}
