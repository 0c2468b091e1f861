package policyfile_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
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
		throttle.WithStore(memstore.New(memstore.WithClock(clock))), throttle.WithClock(clock))
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
		{"syntax", "instances: 2\nrules:\n  - name: a\n    host: [x\n", 3, "", "", "invalid YAML"}, // the line go-yaml reports
		{"empty", "", 0, "", "", "empty file"},
		{"unknown field", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, brust: 2}\n", 4, "a", "limits[0].brust", "unknown field"},
		{"bad duration", "rules:\n  - name: a\n    limits:\n      - name: l\n        rate: 1\n        per: 30 minutes\n", 6, "a", "limits[0].per", "not a duration"},
		{"missing per", "rules:\n  - name: a\n    limits:\n      - name: l\n        rate: 1\n", 4, "a", "limits[0].per", "missing"},
		{"bad algorithm", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, algorithm: leaky}\n", 4, "a", "limits[0].algorithm", "leaky"},
		{"bad key", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, key: cookie:x}\n", 4, "a", "limits[0].key", "cookie"},
		{"bad waiter", "rules:\n  - name: a\n    wait: sometimes\n", 3, "a", "wait", "sometimes"},
		{"bad mode", "on_store_failure: maybe\nrules: []\n", 1, "", "on_store_failure", "maybe"},
		{"zero rate (validation)", "rules:\n  - name: a\n    limits:\n      - name: l\n        per: 1m\n        rate: 0\n", 6, "a", "limits[0].rate", ""},
		{"bad path (validation)", "rules:\n  - name: a\n    path: /x/{\n", 3, "a", "path", ""},
		{"duplicate names (validation)", "rules:\n  - name: a\n  - name: a\n", 3, "a", "name", ""},
		{"empty settle path", "rules:\n  - name: a\n    settle_from_json: \"\"\n", 3, "a", "settle_from_json", "dot-separated path"},
		{"settle path with an empty key", "rules:\n  - name: a\n    settle_from_json: data..cost\n", 3, "a", "settle_from_json", "data..cost"},
		{"settle path not a string", "rules:\n  - name: a\n    settle_from_json: [data]\n", 3, "a", "settle_from_json", "must be a string"},
		{"empty match", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, match: {}}\n", 4, "a", "limits[0].match", "give method or path"},
		{"bad match path", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, match: {path: \"/x/{\"}}\n", 4, "a", "limits[0].match.path", "wildcard"},
		{"unknown match field", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, match: {host: x}}\n", 4, "a", "limits[0].match.host", "unknown field"},
		{"limit cost 0", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, cost: 0}\n", 4, "a", "limits[0].cost", "at least 1"},
		{"limit cost twice", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, cost: 2, cost_by_method: {GET: 1}}\n", 4, "a", "limits[0].cost", "not both"},
		{"bad headroom", "classes:\n  - {name: bulk, headroom: lots}\nrules: []\n", 2, "", "classes[0].headroom", "a percentage"},
		{"headroom 100% (validation)", "classes:\n  - name: ok\n  - name: bulk\n    headroom: 100%\nrules: []\n", 4, "", "classes[1].headroom", "below 1"},
		{"unknown class (validation)", "classes: [{name: bulk}]\nrules:\n  - name: a\n    class: bluk\n", 4, "a", "class", "bluk"},
		{"bad tenant", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, tenant: customer}\n", 4, "a", "limits[0].tenant", "KIND:NAME"},
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
	assert.Contains(t, err.Error(), `p.yaml:3: rule "a": wait`)
	assert.Contains(t, err.Error(), `p.yaml:5: rule "a": limits[0].per`)
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

// A .json file is JSON, strictly: what a JSON parser refuses, Load
// refuses, with the line; .yaml and .yml files stay YAML.
func TestJSONIsStrict(t *testing.T) {
	cases := []struct {
		name, doc string
		line      int
		field     string
		inErr     string
	}{
		{"trailing comma", "{\"rules\": [\n {\"name\": \"a\",\n  \"limits\": [{\"name\": \"l\", \"rate\": 1, \"per\": \"1m\"},]}]}", 3, "", "invalid JSON"},
		{"trailing comma in object", "{\"instances\": 2,\n}", 2, "", "invalid JSON"},
		{"comment", "// mine\n{\"instances\": 2}", 1, "", "invalid JSON"},
		{"single quotes", "{'instances': 2}", 1, "", "invalid JSON"},
		{"unquoted key", "{\n instances: 2}", 2, "", "invalid JSON"},
		{"second value", "{\"instances\": 2}\n{}", 2, "", "after the end"},
		{"truncated", "{\"instances\": 2,\n \"rules\": [", 2, "", "unexpected end"},
		{"unknown field", "{\"rules\": [\n {\"name\": \"a\", \"hots\": \"x\"}]}", 2, "hots", "unknown field"},
		{"duplicate field", "{\"instances\": 2,\n \"instances\": 3}", 2, "instances", "given twice"},
		{"number as string", "{\"rules\": [{\"name\": 5}]}", 1, "name", "must be a string"},
		{"not an object", "[1, 2]", 1, "", "must be a mapping"},
		{"empty", "  \n", 0, "", "empty file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := policyfile.Load("policy.json", []byte(c.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var fe *policyfile.Error
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.line, fe.Line, "line: %v", err)
			assert.Equal(t, c.field, fe.Field, "field: %v", err)
			assert.ErrorContains(t, err, c.inErr)
		})
	}

	// The same trailing comma is YAML's flow syntax in a .yaml or .yml file.
	for _, name := range []string{"policy.yaml", "policy.yml"} {
		_, err := policyfile.Load(name, []byte(`{"instances": 2, "presets": [slack],}`))
		assert.NoError(t, err, name)
	}
	_, err := policyfile.Load("POLICY.JSON", []byte(`{"instances": 2,}`))
	assert.ErrorContains(t, err, "invalid JSON")
}

