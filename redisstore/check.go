package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// checkTimeout bounds [Store.Check] when its context has no deadline.
const checkTimeout = 10 * time.Second

// checkScope is the scope of the pause key Check writes. No rule can have
// it: a rule's scope uses only letters, digits and ._-.
const checkScope = "redisstore:check"

// Check contacts Redis, reports whether the store can work with it, and
// warms the client up, so that a misconfiguration shows at start-up and
// the first decisions do not pay for dialing and script loading. Call it
// once after [New], before serving; [New] itself does not contact Redis.
//
// An error that a configuration mistake causes matches
// [quota.ErrStoreConfig] and names the cause: a wrong or missing
// password (NOAUTH, WRONGPASS), an ACL user without a command or key the
// store needs (NOPERM), a command that is disabled or renamed (EVALSHA,
// EVAL), a read-only replica (READONLY, on a client with a fixed
// address; on a Sentinel client it is a failover), a *redis.ClusterClient on a
// server without Cluster support, or any other client on a Cluster node.
// Any other error is an outage (Redis unreachable, too slow); when a
// connection was refused or could not be made, the error says so (a
// go-redis client that retries its dials would otherwise report only the
// deadline). Calls the store makes later classify their errors the same
// way.
//
// To check, Check reads INFO cluster (skipped if the ACL user may not),
// runs the store's pause script with EVAL and with EVALSHA on a key of
// its own (a pause of 1µs on a scope no rule can have: it changes no
// decision), and PINGs every master. To warm up, it loads every script
// of the store on every master (SCRIPT LOAD; skipped if SCRIPT is
// disabled or not permitted, since the store falls back to EVAL) and
// opens connections: on each master at least as many as the client's
// MinIdleConns and [BatchInFlight], within PoolSize, MaxIdleConns and
// MaxActiveConns.
//
// A client whose ReadTimeout or WriteTimeout is shorter than
// [MinClientTimeout] is a configuration error too, naming the option: a
// reply slower than it fails, and a [throttle.Transport] then treats
// Redis as down (its rules' failure modes) while Redis is merely slow,
// and gives back grants whose replies it never read.
//
// Check is bounded by ctx and, if ctx has no deadline, by 10 seconds. It
// changes nothing a decision reads, so it may be called again at any
// time, and concurrently.
func (s *Store) Check(ctx context.Context) error {
	return s.runCheck(ctx, s.check)
}

// runCheck runs check, Check's steps, as Check describes: bounded, and
// with the cause of a failure found.
func (s *Store) runCheck(ctx context.Context, check func(context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, checkTimeout)
		defer cancel()
	}
	// A quarter of the time is kept to find out why Redis did not answer.
	dl, _ := ctx.Deadline()
	stepCtx, cancel := context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*3/4))
	defer cancel()
	err := check(stepCtx)
	if err == nil {
		return nil
	}
	if err = s.configErr(err); errors.Is(err, quota.ErrStoreConfig) {
		return fmt.Errorf("redisstore: check: %w", err)
	}
	if derr := s.dialError(ctx, err); derr != nil {
		return fmt.Errorf("redisstore: check: cannot connect to Redis: %w (the check gave up with: %w)", derr, err)
	}
	return fmt.Errorf("redisstore: check: %w", err)
}

// check runs Check's steps within ctx.
func (s *Store) check(ctx context.Context) error {
	if err := s.checkTimeouts(); err != nil {
		return err
	}
	if err := s.checkKind(ctx); err != nil {
		return err
	}
	if err := s.loadScripts(ctx); err != nil {
		return err
	}
	if err := s.checkWrite(ctx); err != nil {
		return err
	}
	return s.warm(ctx)
}

// MinClientTimeout is the shortest ReadTimeout and WriteTimeout of a
// go-redis client that [Store.Check] accepts: the least call budget of a
// throttle.Transport (throttle.Breaker's CallTimeout, 2 s by default).
// go-redis's defaults (3 s; -1 and -2 for none) pass.
const MinClientTimeout = 2 * time.Second

// checkTimeouts reports a go-redis client whose socket timeouts are
// shorter than MinClientTimeout.
func (s *Store) checkTimeouts() error {
	var read, write time.Duration
	switch c := s.client.(type) {
	case *redis.Client:
		read, write = c.Options().ReadTimeout, c.Options().WriteTimeout
	case *redis.ClusterClient:
		read, write = c.Options().ReadTimeout, c.Options().WriteTimeout
	default:
		return nil
	}
	for _, o := range []struct {
		name string
		d    time.Duration
	}{{"ReadTimeout", read}, {"WriteTimeout", write}} {
		if o.d > 0 && o.d < MinClientTimeout {
			return fmt.Errorf("%w: the client's %s (%v) is shorter than %v, the least call budget of a throttle.Transport: "+
				"a slow reply would fail as if Redis were down; keep go-redis's default or set it to %v or more",
				quota.ErrStoreConfig, o.name, o.d, MinClientTimeout, MinClientTimeout)
		}
	}
	return nil
}

// checkKind reports a client whose kind does not match the server's: a
// ClusterClient whose masters cannot be listed (cluster support disabled),
// or a client of another kind on a Cluster node.
func (s *Store) checkKind(ctx context.Context) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			if err := m.Ping(ctx).Err(); err != nil && !redis.IsPermissionError(err) {
				return fmt.Errorf("PING %s: %w", m.Options().Addr, err)
			}
			return nil
		})
	case *redis.Ring:
		return c.ForEachShard(ctx, notCluster)
	case *redis.Client:
		return notCluster(ctx, c)
	}
	return s.client.Ping(ctx).Err()
}

