package grpcthrottle_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/grpcthrottle"
	"github.com/quotakit/throttle/grpcthrottle/internal/quotaserver"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
)

// rdb is the Redis every test shares, each under its own key prefix.
var rdb *redistest.Server

func TestMain(m *testing.M) {
	var stop func()
	rdb, stop = redistest.StartMain()
	code := m.Run()
	stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// newStore returns a store on the shared Redis under a key prefix of the
// test's own, with its own client, as one instance of a fleet has.
func newStore(t testing.TB, prefix string) *redisstore.Store {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: rdb.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	require.NoError(t, err)
	return s
}

// startServer starts a quota-enforcing server, stopped in t.Cleanup.
func startServer(t testing.TB, q quotaserver.Quota) *quotaserver.Server {
	t.Helper()
	srv, err := quotaserver.Start(q, nil)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	return srv
}

// dial returns a health client on its own connection to addr, throttled
// by lim; the connection is closed in t.Cleanup.
func dial(t testing.TB, addr string, lim *throttle.Limiter, opts ...grpcthrottle.Option) grpc_health_v1.HealthClient {
	t.Helper()
	return grpc_health_v1.NewHealthClient(dialConn(t, addr, lim, opts...))
}

// dialConn returns a connection to addr throttled by lim, closed in
// t.Cleanup.
func dialConn(t testing.TB, addr string, lim *throttle.Limiter, opts ...grpcthrottle.Option) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcthrottle.UnaryClientInterceptor(lim, opts...)),
		grpc.WithStreamInterceptor(grpcthrottle.StreamClientInterceptor(lim, opts...)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