// An integer field takes a whole number, and says which field when it is
// given anything else.
func TestIntegersOnly(t *testing.T) {
	limit := func(fields string) string {
		return "rules:\n  - name: a\n    limits:\n      - {name: l, per: 1m, " + fields + "}\n"
	}
	cases := []struct {
		name, file, doc string
		rule, field     string
		inErr           string
	}{
		{"rate", "p.yaml", limit("rate: 5.5"), "a", "limits[0].rate", "must be a whole number, got 5.5"},
		{"burst", "p.yaml", limit("rate: 5, burst: 2.5"), "a", "limits[0].burst", "must be a whole number, got 2.5"},
		{"rate as text", "p.yaml", limit(`rate: "5"`), "a", "limits[0].rate", `must be a whole number, got "5"`},
		{"rate too large", "p.yaml", limit("rate: 1e300"), "a", "limits[0].rate", "out of range"},
		{"rate infinite", "p.yaml", limit("rate: .inf"), "a", "limits[0].rate", "must be a whole number"},
		{"instances", "p.yaml", "instances: 2.5\n", "", "instances", "must be a whole number, got 2.5"},
		{"cost", "p.yaml", "rules:\n  - name: a\n    cost: 1.5\n", "a", "cost", "must be a whole number, got 1.5"},
		{"cost_by_method", "p.yaml", "rules:\n  - name: a\n    cost_by_method: {GET: 0.5}\n", "a", "cost_by_method.GET", "must be a whole number, got 0.5"},
		{"retry.max", "p.yaml", "rules:\n  - name: a\n    retry: {max: 2.5}\n", "a", "retry.max", "must be a whole number, got 2.5"},
		{"json rate", "p.json", `{"rules": [{"name": "a", "limits": [{"name": "l", "per": "1m", "rate": 5.5}]}]}`, "a", "limits[0].rate", "must be a whole number, got 5.5"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := policyfile.Load(c.file, []byte(c.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var fe *policyfile.Error
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.rule, fe.Rule, "rule: %v", err)
			assert.Equal(t, c.field, fe.Field, "field: %v", err)
			assert.ErrorContains(t, err, c.inErr)
		})
	}

	// A whole number written as a float is that number.
	p, err := policyfile.Load("p.json", []byte(`{"rules": [{"name": "a", "limits": [{"name": "l", "per": "1m", "rate": 5.0, "burst": 1e1}]}]}`))
	require.NoError(t, err)
	assert.Equal(t, 5, p.Rules[0].Limits[0].Rate)
	assert.Equal(t, 10, p.Rules[0].Limits[0].Burst)
}

