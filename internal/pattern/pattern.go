// Package pattern holds the two request patterns of a throttle rule: the
// path pattern, in the syntax of net/http.ServeMux (path part only), and
// the host pattern. Both are parsed once when a policy is validated and
// matched on every request, so matching avoids allocations: a path match
// allocates only the slice of wildcard values it returns (and the decoded
// value of a segment that holds percent escapes), a host match allocates
// nothing.
package pattern

import (
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// pathEnd says what a path pattern allows after its last segment.
type pathEnd uint8

const (
	endExact  pathEnd = iota // "/a/b": nothing
	endPrefix                // "/a/b/": a slash and anything after it
	endDollar                // "/a/b/{$}": exactly one slash
	endMulti                 // "/a/b/{rest...}": a slash and anything after it, captured
)

// pathSegment is one segment of a path pattern: a literal, already
// percent-decoded, or a single-segment wildcard.
type pathSegment struct {
	lit  string
	wild bool
}

// Path is a parsed path pattern in the syntax of net/http.ServeMux
// (Go 1.22 and later), path part only: no method, no host.
//
//   - "/a/b" matches only the path "/a/b";
//   - "/a/" matches "/a/" and every path below it, but not "/a";
//   - "/a/{$}" matches only "/a/";
//   - "{name}" matches one whole non-empty segment;
//   - "{name...}" must come last and matches the rest of the path, which
//     may be empty ("/files/{p...}" matches "/files/").
//
// The request's escaped path is split on "/" first and each segment is
// percent-decoded after, so "%2F" inside a segment never splits it. The path
// is not cleaned: "/a/../b" does not match "/b". A pattern's literal
// segments are percent-decoded too, so "/a%20b" matches "/a b".
//
// A Path is immutable and safe for concurrent use.
type Path struct {
	str   string
	segs  []pathSegment // the segments before the end
	end   pathEnd
	names []string // wildcard names in pattern order, the multi one last
}

// ParsePath parses s; see [Path] for the syntax. The error
// says what is wrong and quotes s.
func ParsePath(s string) (*Path, error) {
	bad := func(format string, args ...any) (*Path, error) {
		return nil, fmt.Errorf("pattern %q: %s", s, fmt.Sprintf(format, args...))
	}
	if s == "" {
		return bad("empty path pattern")
	}
	if !strings.HasPrefix(s, "/") {
		switch {
		case strings.Contains(s, "://"):
			return bad(`a scheme is not allowed in a path pattern; give the path alone, starting with "/"`)
		case strings.IndexFunc(s, unicode.IsSpace) > 0:
			return bad(`a method is not allowed in a path pattern (use the rule's Method field); give the path alone, starting with "/"`)
		case strings.Contains(s, "/"):
			return bad(`a host is not allowed in a path pattern (use the rule's Host field); give the path alone, starting with "/"`)
		default:
			return bad(`a path pattern must start with "/"`)
		}
	}
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			return bad("invalid UTF-8")
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return bad("whitespace or control character %q in path pattern", r)
		case r == '?':
			return bad(`a query ("?") is not allowed in a path pattern`)
		case r == '#':
			return bad(`a fragment ("#") is not allowed in a path pattern`)
		}
	}

	p := &Path{str: s, end: endExact}
	rest := s
	for len(rest) > 0 {
		// rest starts with "/".
		rest = rest[1:]
		if rest == "" {
			p.end = endPrefix
			break
		}
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			i = len(rest)
		}
		var seg string
		seg, rest = rest[:i], rest[i:]
		if strings.IndexByte(seg, '{') < 0 {
			lit, err := url.PathUnescape(seg)
			if err != nil {
				return bad("bad percent-escape in segment %q", seg)
			}
			p.segs = append(p.segs, pathSegment{lit: lit})
			continue
		}
		if seg[0] != '{' || seg[len(seg)-1] != '}' || strings.Count(seg, "{") != 1 {
			return bad("a wildcard must be a whole segment such as \"{name}\", not %q", seg)
		}
		name := seg[1 : len(seg)-1]
		if name == "$" {
			if rest != "" {
				return bad(`"{$}" must come last`)
			}
			p.end = endDollar
			break
		}
		name, multi := strings.CutSuffix(name, "...")
		if multi && rest != "" {
			return bad("%q must come last", seg)
		}
		if name == "" {
			return bad("wildcard %q has no name", seg)
		}
		if !isIdentifier(name) {
			return bad("wildcard name %q is not a Go identifier", name)
		}
		for _, n := range p.names {
			if n == name {
				return bad("wildcard name %q is used twice", name)
			}
		}
		p.names = append(p.names, name)
		if multi {
			p.end = endMulti
			break
		}
		p.segs = append(p.segs, pathSegment{lit: name, wild: true})
	}
	return p, nil
}

