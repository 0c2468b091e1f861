package throttle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
)

// A KeyFunc derives the key of a limit's counter from a request (a copy
// carrying the rule's path wildcards; it may replace the Body but must
// leave it readable, and must change nothing else: the copy shares the
// caller's URL and headers). An error means the request has no key: it is not
// sent. Keys are escaped, and long ones hashed, before they reach a store.
//
// Validation ([Policy.Validate], [NewTransport], [NewLimiter]) calls each
// limit's KeyFunc once with a probe request (no body, no headers) to find
// the path wildcards it reads through [KeyFromPath]; its result is ignored.
type KeyFunc func(r *http.Request) (string, error)

// maxBodyKeyBytes bounds how much of a request body [KeyFromBody] reads.
const maxBodyKeyBytes = 1 << 20

// ConstantKey returns a KeyFunc that gives every request the key s: one
// counter for all. A nil [Limit.Key] does the same with an empty key.
func ConstantKey(s string) KeyFunc {
	return func(*http.Request) (string, error) { return s, nil }
}

type ctxKeys struct {
	name, value string
	parent      *ctxKeys
}

type ctxKeysKey struct{}

// WithKey returns a copy of ctx in which the key called name has the value
// value, for limits whose Key is [KeyFromContext](name). Later calls with
// the same name override earlier ones.
func WithKey(ctx context.Context, name, value string) context.Context {
	parent, _ := ctx.Value(ctxKeysKey{}).(*ctxKeys)
	return context.WithValue(ctx, ctxKeysKey{}, &ctxKeys{name: name, value: value, parent: parent})
}

// KeyFromContext returns a KeyFunc that reads the key called name set on
// the request's context with [WithKey]. A request without it fails with an
// error wrapping [ErrMissingKey].
func KeyFromContext(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		k, _ := r.Context().Value(ctxKeysKey{}).(*ctxKeys)
		for ; k != nil; k = k.parent {
			if k.name == name {
				return k.value, nil
			}
		}
		return "", fmt.Errorf("%w: no context key %q (set it with throttle.WithKey)", ErrMissingKey, name)
	}
}

// KeyFromHeader returns a KeyFunc that reads the request header name. The
// value of a header that can carry a secret (Authorization, Cookie, and any
// name containing "token", "key", "secret", "auth", "session", "password" or
// "signature") is hashed with SHA-256 first, so no secret reaches a store's
// keys or logs. A request without the header fails with an error wrapping
// [ErrMissingKey].
func KeyFromHeader(name string) KeyFunc {
	canonical := http.CanonicalHeaderKey(name)
	secret := sensitiveHeader(canonical)
	return func(r *http.Request) (string, error) {
		v := r.Header.Values(canonical)
		if len(v) == 0 {
			return "", fmt.Errorf("%w: no header %s", ErrMissingKey, canonical)
		}
		s := strings.Join(v, ",")
		if secret {
			return hashValue(s), nil
		}
		return s, nil
	}
}

// sensitiveHeader reports whether a header's value may be a secret.
func sensitiveHeader(canonical string) bool {
	switch canonical {
	case "Authorization", "Proxy-Authorization", "Cookie":
		return true
	}
	lower := strings.ToLower(canonical)
	for _, word := range []string{"token", "key", "secret", "auth", "session", "password", "signature"} {
		if strings.Contains(lower, word) {
			return true
		}
	}
	return false
}

// KeyFromPath returns a KeyFunc that reads the path wildcard name of the
// matched rule's Path pattern, e.g. "owner" for "/repos/{owner}/{repo}".
// An empty value fails with an error wrapping [ErrMissingKey]. A limit
// whose rule's Path has no wildcard name (or no Path) is an invalid policy:
// [Policy.Validate], [NewTransport] and [NewLimiter] report it, also through
// [HashKey] and [JoinKeys].
func KeyFromPath(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		if p := probeOf(r); p != nil {
			p.paths = append(p.paths, name)
		}
		if v := r.PathValue(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: no path wildcard %q", ErrMissingKey, name)
	}
}

// A keyProbe collects the path wildcards a KeyFunc reads when validation
// calls it with a probe request (see pathKeysRead).
type keyProbe struct {
	paths []string // the names KeyFromPath funcs were asked for
}

type keyProbeKey struct{}

// probeOf returns the probe r carries, or nil for a real request.
func probeOf(r *http.Request) *keyProbe {
	p, _ := r.Context().Value(keyProbeKey{}).(*keyProbe)
	return p
}

// pathKeysRead returns the path wildcards f reads through [KeyFromPath],
// found by calling f once with a probe request: no body, no headers, no
// path values, a context marking it as a probe. KeyFromPath, HashKey and
// JoinKeys answer a probe exactly; a KeyFunc of the user's is called like
// any request and its result (error or panic included) is ignored.
func pathKeysRead(f KeyFunc) (names []string) {
	p := &keyProbe{}
	ctx := context.WithValue(context.Background(), keyProbeKey{}, p)
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://probe.invalid/", http.NoBody)
	if err != nil {
		return nil
	}
	defer func() {
		recover() // a user's KeyFunc that cannot read a probe says nothing about paths
		names = p.paths
	}()
	f(r)
	return p.paths
}