// Load reports every problem of a file at once, each once: what the file
// gets wrong and what validation finds, with file, line, rule and field.
func TestEveryProblemOnce(t *testing.T) {
	doc := `instances: -1
rules:
  - name: a
    hots: example.com
    wait: soon
    limits:
      - {name: l, rate: 5.5, per: 1m}
      - {name: m, rate: 0, per: 1m}
      - {name: n, rate: 1, per: forever, colour: red}
  - name: b
    path: /x/{
    limits:
      - {name: k, rate: 1}
`
	_, err := policyfile.Load("policy.yaml", []byte(doc))
	require.Error(t, err)
	want := []string{
		`policy.yaml:4: rule "a": hots: unknown field (name, host, method, path, scope, wait, cost, cost_by_method, shadow, on_store_failure, limits, learn, retry, settle_from_json, class)`,
		`policy.yaml:5: rule "a": wait: unknown waiter "soon" (block, fail-fast, up-to DURATION)`,
		`policy.yaml:7: rule "a": limits[0].rate: must be a whole number, got 5.5`,
		`policy.yaml:9: rule "a": limits[2].per: not a duration (such as 30s, 5m, 1h): "forever"`,
		`policy.yaml:9: rule "a": limits[2].colour: unknown field (name, rate, per, burst, algorithm, phase, key, match, cost, cost_by_method, tenant)`,
		`policy.yaml:13: rule "b": limits[0].per: missing: give a duration such as 1m or 30m`,
		`policy.yaml:1: instances: must not be negative, got -1`,
		`policy.yaml:8: rule "a": limits[1].rate: must be positive, got 0`,
		`policy.yaml:11: rule "b": path: `,
	}
	msg := err.Error()
	lines := strings.Split(msg, "\n")
	require.Len(t, lines, len(want), msg)
	for _, w := range want {
		assert.Equal(t, 1, strings.Count(msg, w), "want once: %s\nin:\n%s", w, msg)
	}
	for _, l := range lines {
		assert.NotContains(t, l, "throttle:", "a problem is said once")
		assert.NotContains(t, l, "invalid policy", "a problem is said once")
		assert.NotContains(t, l, "Limits", "the file's field names")
	}
	var fe *policyfile.Error
	require.ErrorAs(t, err, &fe)
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	var pe *throttle.PolicyError
	assert.ErrorAs(t, err, &pe, "validation's problems are still PolicyErrors")
}

// A misspelt field is named as the file names it, wherever it is, never
// by a Go type.
func TestUnknownFieldsNameTheField(t *testing.T) {
	cases := []struct {
		name, doc, rule, field string
		line                   int
	}{
		{"top", "instance: 2\n", "", "instance", 1},
		{"rule", "rules:\n  - name: a\n    limts: []\n", "a", "limts", 3},
		{"limit", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, brust: 2}\n", "a", "limits[0].brust", 4},
		{"learn", "rules:\n  - name: a\n    learn: {max_paws: 1m}\n", "a", "learn.max_paws", 3},
		{"retry", "rules:\n  - name: a\n    retry:\n      tries: 2\n", "a", "retry.tries", 4},
		{"unnamed rule", "rules:\n  - name: \"\"\n    wiat: block\n", "#0", "wiat", 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := policyfile.Load("p.yaml", []byte(c.doc))
			fe := problem(t, err, c.field)
			assert.Equal(t, c.rule, fe.Rule)
			assert.Equal(t, c.line, fe.Line)
			assert.ErrorContains(t, fe, "unknown field")
			assert.NotContains(t, err.Error(), "policyfile.")
			assert.NotContains(t, err.Error(), "type")
		})
	}
}

// problem returns the problem of err about field.
func problem(t *testing.T, err error, field string) *policyfile.Error {
	t.Helper()
	require.Error(t, err)
	var all []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		all = j.Unwrap()
	} else {
		all = []error{err}
	}
	for _, e := range all {
		var fe *policyfile.Error
		if errors.As(e, &fe) && fe.Field == field {
			return fe
		}
	}
	require.Failf(t, "no problem with the field", "%s in:\n%v", field, err)
	return nil
}

