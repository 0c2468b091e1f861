package redisstore_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A ClusterClient whose node does not answer is asked to reload its state
// after the connection error, at most once per interval.
func TestClusterReloadOnConnectionError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := l.Addr().String()
	require.NoError(t, l.Close())

	for _, tc := range []struct {
		name  string
		every time.Duration
		want  int64
	}{
		{"default interval", 0, 1},
		{"off", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{dead}, DialTimeout: 100 * time.Millisecond, DialerRetries: 1, MaxRedirects: -1})
			t.Cleanup(func() { _ = cc.Close() })
			s, err := redisstore.New(cc, redisstore.WithClusterReload(tc.every))
			require.NoError(t, err)
			for range 3 {
				_, err := s.Take(context.Background(), gcraDemand("reload", 10))
				require.Error(t, err)
			}
			assert.Equal(t, tc.want, redisstore.ClusterReloads(s))
		})
	}
}
