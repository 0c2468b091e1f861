package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/quotakit/throttle/internal/quotamath"
	"github.com/quotakit/throttle/quota"
)

var _ quota.Anchorer = (*Store)(nil)

// Anchor implements [quota.Anchorer] in one round trip, on Redis's clock:
// anchor.lua moves the windows of b's counter, kept in its hash with the
// counts, so every instance sharing the Redis counts on them from the
// next decision on.
func (s *Store) Anchor(ctx context.Context, scope string, b quota.Bucket, within, tolerance time.Duration) (time.Duration, bool, error) {
	l := b.Limit
	if err := l.Validate(); err != nil {
		return 0, false, fmt.Errorf("redisstore: anchor: limit: %w", err)
	}
	if !l.Anchored {
		return 0, false, fmt.Errorf("redisstore: anchor: limit %s: %w: not Anchored", l.Name, quota.ErrInvalid)
	}
	ks := newKeys(s.prefix, scope)
	args, _ := s.scriptArgs(4, "", false)
	args = append(args, algoCode(l.Algorithm), l.Per.Microseconds(), quotamath.CeilMicros(within), max(tolerance, 0).Microseconds())
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	res, err := anchorScript.Run(ctx, s.client, []string{ks.limit(&b)}, args...).Int64Slice()
	if err != nil {
		s.reload.note(err)
		return 0, false, fmt.Errorf("redisstore: anchor: %w", s.configErr(err))
	}
	if len(res) != 2 || res[1] < 0 {
		return 0, false, fmt.Errorf("redisstore: anchor: malformed reply %v", res)
	}
	return quotamath.Micros(res[1]), res[0] == 1, nil
}