// The names a file may use for algorithms and failure modes are the
// root's: whatever Algorithm.String and FailureMode.String print.
func TestNamesAreTheRoots(t *testing.T) {
	for a := throttle.GCRA; a <= throttle.Concurrency; a++ {
		t.Run(a.String(), func(t *testing.T) {
			doc := "rules:\n  - name: a\n    wait: fail-fast\n    limits:\n      - {name: l, rate: 1, per: 1m, algorithm: " + a.String() + "}\n"
			p, err := policyfile.Load("p.yaml", []byte(doc))
			require.NoError(t, err)
			assert.Equal(t, a, p.Rules[0].Limits[0].Algorithm)
		})
	}
	for m := throttle.FailDefault; m <= throttle.FailClosed; m++ {
		t.Run(m.String(), func(t *testing.T) {
			doc := "on_store_failure: " + m.String() + "\nrules:\n  - name: a\n    on_store_failure: " + m.String() + "\n"
			p, err := policyfile.Load("p.yaml", []byte(doc))
			require.NoError(t, err)
			assert.Equal(t, m, p.OnStoreFailure)
			assert.Equal(t, m, p.Rules[0].OnStoreFailure)
		})
	}
	_, err := policyfile.Load("p.yaml", []byte("on_store_failure: maybe\n"))
	assert.ErrorContains(t, err, `p.yaml:1: on_store_failure: unknown failure mode "maybe" (default, local, open, closed)`)
}

// Load never panics, and what it refuses is an invalid policy.
func FuzzLoad(f *testing.F) {
	f.Add(notifierYAML, false)
	f.Add(notifierJSON, true)
	f.Add("rules:\n  - &r {name: a, limits: [{<<: {rate: 1}, name: l, per: 1m}]}\n  - *r\n", false)
	f.Add(`{"rules": [{"name": "a", "cost_by_method": {"GET": 1e400}, "limits": [{"rate": -0.5}]}]}`, true)
	f.Fuzz(func(t *testing.T, doc string, json bool) {
		name := "p.yaml"
		if json {
			name = "p.json"
		}
		_, err := policyfile.Load(name, []byte(doc))
		if err != nil && !errors.Is(err, throttle.ErrInvalidPolicy) {
			t.Errorf("%v does not match ErrInvalidPolicy", err)
		}
	})
}

// Phases and anchors are read, and a bad one is reported at its field.
func TestPhaseAndAnchor(t *testing.T) {
	p, err := policyfile.Load("p.yaml", []byte(`rules:
  - name: daily
    limits:
      - {name: day, rate: 1000, per: 24h, algorithm: fixed-window, phase: 8h}
  - name: vendor
    learn: {sync: window, anchor: window, anchor_tolerance: 500ms, anchor_grid: true}
    limits:
      - {name: window, rate: 60, per: 1m, algorithm: fixed-window}
`))
	require.NoError(t, err)
	assert.Equal(t, 8*time.Hour, p.Rules[0].Limits[0].Phase)
	assert.Equal(t, "window", p.Rules[1].Learn.Anchor)
	assert.Equal(t, 500*time.Millisecond, p.Rules[1].Learn.AnchorTolerance)
	assert.True(t, p.Rules[1].Learn.AnchorGrid)
	assert.False(t, p.Rules[0].Learn.AnchorGrid)

	for _, c := range []struct {
		name, doc, field, inErr string
	}{
		{"phase of a whole window", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, algorithm: fixed-window, phase: 1m}\n",
			"limits[0].phase", "must be in [0, Per)"},
		{"phase of gcra", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1m, phase: 1s}\n",
			"limits[0].phase", "has none"},
		{"anchor of gcra", "rules:\n  - name: a\n    learn: {anchor: l}\n    limits:\n      - {name: l, rate: 1, per: 1m}\n",
			"learn.anchor", "only fixed-window and sliding-window"},
		{"anchor of a phased limit", "rules:\n  - name: a\n    learn: {anchor: l}\n    limits:\n      - {name: l, rate: 1, per: 1m, algorithm: fixed-window, phase: 1s}\n",
			"learn.anchor", "has a Phase"},
		{"anchor of no limit", "rules:\n  - name: a\n    learn: {anchor: x}\n    limits:\n      - {name: l, rate: 1, per: 1m, algorithm: fixed-window}\n",
			"learn.anchor", "names no limit"},
		{"negative tolerance", "rules:\n  - name: a\n    learn: {anchor: l, anchor_tolerance: -1s}\n    limits:\n      - {name: l, rate: 1, per: 1m, algorithm: fixed-window}\n",
			"learn.anchor_tolerance", "must not be negative"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := policyfile.Load("p.yaml", []byte(c.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var fe *policyfile.Error
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, c.field, fe.Field, "field: %v", err)
			assert.ErrorContains(t, err, c.inErr)
		})
	}
}

