// Package redisstore provides a [quota.Store] kept in Redis, so that
// every instance of a service shares one quota.
//
//	rdb := redis.NewClient(&redis.Options{
//		Addr:                  "localhost:6379",
//		Password:              os.Getenv("REDIS_PASSWORD"),
//		ContextTimeoutEnabled: true,                  // call deadlines reach the socket
//		DialTimeout:           time.Second,           // default 5 s
//		DialerRetries:         1,                     // default 5, 100 ms apart
//		MinIdleConns:          8,                     // connections kept open
//		MaxRetryBackoff:       64 * time.Millisecond, // default 1 s
//	})
//	store, err := redisstore.New(rdb)
//	if err != nil { ... }
//	if err := store.Check(ctx); err != nil { ... } // wrong password, replica, ...
//	tr, err := throttle.NewTransport(nil, policy, throttle.WithStore(store))
//
// [New] does not contact Redis; [Store.Check] does, once at start-up: it
// reports a misconfiguration (its error then matches
// [quota.ErrStoreConfig]) or an unreachable Redis, and warms the client
// up. The options are explained under "Client options" below.
//
// # One round trip per decision
//
// Every [Store.Take] is a single EVALSHA of take.lua (go-redis's
// [redis.Script.Run], which falls back to EVAL when Redis answers NOSCRIPT,
// after SCRIPT FLUSH or a restart). The script reads Redis's clock (TIME, in
// microseconds), checks every limit of the demand and every pause it
// lists, and either charges all limits at the instant it found or charges
// nothing. Go passes durations only, never instants, so the clocks of the
// instances do not matter. Scripts are never pipelined (NOSCRIPT recovery
// does not work inside a pipeline). [Store.Cancel], [Store.Pause] and
// [Store.Settle] are one script call each as well.
//
// Under heavy concurrency, GCRA-only demands of one scope share that round
// trip: while [BatchInFlight] calls of the scope are in flight (one fewer
// while its batches have company), later demands wait and go together
// in one EVALSHA of take_batch.lua, which
// decides them one after another at one instant, each all-or-nothing as
// its own call would, reading and writing each key once for the batch
// ([WithBatching] sets the batch size or turns batching off).
//
// # Key layout
//
// With the default prefix "throttle:", a demand in scope S writes
//
//	throttle:v1:{S}:g:NAME:KEY   GCRA, when Rate divides Per: the theoretical arrival time, µs
//	throttle:v1:{S}:G:NAME:KEY   GCRA otherwise: the same, exact, "us" or "us:frac" (frac/Rate µs more)
//	throttle:v1:{S}:f:NAME:KEY   fixed window: hash of window index -> count
//	throttle:v1:{S}:w:NAME:KEY   sliding window: the same, two windows kept
//	throttle:v1:{S}:l:NAME:KEY   sliding log: sorted set, member "instant:cost:id", score the running total of costs
//	throttle:v1:{S}:c:NAME:KEY   concurrency: sorted set, lease id -> expiry, µs
//	throttle:v1:{S}:p:KEY        pause: its end, µs
//	throttle:v1:{S}:r:ID         a granted decision's reply (replay ids)
//	throttle:v1:{S}:s:ID         the costs a reservation was settled to (Store.Settle)
//	throttle:v1:{S}:tA:NAME:KEY  fair shares (a bucket's Tenant): sorted set, tenant -> its last demand, µs
//	throttle:v1:{S}:hA:NAME:KEY  fair shares: sorted set, tenant -> the end of its claim, µs
//	throttle:v1:{S}:vA:NAME:N:KEY:TENANT  fair shares: a tenant's share clock, µs (N = len(KEY))
//
// NAME is the limit's name and KEY the bucket's key; A is the limit key's
// algorithm letter (g or G, f, w or l). "v1" is the schema version: a
// release that changes the layout changes it, so it never misreads keys
// written by another. Every key has a TTL that ends when its state can no
// longer affect a decision: at the GCRA arrival time, at the end of the
// last window charged (one window later for the sliding window), Per
// after the newest log entry, when the latest lease expires (a
// concurrency key whose last lease is released is deleted), Per after a
// shared limit's last demand, at a share clock's instant or a claim's
// end, at the pause's end, when the replay window closes, or when the
// last charge of a settled reservation can be settled no more. Nothing
// lives forever.
//
// Upgrading from a version that rounded GCRA's emission interval up to
// the microsecond (before quotas above 2^53 µs units were accepted): a
// GCRA limit whose Rate divides Per in microseconds (100 a second, 60 a
// minute, 5,000 an hour) keeps its g: keys, whose values and charges are
// unchanged, so old and new instances share its counter during a rolling
// upgrade. Any other GCRA limit (3 a second, 7 per 3 seconds) is counted
// exactly under a G: key, which the old version never reads: while both
// versions run, each counts it apart (up to twice its quota across the
// fleet), and at the switch its counter starts empty (one burst more, at
// most); the old g: key expires within 2 s of its arrival time. Window,
// log and concurrency keys are unchanged.
//
// A demand with a [quota.Bucket] Tenant, or a class noted on a window or
// log limit ([quota.Bucket.Noted]), runs take.lua, whose lent headrooms
// and fair shares are in share.lua, unless a shorter script decides it
// the same way: take_share.lua a demand of one or two GCRA limits with a
// tenant (take_share_batch.lua several of them at once, [WithBatching]),
// take_window.lua a class on one window. A headroom on GCRA costs nothing: it
// lowers the allowance every script already takes. A restricted demand
// is sent with MaxWait at most T/2, the furthest it may be reserved.
//
// # Concurrency limits and leases
//
// A [throttle.Concurrency] limit keeps one sorted set per bucket: each
// member is a lease id (the decision id), scored by its expiry on Redis's
// clock. take.lua prunes expired leases, counts the rest (ZCARD) and adds
// the new lease (ZADD) in the same script as the other limits, so a demand
// gets its rate quota and its slot, or neither. [Store.Release]
// (release.lua) removes the lease by id, so a second release does nothing,
// and announces the removal with PUBLISH on the channel
// throttle:v1:{S}:n:NAME:KEY. [Store.Renew] (renew.lua) extends a lease
// that is still held and reports one that is gone. A crashed instance's
// leases simply expire. [Store.WatchRelease] subscribes one connection
// per store, only while something waits and only to the watched
// channels, and wakes one waiter of this store per release; so a release
// costs at most one retry per instance with waiters, however many
// requests wait. In Cluster mode PUBLISH is broadcast to every node; the
// subscriber may connect to any of them.
//
// # Redis Cluster
//
// {S} is the Cluster hash tag: all keys of one scope live in one slot, so a
// script never touches keys of two slots (no CROSSSLOT) and never touches a
// key it did not declare. The library chooses the tag: the scope is escaped
// ('%', '{' and '}' become %25, %7B and %7D) so no request data can end it
// or start another, and a prefix with braces is refused. The trade-off: one
// scope is one slot on one master, so a very hot scope does not spread over
// the cluster. Split traffic into more scopes (rules) to spread it.
//
// # Retries and replays
//
// go-redis sends a command again when its connection failed after it was
// written (3 retries by default), and a ClusterClient follows MOVED and
// ASK redirects; Redis may then run the script twice. [Replay] selects
// the remedy, and the default picks the cheapest safe one for the client:
//
//   - [ReplayDetect] (the default for go-redis's clients that retry,
//     Cluster included): every call carries a mark that go-redis writes
//     anew with each sending, and the script refuses a call sent again
//     after a sending that may have run with [ErrResent]. A redirected
//     call (MOVED, ASK) is decided once: go-redis tells the call of the
//     redirect before it sends it again, and the mark then knows the
//     first sending never ran. Nothing is kept in Redis and it costs
//     Redis nothing; a lost reply becomes an error.
//   - [ReplayIDs]: the script remembers a granted decision's reply for
//     the per-call timeout plus a second and answers a call sent again
//     with it, so the retry succeeds. It costs about 2.5 times Redis's
//     work for a one-limit decision (a GET, a SET of a new key, the id
//     and a longer reply); choose it where a lost reply must be retried.
//   - [ReplayNoRetries]: the client must have retries and redirects
//     disabled; a lost reply is an error, at no cost.
//
// In every case an error from Take means the demand may or may not have
// been charged; treat it as not granted. [Store.Cancel] is marked the same
// way under ReplayDetect, so a refund is never given twice.
//
// # Failures
//
// Each call to Redis is bounded by the per-call timeout ([WithTimeout],
// default 10 s, a backstop), separate from how long the caller may wait
// for quota (calls made with context.Background share deadlines instead of
// starting a timer each; see [WithTimeout]). Errors are wrapped with
// "redisstore: " and %w, so [errors.Is] sees go-redis's and the context's
// errors. What a request does when the store fails is the
// [throttle.Transport]'s decision, not the store's: its failure modes,
// call budget and circuit breaker ([throttle.FailureMode],
// [throttle.Breaker]) keep a slow or dead Redis from costing a request
// more than the budget.
//
// # Misconfiguration
//
// An error that waiting does not cure matches [quota.ErrStoreConfig]
// and says what to change, whichever call returns it: Redis answered
// NOAUTH or WRONGPASS (password, username), NOPERM (the ACL user lacks a
// command or a key under the prefix), an unknown command (EVALSHA or EVAL
// renamed or disabled), READONLY (a replica), or the client's kind does
// not match the server (a *redis.ClusterClient on a server without
// Cluster support; another client on a Cluster node, MOVED). A Transport
// logs such an error at Error level. [Store.Check] finds each of them at
// start-up, before any request: call it after [New]. A READONLY reply
// is a configuration error on a client with a fixed address (naming it),
// and an outage on a Sentinel client, whose demoted master answers
// READONLY for a moment during a failover.
//
// # Client options
//
// go-redis's defaults suit a cache better than a rate limiter. These are
// the ones to change, for a redis.Options, redis.ClusterOptions or
// redis.FailoverOptions alike (defaults as of go-redis v9.23):
//
//   - ContextTimeoutEnabled: true. Without it go-redis does not apply a
//     call's context deadline to socket reads and writes (it reads with
//     context.Background), and only ReadTimeout (5 s) ends a stalled
//     read; with it, the earlier of the two does.
//   - DialTimeout: about 1 s (default 5 s), per dial attempt.
//   - DialerRetries: 1 (default 5 attempts, DialerRetryTimeout 100 ms
//     apart, per connection). go-redis's own retries (MaxRetries) still
//     redial; and a refused connection then fails with go-redis's dial
//     error ("connect: connection refused") rather than running into the
//     call's deadline, which would report only "context deadline
//     exceeded".
//   - MinIdleConns: the connections kept open, so that a decision does not
//     wait for a dial (and a TLS handshake); [BatchInFlight] or more.
//     [Store.Check] opens them at start-up.
//   - MaxRetryBackoff: tens of milliseconds (default 1 s; the backoff
//     doubles from MinRetryBackoff, 10 ms), so a retry fits in a call's
//     budget.
//   - ReadTimeout, WriteTimeout, MaxRetries and MaxRedirects: keep the
//     defaults (5 s; 3 retries for a Client, 3 redirects for a
//     ClusterClient). Do not set ReadTimeout below the Transport's call
//     budget, or a slow answer becomes a failure. A retry is safe:
//     go-redis retries calls it never sent (a failed dial, an exhausted
//     pool), which is how a call survives a restart, and a call it had
//     sent is refused with [ErrResent] rather than decided twice
//     ([ReplayDetect], the default), or answered from memory
//     ([ReplayIDs]); a Cluster redirect is followed and decided once.
//   - PoolSize: the default (10 per GOMAXPROCS; 5 per GOMAXPROCS and
//     node for a ClusterClient) is ample: batching keeps the connections
//     in use per scope near [BatchInFlight].
//
// # Redis Cluster failover
//
// A *redis.ClusterClient learns the topology at start and then every
// ClusterStateReloadInterval (60 s by default), and on MOVED replies. A
// master killed outright answers nothing, so no MOVED comes, and by
// itself the client would keep sending that master's slots to a dead
// address until its next periodic reload. The store therefore asks the
// client to reload (ClusterClient.ReloadState) after every connection-class
// error (refused, reset, timed out, CLUSTERDOWN), at most once per 250 ms
// ([WithClusterReload]); the client finds the promoted replica as soon as
// the cluster has promoted it (cluster-node-timeout plus the election,
// about 2 to 5 s with a 2 s node timeout). Keep MaxRedirects at its
// default (3) or more. A manual failover (CLUSTER FAILOVER) answers MOVED
// and costs no request an error.
//
// # State loss
//
// Redis keeps the counters in memory. A restart without persistence,
// FLUSHALL, or a failover that loses writes the replica had not yet
// received forgets what was charged: after each such loss the fleet may
// admit up to one more burst (GCRA Burst, or Rate for the window
// algorithms) per limit and key, and never more. Pauses recorded in Redis
// are lost too, but every instance that learned a pause keeps its own
// copy and honours it (see [throttle.Learning]). SCRIPT FLUSH loses
// nothing: the next call answers NOSCRIPT and go-redis loads the script
// again with EVAL.
// Redis Sentinel (redis.NewFailoverClient), its failovers and what they cost: docs/sentinel.md.
//
// # Without Lua
//
// [MultiExecStore] ([NewMultiExec]) serves deployments behind proxies that
// do not run scripts: fixed windows only, by INCRBY and PEXPIRE NX in
// MULTI/EXEC, with no reservations, no waiting, no leases, a Cancel that
// gives back nothing and the over-count of refused demands described
// there. It is a type of its own, not an option of [Store], because it
// keeps fewer of the promises of [quota.Store].
package redisstore
