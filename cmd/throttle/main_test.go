package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/policyfile"
	"github.com/quotakit/throttle/redisstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const policy = `rules:
  - name: notify
    wait: fail-fast
    limits:
      - {name: global, rate: 10, per: 30m, algorithm: sliding-log}
      - {name: category, rate: 3, per: 30m, algorithm: sliding-log, key: "context:category"}
`

func TestStateAfterTraffic(t *testing.T) {
	srv := redistest.Start(t)
	env := func(k string) string {
		if k == "REDIS_URL" {
			return "redis://" + srv.Addr()
		}
		return ""
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(policy), 0o600))

	// Traffic through a transport on the same Redis: 3 "errors", 1
	// "info", the last "errors" answered 429 with Retry-After: 120, which
	// pauses the rule.
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer vendor.Close()
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	store, err := redisstore.New(client)
	require.NoError(t, err)
	p, err := policyfile.LoadFile(path)
	require.NoError(t, err)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr, err := throttle.NewTransport(base, p, throttle.WithStore(store))
	require.NoError(t, err)
	send := func(category, path string) {
		ctx := throttle.WithKey(context.Background(), "category", category)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, vendor.URL+path, nil)
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	send("errors", "/")
	send("errors", "/")
	send("info", "/")
	send("errors", "/slow")

	var out bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"-policy", path, "state"}, env, &out))
	got := out.String()
	t.Log("\n" + got)
	lines := strings.Split(got, "\n")
	require.GreaterOrEqual(t, len(lines), 6)
	assert.Equal(t, "scope notify", lines[0])
	assert.Regexp(t, `^\s+\(pause\)\s+-\s+2m\d+s$|^\s+\(pause\)\s+-\s+1m5\ds$`, lines[2])
	assert.Regexp(t, `^\s+category\s+errors\s+3\s+0\s+(30m0s|29m5\ds)$`, lines[3])
	assert.Regexp(t, `^\s+category\s+info\s+1\s+2\s+(30m0s|29m5\ds)$`, lines[4])
	assert.Regexp(t, `^\s+global\s+-\s+4\s+6\s+(30m0s|29m5\ds)$`, lines[5])

	out.Reset()
	require.NoError(t, run(context.Background(), []string{"-policy", path, "reset", "-rule", "notify", "-limit", "category", "-key", "errors"}, env, &out))
	require.NoError(t, run(context.Background(), []string{"-policy", path, "clear-pause", "-rule", "notify"}, env, &out))
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"-policy", path, "state"}, env, &out))
	got = out.String()
	assert.NotContains(t, got, "(pause)")
	assert.NotContains(t, got, "errors")
	assert.Contains(t, got, "global")
}

func TestUsageErrors(t *testing.T) {
	env := func(string) string { return "" }
	var out bytes.Buffer
	err := run(context.Background(), nil, env, &out)
	assert.ErrorContains(t, err, "usage")
	err = run(context.Background(), []string{"-policy", "missing.yaml", "state"}, env, &out)
	assert.ErrorIs(t, err, os.ErrNotExist)

	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(policy), 0o600))
	err = run(context.Background(), []string{"-policy", path, "frobnicate"}, env, &out)
	assert.ErrorContains(t, err, "unknown command")
	err = run(context.Background(), []string{"-policy", path, "reset", "-rule", "nope", "-limit", "global"}, env, &out)
	assert.ErrorContains(t, err, `no rule "nope"`)
	err = run(context.Background(), []string{"-policy", path, "reset", "-rule", "notify", "-limit", "nope"}, env, &out)
	assert.ErrorContains(t, err, `no limit "nope"`)
}

// -h lists the commands and every flag and succeeds; a wrong flag or
// command is a usage error, which exits 2.
func TestHelpAndUsage(t *testing.T) {
	env := func(string) string { return "" }
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(policy), 0o600))

	for _, args := range [][]string{{"-h"}, {"-help"}, {"--help"}, {"help"}, {"-policy", path, "-h"}, {"-policy", path, "reset", "-h"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), args, env, &out)
			require.NoError(t, err)
			assert.Equal(t, 0, exitCode(err))
			help := out.String()
			for _, want := range []string{"usage:", "state", "reset", "clear-pause", "-policy", "-prefix", "-rule", "-limit", "-key", "REDIS_URL"} {
				assert.Contains(t, help, want)
			}
			assert.NotContains(t, help, "help requested")
		})
	}

	cases := []struct {
		name  string
		args  []string
		inErr string
	}{
		{"no arguments", nil, "usage:"},
		{"no command", []string{"-policy", path}, "no command"},
		{"no policy", []string{"state"}, "-policy"},
		{"unknown flag", []string{"-policy", path, "-verbose", "state"}, "-verbose"},
		{"unknown command", []string{"-policy", path, "frobnicate"}, `unknown command "frobnicate"`},
		{"unknown command flag", []string{"-policy", path, "state", "-rule", "notify"}, "-rule"},
		{"missing rule", []string{"-policy", path, "reset", "-limit", "global"}, "reset needs -rule"},
		{"missing limit", []string{"-policy", path, "reset", "-rule", "notify"}, "reset needs -limit"},
		{"extra argument", []string{"-policy", path, "state", "now"}, `unexpected argument "now"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), c.args, env, &out)
			require.Error(t, err)
			assert.ErrorContains(t, err, c.inErr)
			assert.ErrorContains(t, err, "usage:")
			assert.Equal(t, 2, exitCode(err))
			assert.Empty(t, out.String())
		})
	}

	err := run(context.Background(), []string{"-policy", "missing.yaml", "state"}, env, io.Discard)
	assert.Equal(t, 1, exitCode(err), "not a usage error")
}
