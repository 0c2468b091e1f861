package policyfile_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/policyfile"
	"github.com/quotakit/throttle/waiters"
)

const notifierYAML = `# the notifier case
instances: 2
rules:
  - name: slack-notify
    host: hooks.slack.com
    method: POST
    wait: fail-fast
    limits:
      - {name: global, rate: 5, per: 30m, algorithm: sliding-log}
      - name: category
        rate: 2
        per: 30m
        algorithm: sliding-log
        key: context:category
  - name: api
    host: "*.example.com"
    path: /api/{method}
    wait: up-to 1s
    cost_by_method: {default: 2, GET: 1}
    limits:
      - {name: per-method, rate: 10, per: 1m, burst: 4, key: "path:method"}
`

const notifierJSON = `{"instances": 2, "rules": [
 {"name": "slack-notify", "host": "hooks.slack.com", "method": "POST", "wait": "fail-fast",
  "limits": [{"name": "global", "rate": 5, "per": "30m", "algorithm": "sliding-log"},
             {"name": "category", "rate": 2, "per": "30m", "algorithm": "sliding-log", "key": "context:category"}]},
 {"name": "api", "host": "*.example.com", "path": "/api/{method}", "wait": "up-to 1s",
  "cost_by_method": {"default": 2, "GET": 1},
  "limits": [{"name": "per-method", "rate": 10, "per": "1m", "burst": 4, "key": "path:method"}]}]}`

// codePolicy is notifierYAML written in Go.
func codePolicy() throttle.Policy {
	return throttle.Policy{Instances: 2, Rules: []throttle.Rule{
		{Name: "slack-notify", Host: "hooks.slack.com", Method: http.MethodPost, Wait: waiters.FailFast(),
			Limits: []throttle.Limit{
				{Name: "global", Rate: 5, Per: 30 * time.Minute, Algorithm: throttle.SlidingLog},
				{Name: "category", Rate: 2, Per: 30 * time.Minute, Algorithm: throttle.SlidingLog, Key: throttle.KeyFromContext("category")},
			}},
		{Name: "api", Host: "*.example.com", Path: "/api/{method}", Wait: waiters.UpTo(time.Second),
			Cost:   throttle.CostByMethod(2, map[string]int{"GET": 1}),
			Limits: []throttle.Limit{{Name: "per-method", Rate: 10, Per: time.Minute, Burst: 4, Key: throttle.KeyFromPath("method")}}},
	}}
}

// okTransport answers every request 200, in memory.
type okTransport struct{}

