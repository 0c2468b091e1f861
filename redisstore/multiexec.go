package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

// MultiExecStore is a [quota.Store] kept in Redis without Lua, for
// deployments behind proxies that do not run scripts. Each decision is one
// MULTI/EXEC transaction: INCRBY and PEXPIRE NX on a counter per limit,
// and PTTL of every pause. It is safe for concurrent use.
//
// It keeps fewer promises than [Store], and says so in its name:
//
//   - Fixed windows only. A [quota.FixedWindow] window starts at the first
//     charge of its key and lasts Per by Redis's clock (PEXPIRE NX),
//     rather than being aligned to the epoch. Take returns an error for a
//     demand with a limit of any other algorithm, or with a Phase or
//     Anchored (it is not a [quota.Anchorer]).
//   - No reservations, so no waiting: a demand is granted only if every
//     limit and pause lets it go now. MaxWait is ignored; on refusal,
//     Delay is the time until the binding window or pause ends.
//   - Refused demands over-count: every limit is charged before the counts
//     are known, and nothing is given back, so a refused demand still uses
//     the quota of the limits that had room until their windows end. Under
//     overload fewer than Rate may pass in a window; never more.
//   - Cancel gives back nothing.
//   - Decision.ResetAfter is the window's PTTL rounded up to the next
//     millisecond, not the exact microsecond of [Store].
//   - No [quota.Concurrency] limits: it is not a [quota.LeaseStore]; nor
//     a [quota.Inspector].
//   - No fair shares: a demand with a [quota.Bucket].Tenant is an error.
//     A headroom (Bucket.Headroom) is kept, like Rate, by the count
//     after the INCRBY, and never lent (quota.Store, Lent headroom).
//
// Pauses work as in [Store], and so does [MultiExecStore.Sync] for fixed
// windows. [MultiExecStore.CheckLimits] lets throttle.NewTransport refuse,
// at start-up, a rule the store cannot decide as written.
type MultiExecStore struct {
	s *Store // the client, prefix, timeout and error handling; it runs no script
}

var (
	_ quota.Store        = (*MultiExecStore)(nil)
	_ quota.LimitChecker = (*MultiExecStore)(nil)
	_ quota.Syncer       = (*MultiExecStore)(nil)
)

// NewMultiExec returns a MultiExecStore that keeps its state in Redis
// through client, as [New] does for a [Store], with [New]'s options; of
// those, only [WithPrefix], [WithTimeout] and [WithClusterReload] change
// what it does (the others are about scripts). Its keys differ from a
// Store's: the two never share counters. NewMultiExec does not contact
// Redis.
func NewMultiExec(client redis.UniversalClient, opts ...Option) (*MultiExecStore, error) {
	s, err := New(client, opts...)
	if err != nil {
		return nil, err
	}
	return &MultiExecStore{s: s}, nil
}

// CheckLimits implements [quota.LimitChecker]: a rule may have only
// [quota.FixedWindow] limits, and it must not wait (the store makes no
// reservations: a request that cannot go now is refused with the time
// until its window ends), so throttle.NewTransport refuses any other rule
// at start-up. A per-request waiter that allows a wait is still refused
// at once.
func (m *MultiExecStore) CheckLimits(limits []quota.Limit, mayWait bool) error {
	for j, l := range limits {
		if l.Algorithm != quota.FixedWindow {
			return &quota.FieldError{Field: fmt.Sprintf("Limits[%d].Algorithm", j),
				Err: fmt.Errorf("redisstore: the MULTI/EXEC store supports only %v limits, not %v", quota.FixedWindow, l.Algorithm)}
		}
		if field, err := txWindows(&l); err != nil {
			return &quota.FieldError{Field: fmt.Sprintf("Limits[%d].%s", j, field), Err: err}
		}
	}
	if mayWait {
		return &quota.FieldError{Field: "Wait",
			Err: errors.New("redisstore: the MULTI/EXEC store makes no reservations, so a request cannot wait for its quota (nil means waiters.Block): use waiters.FailFast()")}
	}
	return nil
}