// jsonCostTransport answers every request 200 with a JSON body that
// reports a cost of 7 at data.rateLimit.cost, in memory.
type jsonCostTransport struct{}

func (jsonCostTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		req.Body.Close()
	}
	body := io.NopCloser(strings.NewReader(`{"data":{"rateLimit":{"cost":7}}}`))
	return &http.Response{StatusCode: 200, Body: body, Header: http.Header{}, Request: req}, nil
}

// TestSettleFromJSON: a rule with settle_from_json is charged its cost,
// the estimate, and then what the answer reports.
func TestSettleFromJSON(t *testing.T) {
	p, err := policyfile.Load("p.yaml", []byte(`rules:
  - name: graphql
    path: /graphql
    wait: fail-fast
    cost: 50
    settle_from_json: data.rateLimit.cost
    limits:
      - {name: points, rate: 100, per: 1h, algorithm: fixed-window}
`))
	require.NoError(t, err)
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	tr, err := throttle.NewTransport(jsonCostTransport{}, p,
		throttle.WithStore(memstore.New(memstore.WithClock(clock))), throttle.WithClock(clock))
	require.NoError(t, err)
	sent := 0
	for range 20 {
		req, _ := http.NewRequest(http.MethodPost, "https://api.example.com/graphql", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		sent++
	}
	// Charged 50 until the answer says 7: 7*8 + 50 > 100.
	assert.Equal(t, 8, sent)
}

// Mistakes that would load and then limit nothing, or fail every request,
// are refused at load with the file's line: an empty file, a method in
// lower case, a path key whose wildcard the rule's path lacks.
func TestMisconfigurationIsRefused(t *testing.T) {
	for _, tc := range []struct {
		name, file, doc string
		line            int
		rule, field     string
		inErr           string
	}{
		{"empty YAML", "p.yaml", "", 0, "", "", "empty file"},
		{"comment only", "p.yaml", "# nothing yet\n", 0, "", "", "empty file"},
		{"no rules", "p.yaml", "instances: 2\nrules: []\n", 1, "", "rules", "no rules and no presets"},
		{"empty JSON", "p.json", "{}", 1, "", "rules", "no rules and no presets"},
		{"lower-case method", "p.yaml", "rules:\n  - name: a\n    method: post\n    limits: [{name: l, rate: 1, per: 1h}]\n", 3, "a", "method",
			`"post" is not upper case; methods are case-sensitive, so it would never match "POST"`},
		{"path key without wildcard", "p.yaml", "rules:\n  - name: a\n    path: /repos/{owner}\n    limits:\n      - {name: l, rate: 1, per: 1h, key: \"path:repo\"}\n", 5, "a", "limits[0].key",
			`path:repo names no wildcard of the rule's path "/repos/{owner}" (it has {owner})`},
		{"hashed path key without wildcard", "p.yaml", "rules:\n  - name: a\n    path: /x\n    limits:\n      - {name: l, rate: 1, per: 1h, key: \"hash:path:repo\"}\n", 5, "a", "limits[0].key",
			`path:repo names no wildcard of the rule's path "/x" (it has none)`},
		{"path key on a rule without path", "p.yaml", "rules:\n  - name: a\n    limits:\n      - {name: l, rate: 1, per: 1h, tenant: \"path:team\"}\n", 4, "a", "limits[0].tenant",
			"the rule has no path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policyfile.Load(tc.file, []byte(tc.doc))
			require.Error(t, err)
			assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var fe *policyfile.Error
			require.ErrorAs(t, err, &fe)
			if tc.line > 0 {
				assert.Equal(t, tc.line, fe.Line, "line: %v", err)
			}
			assert.Equal(t, tc.rule, fe.Rule, "rule: %v", err)
			assert.Equal(t, tc.field, fe.Field, "field: %v", err)
			assert.ErrorContains(t, err, tc.inErr)
		})
	}

	// The same rules written right load.
	for _, doc := range []string{
		"rules:\n  - name: a\n    method: POST\n    limits: [{name: l, rate: 1, per: 1h}]\n",
		"rules:\n  - name: a\n    path: /repos/{owner}/{rest...}\n    limits:\n      - {name: l, rate: 1, per: 1h, key: \"hash:path:rest\"}\n",
		"presets: [slack]\n",
	} {
		_, err := policyfile.Load("p.yaml", []byte(doc))
		assert.NoError(t, err, doc)
	}
}
