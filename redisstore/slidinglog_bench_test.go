package redisstore_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// BenchmarkSlidingLog measures what one sliding-log decision costs Redis
// with 10, 1,000 and 10,000 entries in the window (issue 18):
//
//	go test ./redisstore -run '^$' -bench SlidingLog -benchtime 3000x -count 3
//
// The log of n entries is a limit of Rate n per n ms, filled by n takes 1
// ms apart on the store's test clock. Each iteration advances the clock by
// 1 ms and takes once: the oldest entry leaves the window, the decision is
// granted at once with the window exactly full, and the log holds n
// entries again. The refused/ cases then keep the clock still and take
// with MaxWait 0 on the full log: refused, with the delay (1 ms) until the
// oldest entry leaves, which the old script found by reading the window.
// The ahead/ cases grant as the first ones do, on a log that also holds
// a reservation an hour ahead, so that every decision places its entry
// before a later one (slidinglog.lua: the log read whole, the earliest
// gap found in one pass, the later entry moved up).
//
// Every iteration decides on two redis-servers of its own, in step: the
// log of n entries, and a log of 10 entries as the baseline, so machine
// noise hits both alike. Metrics, besides ns/op (of both decisions):
//
//	redis_us/op       Redis's time per take.lua call on the n-entry log
//	                  (INFO commandstats, evalsha usec/calls)
//	redis_cpu_us/op   Redis's main-thread CPU (INFO cpu, user+sys) per
//	                  iteration on that server: parsing, event loop and reply
//	                  included
//	x_entries10       redis_us/op over the baseline's, in the same run
func BenchmarkSlidingLog(b *testing.B) {
	subject, base := redistest.Start(b), redistest.Start(b)
	for _, mode := range []string{"", "refused/", "ahead/"} {
		for _, n := range []int{10, 1000, 10000} {
			name := fmt.Sprintf("%sentries=%d", mode, n)
			b.Run(name, func(b *testing.B) { benchSlidingLog(b, subject, base, n, mode == "refused/", mode == "ahead/") })
		}
	}
}

// benchSlidingLog runs one case of BenchmarkSlidingLog.
func benchSlidingLog(b *testing.B, subject, base *redistest.Server, n int, refused, ahead bool) {
	bg := context.Background()
	clock := storetest.NewClock(time.UnixMicro(1_700_000_000_000_000))
	type side struct {
		c *redis.Client
		s *redisstore.Store
		d *quota.Demand
	}
	newSide := func(srv *redistest.Server, entries int) side {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		b.Cleanup(func() { _ = c.Close() })
		require.NoError(b, c.FlushAll(bg).Err())
		s, err := redisstore.New(c, redisstore.WithNow(clock.Now), redisstore.WithReplay(redisstore.ReplayNoRetries), redisstore.WithTimeout(time.Minute))
		require.NoError(b, err)
		l := quota.Limit{Name: "log", Rate: entries, Per: time.Duration(entries) * time.Millisecond, Algorithm: quota.SlidingLog}
		return side{c, s, &quota.Demand{Scope: "bench", Cost: 1, MaxWait: time.Hour, Limits: []quota.Bucket{{Limit: l}}}}
	}
	sides := []side{newSide(subject, n), newSide(base, 10)}
	full := func(d *quota.Demand) *quota.Demand { f := *d; f.MaxWait = 0; return &f }
	fulls := []*quota.Demand{full(sides[0].d), full(sides[1].d)}
	grant := func() {
		clock.Advance(time.Millisecond)
		for _, sd := range sides {
			dec, err := sd.s.Take(bg, sd.d)
			if err != nil || !dec.OK || dec.Delay != 0 {
				b.Fatalf("take: %+v, %v; want granted at once", dec, err)
			}
		}
	}
	refuse := func() {
		for i, sd := range sides {
			dec, err := sd.s.Take(bg, fulls[i])
			if err != nil || dec.OK || dec.Delay != time.Millisecond {
				b.Fatalf("take: %+v, %v; want refused for 1ms", dec, err)
			}
		}
	}
	if ahead { // a reservation an hour ahead: the subject's first entry
		start := clock.Now()
		clock.Set(start.Add(time.Hour))
		if dec, err := sides[0].s.Take(bg, sides[0].d); err != nil || !dec.OK {
			b.Fatalf("take: %+v, %v; want granted", dec, err)
		}
		clock.Set(start)
	}
	for range n {
		grant()
	}
	before := []redisCost{readRedisCost(b, sides[0].c), readRedisCost(b, sides[1].c)}
	for b.Loop() {
		if refused {
			refuse()
		} else {
			grant()
		}
	}
	b.StopTimer()
	used := readRedisCost(b, sides[0].c).minus(before[0])
	baseUsed := readRedisCost(b, sides[1].c).minus(before[1])
	b.ReportMetric(used.perCall(), "redis_us/op")
	b.ReportMetric(used.cpuUS/float64(b.N), "redis_cpu_us/op")
	b.ReportMetric(used.perCall()/baseUsed.perCall(), "x_entries10")
}

// redisCost is what a redis-server has spent so far: EVALSHA calls and
// their time (INFO commandstats), and its main thread's CPU (INFO cpu).
type redisCost struct {
	calls, usec int64
	cpuUS       float64
}

func (r redisCost) minus(o redisCost) redisCost {
	return redisCost{r.calls - o.calls, r.usec - o.usec, r.cpuUS - o.cpuUS}
}

// perCall is the EVALSHA time per call in µs.
func (r redisCost) perCall() float64 { return float64(r.usec) / float64(max(r.calls, 1)) }

func readRedisCost(b *testing.B, c *redis.Client) redisCost {
	b.Helper()
	bg := context.Background()
	st, err := commandStats(bg, c)
	require.NoError(b, err)
	info, err := c.Info(bg, "cpu").Result()
	require.NoError(b, err)
	var cpu float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			s, err := strconv.ParseFloat(v, 64)
			require.NoError(b, err)
			cpu += s * 1e6
		}
	}
	return redisCost{calls: st["evalsha"].Calls, usec: st["evalsha"].Usec, cpuUS: cpu}
}
