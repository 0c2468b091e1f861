// Package redistest starts and stops real redis-server processes for tests:
// a single server ([Start]), a local Redis Cluster ([StartCluster]) or a
// master, its replica and three Sentinels ([StartSentinel]), each on free
// loopback ports, in its own temporary directory, without persistence
// (--save "" --appendonly no).
//
// # Lifetime
//
// [Start], [StartCluster] and [StartSentinel] stop what they started in
// t.Cleanup (SHUTDOWN NOSAVE, then SIGTERM, then SIGKILL after a short
// grace), and they reap every process, so no redis-server outlives the test binary (on Linux a
// server is also killed if the test binary dies). No goroutine is left running either, so
// go.uber.org/goleak passes while a server is still up.
//
// To share one server (or cluster) between all tests of a package, start it
// in TestMain with [StartMain] (or [StartClusterMain]) and give each test its
// own key prefix ([Prefix]) instead of flushing the database:
//
//	var srv *redistest.Server
//
//	func TestMain(m *testing.M) {
//		var stop func()
//		srv, stop = redistest.StartMain()
//		code := m.Run()
//		stop()
//		if code == 0 {
//			if err := goleak.Find(); err != nil {
//				fmt.Fprintln(os.Stderr, err)
//				code = 1
//			}
//		}
//		os.Exit(code)
//	}
//
// goleak.VerifyTestMain(m) works as well, since a running server leaves no
// goroutine behind; the server is then reaped by the kernel's parent-death
// signal when the test binary exits.
//
// # Missing redis-server
//
// If redis-server is not on PATH the test fails with an install hint. Set
// THROTTLE_SKIP_REDIS=1 to skip instead (for [StartMain], the whole package
// is skipped).
//
// # Faults
//
// [Server.Kill] kills a server with SIGKILL, [Server.Restart] starts it again
// on the same port (a cluster node keeps its node ID, since its nodes.conf
// survives), and [Cluster.WaitReady] waits for a cluster to settle again.
// [Sentinel.KillMaster] and [Sentinel.Failover] make the Sentinels fail
// over, and [Sentinel.WaitFailover] waits for the promoted replica.
//
// Only Unix systems are supported.
package redistest
