package redistest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/internal/redistest"
)

func TestStartMain(t *testing.T) {
	t.Parallel()
	s, stop := redistest.StartMain(redistest.Args("--maxmemory", "1mb"))
	got, err := s.Do("CONFIG", "GET", "maxmemory")
	require.NoError(t, err)
	assert.Equal(t, []any{"maxmemory", "1048576"}, got)
	pid := pidOf(t, s)
	dir := s.Dir()

	stop()
	assert.False(t, alive(pid))
	assert.NoDirExists(t, dir)
}

func TestStartClusterMain(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster takes two seconds to form")
	}
	t.Parallel()
	c, stop := redistest.StartClusterMain(1, 0)
	n := c.Nodes()[0]
	got, err := n.Do("CLUSTER", "INFO")
	require.NoError(t, err)
	assert.Contains(t, got, "cluster_state:ok")
	pid := pidOf(t, n.Server)

	stop()
	assert.False(t, alive(pid))
}

// Not parallel: it changes the environment.
func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, tt := range []struct {
		name, skipEnv      string
		wantFail, wantSkip bool
	}{
		{"fails", "", true, false},
		{"skips", "1", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("THROTTLE_SKIP_REDIS", tt.skipEnv)
			ft := &fakeTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				redistest.Start(ft)
			}()
			<-done
			assert.Equal(t, tt.wantFail, ft.failed)
			assert.Equal(t, tt.wantSkip, ft.skipped)
			assert.Contains(t, ft.msg, "redis-server not found: apt-get install -y redis-server")
		})
	}
}

func BenchmarkStart(b *testing.B) {
	for b.Loop() {
		s := redistest.Start(b)
		if err := s.Stop(); err != nil {
			b.Fatal(err)
		}
	}
}
