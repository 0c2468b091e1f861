package redisstore_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCluster runs the conformance suite and the key layout checks on a
// real 3-master Redis Cluster: a script touching keys of two slots would
// fail with CROSSSLOT.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	t.Parallel() // beside the conformance variants, after the fleets
	cl := redistest.StartCluster(t, 3, 0)
	newCluster := func(t *testing.T) *redis.ClusterClient {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	prefix := redistest.Prefix(t)

	t.Run("ReadsBeforeReservedWrites", func(t *testing.T) { readsBeforeReservedWrites(t, newCluster(t)) })
	t.Run("Inspect", func(t *testing.T) {
		inspectConcurrency(t, newStoreOn(t, newCluster(t), prefix))
	})
	t.Run("ShortenAcrossSlots", func(t *testing.T) { shortenAcrossSlots(t, newCluster(t)) })

	t.Run("Conformance", func(t *testing.T) {
		storetest.Run(t, storetest.Config{
			New: func(t *testing.T, now func() time.Time) quota.Store {
				return newStoreOn(t, newCluster(t), prefix, redisstore.WithNow(now))
			},
			Instances: func(t *testing.T, now func() time.Time, n int) []quota.Store {
				ss := make([]quota.Store, n)
				for i := range ss {
					ss[i] = newStoreOn(t, newCluster(t), prefix, redisstore.WithNow(now))
				}
				return ss
			},
		})
	})

	t.Run("QueueDropOldest", func(t *testing.T) {
		queueDropOldest(t, func(t *testing.T) redis.UniversalClient { return newCluster(t) })
	})

	t.Run("SettleFleet", func(t *testing.T) {
		// TestSettleFleet's fleet, each instance with a client of its own
		// of the Cluster.
		dial := func(t *testing.T) redis.UniversalClient { return newCluster(t) }
		for _, alg := range []quota.Algorithm{quota.FixedWindow, quota.GCRA} {
			t.Run(alg.String(), func(t *testing.T) {
				res := runGQLFleet(t, dial, alg, true)
				assert.Zero(t, res.rejected, "queries the vendor rejected")
				assert.GreaterOrEqual(t, res.share, 0.9, "share of the budget used")
			})
		}
	})

	t.Run("Redirects", func(t *testing.T) {
		for _, alg := range []quota.Algorithm{quota.GCRA, quota.SlidingLog} {
			t.Run(alg.String(), func(t *testing.T) {
				movedIsDecidedOnce(t, cl, newCluster(t), alg)
			})
		}
		t.Run("lost reply", func(t *testing.T) {
			lostReplyIsRefused(t, cl)
		})
	})

	t.Run("KeyLayout", func(t *testing.T) {
		prefix := redistest.Prefix(t)
		s := newStoreOn(t, newCluster(t), prefix)
		scopes, keys := hostile()
		for _, sc := range scopes {
			for _, k := range keys {
				exercise(t, s, sc, k)
			}
		}
		var nodes []*redis.Client
		for _, m := range cl.Masters() {
			nodes = append(nodes, newClient(t, m.Addr()))
		}
		checkLayout(t, nodes, prefix, scopes, true)
	})
}

// movedIsDecidedOnce: a ClusterClient that follows redirects gets
// ReplayDetect by default, which costs Redis nothing. Its scope's slot is
// moved to another master after the client learned the topology, so the
// next Take is answered MOVED by the old owner and sent again to the new
// one. That resend is decided, as a first sending (the MOVED sending never
// ran), not refused with ErrResent; the limit is charged once for it.
func movedIsDecidedOnce(t *testing.T, cl *redistest.Cluster, c *redis.ClusterClient, alg quota.Algorithm) {
	const rate = 5
	prefix := redistest.Prefix(t)
	s := newStoreOn(t, c, prefix)
	require.Equal(t, "detect", redisstore.ReplayMode(s))
	scope := "moved-" + alg.String()
	d := &quota.Demand{Scope: scope, Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: 24 * time.Hour, Algorithm: alg}, Key: "k"}}}
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	require.True(t, dec.OK)

	tag := "{" + scope + "}"
	from, err := cl.Owner(tag)
	require.NoError(t, err)
	var to *redistest.Node
	for _, m := range cl.Masters() {
		if m.ID != from.ID {
			to = m
			break
		}
	}
	require.NotNil(t, to)
	movedBefore := errorStat(t, from, "MOVED")
	moveSlot(t, cl, redistest.Slot(tag), from, to)

	dec, err = s.Take(ctx(t), d)
	require.NoError(t, err, "the resend after MOVED is decided")
	assert.True(t, dec.OK)
	assert.Greater(t, errorStat(t, from, "MOVED"), movedBefore, "the old owner answered MOVED")
	assert.Equal(t, rate-2, grants(t, s, d), "charged once for the redirected call")
}

// moveSlot moves slot, with its keys, from one master to another, and
// tells every master.
func moveSlot(t *testing.T, cl *redistest.Cluster, slot int, from, to *redistest.Node) {
	t.Helper()
	src, dst := newClient(t, from.Addr()), newClient(t, to.Addr())
	require.NoError(t, dst.Do(ctx(t), "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ID).Err())
	require.NoError(t, src.Do(ctx(t), "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ID).Err())
	keys, err := src.ClusterGetKeysInSlot(ctx(t), slot, 1000).Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		host, port, err := net.SplitHostPort(to.Addr())
		require.NoError(t, err)
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		require.NoError(t, src.Do(ctx(t), args...).Err())
	}
	for _, m := range cl.Masters() {
		require.NoError(t, newClient(t, m.Addr()).Do(ctx(t), "CLUSTER", "SETSLOT", slot, "NODE", to.ID).Err())
	}
}

// errorStat returns how many error replies of kind (MOVED, ASK, ...) n
// has sent.
func errorStat(t *testing.T, n *redistest.Node, kind string) int {
	t.Helper()
	info, err := newClient(t, n.Addr()).Info(ctx(t), "errorstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+kind+":count="); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// lostReplyIsRefused: under the same default, a call whose reply is lost
// after its master ran it (a proxy in front of that master drops the
// reply) is sent again by go-redis and refused with ErrResent: charged
// once, not twice.
func lostReplyIsRefused(t *testing.T, cl *redistest.Cluster) {
	const rate = 5
	scope := "lost-reply"
	owner, err := cl.Owner("{" + scope + "}")
	require.NoError(t, err)
	p := faultproxy.New(t, owner.Addr())
	var dialer net.Dialer
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(),
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == owner.Addr() {
				addr = p.Addr()
			}
			return dialer.DialContext(ctx, network, addr)
		},
	})
	t.Cleanup(func() { _ = c.Close() })
	s := newStoreOn(t, c, redistest.Prefix(t))
	require.Equal(t, "detect", redisstore.ReplayMode(s))
	d := &quota.Demand{Scope: scope, Cost: 1, Limits: []quota.Bucket{{Limit: quota.Limit{Name: "l", Rate: rate, Per: 24 * time.Hour}, Key: "k"}}}
	dec, err := s.Take(ctx(t), d)
	require.NoError(t, err)
	require.True(t, dec.OK)

	p.DropReplyTo("evalsha")
	_, err = s.Take(ctx(t), d)
	assert.ErrorIs(t, err, redisstore.ErrResent)
	assert.Equal(t, 1, p.Stats().Dropped)
	assert.Equal(t, rate-2, grants(t, s, d), "charged once for the call sent again")
}
