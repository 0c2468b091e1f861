package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// This file holds the Concurrency limits' lease operations: Claim and
// Renew (one script call each), Release (queued: releases.go), and the
// release notifications that wake waiters, over one shared pub/sub
// connection per store.

var _ quota.LeaseStore = (*Store)(nil)

// leaseKeys returns the concurrency keys of r's demand and, through add,
// one argument per key.
func (s *Store) leaseKeys(r *quota.Reservation, add func(ks keys, b *quota.Bucket)) ([]string, error) {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) || r.ID == "" {
		return nil, errors.New("redisstore: malformed reservation")
	}
	d := r.Demand
	ks := s.keysOf(d.Scope)
	var keys []string
	for i := range d.Limits {
		b := &d.Limits[i]
		if b.Limit.Algorithm == quota.Concurrency {
			keys = append(keys, ks.limit(b))
			add(ks, b)
		}
	}
	return keys, nil
}

// markUnclaimed marks r, just granted by take.lua, as unclaimed when a
// Concurrency limit's mark is 0: a reservation for a later instant, whose
// slots take.lua left to Claim. The mark, not the delay, says so, since a
// remembered reply (ReplayIDs) may be given after the instant has passed.
func markUnclaimed(r *quota.Reservation) {
	for i := range r.Demand.Limits {
		if r.Demand.Limits[i].Limit.Algorithm == quota.Concurrency && r.Marks[i] == 0 {
			r.Unclaimed = true
		}
	}
}

// Claim implements [quota.LeaseStore.Claim] in one round trip, on
// Redis's clock (claim.lua). A claim sent again by go-redis runs as the
// first did (the lease id is already held), so it needs no resend mark.
func (s *Store) Claim(ctx context.Context, r *quota.Reservation) (quota.Decision, error) {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return quota.Decision{}, errors.New("redisstore: claim: malformed reservation")
	}
	if !r.Unclaimed {
		return quota.Decision{OK: true, Limit: -1, Reservation: r}, nil
	}
	args, _ := s.scriptArgs(1, r.ID, false)
	args = append(args, 0)
	var idx []int // limit index of each key
	keys, err := s.leaseKeys(r, func(_ keys, b *quota.Bucket) {
		args = append(args, b.Limit.Per.Microseconds(), b.Limit.Rate)
	})
	if err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	for i := range r.Demand.Limits {
		if r.Demand.Limits[i].Limit.Algorithm == quota.Concurrency {
			idx = append(idx, i)
		}
	}
	c := newReservation(r.Demand, r.ID)
	copy(c.Marks, r.Marks)
	if len(keys) == 0 {
		return quota.Decision{OK: true, Limit: -1, Reservation: c}, nil
	}
	nc := len(keys)
	carried, err := s.releases.carry(ctx, r.Demand.Scope)
	if err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: claim: %w", err)
	}
	args[2] = len(carried)
	keys, args = appendReleases(keys, args, carried)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	res, err := s.run(ctx, claimScript, nil, keys, args...).Int64Slice()
	if err != nil {
		s.reload.note(err)
		s.releases.giveBack(s, r.Demand.Scope, carried, releaseRetry)
		return quota.Decision{}, fmt.Errorf("redisstore: claim: %w", s.configErr(err))
	}
	switch {
	case len(res) == 1+nc && res[0] == 1:
		for k, i := range idx {
			c.Marks[i] = res[1+k]
		}
		return quota.Decision{OK: true, Limit: -1, Reservation: c}, nil
	case len(res) == 3 && res[0] == 0 && res[1] >= 0 && res[2] >= 1 && res[2] <= int64(len(idx)):
		return quota.Decision{Delay: time.Duration(res[1]) * time.Microsecond, Limit: idx[res[2]-1]}, nil
	}
	return quota.Decision{}, fmt.Errorf("redisstore: claim: malformed reply %v", res)
}

// Release implements [quota.LeaseStore.Release] without a round trip
// of its own: it queues r's leases and returns. The next Take or Claim of
// r's scope that this store sends carries them and applies them first,
// in the same script; leases that no such call carries within a
// millisecond are sent together in one call (releases.go). A slot is so
// freed at most about a millisecond and one round trip after Release
// returns, and a Take or Claim of the scope sent after Release returns
// sees it free. Sending is retried while Redis fails, until the lease
// would have expired anyway. Each removal is announced on the bucket's
// channel, which wakes waiters (WatchRelease). Releasing twice does
// nothing.
func (s *Store) Release(_ context.Context, r *quota.Reservation) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) || r.ID == "" {
		return errors.New("redisstore: release: malformed reservation")
	}
	d := r.Demand
	var ks keys
	var buf [2]leaseRelease
	rs := buf[:0]
	until := time.Now()
	for i := range d.Limits {
		if b := &d.Limits[i]; b.Limit.Algorithm == quota.Concurrency {
			if ks.base == "" {
				ks = newKeys(s.prefix, d.Scope)
			}
			rs = append(rs, leaseRelease{key: ks.limit(b), id: r.ID, channel: ks.released(b), until: until.Add(b.Limit.Per)})
		}
	}
	s.releases.add(s, d.Scope, rs, s.linger)
	return nil
}

