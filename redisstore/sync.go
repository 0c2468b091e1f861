package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Syncer = (*Store)(nil)

// checkSyncLimit returns an error for a limit that Sync cannot lower:
// one that [quota.Limit.Validate] refuses (its arithmetic would not be
// exact), or a concurrency limit.
func checkSyncLimit(l *quota.Limit) error {
	if err := l.Validate(); err != nil {
		return fmt.Errorf("redisstore: sync: invalid limit: %w", err)
	}
	if l.Algorithm == quota.Concurrency {
		return errors.New("redisstore: sync: a concurrency limit is not a rate")
	}
	return nil
}

// Sync implements [quota.Syncer] in one round trip, on Redis's clock:
// it lowers b's counter so that at most remaining more units pass before
// the vendor's reset, within from now, and never raises it. A window
// limit whose reset is several windows away writes one count per window
// until it.
func (s *Store) Sync(ctx context.Context, scope string, b quota.Bucket, remaining int, within time.Duration) error {
	l := b.Limit
	if err := checkSyncLimit(&l); err != nil || within <= 0 {
		return err
	}
	left := int64(max(remaining, 0))
	p, rate := l.Per.Microseconds(), int64(l.Rate)
	ks := newKeys(s.prefix, scope)
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	w := quotamath.CeilMicros(within)
	var args []any
	switch l.Algorithm {
	case quota.GCRA:
		bu := int64(l.BurstOrRate())
		if left >= bu {
			return nil
		}
		// (Burst - left)*T, "q" or "q:r" (sync.lua).
		args, _ = s.scriptArgs(3, "", false)
		ql := quotamath.Of(l)
		args = append(args, algoCode(l.Algorithm), int64(w), timeArg(ql.Emissions(bu-left), 0))
	default:
		if left >= rate {
			return nil
		}
		args, _ = s.scriptArgs(6, s.nextID(), false)
		args = append(args, algoCode(l.Algorithm), int64(w), p, rate-left)
		if l.Windowed() {
			args = append(args, rate, phaseArg(&l))
		}
	}
	if err := syncScript.Run(ctx, s.client, []string{ks.limit(&b)}, args...).Err(); err != nil {
		s.reload.note(err)
		return fmt.Errorf("redisstore: sync: %w", s.configErr(err))
	}
	return nil
}
