package redisstore_test

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a bytes.Buffer safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// New warns, naming the option, about a client whose timeouts are below
// MinClientTimeout, and says nothing about one with go-redis's defaults.
// Not parallel: it replaces slog's default logger.
func TestNewWarnsShortTimeouts(t *testing.T) {
	var buf lockedBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })

	for _, c := range []struct {
		name   string
		opts   func(*redis.Options)
		option string // named in the warning; "" for none
	}{
		{"defaults", func(*redis.Options) {}, ""},
		{"short read timeout", func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond }, "ReadTimeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := len(buf.String())
			_, err := redisstore.New(newClient(t, srv.Addr(), c.opts))
			require.NoError(t, err, "a warning, not an error")
			got := buf.String()[before:]
			if c.option == "" {
				assert.NotContains(t, got, "MinClientTimeout")
				return
			}
			assert.Contains(t, got, "level=WARN")
			assert.Contains(t, got, "MinClientTimeout")
			assert.Contains(t, got, c.option)
		})
	}
}
