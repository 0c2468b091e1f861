package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds the queue of released leases: Release does not call
// Redis itself. It queues the leases, and the next take.lua or claim.lua
// call of the same scope carries them, applied before its own decision
// (one round trip per request for an in-flight limit, not two). A queue
// that no such call empties within releaseLinger is sent on its own by
// release.lua, one call for everything queued by then, so a slot is freed
// at most about releaseLinger plus one round trip after Release returns,
// or after the takes of the scope then in flight end (batch.go), which
// then carry no timer per release.

// releaseLinger is how long released leases wait for a take or claim of
// their scope to carry them before they are sent on their own, counted
// from the release or, when takes of the scope are in flight then, from
// the end of the last of them.
const releaseLinger = time.Millisecond

// releaseRetry is how long a failed send of released leases waits before
// it is tried again. Leases whose lease time has passed since their
// release are dropped instead: they have expired in Redis by then.
const releaseRetry = 100 * time.Millisecond

// leaseRelease is one lease to remove: the concurrency key, the lease id
// and the channel that announces the removal.
type leaseRelease struct {
	key, id, channel string
	until            time.Time // local time after which the lease has expired anyway
}

// releaseQueue is a store's released leases, by scope. The zero value is
// ready.
type releaseQueue struct {
	mu     sync.Mutex
	scopes map[string]*scopeReleases
}

// scopeReleases is the queue of one scope.
type scopeReleases struct {
	pending []leaseRelease
	timer   *time.Timer   // non-nil while a send is scheduled
	sending chan struct{} // non-nil while release.lua is in flight; closed after
}

