package faultproxy_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
)

// setup starts a Redis, a proxy in front of it, a client through the proxy
// and a direct client to check the server's state.
func setup(t *testing.T, opts *redis.Options) (*redistest.Server, *faultproxy.Proxy, *redis.Client, *redis.Client) {
	t.Helper()
	srv := redistest.Start(t)
	p := faultproxy.New(t, srv.Addr())
	if opts == nil {
		opts = &redis.Options{MaxRetries: -1}
	}
	opts.Addr = p.Addr()
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = direct.Close() })
	// Warm up: the connection handshake (HELLO, CLIENT SETINFO) is done.
	require.NoError(t, c.Ping(context.Background()).Err())
	return srv, p, c, direct
}

// rawPing sends PING on a plain connection and reads the reply line.
func rawPing(c net.Conn, r *bufio.Reader) (string, error) {
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestForwards(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, p, c, direct := setup(t, nil)
	assert.Equal(t, p.Target(), direct.Options().Addr)

	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	assert.Equal(t, "v", direct.Get(ctx, "k").Val())
	assert.Equal(t, "v", c.Get(ctx, "k").Val())

	st := p.Stats()
	assert.Equal(t, 1, st.Accepted)
	assert.Equal(t, 1, st.Active)
	assert.Positive(t, st.BytesToServer)
	assert.Positive(t, st.BytesToClient)
	assert.Zero(t, st.Dropped)
	assert.Zero(t, st.Refused)
}

func TestDropNextReply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, p, c, direct := setup(t, nil)

	p.DropNextReply()
	err := c.Set(ctx, "k", "v", 0).Err()
	assert.Error(t, err, "the reply was lost")
	assert.Equal(t, "v", direct.Get(ctx, "k").Val(), "but the command ran")
	assert.Equal(t, 1, p.Stats().Dropped)

	// Only one reply is dropped; the client reconnects.
	assert.NoError(t, c.Set(ctx, "k", "w", 0).Err())
	assert.Equal(t, "w", c.Get(ctx, "k").Val())
	assert.GreaterOrEqual(t, p.Stats().Accepted, 2, "the proxy accepted and reset a new connection")
	assert.Equal(t, 1, p.Stats().Dropped)
}

func TestDropReplyToRetriedScriptRunsTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// go-redis retries by default: a lost reply makes it run the script
	// again on a new connection.
	_, p, c, direct := setup(t, &redis.Options{})
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	require.NoError(t, incr.Load(ctx, c).Err())

	p.DropReplyTo("evalsha")
	require.NoError(t, c.Ping(ctx).Err(), "other commands pass")
	n, err := incr.Run(ctx, c, []string{"n"}).Int()
	require.NoError(t, err)
	assert.Equal(t, 2, n, "the script ran twice")
	assert.Equal(t, "2", direct.Get(ctx, "n").Val())
	assert.Equal(t, 1, p.Stats().Dropped)
}

func TestResetAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, p, _, _ := setup(t, nil)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	r := bufio.NewReader(raw)
	pong, err := rawPing(raw, r)
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", pong)
	require.Equal(t, 2, p.Stats().Active)

	p.ResetAll()
	_, err = rawPing(raw, r)
	assert.Error(t, err, "the open connection was reset")

	// New connections work: the fresh client's one connection is accepted
	// (counted from here: the setup's client may have dialed another one
	// meanwhile, which a clean-clone CI run once counted as a fourth).
	before := p.Stats().Accepted
	require.GreaterOrEqual(t, before, 2)
	fresh := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer fresh.Close()
	assert.NoError(t, fresh.Ping(ctx).Err())
	assert.Equal(t, before+1, p.Stats().Accepted)
}

func TestRefuse(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, p, _, _ := setup(t, nil)
	p.SetRefuse(true)
	fresh := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer fresh.Close()
	assert.Error(t, fresh.Ping(ctx).Err())
	refused := p.Stats().Refused
	assert.Positive(t, refused, "go-redis may redial; each attempt is refused")

	p.SetRefuse(false)
	assert.NoError(t, fresh.Ping(ctx).Err())
	assert.Equal(t, refused, p.Stats().Refused)
}

func TestBlackhole(t *testing.T) {
	t.Parallel()
	_, p, _, _ := setup(t, nil)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	r := bufio.NewReader(raw)
	pong, err := rawPing(raw, r)
	require.NoError(t, err)
	require.Equal(t, "+PONG\r\n", pong)

	p.SetBlackhole(true)
	p.SetBlackhole(true) // idempotent
	before := p.Stats().BytesToServer
	require.NoError(t, raw.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err = rawPing(raw, r)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded, "no reply while blackholed")
	assert.Equal(t, before, p.Stats().BytesToServer, "the command was held back")

	p.SetBlackhole(false)
	require.NoError(t, raw.SetReadDeadline(time.Time{}))
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "+PONG\r\n", line, "held traffic flows after restore")
}

func TestLatency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, p, c, _ := setup(t, nil)
	const d = 30 * time.Millisecond
	for _, dir := range []faultproxy.Direction{faultproxy.ToServer, faultproxy.ToClient} {
		p.SetLatency(dir, d)
		start := time.Now()
		require.NoError(t, c.Ping(ctx).Err())
		// A lower bound only: the delay is a timer of at least d.
		assert.GreaterOrEqual(t, time.Since(start), d, "direction %d", dir)
		p.SetLatency(dir, 0)
	}
}

func TestJitter(t *testing.T) {
	t.Parallel()
	_, p, _, _ := setup(t, nil)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	r := bufio.NewReader(raw)
	const d = 20 * time.Millisecond
	p.SetJitter(faultproxy.ToClient, 1, d, d)
	for range 3 {
		start := time.Now()
		pong, err := rawPing(raw, r)
		require.NoError(t, err)
		require.Equal(t, "+PONG\r\n", pong)
		// A lower bound only: the delay is a timer of at least d.
		assert.GreaterOrEqual(t, time.Since(start), d)
	}
	assert.Equal(t, 3, p.Stats().Jittered, "every reply was delayed")

	p.SetJitter(faultproxy.ToClient, 0, 0, 0)
	_, err = rawPing(raw, r)
	require.NoError(t, err)
	assert.Equal(t, 3, p.Stats().Jittered, "none after it is removed")
	assert.Panics(t, func() { p.SetJitter(faultproxy.ToServer, 0.5, d, d-1) })
}

func TestTargetDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, p, c, _ := setup(t, nil)
	require.NoError(t, srv.Kill())
	assert.Error(t, c.Ping(ctx).Err())
	assert.Error(t, c.Ping(ctx).Err(), "a new connection to the proxy is reset")
	assert.GreaterOrEqual(t, p.Stats().Accepted, 2, "the proxy accepted and reset a new connection")
	require.NoError(t, srv.Restart())
	assert.NoError(t, c.Ping(ctx).Err(), "the client gets through again")
}

func TestCloseWithTraffic(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	p := faultproxy.New(t, srv.Addr())
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	require.NoError(t, c.Ping(ctx).Err())
	p.SetBlackhole(true)
	p.SetLatency(faultproxy.ToServer, time.Hour)
	raw, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.Write([]byte("*1\r\n$4\r\nPING\r\n"))
	require.NoError(t, err)

	p.Close() // does not wait for the hour, nor for the blackhole
	p.Close()
	assert.Zero(t, p.Stats().Active)
	assert.Error(t, c.Ping(ctx).Err())
}
