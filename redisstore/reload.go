package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultReloadEvery is the least time between two cluster state reloads
// of a [Store] made without [WithClusterReload].
const DefaultReloadEvery = 250 * time.Millisecond

// WithClusterReload sets the least time between two reloads of the
// cluster state that the store asks of a *redis.ClusterClient after a
// connection-class error (see [Store] and the package documentation,
// "When Redis fails"). A negative d turns the reloads off; zero means
// [DefaultReloadEvery]. It has no effect with other clients.
func WithClusterReload(d time.Duration) Option {
	return func(s *Store) { s.reload.every = d }
}

// reloader asks a ClusterClient to reload its view of the cluster when a
// call failed in a way that suggests the topology changed (a master that
// died, a node that stopped answering), at most once per every.
//
// Without it, go-redis keeps sending a dead master's slots to its address
// until the next periodic reload (ClusterStateReloadInterval, 60 s by
// default): the dead node answers nothing, so no MOVED ever corrects the
// client. Reloading on such errors makes the client find the promoted
// replica as soon as the cluster has promoted it.
type reloader struct {
	cc    *redis.ClusterClient // nil: not a cluster, nothing to do
	every time.Duration        // < 0: off
	now   func() time.Time
	last  atomic.Int64 // UnixNano of the last reload asked for
	count atomic.Int64 // reloads asked for, for tests
}

// init sets up r for client, after the options were applied.
func (r *reloader) init(client redis.UniversalClient) {
	r.cc, _ = client.(*redis.ClusterClient)
	if r.every == 0 {
		r.every = DefaultReloadEvery
	}
	if r.now == nil {
		r.now = time.Now
	}
}

// note looks at err, from a call to Redis, and asks for a reload of the
// cluster state if it is connection-class and the last reload was asked
// for long enough ago. ClusterClient.ReloadState returns at once (go-redis
// reloads on a goroutine of its own and merges reloads asked for while one
// runs), so note never delays the caller.
func (r *reloader) note(err error) {
	if r.cc == nil || r.every < 0 || !connectionClass(err) {
		return
	}
	now := r.now().UnixNano()
	last := r.last.Load()
	if last != 0 && now-last < int64(r.every) {
		return
	}
	if !r.last.CompareAndSwap(last, now) {
		return // another call is asking at the same moment
	}
	r.count.Add(1)
	r.cc.ReloadState(context.Background())
}

// connectionClass reports whether err says that a node could not be
// reached or did not answer, or that the cluster is reorganising, as
// opposed to an answer (a script error, BUSY, NOSCRIPT) or a client that
// was closed on purpose.
func connectionClass(err error) bool {
	if err == nil || errors.Is(err, redis.ErrClosed) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if errors.As(err, &ne) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var re redis.Error
	if errors.As(err, &re) {
		msg := re.Error()
		for _, p := range []string{"CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN"} {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}