// add queues rs of scope and schedules their send, after delay, unless
// one is scheduled or in flight (which schedules the next when it ends).
// add copies rs.
func (q *releaseQueue) add(s *Store, scope string, rs []leaseRelease, delay time.Duration) {
	if len(rs) == 0 {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.scopes == nil {
		q.scopes = make(map[string]*scopeReleases)
	}
	sr := q.scopes[scope]
	if sr == nil {
		sr = &scopeReleases{}
		q.scopes[scope] = sr
	}
	sr.pending = append(sr.pending, rs...)
	// While a take of the scope is in flight (batch.go), its end arms the
	// timer (arm) if no later call carried the releases by then: no timer
	// is started and stopped per release under load.
	if sr.timer == nil && sr.sending == nil && !s.inFlight(scope) {
		sr.timer = time.AfterFunc(delay, func() { q.send(s, scope, sr) })
	}
}

// arm schedules the send of scope's queued releases after s.linger, when
// some wait and no send is scheduled or in flight: the last take of the
// scope in flight has ended without them (add did not arm).
func (q *releaseQueue) arm(s *Store, scope string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if sr := q.scopes[scope]; sr != nil && len(sr.pending) > 0 && sr.timer == nil && sr.sending == nil {
		sr.timer = time.AfterFunc(s.linger, func() { q.send(s, scope, sr) })
	}
}

// carry takes the queued releases of scope for a take or claim call to
// carry. It first waits out a send of scope's releases in flight, so
// that a release queued before the call is applied before it (a caller
// that releases and then takes again sees its slot free). The caller
// gives the releases back with giveBack if its call fails.
func (q *releaseQueue) carry(ctx context.Context, scope string) ([]leaseRelease, error) {
	q.mu.Lock()
	for {
		sr := q.scopes[scope]
		if sr == nil {
			q.mu.Unlock()
			return nil, nil
		}
		if sr.sending == nil {
			rs := sr.pending
			sr.pending = nil
			if sr.timer != nil && sr.timer.Stop() {
				sr.timer = nil
			}
			q.drop(scope, sr)
			q.mu.Unlock()
			return rs, nil
		}
		done := sr.sending
		q.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		q.mu.Lock()
	}
}

// giveBack queues again the releases that a failed call carried (or may
// have carried: applying them twice does nothing), less the expired ones.
func (q *releaseQueue) giveBack(s *Store, scope string, rs []leaseRelease, delay time.Duration) {
	q.add(s, scope, unexpired(rs, time.Now()), delay)
}

// drop forgets sr, the queue of scope, when nothing is queued, scheduled
// or in flight, so scopes released once do not stay in memory. q.mu is
// held.
func (q *releaseQueue) drop(scope string, sr *scopeReleases) {
	if len(sr.pending) == 0 && sr.timer == nil && sr.sending == nil && q.scopes[scope] == sr {
		delete(q.scopes, scope)
	}
}

// send sends the queued releases of scope, sr, in one release.lua call,
// and schedules what was queued meanwhile or what failed.
func (q *releaseQueue) send(s *Store, scope string, sr *scopeReleases) {
	q.mu.Lock()
	sr.timer = nil
	rs := sr.pending
	sr.pending = nil
	if len(rs) == 0 || q.scopes[scope] != sr {
		q.drop(scope, sr)
		q.mu.Unlock()
		return
	}
	done := make(chan struct{})
	sr.sending = done
	q.mu.Unlock()

	err := s.sendReleases(context.Background(), rs)

	q.mu.Lock()
	sr.sending = nil
	close(done)
	delay := s.linger
	if err != nil && !errors.Is(err, redis.ErrClosed) {
		sr.pending = append(unexpired(rs, time.Now()), sr.pending...)
		delay = releaseRetry
	}
	if len(sr.pending) > 0 {
		sr.timer = time.AfterFunc(delay, func() { q.send(s, scope, sr) })
	}
	q.drop(scope, sr)
	q.mu.Unlock()
}

// unexpired returns the releases of rs whose lease may still be live at
// now.
func unexpired(rs []leaseRelease, now time.Time) []leaseRelease {
	live := rs[:0:0]
	for _, r := range rs {
		if now.Before(r.until) {
			live = append(live, r)
		}
	}
	return live
}

// appendReleases appends the keys and arguments that carry rs to a
// script call, in release.lua's layout.
func appendReleases(keys []string, args []any, rs []leaseRelease) ([]string, []any) {
	for _, r := range rs {
		keys = append(keys, r.key)
		args = append(args, r.id, r.channel)
	}
	return keys, args
}

// appendReleaseRuns appends the keys and arguments that carry rs, grouped
// by key (groupReleases), to a take_batch.lua call, and returns the
// number of runs (keys): per run of releases of one key, the key in
// keys, and in args its lease ids, their number and the key's channel.
// A run of n releases so costs Redis one key and n + 2 arguments where
// release.lua's layout would cost n keys and 2n arguments.
func appendReleaseRuns(keys []string, args []any, rs []leaseRelease) ([]string, []any, int) {
	runs := 0
	for i := 0; i < len(rs); runs++ {
		j := i + 1
		for j < len(rs) && rs[j].key == rs[i].key {
			j++
		}
		keys = append(keys, rs[i].key)
		for _, r := range rs[i:j] {
			args = append(args, r.id)
		}
		args = append(args, j-i, rs[i].channel)
		i = j
	}
	return keys, args, runs
}

// sendReleases applies rs in one release.lua call.
func (s *Store) sendReleases(ctx context.Context, rs []leaseRelease) error {
	args, _ := s.scriptArgs(2*len(rs), "", false)
	keys, args := appendReleases(make([]string, 0, len(rs)), args, rs)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	return releaseScript.Run(ctx, s.client, keys, args...).Err()
}

// Flush sends now the released leases that wait to ride on a later call
// (see [Store.Release]), in one call per scope, and returns the first
// error. Call it before a graceful shutdown, so that slots released in the
// last millisecond are free at once rather than when their leases expire.
func (s *Store) Flush(ctx context.Context) error {
	s.releases.mu.Lock()
	scopes := make([]string, 0, len(s.releases.scopes))
	for scope := range s.releases.scopes {
		scopes = append(scopes, scope)
	}
	s.releases.mu.Unlock()
	var first error
	for _, scope := range scopes {
		if err := s.flushScope(ctx, scope); err != nil && first == nil {
			first = fmt.Errorf("redisstore: flush: %w", err)
		}
	}
	return first
}

// flushScope sends the queued releases of scope now, after any send in
// flight, so that a call that reads lease state (Renew, Inspect) sees
// them applied.
func (s *Store) flushScope(ctx context.Context, scope string) error {
	rs, err := s.releases.carry(ctx, scope)
	if err != nil || len(rs) == 0 {
		return err
	}
	if err := s.sendReleases(ctx, rs); err != nil {
		if !errors.Is(err, redis.ErrClosed) {
			s.releases.giveBack(s, scope, rs, releaseRetry)
		}
		return s.configErr(err)
	}
	return nil
}
