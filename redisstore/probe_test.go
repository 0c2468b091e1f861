package redisstore_test

import (
	"os"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
)

func TestProbeSlots8(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: 128})
	defer c.Close()
	s, _ := redisstore.New(c, append(probeOpts(), redisstore.WithPrefix(redistest.Prefix(t)))...)
	slots := quota.Bucket{Limit: quota.Limit{Name: "c", Rate: 1_000_000, Per: time.Minute, Algorithm: quota.Concurrency}, Key: "k"}
	rate := quota.Bucket{Limit: quota.Limit{Name: "g", Rate: 1_000_000, Per: time.Second}, Key: "k"}
	d := &quota.Demand{Scope: "p8", Limits: []quota.Bucket{rate, slots}, Cost: 1}
	bg := context.Background()
	before, _ := commandStats(bg, c)
	var n atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(2 * time.Second)
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				dec, err := s.Take(bg, d)
				if err != nil || !dec.OK {
					t.Error(err)
					return
				}
				s.Release(bg, dec.Reservation)
				n.Add(1)
			}
		})
	}
	wg.Wait()
	after, _ := commandStats(bg, c)
	for k, v := range after {
		b := before[k]
		if v.Calls-b.Calls > 0 {
			t.Logf("%s: %.3f calls/decision, %.2f usec/decision", k, float64(v.Calls-b.Calls)/float64(n.Load()), float64(v.Usec-b.Usec)/float64(n.Load()))
		}
	}
	t.Logf("%d decisions/s", n.Load()/2)
}

func probeOpts() []redisstore.Option {
	if os.Getenv("LINGER") != "" {
		return []redisstore.Option{redisstore.WithReleaseLinger(time.Hour)}
	}
	return nil
}