// isIdentifier reports whether s is a Go identifier.
func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if !unicode.IsLetter(r) && r != '_' && (i == 0 || !unicode.IsDigit(r)) {
			return false
		}
	}
	return true
}

// String returns the pattern as it was written.
func (p *Path) String() string { return p.str }

// Wildcards returns the wildcard names of p in pattern order, for checking
// the names given to throttle.KeyFromPath. The caller may keep and modify it.
func (p *Path) Wildcards() []string {
	if p == nil {
		return nil
	}
	return append([]string(nil), p.names...)
}

// maxStackWildcards is how many wildcard values match gathers without
// allocating before it knows the path matches.
const maxStackWildcards = 8

// Match reports whether the path of u matches p and, if so, the wildcard
// names and their values, in pattern order, for
// [net/http.Request.SetPathValue]. The names slice belongs to p: the caller
// must not modify its elements. A nil p matches every path and has no
// wildcards.
//
// A URL with an empty path matches as "/" (an HTTP client sends "/" for it).
// A URL whose path does not start with "/" matches nothing.
func (p *Path) Match(u *url.URL) (names, values []string, ok bool) {
	if p == nil {
		return nil, nil, true
	}
	if u == nil {
		return nil, nil, false
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if path[0] != '/' {
		return nil, nil, false
	}

	// Raw (still escaped) wildcard values, decoded once the match is sure.
	var buf [maxStackWildcards]string
	raw := buf[:0]
	if len(p.names) > maxStackWildcards {
		raw = make([]string, 0, len(p.names))
	}

	rest := path
	for _, sg := range p.segs {
		if rest == "" {
			return nil, nil, false
		}
		rest = rest[1:] // the "/" that starts each segment
		i := strings.IndexByte(rest, '/')
		if i < 0 {
			i = len(rest)
		}
		seg := rest[:i]
		rest = rest[i:]
		if sg.wild {
			if seg == "" {
				return nil, nil, false
			}
			raw = append(raw, seg)
		} else if !segmentEqual(seg, sg.lit) {
			return nil, nil, false
		}
	}
	switch p.end {
	case endExact:
		ok = rest == ""
	case endDollar:
		ok = rest == "/"
	case endPrefix:
		ok = rest != ""
	case endMulti:
		ok = rest != ""
		if ok {
			raw = append(raw, rest[1:])
		}
	}
	if !ok {
		return nil, nil, false
	}
	if len(p.names) == 0 {
		return nil, nil, true
	}
	values = make([]string, len(raw))
	for i, v := range raw {
		if p.end == endMulti && i == len(raw)-1 {
			values[i] = unescapeRest(v)
		} else {
			values[i] = unescapeSegment(v)
		}
	}
	return p.names[:len(p.names):len(p.names)], values, true
}

// unescapeSegment percent-decodes one path segment. A segment with a bad
// escape is returned as it is, as net/http.ServeMux does.
func unescapeSegment(seg string) string {
	if strings.IndexByte(seg, '%') < 0 {
		return seg
	}
	if v, err := url.PathUnescape(seg); err == nil {
		return v
	}
	return seg
}

// unescapeRest percent-decodes each segment of rest, a run of segments
// joined by "/", and joins the decoded segments with "/" again.
func unescapeRest(rest string) string {
	if strings.IndexByte(rest, '%') < 0 {
		return rest
	}
	if v, err := url.PathUnescape(rest); err == nil {
		return v
	}
	segs := strings.Split(rest, "/")
	for i, s := range segs {
		segs[i] = unescapeSegment(s)
	}
	return strings.Join(segs, "/")
}

// segmentEqual reports whether the escaped path segment seg, once decoded
// as [unescapeSegment] decodes it, equals lit. It does not allocate.
func segmentEqual(seg, lit string) bool {
	if strings.IndexByte(seg, '%') < 0 {
		return seg == lit
	}
	j := 0
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c == '%' {
			if i+2 >= len(seg) || !isHex(seg[i+1]) || !isHex(seg[i+2]) {
				return seg == lit // a bad escape: compared as it is
			}
			c = unhex(seg[i+1])<<4 | unhex(seg[i+2])
			i += 2
		}
		if j >= len(lit) || lit[j] != c {
			// Keep scanning for a bad escape, which changes the rule.
			return badEscapeAfter(seg, i+1) && seg == lit
		}
		j++
	}
	return j == len(lit)
}

