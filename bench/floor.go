package main

import (
	"context"
	_ "embed"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorGCRASource is floor_gcra.lua: the least work a GCRA decision on
// Redis's clock can do in one script call. It is not a limiter (keys never
// expire; no pause, wait, retry time or protection against a call sent
// twice); the throughput part runs it as a yardstick between the EVALSHA
// baseline and the contenders.
//
//go:embed floor_gcra.lua
var floorGCRASource string

// floorGCRA runs floor_gcra.lua (EVALSHA, EVAL on NOSCRIPT).
var floorGCRA = redis.NewScript(floorGCRASource)

// readClock is an EVALSHA that only reads Redis's clock (TIME) and
// returns it in µs: what a decision on Redis's clock pays before it reads
// or writes anything.
var readClock = redis.NewScript("local tm = redis.call('TIME') return tm[1] * 1000000 + tm[2]")

// floorLibrary returns floor_gcra.lua as a library for limits of rate
// per second with a burst of rate: one limit on key, or with two, a
// limit for all keys and one per key (as [hierarchy]).
func floorLibrary(name string, limits int) library {
	return library{name: name, new: func(c *redis.Client, key string, r int) (decider, error) {
		t := (time.Second.Microseconds() + int64(r) - 1) / int64(r)
		keys := []string{"floor:{bench}:per-key:" + key}
		args := []any{t, int64(r-1) * t}
		if limits == 2 {
			keys = []string{"floor:{bench}:all", keys[0]}
			args = append(args, t, int64(r-1)*t)
		}
		return func(ctx context.Context) (bool, time.Duration, error) {
			n, err := floorGCRA.Run(ctx, c, keys, args...).Int()
			return n == 1, 0, err
		}, nil
	}}
}
