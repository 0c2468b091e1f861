package main

import (
	"context"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ulule "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"
)

// A decider asks one limiter instance for one unit of quota. ok reports
// whether it was granted; when not, retry is how long the library says to
// wait before asking again (zero when it does not say). It is safe for
// concurrent use.
type decider func(ctx context.Context) (ok bool, retry time.Duration, err error)

// A library makes the deciders of one contender. Every part builds its
// contenders from the same libraries, so every library gets the same
// limit, key and client in a part.
type library struct {
	name string

	// local reports that the library decides in process: instances share
	// nothing, and no Redis is involved.
	local bool

	// new returns one instance's decider for a limit of rate per second
	// with a burst of rate, on key, through client c (nil when local).
	new func(c *redis.Client, key string, rate int) (decider, error)
}

// redisRate is go-redis/redis_rate v10: GCRA in one Lua script.
var redisRate = library{name: "redis_rate v10 (GCRA)", new: func(c *redis.Client, key string, r int) (decider, error) {
	l, limit := redis_rate.NewLimiter(c), redis_rate.PerSecond(r)
	return func(ctx context.Context) (bool, time.Duration, error) {
		res, err := l.Allow(ctx, key, limit)
		if err != nil {
			return false, 0, err
		}
		return res.Allowed > 0, max(res.RetryAfter, 0), nil
	}, nil
}}

// ululeLimiter is ulule/limiter v3 with its Redis store: a fixed window
// (INCRBY and PEXPIRE in a Lua script) that starts at the first request.
// Its only hint for a refused caller is Reset, the window's end in whole
// Unix seconds.
var ululeLimiter = library{name: "ulule/limiter v3 (fixed window)", new: func(c *redis.Client, key string, r int) (decider, error) {
	st, err := ulule.NewStoreWithOptions(c, limiter.StoreOptions{Prefix: "ulule", MaxRetry: 3})
	if err != nil {
		return nil, err
	}
	l := limiter.New(st, limiter.Rate{Period: time.Second, Limit: int64(r)})
	return func(ctx context.Context) (bool, time.Duration, error) {
		res, err := l.Get(ctx, key)
		if err != nil {
			return false, 0, err
		}
		return !res.Reached, max(time.Until(time.Unix(res.Reset, 0)), 0), nil
	}, nil
}}

// throttledGCRA is throttled/throttled v2's GCRA over its go-redis v9
// store: a pipelined TIME and GET, then a compare-and-swap script (or
// SETNX and EXPIRE for a new key), retried up to 10 times on a conflict.
// MaxBurst is the burst beyond the first request, so rate-1 is a burst of
// rate, as for the others.
var throttledGCRA = library{name: "throttled v2 (GCRA)", new: func(c *redis.Client, key string, r int) (decider, error) {
	st, err := goredisstore.NewCtx(c, "throttled:")
	if err != nil {
		return nil, err
	}
	l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(r), MaxBurst: r - 1})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (bool, time.Duration, error) {
		limited, res, err := l.RateLimitCtx(ctx, key, 1)
		if err != nil {
			return false, 0, err
		}
		return !limited, max(res.RetryAfter, 0), nil
	}, nil
}}

// xrate is golang.org/x/time/rate: a token bucket in process. Each
// instance is a separate limiter; nothing is shared.
var xrate = library{name: "x/time/rate (local only)", local: true, new: func(_ *redis.Client, _ string, r int) (decider, error) {
	l := rate.NewLimiter(rate.Limit(r), r)
	return func(context.Context) (bool, time.Duration, error) { return l.Allow(), 0, nil }, nil
}}

// newXrate returns the limiter xrate's deciders use, for the overload
// part, which waits with its Wait method.
func newXrate(r int) *rate.Limiter { return rate.NewLimiter(rate.Limit(r), r) }

// scope is the scope of every demand of ours.
const scope = "bench"