// badEscapeAfter reports whether seg[i:] holds a malformed percent-escape.
func badEscapeAfter(seg string, i int) bool {
	for ; i < len(seg); i++ {
		if seg[i] == '%' {
			if i+2 >= len(seg) || !isHex(seg[i+1]) || !isHex(seg[i+2]) {
				return true
			}
			i += 2
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// Host is a parsed host pattern. Host names compare without regard
// to case and a trailing dot on the request's host is ignored.
//
//   - "api.github.com" matches that name;
//   - "*.example.com" matches any name with one or more labels before
//     ".example.com", but not "example.com" itself;
//   - "[::1]" matches that IPv6 address (in any spelling);
//   - without a port the pattern matches the host on any port; with one
//     ("localhost:8080", "[::1]:8080", "*.example.com:443") it matches only
//     a host that names that port explicitly. The port a scheme implies is
//     not known here: "example.com:443" does not match the host
//     "example.com".
//
// A Host is a value that is safe for concurrent use. Its zero value
// matches nothing but an empty host.
type Host struct {
	str      string
	name     string     // lower case, no trailing dot; the suffix with its leading "." when wildcard
	addr     netip.Addr // the address when ipv6
	port     string     // decimal without leading zeros; "" for any port
	wildcard bool
	ipv6     bool
}

// ParseHost parses s; see [Host] for the syntax. The error
// says what is wrong and quotes s.
func ParseHost(s string) (Host, error) {
	bad := func(format string, args ...any) (Host, error) {
		return Host{}, fmt.Errorf("pattern %q: %s", s, fmt.Sprintf(format, args...))
	}
	switch {
	case s == "":
		return bad("empty host pattern")
	case strings.Contains(s, "://"):
		return bad(`a scheme is not allowed in a host pattern; give the host alone, as in "api.example.com"`)
	case strings.Contains(s, "/"):
		return bad(`a path is not allowed in a host pattern (use the rule's Path field)`)
	}
	for _, r := range s {
		if r == utf8.RuneError {
			return bad("invalid UTF-8")
		}
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return bad("whitespace or control character %q in host pattern", r)
		}
	}

	h := Host{str: s}
	name, port := s, ""
	hasPort := false
	if s[0] == '[' {
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return bad(`missing "]" after the IPv6 address`)
		}
		lit, after := s[1:i], s[i+1:]
		a, err := netip.ParseAddr(strings.Replace(lit, "%25", "%", 1))
		if err != nil {
			return bad("invalid IPv6 address %q", lit)
		}
		if !a.Is6() {
			return bad("brackets are only for IPv6 addresses; write %q without them", lit)
		}
		if after != "" {
			if after[0] != ':' {
				return bad(`unexpected %q after "]"; a port follows a ":"`, after)
			}
			port, hasPort = after[1:], true
		}
		h.addr, h.ipv6 = a, true
	} else {
		switch strings.Count(s, ":") {
		case 0:
		case 1:
			name, port, hasPort = strings.Cut(s, ":")
		default:
			return bad(`an IPv6 address must be in brackets, as in "[::1]:8080"`)
		}
		name = strings.TrimSuffix(name, ".")
		if name == "" {
			return bad("empty host name")
		}
		labels := strings.Split(name, ".")
		for i, l := range labels {
			if l == "" {
				return bad("empty label in host name %q", name)
			}
			if strings.Contains(l, "*") {
				if l != "*" || i != 0 {
					return bad(`"*" is allowed only as the whole first label, as in "*.example.com"`)
				}
				if len(labels) == 1 {
					return bad(`"*" must be followed by a domain, as in "*.example.com" (an empty host pattern matches every host)`)
				}
				continue
			}
			for _, r := range l {
				if r < utf8.RuneSelf && !isHostByte(byte(r)) || r >= utf8.RuneSelf && !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r) {
					return bad("invalid character %q in host name", r)
				}
			}
		}
		name = strings.ToLower(name)
		if labels[0] == "*" {
			h.wildcard = true
			name = name[1:]
		}
		h.name = name
	}
	if hasPort {
		p, err := parsePort(port)
		if err != nil {
			return bad("%v", err)
		}
		h.port = p
	}
	return h, nil
}

