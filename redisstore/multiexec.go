package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

var _ quota.LimitChecker = (*Store)(nil)

// CheckLimits implements [quota.LimitChecker]: in the MULTI/EXEC mode
// ([WithMultiExec]) a rule may have only [quota.FixedWindow] limits, and
// it must not wait (the mode makes no reservations: a request that cannot
// go now is refused with the time until its window ends), so
// throttle.NewTransport refuses any other rule at start-up. Nil in the Lua
// mode. A per-request waiter that allows a wait is still refused at once
// in that mode.
func (s *Store) CheckLimits(limits []quota.Limit, mayWait bool) error {
	if !s.multiExec {
		return nil
	}
	for j, l := range limits {
		if l.Algorithm != quota.FixedWindow {
			return &quota.FieldError{Field: fmt.Sprintf("Limits[%d].Algorithm", j),
				Err: fmt.Errorf("redisstore: the MULTI/EXEC mode supports only %v limits, not %v", quota.FixedWindow, l.Algorithm)}
		}
	}
	if mayWait {
		return &quota.FieldError{Field: "Wait",
			Err: errors.New("redisstore: the MULTI/EXEC mode makes no reservations, so a request cannot wait for its quota (nil means waiters.Block): use waiters.FailFast()")}
	}
	return nil
}

// takeMultiExec decides d without Lua (see [WithMultiExec]): one
// MULTI/EXEC that reads every pause's PTTL and, for every limit, adds the
// cost (INCRBY), starts the window if the key is new (PEXPIRE NX) and reads
// its PTTL.
func (s *Store) takeMultiExec(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	for i := range d.Limits {
		if a := d.Limits[i].Limit.Algorithm; a != quota.FixedWindow {
			return quota.Decision{}, fmt.Errorf("redisstore: limit %s: the MULTI/EXEC mode supports only %v, not %v", d.Limits[i].Limit.Name, quota.FixedWindow, a)
		}
	}
	ks := newKeys(s.prefix, d.Scope)
	ctx, cancel := s.callContext(ctx)
	defer cancel()

	pauses := make([]*redis.DurationCmd, len(d.Pauses))
	counts := make([]*redis.IntCmd, len(d.Limits))
	ttls := make([]*redis.DurationCmd, len(d.Limits))
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range d.Pauses {
			pauses[i] = p.PTTL(ctx, ks.txPause(k))
		}
		for i := range d.Limits {
			b := &d.Limits[i]
			key := ks.txCounter(b)
			counts[i] = p.IncrBy(ctx, key, int64(d.Cost))
			p.Do(ctx, "pexpire", key, ceilMillis(b.Limit.Per), "nx")
			ttls[i] = p.PTTL(ctx, key)
		}
		return nil
	})
	if err != nil {
		s.reload.note(err)
		return quota.Decision{}, fmt.Errorf("redisstore: take: %w", s.configErr(err))
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
		if c.Val() <= int64(d.Limits[i].Limit.Rate) {
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
		return quota.Decision{OK: true, Limit: -1, Reservation: &quota.Reservation{Demand: d, Marks: make([]int64, len(d.Limits))}}, nil
	}
	dec := quota.Decision{Delay: wait, Limit: binding}
	if binding < 0 {
		dec.Pause = d.Pauses[pause]
	}
	return dec, nil
}

// pauseMultiExec records a pause without Lua: the key's TTL is the pause.
// SET NX PX creates it, PEXPIRE GT lengthens an existing one.
func (s *Store) pauseMultiExec(ctx context.Context, ks keys, key string, d time.Duration) error {
	ms := ceilMillis(d)
	d = time.Duration(ms) * time.Millisecond
	k := ks.txPause(key)
	_, err := s.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.SetNX(ctx, k, 1, d)
		p.Do(ctx, "pexpire", k, ms, "gt")
		return nil
	})
	return err
}

// ceilMillis converts d to whole milliseconds, rounding up, at least 1.
func ceilMillis(d time.Duration) int64 {
	ms := d.Milliseconds()
	if time.Duration(ms)*time.Millisecond < d || ms < 1 {
		ms++
	}
	return max(ms, 1)
}
