package redisstore

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// A configError is a Redis error reply that a configuration mistake causes
// rather than an outage: waiting does not make it go away. It matches
// [quota.ErrStoreConfig] and the reply itself.
type configError struct {
	cause string // what is wrong and what to change, in plain words
	err   error  // Redis's reply, as go-redis returned it
}

func (e *configError) Error() string {
	return "misconfigured Redis: " + e.cause + ": " + e.err.Error()
}

func (e *configError) Unwrap() []error { return []error{quota.ErrStoreConfig, e.err} }

// configErr returns err wrapped in a configError when Redis answered with
// an error that a configuration mistake causes, and err itself otherwise
// (nil, outages, context errors, [ErrResent], malformed replies). Every
// error the store returns from a call to Redis passes through it, so that
// a [throttle.Transport] can tell "fix the configuration" from "Redis is
// down".
//
// A MOVED or ASK reply is a configuration error only for a client that
// does not follow them (anything but a *redis.ClusterClient): a plain
// client pointed at a Cluster node. A ClusterClient returns one only when
// its redirects ran out during a resharding.
//
// A READONLY reply (the server is a replica) is a configuration error on a
// client with a fixed address, and says which address to change. On a
// Sentinel client it is not: during a failover the demoted master answers
// READONLY until the client hears of the new one, an outage of a moment.
// A marked call (a Take, a Cancel) that go-redis retried after a READONLY
// reply ends as [ErrResent], since the mark cannot hear a plain client's
// retries; for such a call the store asks the server its ROLE once and, if
// it is a replica, reports the configuration error instead.
func (s *Store) configErr(err error) error {
	if err == nil || errors.Is(err, quota.ErrStoreConfig) {
		return err
	}
	if errors.Is(err, ErrResent) {
		return s.resentOnReplica(err)
	}
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return err
	}
	if cause := configCause(rerr.Error(), s.client); cause != "" {
		return &configError{cause: cause, err: err}
	}
	return err
}

// configCause names the configuration mistake behind the Redis error
// reply msg on client, or returns "" for a reply that is not one: every
// reply that waiting does not mend, so that a store call classifies it as
// Check does. Script
// errors carry the reply of the command that failed inside the script
// (Redis 7: "READONLY ... script: ...", "ERR The user executing the
// script can't ...", "ERR Unknown Redis command called from script ...").
func configCause(msg string, client redis.UniversalClient) string {
	m := strings.TrimPrefix(msg, "ERR ")
	has := func(s string) bool { return strings.Contains(m, s) }
	switch {
	case strings.HasPrefix(m, "NOAUTH"), has("Protocol error: unauthenticated"):
		// Redis answers a long command from a client that has not
		// authenticated with "Protocol error: unauthenticated multibulk
		// length" (or "bulk length") instead of NOAUTH, and hangs up.
		return "authentication: the server requires a password and the client sent none (set the client's Password, and Username for an ACL user)"
	case strings.HasPrefix(m, "WRONGPASS"), has("invalid password"):
		return "authentication: the server refused the client's username or password, or the user is disabled"
	case has("called without any password configured"), has("Client sent AUTH, but no password is set"):
		return "authentication: the client sends a password but the server has none configured"
	case strings.HasPrefix(m, "NOPERM"), has("The user executing the script can't"):
		return "permissions: the ACL user may not run a command or touch a key the store needs (EVALSHA, EVAL and the commands of its scripts, on keys under the store's prefix)"
	case strings.HasPrefix(m, "unknown command"), has("Unknown Redis command called from script"):
		return "unknown command: the server does not know a command the store uses (disabled or renamed with rename-command, e.g. EVALSHA or EVAL; behind a proxy that runs no scripts, use NewMultiExec)"
	case strings.HasPrefix(m, "READONLY"), has("-READONLY"):
		if sentinelClient(client) {
			return "" // a failover under way; see configErr
		}
		return readOnlyCause(client, "")
	case has("cluster support disabled"):
		return "Cluster client on a server that is not a Cluster (cluster support disabled): use redis.NewClient for a single server or Sentinel"
	case has("SELECT is not allowed in cluster mode"):
		return "non-Cluster client on a Redis Cluster node: use redis.NewClusterClient"
	case has("DB index is out of range"):
		return "database: the client's DB does not exist on the server"
	case strings.HasPrefix(m, "MOVED "), strings.HasPrefix(m, "ASK "):
		if _, ok := client.(*redis.ClusterClient); !ok {
			return "non-Cluster client on a Redis Cluster node (MOVED): use redis.NewClusterClient"
		}
	}
	return ""
}

// readOnlyCause says that client's server is a replica (of master, when
// known) and what to change.
func readOnlyCause(client redis.UniversalClient, master string) string {
	where := "the client is connected to a replica"
	if c, ok := client.(*redis.Client); ok {
		where = "the client's address " + c.Options().Addr + " is a replica"
	}
	if master != "" {
		where += " of " + master
	}
	return "read-only replica: " + where + "; point the client at the master (redis.NewFailoverClient if Sentinel manages it, redis.NewClusterClient for a Cluster)"
}

// sentinelClient reports whether client is a go-redis Sentinel client
// (redis.NewFailoverClient, or redis.NewUniversalClient with a
// MasterName): a *redis.Client whose address go-redis sets to
// "FailoverClient" and whose dialer asks the Sentinels for the master.
func sentinelClient(client redis.UniversalClient) bool {
	c, ok := client.(*redis.Client)
	return ok && c.Options().Addr == "FailoverClient"
}

// roleTimeout bounds the ROLE that resentOnReplica sends.
const roleTimeout = time.Second

// resentOnReplica returns err, an [ErrResent] of a call on s, as a
// configuration error when the server of a client with a fixed address
// says it is a replica: go-redis retried the call after a READONLY reply,
// and the mark refused the retry. Any other answer, or none, leaves err
// as it is.
func (s *Store) resentOnReplica(err error) error {
	c, ok := s.client.(*redis.Client)
	if !ok || sentinelClient(c) {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(roleTimeout, max(s.timeout, 100*time.Millisecond)))
	defer cancel()
	role, rerr := c.Do(ctx, "ROLE").Slice()
	if rerr != nil || len(role) == 0 {
		return err
	}
	if r, _ := role[0].(string); r != "slave" && r != "replica" {
		return err
	}
	master := ""
	if len(role) >= 3 {
		host, _ := role[1].(string)
		port, _ := role[2].(int64)
		master = net.JoinHostPort(host, strconv.FormatInt(port, 10))
	}
	return &configError{cause: readOnlyCause(c, master), err: readOnlyResent{err}}
}

// readOnlyResent is a marked call's [ErrResent] after a READONLY reply:
// it matches ErrResent, and says what happened.
type readOnlyResent struct{ err error }

func (e readOnlyResent) Error() string {
	return "READONLY: the server refused the call's writes, go-redis sent it again, and the store refused the resend"
}

func (e readOnlyResent) Unwrap() error { return e.err }
