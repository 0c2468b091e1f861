// Package faulttest holds the fault tests of "When Redis fails": a
// [throttle.Transport] over a redisstore.Store on real redis-server
// processes (single node and a local Cluster), with faults injected by
// killing and restarting servers, by Redis commands (SCRIPT FLUSH,
// FLUSHALL, a long script) and by a loopback TCP proxy (latency, lost
// replies, blackhole). TestFleet runs 8 instances of 16 workers each, one
// rule per algorithm, under delayed replies, a stopped (SIGSTOP) or killed
// Redis and a saturated CPU, and checks every limit's counts at the vendor.
// It has no code of its own outside its tests; they
// need both the root package and redisstore, which no other package
// imports together.
//
// Run them with
//
//	go test -race -v -run TestFault ./internal/faulttest
//
// Each test logs the latency and recovery figures quoted in
// docs/when-redis-fails.md.
package faulttest