// notCluster reports an error if c's server is a Cluster node (INFO
// cluster says cluster_enabled:1). An ACL user that may not run INFO
// passes.
func notCluster(ctx context.Context, c *redis.Client) error {
	info, err := c.Info(ctx, "cluster").Result()
	switch {
	case redis.IsPermissionError(err):
		return nil
	case err != nil:
		return fmt.Errorf("INFO cluster: %w", err)
	case strings.Contains(info, "cluster_enabled:1"):
		return &configError{
			cause: "non-Cluster client on a Redis Cluster node: use redis.NewClusterClient",
			err:   fmt.Errorf("%s: INFO cluster: cluster_enabled:1", c.Options().Addr),
		}
	}
	return nil
}

// loadScripts loads every script of the store on every master, in one
// round trip per master.
func (s *Store) loadScripts(ctx context.Context) error {
	load := func(ctx context.Context, c *redis.Client) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, script := range storeScripts {
				p.ScriptLoad(ctx, script.src)
			}
			return nil
		})
		if err != nil && (redis.IsPermissionError(err) || redis.HasErrorPrefix(err, "unknown command")) {
			return nil // SCRIPT is not ours to run: EVALSHA falls back to EVAL
		}
		if err != nil {
			return fmt.Errorf("SCRIPT LOAD on %s: %w", c.Options().Addr, err)
		}
		return nil
	}
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, load)
	case *redis.Ring:
		return c.ForEachShard(ctx, load)
	case *redis.Client:
		return load(ctx, c)
	}
	for _, script := range storeScripts {
		if err := s.client.ScriptLoad(ctx, script.src).Err(); err != nil {
			if redis.IsPermissionError(err) || redis.HasErrorPrefix(err, "unknown command") {
				return nil
			}
			return fmt.Errorf("SCRIPT LOAD: %w", err)
		}
	}
	return nil
}

// checkWrite writes a pause of 1µs in checkScope, as Store.Pause does:
// with EVAL and with EVALSHA (pause.lua), which need those commands, the
// commands of the script, write access to a key under the prefix and a
// master. The pause is not marked for
// ReplayDetect, so a READONLY reply that go-redis retried stays READONLY.
func (s *Store) checkWrite(ctx context.Context) error {
	ks := newKeys(s.prefix, checkScope)
	keys := []string{ks.pause("")}
	if err := pauseScript.Eval(ctx, s.client, keys, "", "", 1).Err(); err != nil {
		return fmt.Errorf("EVAL: %w", err)
	}
	if err := pauseScript.EvalSha(ctx, s.client, keys, "", "", 1).Err(); err != nil {
		return fmt.Errorf("EVALSHA: %w", err)
	}
	return nil
}

// warm opens connections on every master; see Check.
func (s *Store) warm(ctx context.Context) error {
	switch c := s.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, warmClient)
	case *redis.Ring:
		return c.ForEachShard(ctx, warmClient)
	case *redis.Client:
		return warmClient(ctx, c)
	}
	return nil
}

// warmClient opens connections of c's pool and leaves them idle in it: it
// holds n at once (each PINGs), then gives them back.
func warmClient(ctx context.Context, c *redis.Client) error {
	o := c.Options()
	n := min(max(o.MinIdleConns, BatchInFlight), o.PoolSize)
	if o.MaxIdleConns > 0 {
		n = min(n, o.MaxIdleConns)
	}
	if o.MaxActiveConns > 0 {
		n = min(n, o.MaxActiveConns)
	}
	conns := make([]*redis.Conn, max(n, 1))
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i := range conns {
		conns[i] = c.Conn()
		wg.Go(func() { errs[i] = conns[i].Ping(ctx).Err() })
	}
	wg.Wait()
	for _, cn := range conns {
		_ = cn.Close()
	}
	for _, err := range errs {
		if err != nil && !redis.IsPermissionError(err) {
			return fmt.Errorf("connect to %s: %w", o.Addr, err)
		}
	}
	return nil
}

// dialError dials the client's addresses when err, from a check that did
// not reach Redis, does not say why (go-redis retries a failed dial, and
// a deadline ends the retries with the context's error), and returns the
// first failure: e.g. "dial tcp 127.0.0.1:6379: connect: connection
// refused". It returns nil when err is a reply of Redis, already holds a
// dial error, or every address answers, and when ctx has ended.
func (s *Store) dialError(ctx context.Context, err error) error {
	var rerr redis.Error
	var op *net.OpError
	if ctx.Err() != nil || errors.As(err, &rerr) || (errors.As(err, &op) && op.Op == "dial") {
		return nil
	}
	type dialer = func(ctx context.Context, network, addr string) (net.Conn, error)
	orNet := func(d dialer) dialer {
		if d != nil {
			return d
		}
		return (&net.Dialer{}).DialContext
	}
	var dial dialer
	var network string
	var addrs []string
	switch c := s.client.(type) {
	case *redis.Client:
		o := c.Options()
		dial, network, addrs = orNet(o.Dialer), o.Network, []string{o.Addr}
	case *redis.ClusterClient:
		o := c.Options()
		dial, network, addrs = orNet(o.Dialer), "tcp", o.Addrs
	case *redis.Ring:
		o := c.Options()
		dial, network = orNet(o.Dialer), "tcp"
		for _, a := range o.Addrs {
			addrs = append(addrs, a)
		}
	}
	for _, a := range addrs {
		conn, err := dial(ctx, network, a)
		if err != nil {
			return err
		}
		_ = conn.Close()
	}
	return nil
}