// Renew implements [quota.LeaseStore.Renew] in one round trip, on
// Redis's clock. A lease that is gone is reported with an error wrapping
// [quota.ErrLeaseLost] and is not taken again.
func (s *Store) Renew(ctx context.Context, r *quota.Reservation) error {
	args, _ := s.scriptArgs(1, "", false) // the id once r is checked
	var names []string
	keys, err := s.leaseKeys(r, func(_ keys, b *quota.Bucket) {
		args = append(args, b.Limit.Per.Microseconds())
		names = append(names, b.Limit.Name)
	})
	if err != nil {
		return fmt.Errorf("redisstore: renew: %w", err)
	}
	if len(keys) == 0 {
		return nil
	}
	if err := s.flushScope(ctx, r.Demand.Scope); err != nil { // a lease released before is lost
		return fmt.Errorf("redisstore: renew: %w", err)
	}
	args[1] = r.ID
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	lost, err := renewScript.Run(ctx, s.client, keys, args...).Int64()
	if err != nil {
		return fmt.Errorf("redisstore: renew: %w", s.configErr(err))
	}
	if lost < 0 || lost > int64(len(names)) {
		return fmt.Errorf("redisstore: renew: malformed reply %d", lost)
	}
	if lost > 0 {
		return fmt.Errorf("redisstore: renew: limit %s: %w", names[lost-1], quota.ErrLeaseLost)
	}
	return nil
}

// WatchRelease implements [quota.LeaseStore.WatchRelease] with Redis
// pub/sub. The store keeps one subscriber connection while anything is
// watched, subscribed to the channels of the watched buckets only, and
// closes it when the last watch stops, so an idle store holds no
// connection or goroutine. Each release message wakes the oldest watcher
// of its bucket in this store that has no wake-up pending (a message of
// n slots freed at once, the n oldest); after a
// reconnection, which may have lost messages, every watcher wakes.
//
// It returns once Redis has confirmed the subscription, or after the
// per-call timeout; wake-ups sent before the confirmation may be lost,
// which the caller's timer covers.
func (s *Store) WatchRelease(ctx context.Context, scope string, b quota.Bucket) (<-chan struct{}, func(), error) {
	ch := newKeys(s.prefix, scope).released(&b)
	c, ready, stop, err := s.hub.watch(ctx, s.client, ch)
	if err != nil {
		return nil, nil, fmt.Errorf("redisstore: watch: %w", s.configErr(err))
	}
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	select {
	case <-ready:
	case <-ctx.Done(): // go on; the caller's timer covers a missed wake-up
	}
	return c, stop, nil
}

// hub is a store's release subscriptions. The zero value is ready.
type hub struct {
	mu    sync.Mutex
	ps    *redis.PubSub
	done  chan struct{} // closed when ps's reader has ended
	chans map[string]*watched
}

// watched is the local watchers of one channel, oldest first.
type watched struct {
	waiters []chan struct{}
	ready   chan struct{} // closed once Redis confirmed the subscription
}

// watch adds a watcher of channel ch, subscribing if it is the first.
func (h *hub) watch(ctx context.Context, client redis.UniversalClient, ch string) (c chan struct{}, ready <-chan struct{}, stop func(), err error) {
	h.mu.Lock()
	if h.ps == nil {
		h.ps = client.Subscribe(context.WithoutCancel(ctx))
		h.done = make(chan struct{})
		h.chans = make(map[string]*watched)
		go h.read(h.ps, h.ps.ChannelWithSubscriptions(), h.done)
	}
	ps := h.ps
	w := h.chans[ch]
	first := w == nil
	if first {
		w = &watched{ready: make(chan struct{})}
		h.chans[ch] = w
	}
	c = make(chan struct{}, 1)
	w.waiters = append(w.waiters, c)
	h.mu.Unlock()

	var once sync.Once
	stop = func() { once.Do(func() { h.unwatch(ch, w, c) }) }
	if first {
		if err := ps.Subscribe(ctx, ch); err != nil {
			stop()
			return nil, nil, nil, err
		}
	}
	return c, w.ready, stop, nil
}

// unwatch removes watcher c of ch; it unsubscribes when ch has no watcher
// left, and closes the connection when nothing is watched.
func (h *hub) unwatch(ch string, w *watched, c chan struct{}) {
	h.mu.Lock()
	if i := slices.Index(w.waiters, c); i >= 0 {
		w.waiters = slices.Delete(w.waiters, i, i+1)
	}
	if len(w.waiters) > 0 || h.chans[ch] != w {
		h.mu.Unlock()
		return
	}
	delete(h.chans, ch)
	ps, done := h.ps, h.done
	if len(h.chans) > 0 {
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = ps.Unsubscribe(ctx, ch) // a failure only leaves messages to ignore
		return
	}
	h.ps, h.done, h.chans = nil, nil, nil
	h.mu.Unlock()
	_ = ps.Close()
	<-done
}

// read dispatches ps's messages until ps is closed.
func (h *hub) read(ps *redis.PubSub, msgs <-chan any, done chan struct{}) {
	defer close(done)
	for m := range msgs {
		h.mu.Lock()
		if h.ps != ps {
			h.mu.Unlock()
			continue
		}
		switch m := m.(type) {
		case *redis.Subscription:
			if w := h.chans[m.Channel]; w != nil && m.Kind == "subscribe" {
				select {
				case <-w.ready: // again: a reconnection, which may have lost messages
					for _, c := range w.waiters {
						signal(c)
					}
				default:
					close(w.ready)
				}
			}
		case *redis.Message:
			// The payload is how many slots were freed (take_batch.lua
			// announces a run of releases at once): wake as many.
			if w := h.chans[m.Channel]; w != nil {
				n, err := strconv.Atoi(m.Payload)
				if err != nil || n < 1 {
					n = 1
				}
				for _, c := range w.waiters {
					if n == 0 {
						break
					}
					if signal(c) {
						n--
					}
				}
			}
		}
		h.mu.Unlock()
	}
}

// signal sends to c unless a signal is pending; it reports whether it sent.
func signal(c chan struct{}) bool {
	select {
	case c <- struct{}{}:
		return true
	default:
		return false
	}
}