// Take implements [quota.Store.Take] in one MULTI/EXEC that reads every
// pause's PTTL and, for every limit, adds the cost (INCRBY), starts the
// window if the key is new (PEXPIRE NX) and reads its PTTL. See
// [MultiExecStore] for what it does not do. An error wraps the go-redis
// or context error; the demand may then have been charged.
func (m *MultiExecStore) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	if err := d.Validate(); err != nil {
		return quota.Decision{}, fmt.Errorf("redisstore: %w", err)
	}
	for i := range d.Limits {
		if a := d.Limits[i].Limit.Algorithm; a != quota.FixedWindow {
			return quota.Decision{}, fmt.Errorf("redisstore: limit %s: the MULTI/EXEC store supports only %v, not %v", d.Limits[i].Limit.Name, quota.FixedWindow, a)
		}
		if _, err := txWindows(&d.Limits[i].Limit); err != nil {
			return quota.Decision{}, fmt.Errorf("redisstore: limit %s: %w", d.Limits[i].Limit.Name, err)
		}
		if d.Limits[i].Tenant != "" {
			return quota.Decision{}, fmt.Errorf("redisstore: %w", &quota.FieldError{Field: fmt.Sprintf("Limits[%d].Tenant", i),
				Err: errors.New("the MULTI/EXEC store cannot share a limit among tenants")})
		}
	}
	ks := newKeys(m.s.prefix, d.Scope)
	ctx, cancel := m.s.callContext(ctx)
	defer cancel()

	pauses := make([]*redis.DurationCmd, len(d.Pauses))
	counts := make([]*redis.IntCmd, len(d.Limits))
	ttls := make([]*redis.DurationCmd, len(d.Limits))
	_, err := m.s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range d.Pauses {
			pauses[i] = p.PTTL(ctx, ks.txPause(k))
		}
		for i := range d.Limits {
			b := &d.Limits[i]
			key := ks.txCounter(b)
			counts[i] = p.IncrBy(ctx, key, int64(d.CostOf(i)))
			p.Do(ctx, "pexpire", key, ceilMillis(b.Limit.Per), "nx")
			ttls[i] = p.PTTL(ctx, key)
		}
		return nil
	})
	if err != nil {
		m.s.reload.note(err)
		return quota.Decision{}, fmt.Errorf("redisstore: take: %w", m.s.configErr(err))
	}

	// PTTL is whole milliseconds, truncated; one more is never early.
	var wait time.Duration
	binding, pause := -1, -1
	for i, c := range pauses {
		if ttl := c.Val(); ttl > 0 && ttl+time.Millisecond > wait {
			wait, pause = ttl+time.Millisecond, i
		}
	}
	for i, c := range counts {
		if c.Val() <= int64(d.Limits[i].Limit.Rate-d.Limits[i].Headroom) {
			continue
		}
		ttl := ttls[i].Val()
		if ttl < 0 {
			ttl = 0
		}
		if ttl+time.Millisecond > wait {
			wait, binding = ttl+time.Millisecond, i
		}
	}
	if binding < 0 && pause < 0 {
		// Remaining and ResetAfter from the counts and the windows' TTLs
		// (whole milliseconds, rounded up: the window's end, never early).
		dec := quota.Decision{OK: true, Limit: -1, Reservation: &quota.Reservation{Demand: d, Marks: make([]int64, len(d.Limits))}}
		dec.Remaining = math.MaxInt64
		for i, c := range counts {
			dec.Remaining = min(dec.Remaining, int64(d.Limits[i].Limit.Rate-d.Limits[i].Headroom)-c.Val())
			dec.ResetAfter = max(dec.ResetAfter, ttls[i].Val()+time.Millisecond)
		}
		if len(counts) == 0 {
			dec.Remaining = 0
		}
		return dec, nil
	}
	dec := quota.Decision{Delay: wait, Limit: binding}
	if binding < 0 {
		dec.Pause = d.Pauses[pause]
	}
	return dec, nil
}

// Cancel implements [quota.Store.Cancel] by giving back nothing: the
// counters of a MultiExecStore cannot tell one charge from another. It
// returns an error only for a malformed reservation.
func (m *MultiExecStore) Cancel(_ context.Context, r *quota.Reservation) error {
	if r == nil || r.Demand == nil || len(r.Marks) != len(r.Demand.Limits) {
		return errors.New("redisstore: cancel: malformed reservation")
	}
	return nil
}

