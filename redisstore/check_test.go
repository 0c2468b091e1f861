package redisstore_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCheck shows what Check leaves behind on a fresh server: every
// script of the package loaded (each .lua file, so a new script that
// Check does not load fails here) and open connections in the pool.
// Check is idempotent and safe to call concurrently.
func TestCheck(t *testing.T) {
	t.Parallel()
	fresh := redistest.Start(t)
	c := newClient(t, fresh.Addr())
	s := newStoreOn(t, c, redistest.Prefix(t))
	require.Zero(t, c.PoolStats().TotalConns, "no connection before Check")

	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = s.Check(ctx(t)) })
	}
	wg.Wait()
	for i, err := range errs {
		assert.NoError(t, err, "concurrent Check %d", i)
	}
	require.NoError(t, s.Check(ctx(t)), "Check again")

	files, err := filepath.Glob("*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		if isPart(f) {
			continue // a part of scripts, not one of its own
		}
		exists, err := c.ScriptExists(ctx(t), redis.NewScript(scriptSource(t, f)).Hash()).Result()
		require.NoError(t, err)
		assert.Equal(t, []bool{true}, exists, "%s loaded by Check", f)
	}
	st := c.PoolStats()
	assert.GreaterOrEqual(t, st.IdleConns, uint32(redisstore.BatchInFlight), "idle connections after Check: %+v", st)
}

// TestCheckMinIdleConns: Check opens at least MinIdleConns connections.
func TestCheckMinIdleConns(t *testing.T) {
	t.Parallel()
	c := newClient(t, srv.Addr(), func(o *redis.Options) { o.MinIdleConns, o.PoolSize = 12, 16 })
	s := newStoreOn(t, c, redistest.Prefix(t))
	require.NoError(t, s.Check(ctx(t)))
	assert.GreaterOrEqual(t, c.PoolStats().TotalConns, uint32(12))
}

// passwordServer returns a server that requires the password "secret".
// (redistest probes a new server without a password, so it is set
// afterwards; Stop then falls back to SIGTERM.)
func passwordServer(t *testing.T) *redistest.Server {
	t.Helper()
	s := redistest.Start(t)
	_, err := s.Do("CONFIG", "SET", "requirepass", "secret")
	require.NoError(t, err)
	return s
}

