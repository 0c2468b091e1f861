package redisstore

import (
	"time"
)

// An Option configures a [Store] made by [New].
type Option func(*Store)

// DefaultPrefix is the key prefix of a [Store] made without [WithPrefix].
const DefaultPrefix = "throttle:"

// DefaultTimeout is the per-call timeout of a [Store] made without
// [WithTimeout]. It is a backstop for calls made without a deadline: a
// [throttle.Transport] decides for itself, well before it, when a slow
// store counts as down ([throttle.Breaker]), and a store timeout shorter
// than the transport's budget would turn a slow answer into a failure.
const DefaultTimeout = 10 * time.Second

// WithPrefix sets the prefix of every key the store writes. It must not
// contain '{' or '}' (it would form a Cluster hash tag of its own); [New]
// reports an error if it does. Stores that share counters must use the
// same prefix.
func WithPrefix(prefix string) Option {
	return func(s *Store) { s.prefix = prefix }
}

// WithTimeout bounds every call to Redis, including go-redis's retries, to
// d, independently of how long the caller is willing to wait for its quota.
// A non-positive d means no bound of the store's own (the caller's context
// still applies). Behind a [throttle.Transport], keep d above the
// transport's call budget ([throttle.Breaker].CallTimeout, adaptive, at
// least 2 s by default): a call the store ends early fails, and a failed
// call may get the rule's failure mode while Redis is merely slow.
//
// A call made with context.Background or context.TODO (an http.Request
// made without a context has Background) does not start a timer of its
// own: calls that begin within d/16 of each other share one deadline, the
// earliest of theirs, so each is bounded by between 15/16 of d and d.
func WithTimeout(d time.Duration) Option {
	return func(s *Store) { s.timeout = d }
}

// Replay selects how a [Store] keeps a call that Redis ran but whose reply
// was lost, and that go-redis then retried, from charging twice. See
// [WithReplay].
type Replay int

const (
	// ReplayAuto picks the cheapest safe remedy for the client: nothing
	// for a client that never retries a command; [ReplayDetect] for
	// go-redis's own clients (*redis.Client, *redis.Ring and
	// *redis.ClusterClient, redirects included); [ReplayIDs] for other
	// implementations of redis.UniversalClient, whose resends the mark
	// cannot follow.
	ReplayAuto Replay = iota

	// ReplayIDs gives every decision a unique id. The script stores a
	// granted decision's reply under its id for a short time
	// (the per-call timeout plus a second) and answers a rerun of the same
	// call with that reply instead of charging again, so a retry after a
	// lost reply succeeds. It costs a GET per decision, a SET per granted
	// one and a small key per granted decision for that time: about 2.5
	// times Redis's work for a one-limit GCRA decision (BENCHMARKS.md).
	// Choose it where a lost reply must be retried rather than reported.
	ReplayIDs

	// ReplayNoRetries requires a client that never retries: a
	// *redis.Client or *redis.Ring with MaxRetries -1, or a
	// *redis.ClusterClient with MaxRetries -1 and MaxRedirects -1. [New]
	// fails for any other client. A lost reply is then an error (which
	// may or may not have charged) rather than a retry, at no cost in
	// Redis. A ClusterClient without redirects cannot follow a resharding,
	// so prefer ReplayDetect there.
	ReplayNoRetries

	// ReplayDetect keeps nothing in Redis: every call carries a mark that
	// go-redis writes anew each time it sends the call, and a call sent
	// again after a sending that may have run (a retry after its
	// connection failed with the call written) fails with [ErrResent]
	// instead of deciding a second time. A sending that Redis refused
	// before running it, such as a Cluster redirect (MOVED, ASK), which
	// go-redis reports to the call before it follows the redirect, does
	// not count: the redirected call is decided once, as a first sending.
	// It costs Redis nothing; go-redis still retries calls it never wrote
	// (a failed dial, a pool timeout). A lost reply is then an error,
	// which may or may not have charged, as with [ReplayNoRetries].
	ReplayDetect
)

// replayOffForTest turns ids off whatever the client; only tests set it.
const replayOffForTest Replay = -1

// WithReplay selects how retried calls are kept from charging twice. The
// default is [ReplayAuto].
func WithReplay(r Replay) Option {
	return func(s *Store) { s.replay = r }
}

// withNow makes the scripts take the current instant from now instead of
// Redis's TIME. Tests only: production code never passes an instant.
func withNow(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}