// Pause implements [quota.Store.Pause] in one MULTI/EXEC: the pause key's
// TTL is the pause, in whole milliseconds rounded up. SET NX PX creates
// it, PEXPIRE GT lengthens an existing one. A non-positive d is a no-op.
func (m *MultiExecStore) Pause(ctx context.Context, scope, key string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	ctx, cancel := m.s.callContext(ctx)
	defer cancel()
	if err := m.pause(ctx, newKeys(m.s.prefix, scope), key, d); err != nil {
		m.s.reload.note(err)
		return fmt.Errorf("redisstore: pause: %w", m.s.configErr(err))
	}
	return nil
}

func (m *MultiExecStore) pause(ctx context.Context, ks keys, key string, d time.Duration) error {
	ms := ceilMillis(d)
	d = time.Duration(ms) * time.Millisecond
	k := ks.txPause(key)
	_, err := m.s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, k, 1, d)
		p.Do(ctx, "pexpire", k, ms, "gt")
		return nil
	})
	return err
}

// Sync implements [quota.Syncer]: it raises the counter of b's current
// window to at least Rate - remaining, never lowering it, so that at most
// remaining more units pass before the window ends (within is not used:
// the window's own end stands for the vendor's reset). It uses WATCH, so
// that a concurrent INCRBY is never overwritten; a lost race is retried a
// few times, then left (the counter then already rose).
func (m *MultiExecStore) Sync(ctx context.Context, scope string, b quota.Bucket, remaining int, within time.Duration) error {
	l := b.Limit
	if err := checkSyncLimit(&l); err != nil || within <= 0 {
		return err
	}
	left, rate := int64(max(remaining, 0)), int64(l.Rate)
	if left >= rate {
		return nil
	}
	target := rate - left
	ks := newKeys(m.s.prefix, scope)
	ctx, cancel := m.s.callContext(ctx)
	defer cancel()
	key := ks.txCounter(&b)
	var err error
	for range 3 {
		err = m.s.client.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := tx.Get(ctx, key).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if cur >= target {
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.IncrBy(ctx, key, target-cur)
				p.Do(ctx, "pexpire", key, ceilMillis(l.Per), "nx")
				return nil
			})
			return err
		}, key)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil && !errors.Is(err, redis.TxFailedErr) {
		m.s.reload.note(err)
		return fmt.Errorf("redisstore: sync: %w", m.s.configErr(err))
	}
	return nil
}

// Check implements what [Store.Check] does, without scripts: it checks
// the client's kind against the server, records a pause of 1µs on a scope
// no rule can have with MULTI/EXEC (which needs MULTI, EXEC, SET, PEXPIRE
// and write access under the prefix), and opens connections as
// [Store.Check] does. It loads no script.
func (m *MultiExecStore) Check(ctx context.Context) error {
	return m.s.runCheck(ctx, func(ctx context.Context) error {
		if err := m.s.checkKind(ctx); err != nil {
			return err
		}
		if err := m.pause(ctx, newKeys(m.s.prefix, checkScope), "", time.Microsecond); err != nil {
			return fmt.Errorf("MULTI/EXEC: %w", err)
		}
		return m.s.warm(ctx)
	})
}

// txWindows reports the field of a limit whose windows the MULTI/EXEC
// store cannot place, which starts each window at its key's first charge:
// a Phase, or Anchored.
func txWindows(l *quota.Limit) (field string, err error) {
	switch {
	case l.Phase != 0:
		return "Phase", fmt.Errorf("redisstore: the MULTI/EXEC store starts each window at its first charge, so it cannot honour a Phase: %w", quota.ErrInvalid)
	case l.Anchored:
		return "Anchored", fmt.Errorf("redisstore: the MULTI/EXEC store cannot move windows (it is not a quota.Anchorer): %w", quota.ErrInvalid)
	}
	return "", nil
}

// ceilMillis converts d to whole milliseconds, rounding up, at least 1.
func ceilMillis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if time.Duration(ms)*time.Millisecond < d || ms < 1 {
		ms++
	}
	return max(ms, 1)
}