// TestCheckMisconfigured starts each misconfiguration on real servers and
// checks that Check names it and that a configuration error matches
// ErrStoreConfig while an outage does not.
func TestCheckMisconfigured(t *testing.T) {
	t.Parallel()
	pw := passwordServer(t)
	acl := redistest.Start(t)
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "noevalsha", "on", ">pw", "~*", "+@all", "-evalsha"},
		{"ACL", "SETUSER", "otherkeys", "on", ">pw", "~other:*", "+@all"},
		{"ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "+@all", "-info", "-script"},
	} {
		_, err := acl.Do(cmd...)
		require.NoError(t, err)
	}
	renamed := redistest.Start(t, redistest.Args("--rename-command", "EVALSHA", ""))
	replica := redistest.Start(t, redistest.Args("--replicaof", "127.0.0.1", strconv.Itoa(srv.Port())))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())

	client := func(addr string, f func(*redis.Options)) func(t *testing.T) redis.UniversalClient {
		return func(t *testing.T) redis.UniversalClient {
			return newClient(t, addr, func(o *redis.Options) {
				if f != nil {
					f(o)
				}
			})
		}
	}
	user := func(name string) func(*redis.Options) {
		return func(o *redis.Options) { o.Username, o.Password = name, "pw" }
	}
	for _, tc := range []struct {
		name    string
		client  func(t *testing.T) redis.UniversalClient
		timeout time.Duration // of Check's context; 0: none
		config  bool          // matches ErrStoreConfig
		says    []string      // in the message
	}{
		{name: "NoPassword", client: client(pw.Addr(), nil), config: true,
			says: []string{"authentication", "NOAUTH"}},
		{name: "WrongPassword", client: client(pw.Addr(), func(o *redis.Options) { o.Password = "wrong" }), config: true,
			says: []string{"authentication", "WRONGPASS"}},
		{name: "NoSuchUser", client: client(srv.Addr(), user("nobody")), config: true,
			says: []string{"authentication", "WRONGPASS"}},
		{name: "ACLNoEvalsha", client: client(acl.Addr(), user("noevalsha")), config: true,
			says: []string{"permissions", "NOPERM", "evalsha"}},
		{name: "ACLOtherKeys", client: client(acl.Addr(), user("otherkeys")), config: true,
			says: []string{"permissions", "NOPERM", "keys"}},
		{name: "RenamedEvalsha", client: client(renamed.Addr(), nil), config: true,
			says: []string{"unknown command", "EVALSHA"}},
		{name: "ReadOnlyReplica", client: client(replica.Addr(), nil), config: true,
			says: []string{"read-only replica", "READONLY"}},
		{name: "ClusterClientOnSingleServer", client: func(t *testing.T) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}})
			t.Cleanup(func() { _ = c.Close() })
			return c
		}, config: true, says: []string{"Cluster client on a server that is not a Cluster", "cluster support disabled"}},
		{name: "NothingListening", client: client(closed, nil), timeout: 500 * time.Millisecond,
			says: []string{"cannot connect to Redis", "connection refused"}},
		{name: "NothingListeningNoRetries", client: client(closed, func(o *redis.Options) { o.DialerRetries, o.MaxRetries = 1, -1 }),
			says: []string{"connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStoreOn(t, tc.client(t), redistest.Prefix(t))
			c := ctx(t)
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				c, cancel = context.WithTimeout(c, tc.timeout)
				defer cancel()
			}
			err := s.Check(c)
			require.Error(t, err)
			t.Logf("Check: %v", err)
			assert.Equal(t, tc.config, errors.Is(err, quota.ErrStoreConfig), "matches ErrStoreConfig")
			for _, w := range tc.says {
				assert.Contains(t, err.Error(), w)
			}
			if !tc.config {
				return
			}
			// The same set-up is a configuration error at run time too,
			// on a store nobody checked: a decision, and a pause.
			rs := newStoreOn(t, tc.client(t), redistest.Prefix(t), redisstore.WithBatching(0))
			for _, n := range []int{1, 4} { // 4 limits: more arguments than Redis reads from a client that has not authenticated
				d := &quota.Demand{Scope: "vendor", Cost: 1}
				for i := range n {
					d.Limits = append(d.Limits, quota.Bucket{Limit: quota.Limit{Name: "l" + strconv.Itoa(i), Rate: 10, Per: time.Second}, Key: "k"})
				}
				_, err = rs.Take(c, d)
				require.Error(t, err)
				t.Logf("Take (%d limits): %v", n, err)
				assert.ErrorIs(t, err, quota.ErrStoreConfig, "Take (%d limits)", n)
				assert.Contains(t, err.Error(), tc.says[0])
			}
			err = rs.Pause(c, "vendor", "", time.Second)
			assert.ErrorIs(t, err, quota.ErrStoreConfig, "Pause")
		})
	}

	t.Run("ACLWithoutInfoOrScript", func(t *testing.T) {
		t.Parallel()
		// The store needs neither INFO nor SCRIPT: Check passes.
		s := newStoreOn(t, client(acl.Addr(), user("noinfo"))(t), redistest.Prefix(t))
		assert.NoError(t, s.Check(ctx(t)))
	})
}

// TestCheckClusterNode: a plain client on a Cluster node fails Check
// (INFO says cluster_enabled:1), and its calls for keys of another node
// fail with MOVED, both matching ErrStoreConfig; a ClusterClient passes.
func TestCheckClusterNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	t.Parallel()
	cl := redistest.StartCluster(t, 3, 0)
	node := cl.Masters()[0]
	plain := newStoreOn(t, newClient(t, node.Addr()), redistest.Prefix(t))
	err := plain.Check(ctx(t))
	require.Error(t, err)
	t.Logf("Check: %v", err)
	assert.ErrorIs(t, err, quota.ErrStoreConfig)
	assert.Contains(t, err.Error(), "non-Cluster client on a Redis Cluster node")

	scope := ""
	for i := 0; scope == ""; i++ {
		sc := "scope-" + strconv.Itoa(i)
		owner, err := cl.Owner("{" + sc + "}")
		require.NoError(t, err)
		if owner.ID != node.ID {
			scope = sc
		}
	}
	_, err = plain.Take(ctx(t), &quota.Demand{
		Scope:  scope,
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: 10, Per: time.Second}}},
		Cost:   1,
	})
	require.Error(t, err)
	t.Logf("Take: %v", err)
	assert.ErrorIs(t, err, quota.ErrStoreConfig)
	assert.Contains(t, err.Error(), "MOVED")

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { _ = cc.Close() })
	s := newStoreOn(t, cc, redistest.Prefix(t))
	require.NoError(t, s.Check(ctx(t)))
	for _, m := range cl.Masters() {
		c := newClient(t, m.Addr())
		exists, err := c.ScriptExists(ctx(t), redis.NewScript(scriptSource(t, "take_gcra.lua")).Hash()).Result()
		require.NoError(t, err)
		assert.Equal(t, []bool{true}, exists, "take_gcra.lua on %s", m.Addr())
	}
}

