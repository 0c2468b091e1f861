package faulttest

import (
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clusterOptions are the recommended ClusterClient options (see
// docs/when-redis-fails.md). ClusterStateReloadInterval is left at its 60 s
// default on purpose: the store's reloads on connection errors are what
// must find the promoted replica.
func clusterOptions(addrs []string) *redis.ClusterOptions {
	o := clientOptions("")
	return &redis.ClusterOptions{
		Addrs:                 addrs,
		DialTimeout:           o.DialTimeout,
		DialerRetries:         o.DialerRetries,
		DialerRetryTimeout:    o.DialerRetryTimeout,
		ReadTimeout:           o.ReadTimeout,
		WriteTimeout:          o.WriteTimeout,
		ContextTimeoutEnabled: true,
		MaxRedirects:          3,
		MinRetryBackoff:       o.MinRetryBackoff,
		MaxRetryBackoff:       o.MaxRetryBackoff,
	}
}

// 9. Redis Cluster, 3 masters and 3 replicas: a manual failover (CLUSTER
// FAILOVER) of the master of the rule's slot costs no request an error or
// a fallback; then that master is killed with SIGKILL, the cluster
// promotes its replica, and the transport decides through the new master
// within a few seconds of the promotion, not after go-redis's 60 s
// refresh.
func TestFaultClusterFailover(t *testing.T) {
	noLeaks(t)
	c := redistest.StartCluster(t, 3, 1, redistest.Args("--repl-diskless-sync-delay", "0"))
	cc := redis.NewClusterClient(clusterOptions(c.Addrs()))
	t.Cleanup(func() { _ = cc.Close() })
	v := newVendor(t)
	const quota = 100_000 // never binds: every request is the store's to decide
	rec := &recorder{}
	tr := newTransport(t, newStore(t, cc), policy(quota, throttle.FailLocal), rec)
	require.NoError(t, roundTrip(t, tr, v, "/").err)

	owner, err := c.Owner("{api}")
	require.NoError(t, err)
	replica := replicaOf(t, c, owner)

	// Manual failover under traffic.
	stop := traffic(t, tr, v, "/", 4, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	_, err = replica.Do("CLUSTER", "FAILOVER")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		o, err := c.Owner("{api}")
		return err == nil && o == replica
	}, 10*time.Second, 10*time.Millisecond, "the replica takes over")
	time.Sleep(300 * time.Millisecond)
	manual := stop()
	t.Logf("manual failover: %d requests, latency median %v, max %v; fallbacks %d",
		len(manual), manual.median().Round(time.Microsecond), manual.max().Round(time.Microsecond), rec.fallbackCount())
	assert.Equal(t, len(manual), manual.sent(), "no request fails")
	assert.Zero(t, rec.fallbackCount(), "no request falls back")
	assert.Empty(t, rec.stateLog(), "the store never failed")
	assertLatency(t, "manual failover", manual)
	require.NoError(t, c.WaitReady(10*time.Second))

	// kill -9 of the new master, under traffic.
	stop = traffic(t, tr, v, "/", 4, 5*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	require.NoError(t, replica.Kill())
	killed := time.Now()
	require.Eventually(t, func() bool {
		o, err := c.Owner("{api}")
		return err == nil && o == owner
	}, 15*time.Second, 10*time.Millisecond, "the old master is promoted back")
	promoted := time.Now()
	up := waitStoreDecides(t, tr, v, rec, promoted, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	killRS := stop()
	t.Logf("kill -9 of a master: promoted after %v; store decides again %v after the promotion (%v after the kill); %d requests, %d by fallback",
		promoted.Sub(killed).Round(time.Millisecond), up.Round(time.Millisecond), (promoted.Sub(killed) + up).Round(time.Millisecond), len(killRS), rec.fallbackCount())
	assert.Less(t, up, 5*time.Second, "far from the 60 s periodic refresh")
	assertLatency(t, "master kill", killRS)
	assert.Equal(t, len(killRS), killRS.sent(), "the local share (quota/2) covers the outage")
	assertOnce(t, rec, true)
}

// replicaOf returns a running replica of master m.
func replicaOf(t *testing.T, c *redistest.Cluster, m *redistest.Node) *redistest.Node {
	t.Helper()
	for _, n := range c.Nodes() {
		if n == m || !n.Running() {
			continue
		}
		info, err := n.Do("INFO", "replication")
		require.NoError(t, err)
		s, _ := info.(string)
		if containsLine(s, "role:slave") && containsLine(s, "master_port:"+itoa(m.Port())) {
			return n
		}
	}
	t.Fatalf("no replica of %s", m.Addr())
	return nil
}