// KeyFromQuery returns a KeyFunc that reads the URL query parameter name.
// A request without it fails with an error wrapping [ErrMissingKey].
func KeyFromQuery(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		q := r.URL.Query()
		if !q.Has(name) {
			return "", fmt.Errorf("%w: no query parameter %q", ErrMissingKey, name)
		}
		return q.Get(name), nil
	}
}

// KeyFromBody returns a KeyFunc that reads the top-level field name of an
// application/x-www-form-urlencoded or application/json request body (as
// Slack's chat.postMessage carries "channel"), falling back to the URL query
// for form requests. It reads at most 1 MiB and puts the body back, so the
// request is still sent whole. A JSON string field gives its value; any
// other JSON value gives its JSON text. A request without the field fails
// with an error wrapping [ErrMissingKey].
func KeyFromBody(name string) KeyFunc {
	return func(r *http.Request) (string, error) {
		body, err := peekBody(r)
		if err != nil {
			return "", err
		}
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		switch {
		case mt == "application/json" || strings.HasSuffix(mt, "+json"):
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(body, &fields); err != nil {
				return "", fmt.Errorf("throttle: reading key %q from JSON body: %w", name, err)
			}
			raw, ok := fields[name]
			if !ok {
				break
			}
			var s string
			if json.Unmarshal(raw, &s) == nil {
				return s, nil
			}
			return string(bytes.TrimSpace(raw)), nil
		default:
			form, err := url.ParseQuery(string(body))
			if err != nil {
				return "", fmt.Errorf("throttle: reading key %q from form body: %w", name, err)
			}
			if form.Has(name) {
				return form.Get(name), nil
			}
			if q := r.URL.Query(); q.Has(name) {
				return q.Get(name), nil
			}
		}
		return "", fmt.Errorf("%w: no body field %q", ErrMissingKey, name)
	}
}

// peekBody reads up to maxBodyKeyBytes of r's body and puts the body back
// whole: the bytes read, then the rest, closing the original on Close.
func peekBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	orig := r.Body
	buf, err := io.ReadAll(io.LimitReader(orig, maxBodyKeyBytes+1))
	r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), orig), closer: orig}
	if err != nil {
		return nil, fmt.Errorf("throttle: reading request body for a key: %w", err)
	}
	if len(buf) > maxBodyKeyBytes {
		return nil, fmt.Errorf("throttle: request body larger than %d bytes; cannot read a key from it", maxBodyKeyBytes)
	}
	return buf, nil
}

// replayBody is a request body put back after a key was read from it.
type replayBody struct {
	io.Reader
	closer io.Closer
}

func (b *replayBody) Close() error { return b.closer.Close() }

// HashKey returns a KeyFunc that hashes the key f returns with SHA-256,
// for keys that are secrets (an API token taken from a query parameter or
// body field, say).
func HashKey(f KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		k, err := f(r)
		if err != nil {
			return "", err
		}
		return hashValue(k), nil
	}
}

// JoinKeys returns a KeyFunc whose key joins the keys of fs, e.g. a
// workspace and a channel. It fails if any of them fails.
func JoinKeys(fs ...KeyFunc) KeyFunc {
	return func(r *http.Request) (string, error) {
		parts := make([]string, len(fs))
		probe := probeOf(r) != nil
		for i, f := range fs {
			k, err := f(r)
			if probe {
				continue // validation asks every part which wildcards it reads
			}
			if err != nil {
				return "", err
			}
			parts[i] = escapeKey(k)
		}
		return strings.Join(parts, "/"), nil
	}
}

// hashValue returns a one-way digest of a secret, 128 bits in hex.
func hashValue(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// maxKeyLen bounds an escaped key; longer keys are replaced by a digest.
const maxKeyLen = 128

// escapeKey makes s safe to embed in store keys: bytes outside
// [A-Za-z0-9._~:@+=-] (and "/" kept by JoinKeys) become %XX, and a result
// longer than maxKeyLen becomes "%h" and a digest, which no escaped string
// can equal. The mapping is injective.
func escapeKey(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !safeKeyByte(s[i]) {
			n++
		}
	}
	if n == 0 && len(s) <= maxKeyLen {
		return s
	}
	if len(s)+2*n > maxKeyLen {
		sum := sha256.Sum256([]byte(s))
		return "%h" + hex.EncodeToString(sum[:16])
	}
	const hexDigits = "0123456789ABCDEF"
	b := make([]byte, 0, len(s)+2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if safeKeyByte(c) {
			b = append(b, c)
			continue
		}
		b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return string(b)
}

func safeKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '~' || c == ':' || c == '@' || c == '+' || c == '=' || c == '-'
}

// errKeyFunc wraps an error from a limit's KeyFunc with the rule and limit.
func errKeyFunc(rule, limit string, err error) error {
	if errors.Is(err, ErrMissingKey) {
		return fmt.Errorf("throttle: rule %s: limit %s: %w", rule, limit, err)
	}
	return fmt.Errorf("throttle: rule %s: limit %s: key: %w", rule, limit, err)
}
