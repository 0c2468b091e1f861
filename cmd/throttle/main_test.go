package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
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

// A Redis that cannot be reached: the error names the address REDIS_URL
// gave (never its password) and the cause.
func TestUnreachableRedisNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(policy), 0o600))
	env := func(k string) string {
		if k == "REDIS_URL" {
			return "redis://:sekret@" + addr + "/0?max_retries=-1"
		}
		return ""
	}
	for _, cmd := range []string{"check", "state"} {
		err := run(context.Background(), []string{"-policy", path, cmd}, env, io.Discard)
		require.Error(t, err, cmd)
		assert.ErrorContains(t, err, "store at "+addr+": redisstore: ", cmd)
		assert.ErrorContains(t, err, "connection refused", cmd)
		assert.NotContains(t, err.Error(), "sekret", cmd)
	}
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

// envFor returns a getenv whose REDIS_URL is url.
func envFor(url string) func(string) string {
	return func(k string) string {
		if k == "REDIS_URL" {
			return url
		}
		return ""
	}
}

// Flags may follow the command; reset and clear-pause that find nothing
// fail (exit 1) and say what they looked for; -json prints JSON; check
// loads the file and checks the Redis.
func TestCommandsOnRedis(t *testing.T) {
	srv := redistest.Start(t)
	env := envFor("redis://" + srv.Addr())
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(policy), 0o600))
	ctx := context.Background()

	// One charge, through a limiter on the same Redis.
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	store, err := redisstore.New(client)
	require.NoError(t, err)
	p, err := policyfile.LoadFile(path)
	require.NoError(t, err)
	lim, err := throttle.NewLimiter(p, throttle.WithStore(store))
	require.NoError(t, err)
	permit, err := lim.Allow(throttle.WithKey(ctx, "category", "errors"), "notify")
	require.NoError(t, err)
	permit.Done()

	var out bytes.Buffer
	t.Run("flags after the command", func(t *testing.T) {
		out.Reset()
		require.NoError(t, run(ctx, []string{"state", "-policy", path}, env, &out))
		assert.Contains(t, out.String(), "scope notify")
		out.Reset()
		require.NoError(t, run(ctx, []string{"-prefix", redisstore.DefaultPrefix, "reset", "-rule", "notify", "-policy", path, "-limit", "global"}, env, &out))
		assert.Equal(t, "reset notify/global key \"\"\n", out.String())
	})

	t.Run("json", func(t *testing.T) {
		out.Reset()
		require.NoError(t, run(ctx, []string{"state", "-json", "-policy", path}, env, &out))
		var got struct {
			States []struct {
				Scope, Limit, Key string
				Used, Remaining   int64
				Pause             bool
			}
		}
		require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
		require.Len(t, got.States, 1, out.String()) // global was reset above
		assert.Equal(t, "notify", got.States[0].Scope)
		assert.Equal(t, "category", got.States[0].Limit)
		assert.Equal(t, "errors", got.States[0].Key)
		assert.Equal(t, int64(1), got.States[0].Used)
		assert.Equal(t, int64(2), got.States[0].Remaining)

		out.Reset()
		require.NoError(t, run(ctx, []string{"-json", "-policy", path, "check"}, env, &out))
		assert.JSONEq(t, `{"policy": "`+path+`", "rules": 1, "redis": "ok"}`, out.String())
	})

	t.Run("nothing matched", func(t *testing.T) {
		for _, tc := range []struct {
			args  []string
			inErr string
		}{
			{[]string{"reset", "-rule", "notify", "-limit", "category", "-key", "warnings"}, `limit category of rule notify has nothing charged to key "warnings" under prefix "throttle:"`},
			{[]string{"reset", "-rule", "notify", "-limit", "category", "-key", "errors", "-prefix", "other:"}, `under prefix "other:"`},
			{[]string{"clear-pause", "-rule", "notify"}, `rule notify has no pause with key ""`},
		} {
			out.Reset()
			err := run(ctx, append([]string{"-policy", path}, tc.args...), env, &out)
			require.Error(t, err, tc.args)
			assert.ErrorIs(t, err, errNothing)
			assert.ErrorContains(t, err, tc.inErr)
			assert.Equal(t, 1, exitCode(err))
			assert.Empty(t, out.String(), "no success printed")
		}
		// The counter is still there: nothing was reset by the wrong key.
		out.Reset()
		require.NoError(t, run(ctx, []string{"-policy", path, "reset", "-rule", "notify", "-limit", "category", "-key", "errors"}, env, &out))
	})

	t.Run("check", func(t *testing.T) {
		out.Reset()
		require.NoError(t, run(ctx, []string{"check", "-policy", path}, env, &out))
		assert.Equal(t, path+": 1 rules, valid; Redis ok, and the store can decide every rule\n", out.String())

		out.Reset()
		require.NoError(t, run(ctx, []string{"check", "-offline", "-policy", path}, envFor("redis://127.0.0.1:1"), &out))
		assert.Contains(t, out.String(), "Redis not checked (-offline)")

		err := run(ctx, []string{"check", "-policy", path}, envFor("redis://nobody:x@"+srv.Addr()), &out)
		assert.ErrorIs(t, err, throttle.ErrStoreConfig, "a user the server does not have")

		bad := filepath.Join(t.TempDir(), "bad.yaml")
		require.NoError(t, os.WriteFile(bad, []byte("rules:\n  - name: a\n    method: post\n"), 0o600))
		err = run(ctx, []string{"check", "-offline", "-policy", bad}, env, &out)
		assert.ErrorContains(t, err, "bad.yaml:3")
		assert.Equal(t, 1, exitCode(err))
	})
}

// -cluster and -sentinel read REDIS_URL as go-redis's Cluster and
// failover URLs, on a real local Cluster and Sentinel set.
func TestClusterAndSentinel(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster and a Sentinel set")
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(policy), 0o600))
	ctx := context.Background()

	cl := redistest.StartCluster(t, 3, 0)
	addrs := cl.Addrs()
	url := "redis://" + addrs[0] + "?addr=" + strings.Join(addrs[1:], "&addr=")
	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"-cluster", "-policy", path, "check"}, envFor(url), &out))
	assert.Contains(t, out.String(), "Redis ok")
	err := run(ctx, []string{"-policy", path, "check"}, envFor("redis://"+addrs[0]), &out)
	assert.ErrorIs(t, err, throttle.ErrStoreConfig, "a plain client on a Cluster node")

	sn := redistest.StartSentinel(t)
	sa := sn.SentinelAddrs()
	url = "redis://" + sa[0] + "?addr=" + strings.Join(sa[1:], "&addr=")
	out.Reset()
	require.NoError(t, run(ctx, []string{"state", "-sentinel", sn.MasterName(), "-policy", path}, envFor(url), &out))
	assert.Contains(t, out.String(), "scope notify")

	err = run(ctx, []string{"-cluster", "-sentinel", "m", "-policy", path, "state"}, envFor(url), &out)
	assert.Equal(t, 2, exitCode(err))
}
