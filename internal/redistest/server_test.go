package redistest_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/internal/redistest"
)

func newClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// pidOf returns the server's process id, as the server reports it.
func pidOf(t *testing.T, s *redistest.Server) string {
	t.Helper()
	v, err := s.Do("INFO", "server")
	require.NoError(t, err)
	for line := range strings.SplitSeq(v.(string), "\r\n") {
		if pid, ok := strings.CutPrefix(line, "process_id:"); ok {
			return pid
		}
	}
	t.Fatal("no process_id in INFO")
	return ""
}

// alive reports whether a process exists (and is not yet reaped).
func alive(pid string) bool {
	return exec.Command("kill", "-0", pid).Run() == nil
}

func TestStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t)
	assert.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"), s.Addr())
	assert.True(t, s.Running())

	c := newClient(t, s.Addr())
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, "v", c.Get(ctx, "k").Val())

	cfg, err := c.ConfigGet(ctx, "*").Result()
	require.NoError(t, err)
	assert.Equal(t, "", cfg["save"], "no RDB snapshots")
	assert.Equal(t, "no", cfg["appendonly"])
	assert.Equal(t, s.Dir(), cfg["dir"])
}

func TestStartArgs(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t, redistest.Args("--maxmemory", "10mb"), redistest.Args("--maxmemory-policy", "allkeys-lru"))
	cfg, err := newClient(t, s.Addr()).ConfigGet(context.Background(), "maxmemory*").Result()
	require.NoError(t, err)
	assert.Equal(t, "10485760", cfg["maxmemory"])
	assert.Equal(t, "allkeys-lru", cfg["maxmemory-policy"])
}

func TestStartBadArgsFails(t *testing.T) {
	t.Parallel()
	// A fake TB records the failure that Start reports for a server that
	// cannot start.
	ft := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redistest.Start(ft, redistest.Args("--no-such-option", "1"))
	}()
	<-done
	assert.True(t, ft.failed)
	assert.Contains(t, ft.msg, "no-such-option")
}

func TestStartsOnDistinctPorts(t *testing.T) {
	t.Parallel()
	a, b := redistest.Start(t), redistest.Start(t)
	assert.NotEqual(t, a.Addr(), b.Addr())
	assert.NotEqual(t, pidOf(t, a), pidOf(t, b))
}

func TestStop(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	pid := pidOf(t, s)
	require.True(t, alive(pid))

	require.NoError(t, s.Stop())
	assert.False(t, s.Running())
	assert.False(t, alive(pid), "process is gone and reaped")
	_, err := s.Do("PING")
	assert.True(t, errors.Is(err, syscall.ECONNREFUSED), "got %v", err)
	assert.NoError(t, s.Stop(), "second Stop is a no-op")
}

func TestKillAndRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t)
	addr := s.Addr()
	pid := pidOf(t, s)
	c := newClient(t, addr)
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())

	require.NoError(t, s.Kill())
	assert.False(t, s.Running())
	assert.False(t, alive(pid))
	assert.Error(t, c.Ping(ctx).Err(), "a killed server does not answer")
	assert.NoError(t, s.Kill(), "second Kill is a no-op")

	require.NoError(t, s.Restart())
	assert.True(t, s.Running())
	assert.Equal(t, addr, s.Addr(), "same port after restart")
	assert.NotEqual(t, pid, pidOf(t, s))
	assert.NoError(t, c.Ping(ctx).Err(), "the client reconnects to the same address")
	assert.Equal(t, redis.Nil, c.Get(ctx, "k").Err(), "no persistence across a restart")
}

func TestRestartRunning(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	pid := pidOf(t, s)
	require.NoError(t, s.Restart())
	assert.False(t, alive(pid), "the old process was stopped")
	assert.NotEqual(t, pid, pidOf(t, s))
}

func TestCleanupStops(t *testing.T) {
	t.Parallel()
	var pid string
	var addr string
	t.Run("inner", func(t *testing.T) {
		s := redistest.Start(t)
		pid, addr = pidOf(t, s), s.Addr()
	})
	assert.False(t, alive(pid), "t.Cleanup stopped and reaped the server")
	c := newClient(t, addr)
	assert.Error(t, c.Ping(context.Background()).Err())
}

func TestDo(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	tests := []struct {
		name string
		args []string
		want any
		err  string
	}{
		{"simple", []string{"PING"}, "PONG", ""},
		{"bulk", []string{"ECHO", "a\r\nb"}, "a\r\nb", ""},
		{"integer", []string{"INCRBY", "n", "5"}, int64(5), ""},
		{"null", []string{"GET", "missing"}, nil, ""},
		{"array", []string{"MGET", "n", "missing"}, []any{"5", nil}, ""},
		{"error", []string{"NOSUCHCOMMAND"}, nil, "ERR unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Do(tt.args...)
			if tt.err != "" {
				var re redistest.RedisError
				require.ErrorAs(t, err, &re)
				assert.Contains(t, re.Error(), tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestPrefix(t *testing.T) {
	t.Parallel()
	a, b := redistest.Prefix(t), redistest.Prefix(t)
	assert.NotEqual(t, a, b)
	assert.True(t, strings.HasPrefix(a, "TestPrefix#"), a)
	t.Run("odd {name}", func(t *testing.T) {
		p := redistest.Prefix(t)
		assert.NotContains(t, p, "{")
		assert.NotContains(t, p, "}")
	})
}
