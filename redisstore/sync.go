package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/redis/go-redis/v9"
)

var _ quota.Syncer = (*Store)(nil)

// Sync implements [quota.Syncer] in one round trip, on Redis's clock:
// it lowers b's counter so that at most remaining more units pass before
// the vendor's reset, within from now, and never raises it. In the
// MULTI/EXEC mode ([WithMultiExec]) it raises the current window's counter
// the same way, with INCRBY.
func (s *Store) Sync(ctx context.Context, scope string, b quota.Bucket, remaining int, within time.Duration) error {
	l := b.Limit
	if l.Rate <= 0 || l.Per < time.Microsecond || l.Burst < 0 {
		return errors.New("redisstore: sync: invalid limit")
	}
	if l.Algorithm == quota.Concurrency {
		return errors.New("redisstore: sync: a concurrency limit is not a rate")
	}
	if within <= 0 {
		return nil
	}
	left := int64(max(remaining, 0))
	p, rate := l.Per.Microseconds(), int64(l.Rate)
	ks := newKeys(s.prefix, scope)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	if s.multiExec {
		if left >= rate {
			return nil
		}
		return s.syncMultiExec(ctx, ks, &b, rate-left)
	}
	w := (within + time.Microsecond - 1) / time.Microsecond
	var args []any
	switch l.Algorithm {
	case quota.GCRA:
		bu := int64(l.BurstOrRate())
		if left >= bu {
			return nil
		}
		t := (p + rate - 1) / rate
		args = []any{s.nowArg(), 0, int64(w), (bu - left) * t}
	default:
		if left >= rate {
			return nil
		}
		args = []any{s.nowArg(), int(l.Algorithm), int64(w), p, rate - left, s.nextID()}
	}
	if err := syncScript.Run(ctx, s.client, []string{ks.limit(&b)}, args...).Err(); err != nil {
		s.reload.note(err)
		return fmt.Errorf("redisstore: sync: %w", s.configErr(err))
	}
	return nil
}

// syncMultiExec raises b's MULTI/EXEC window counter to at least target,
// with WATCH so that a concurrent INCRBY is never overwritten; a lost race
// is retried a few times, then left (the counter then already rose).
func (s *Store) syncMultiExec(ctx context.Context, ks keys, b *quota.Bucket, target int64) error {
	key := ks.txCounter(b)
	var err error
	for range 3 {
		err = s.client.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := tx.Get(ctx, key).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if cur >= target {
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.IncrBy(ctx, key, target-cur)
				p.Do(ctx, "pexpire", key, ceilMillis(b.Limit.Per), "nx")
				return nil
			})
			return err
		}, key)
		if !errors.Is(err, redis.TxFailedErr) {
			break
		}
	}
	if err != nil && !errors.Is(err, redis.TxFailedErr) {
		s.reload.note(err)
		return fmt.Errorf("redisstore: sync: %w", s.configErr(err))
	}
	return nil
}