func (okTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// script runs the same requests through p on a fixed clock and returns
// what happened to each.
func script(t *testing.T, p throttle.Policy) []string {
	t.Helper()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tr, err := throttle.NewTransport(okTransport{}, p,
		throttle.WithStore(throttle.NewMemoryStore(throttle.WithStoreClock(clock))), throttle.WithClock(clock))
	require.NoError(t, err)
	var out []string
	send := func(method, url, category string) {
		ctx := context.Background()
		if category != "" {
			ctx = throttle.WithKey(ctx, "category", category)
		}
		req, _ := http.NewRequestWithContext(ctx, method, url, nil)
		resp, err := tr.RoundTrip(req)
		var le *throttle.LimitError
		switch {
		case err == nil:
			resp.Body.Close()
			out = append(out, "sent")
		case errors.As(err, &le):
			out = append(out, "refused "+le.Limit+" "+le.RetryAfter.String())
		default:
			out = append(out, "error "+err.Error())
		}
	}
	for _, c := range []string{"errors", "errors", "errors", "warnings", "warnings", "warnings", "info", "info"} {
		send(http.MethodPost, "https://hooks.slack.com/services/x", c)
		now = now.Add(time.Second)
	}
	send(http.MethodPost, "https://hooks.slack.com/services/x", "") // no category
	for i := range 8 {
		send(http.MethodGet, "https://a.example.com/api/list", "")
		if i%2 == 0 {
			send(http.MethodPost, "https://b.example.com/api/post", "")
		}
	}
	return out
}

func TestFileBehavesLikeCode(t *testing.T) {
	want := script(t, codePolicy())
	require.Contains(t, want, "sent")
	require.Contains(t, strings.Join(want, "\n"), "refused category")
	require.Contains(t, strings.Join(want, "\n"), "refused global")
	require.Contains(t, strings.Join(want, "\n"), "refused per-method")

	for name, doc := range map[string]string{"notifier.yaml": notifierYAML, "notifier.json": notifierJSON} {
		t.Run(name, func(t *testing.T) {
			p, err := policyfile.Load(name, []byte(doc))
			require.NoError(t, err)
			assert.Equal(t, want, script(t, p))
		})
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(notifierYAML), 0o600))
	p, err := policyfile.LoadFile(path)
	require.NoError(t, err)
	assert.Len(t, p.Rules, 2)

	_, err = policyfile.LoadFile(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestBadFiles(t *testing.T) {
	cases := []struct {
		name, doc          string
		line               int
		rule, field, inErr string
	}{
		{"syntax", "instances: 2\nrules:\n  - name: a\n    host: [x\n", 3, "", "", "yaml"}, // the line go-yaml reports,
		{"empty", "", 0, "", "", "empty file"},
		{"unknown field", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, brust: 2}\n", 4, "", "", "brust"},
		{"bad duration", "rules:\n  - name: a\n    limits:\n      - name: l\n        rate: 1\n        per: 30 minutes\n", 6, "a", "limits[0].per", "not a duration"},
		{"missing per", "rules:\n  - name: a\n    limits:\n      - name: l\n        rate: 1\n", 4, "a", "limits[0].per", "missing"},
		{"bad algorithm", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, algorithm: leaky}\n", 4, "a", "limits[0].algorithm", "leaky"},
		{"bad key", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, key: cookie:x}\n", 4, "a", "limits[0].key", "cookie"},
		{"bad waiter", "rules:\n  - name: a\n    wait: sometimes\n", 3, "a", "wait", "sometimes"},
		{"bad mode", "on_store_failure: maybe\nrules: []\n", 1, "", "on_store_failure", "maybe"},
		{"zero rate (validation)", "rules:\n  - name: a\n    limits:\n      - name: l\n        per: 1m\n        rate: 0\n", 6, "a", "limits[0].rate", ""},
		{"bad path (validation)", "rules:\n  - name: a\n    path: /x/{\n", 3, "a", "path", ""},
		{"duplicate names (validation)", "rules:\n  - name: a\n  - name: a\n", 3, "a", "name", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := policyfile.Load("policy.yaml", []byte(c.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var fe *policyfile.Error
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, "policy.yaml", fe.File)
			assert.Equal(t, c.line, fe.Line, "line: %v", err)
			assert.Equal(t, c.rule, fe.Rule, "rule: %v", err)
			assert.Equal(t, c.field, fe.Field, "field: %v", err)
			assert.Contains(t, err.Error(), c.inErr)
			assert.True(t, strings.HasPrefix(err.Error(), "policy.yaml"), err.Error())
		})
	}
}

func TestAllProblemsAreReported(t *testing.T) {
	doc := "rules:\n  - name: a\n    wait: soon\n    limits:\n      - {name: l, rate: 1, per: forever}\n"
	_, err := policyfile.Load("p.yaml", []byte(doc))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "p.yaml:3: rule a: wait")
	assert.Contains(t, err.Error(), "p.yaml:5: rule a: limits[0].per")
}

// The README's example file loads, and makes a transport.
func TestReadmeExample(t *testing.T) {
	p, err := policyfile.LoadFile(filepath.Join("testdata", "readme.yaml"))
	require.NoError(t, err)
	_, err = throttle.NewTransport(nil, p)
	require.NoError(t, err)
}

func TestPresetsByName(t *testing.T) {
	doc := "presets: [slack, github]\nrules:\n  - name: mine\n    host: api.example.com\n"
	p, err := policyfile.Load("p.yaml", []byte(doc))
	require.NoError(t, err)
	require.Greater(t, len(p.Rules), 3)
	assert.Equal(t, "mine", p.Rules[0].Name, "the file's rules come first")
	names := map[string]bool{}
	for _, r := range p.Rules {
		names[r.Host] = true
	}
	assert.True(t, names["slack.com"] || names["*.slack.com"], "slack rules: %v", names)
	assert.True(t, names["api.github.com"], "github rules: %v", names)
	_, err = throttle.NewTransport(nil, p)
	require.NoError(t, err)

	_, err = policyfile.Load("p.yaml", []byte("presets: [twitter]\n"))
	var fe *policyfile.Error
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, 1, fe.Line)
	assert.Equal(t, "presets[0]", fe.Field)
	assert.ErrorContains(t, err, `unknown preset "twitter" (github, slack)`)
}
