// Package baseurl reads the base URLs that the presets take for the hosts
// they limit: one host, by http or https, with a path a rule's pattern can
// hold, and errors that never show credentials.
package baseurl

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/quotakit/throttle/internal/pattern"
)

// Parse parses a base URL and checks that it names one host by http or
// https, with a path a rule's pattern can hold; the path gets a trailing
// slash, as go-github gives it one. Its errors show the URL without
// credentials.
func Parse(raw string) (*url.URL, error) {
	shown := Redact(raw)
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			ue.URL = shown
		}
		return nil, err
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: the scheme must be https (or http for a test fake)", shown)
	case u.Opaque != "" || u.Host == "":
		return nil, fmt.Errorf("%q: no host", shown)
	case u.User != nil:
		return nil, fmt.Errorf("%q: credentials do not belong in the URL", shown)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, fmt.Errorf("%q: a base URL has no query or fragment", shown)
	case strings.ContainsAny(u.Host, "*"):
		return nil, fmt.Errorf("%q: the host must be one name, not a pattern", shown)
	case strings.ContainsAny(u.Path, "{}"):
		return nil, fmt.Errorf("%q: the path must not hold { or }", shown)
	}
	if _, err := pattern.ParseHost(u.Host); err != nil {
		return nil, fmt.Errorf("%q: %w", shown, err)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	return u, nil
}

// Redact replaces the user information of a URL, if any, with "xxxxx",
// without parsing it (it may not parse).
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority := rest
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	return scheme + "://xxxxx" + rest[at:]
}