// isHostByte reports whether c may appear in a label of a host name.
func isHostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

// parsePort checks a port of a host pattern and returns it in canonical
// form.
func parsePort(port string) (string, error) {
	if port == "" {
		return "", fmt.Errorf(`empty port after ":"`)
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", fmt.Errorf("port %q is not a number", port)
		}
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q is out of range 1-65535", port)
	}
	return strconv.Itoa(n), nil
}

// String returns the pattern as it was written.
func (h Host) String() string { return h.str }

// Match reports whether host, a [url.URL.Host] (possibly with a port,
// possibly an IPv6 literal such as "[::1]:8080"), matches h. It does not
// allocate.
func (h Host) Match(host string) bool {
	name, port, ipv6, ok := splitRequestHost(host)
	if !ok || ipv6 != h.ipv6 {
		return false
	}
	if h.port != "" {
		for len(port) > 1 && port[0] == '0' {
			port = port[1:]
		}
		if port != h.port {
			return false
		}
	}
	switch {
	case h.ipv6:
		name = strings.Replace(name, "%25", "%", 1)
		a, err := netip.ParseAddr(name)
		return err == nil && a == h.addr
	case h.wildcard:
		// name is "<one or more labels>" + h.name, where h.name starts with ".".
		n := len(name) - len(h.name)
		return n > 0 && name[0] != '.' && name[n-1] != '.' && strings.EqualFold(name[n:], h.name)
	default:
		return strings.EqualFold(name, h.name)
	}
}

// splitRequestHost splits a request's host into name and port. The name of
// an IPv6 literal comes without brackets; other names lose one trailing
// dot. ok is false for a host that is not well formed.
func splitRequestHost(host string) (name, port string, ipv6, ok bool) {
	if strings.HasPrefix(host, "[") {
		i := strings.IndexByte(host, ']')
		if i < 0 {
			return "", "", false, false
		}
		name, port = host[1:i], host[i+1:]
		ipv6 = true
		if port != "" {
			if port[0] != ':' {
				return "", "", false, false
			}
			port = port[1:]
		}
	} else {
		i := strings.IndexByte(host, ':')
		if i >= 0 && strings.IndexByte(host[i+1:], ':') >= 0 {
			return "", "", false, false // an IPv6 address without brackets
		}
		name = host
		if i >= 0 {
			name, port = host[:i], host[i+1:]
		}
		name = strings.TrimSuffix(name, ".")
	}
	for i := 0; i < len(port); i++ {
		if port[i] < '0' || port[i] > '9' {
			return "", "", false, false
		}
	}
	return name, port, ipv6, true
}
