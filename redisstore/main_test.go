package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// srv is the redis-server shared by every test of the package; each test
// uses its own key prefix.
var srv *redistest.Server

func TestMain(m *testing.M) {
	var stop func()
	srv, stop = redistest.StartMain()
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

// newClient returns a client of addr, closed when t ends.
func newClient(t testing.TB, addr string, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// newStore returns a store on its own client of the shared server.
func newStore(t testing.TB, prefix string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	return newStoreOn(t, newClient(t, srv.Addr()), prefix, opts...)
}

// newStoreOn returns a store on c. Its per-call timeout is long, so that a
// loaded test machine (-race, parallel packages) does not make calls fail;
// opts may set another.
func newStoreOn(t testing.TB, c redis.UniversalClient, prefix string, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, append([]redisstore.Option{redisstore.WithPrefix(prefix), redisstore.WithTimeout(20 * time.Second)}, opts...)...)
	require.NoError(t, err)
	return s
}

// differential returns the two sides of a differential test: a client
// that never retries and two stores on it, on prefixes named a and b
// (returned, to read their keys), whose scripts take the instant from
// clock; the second store also gets bOpts.
func differential(t testing.TB, clock *storetest.Clock, a, b string, bOpts ...redisstore.Option) (c *redis.Client, sa, sb *redisstore.Store, pa, pb string) {
	t.Helper()
	c = newClient(t, srv.Addr(), func(o *redis.Options) { o.MaxRetries = -1 })
	opts := []redisstore.Option{redisstore.WithNow(clock.Now), redisstore.WithReplay(redisstore.ReplayNoRetries)}
	pa, pb = redistest.Prefix(t)+a, redistest.Prefix(t)+b
	return c, newStoreOn(t, c, pa, opts...), newStoreOn(t, c, pb, append(opts, bOpts...)...), pa, pb
}

// ctx returns a context for one test, with a generous deadline.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}