// bucket returns one limit of ours: rate per second with the default
// burst (rate), or for a Concurrency limit rate slots with a one-minute
// lease.
func bucket(name string, a quota.Algorithm, rate int, key string) quota.Bucket {
	per := time.Second
	if a == quota.Concurrency {
		per = time.Minute
	}
	return quota.Bucket{Limit: quota.Limit{Name: name, Rate: rate, Per: per, Algorithm: a}, Key: key}
}

// oursConfig configures our redisstore as a library.
type oursConfig struct {
	name string
	opts []redisstore.Option // for redisstore.New

	// buckets gives the demand's limits for a key and rate.
	buckets func(key string, rate int) []quota.Bucket

	// pauses are the demand's pause keys; [throttle.Transport] always
	// lists the rule's pause key "".
	pauses []string

	// release makes a granted decision release its Concurrency slots at
	// once: Take, then Release, two calls.
	release bool

	// granted, if set, is called with every granted reservation.
	granted func(*quota.Reservation)

	// multiExec makes the store redisstore.NewMultiExec's.
	multiExec bool
}

// ours returns our redisstore as a library: each instance is a Store made
// with c.opts on its client, taking one demand.
func ours(c oursConfig) library {
	return library{name: c.name, new: func(rc *redis.Client, key string, r int) (decider, error) {
		var s quota.Store
		var err error
		if c.multiExec {
			s, err = redisstore.NewMultiExec(rc, c.opts...)
		} else {
			s, err = redisstore.New(rc, c.opts...)
		}
		if err != nil {
			return nil, err
		}
		d := &quota.Demand{Scope: scope, Limits: c.buckets(key, r), Pauses: c.pauses, Cost: 1}
		return func(ctx context.Context) (bool, time.Duration, error) {
			dec, err := s.Take(ctx, d)
			if err != nil || !dec.OK {
				return false, dec.Delay, err
			}
			if c.granted != nil {
				c.granted(dec.Reservation)
			}
			if c.release {
				if err := s.(quota.LeaseStore).Release(ctx, dec.Reservation); err != nil {
					return false, 0, err
				}
			}
			return true, 0, nil
		}, nil
	}}
}

// replayIDs makes our store remember each decision's reply for replays,
// the default for a Cluster client that follows redirects.
var replayIDs = []redisstore.Option{redisstore.WithReplay(redisstore.ReplayIDs)}

// one returns buckets of a single limit of algorithm a on the key.
func one(a quota.Algorithm) func(key string, rate int) []quota.Bucket {
	return func(key string, rate int) []quota.Bucket {
		return []quota.Bucket{bucket("limit", a, rate, key)}
	}
}

// hierarchy returns the buckets of a two-limit rule: one limit for all
// keys and one per key, both GCRA, decided together.
func hierarchy(key string, rate int) []quota.Bucket {
	return []quota.Bucket{bucket("all", quota.GCRA, rate, ""), bucket("per-key", quota.GCRA, rate, key)}
}

// shared returns the buckets of bs, the first shared among tenants as
// tenant (if not empty) and of a class with the headroom (Classed).
func shared(bs func(key string, rate int) []quota.Bucket, tenant string, headroom int) func(key string, rate int) []quota.Bucket {
	return func(key string, rate int) []quota.Bucket {
		b := bs(key, rate)
		b[0].Tenant = tenant
		if headroom > 0 {
			b[0].Headroom, b[0].Classed = headroom, true
		}
		return b
	}
}

// busyBucket returns a GCRA limit that stays busy whatever the rate: 1000
// a second and a burst of 2^30, so that decisions made faster than one a
// millisecond move its arrival time ahead of the clock and are granted at
// once.
func busyBucket(key string, _ int) []quota.Bucket {
	b := bucket("busy", quota.GCRA, 1000, key)
	b.Limit.Burst = 1 << 30
	return []quota.Bucket{b}
}

// withSlots returns the buckets of a GCRA limit and a Concurrency limit of
// rate slots.
func withSlots(key string, rate int) []quota.Bucket {
	return []quota.Bucket{bucket("limit", quota.GCRA, rate, key), bucket("slots", quota.Concurrency, rate, key)}
}