// scriptSource returns the script that the store runs for the file name:
// prologue.lua, its parts, then the file, includes expanded (scripts.go).
func scriptSource(t *testing.T, name string) string {
	t.Helper()
	return redisstore.ComposeScript(name)
}

// isPart reports whether the .lua file name is a part of scripts
// (prologue.lua, one of redisstore.ScriptParts, or a file another
// includes), not one by itself.
func isPart(name string) bool {
	if name == "prologue.lua" {
		return true
	}
	for _, parts := range redisstore.ScriptParts() {
		if slices.Contains(parts, name) {
			return true
		}
	}
	files, _ := filepath.Glob("*.lua")
	for _, f := range files {
		if text, err := os.ReadFile(f); err == nil && strings.Contains(string(text), "-- #include "+name+"\n") {
			return true
		}
	}
	return false
}

// TestConfigErrorOnCalls: the store's calls, not only Check, return
// errors matching ErrStoreConfig when Redis refuses the configuration.
func TestConfigErrorOnCalls(t *testing.T) {
	t.Parallel()
	pw := passwordServer(t)
	s := newStoreOn(t, newClient(t, pw.Addr(), func(o *redis.Options) { o.Password = "wrong" }), redistest.Prefix(t))
	d := &quota.Demand{
		Scope:  "vendor",
		Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: 10, Per: time.Second}, Key: "k"}},
		Cost:   1,
	}
	_, err := s.Take(ctx(t), d)
	require.Error(t, err)
	t.Logf("Take: %v", err)
	assert.ErrorIs(t, err, quota.ErrStoreConfig)
	assert.Contains(t, err.Error(), "WRONGPASS")

	err = s.Pause(ctx(t), "vendor", "", time.Second)
	assert.ErrorIs(t, err, quota.ErrStoreConfig)

	rs := newStoreOn(t, newClient(t, srv.Addr(), func(o *redis.Options) { o.Username, o.Password = "nobody", "x" }),
		redistest.Prefix(t), redisstore.WithBatching(0))
	_, err = rs.Take(ctx(t), d)
	assert.ErrorIs(t, err, quota.ErrStoreConfig)
}

// A client whose ReadTimeout or WriteTimeout is below the Transport's
// least call budget fails Check as a configuration error naming the
// option; go-redis's defaults and "no timeout" pass.
func TestCheckClientTimeouts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		opts   func(*redis.Options)
		option string // named in the error; "" for none
	}{
		{"defaults", func(*redis.Options) {}, ""},
		{"no read timeout", func(o *redis.Options) { o.ReadTimeout = -1 }, ""},
		{"at the minimum", func(o *redis.Options) {
			o.ReadTimeout, o.WriteTimeout = redisstore.MinClientTimeout, redisstore.MinClientTimeout
		}, ""},
		{"short read timeout", func(o *redis.Options) { o.ReadTimeout = 200 * time.Millisecond }, "ReadTimeout"},
		{"short write timeout", func(o *redis.Options) { o.WriteTimeout = time.Second }, "WriteTimeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := newStoreOn(t, newClient(t, srv.Addr(), c.opts), redistest.Prefix(t))
			err := s.Check(ctx(t))
			if c.option == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, quota.ErrStoreConfig)
			assert.Contains(t, err.Error(), c.option)
		})
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, ReadTimeout: 100 * time.Millisecond})
	t.Cleanup(func() { _ = cc.Close() })
	s, err := redisstore.New(cc, redisstore.WithPrefix(redistest.Prefix(t)))
	require.NoError(t, err)
	err = s.Check(ctx(t))
	require.ErrorIs(t, err, quota.ErrStoreConfig)
	assert.Contains(t, err.Error(), "ReadTimeout")
}
