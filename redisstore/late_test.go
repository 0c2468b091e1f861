package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/faultproxy"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// On Redis, a grant is late when its reply is held after the script
// charged it, not when its command is held before: a command that
// reaches Redis 300 ms late (a loaded machine, a busy Redis) is charged
// 300 ms late, and its request is no later after its charge than a
// prompt one. Redis's TIME, which the scripts read, tells them apart
// (quota.Decision.At). A rule judging the call's latency makes every
// held command's grant late; no rule lets the held reply's go.
func TestLateGrantRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("calls held 300 ms")
	}
	const held = 300 * time.Millisecond
	for _, c := range []struct {
		name  string
		dir   faultproxy.Direction
		calls int
	}{
		{"reply held", faultproxy.ToClient, 1},
		{"command held", faultproxy.ToServer, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			px := faultproxy.New(t, srv.Addr())
			store := newStoreOn(t, newClient(t, px.Addr()), redistest.Prefix(t), redisstore.WithBatching(0))
			var late, retimed, lateCalls atomic.Int64
			lim, err := throttle.NewLimiter(throttle.Policy{Instances: 1, Rules: []throttle.Rule{{
				Name:   "api",
				Limits: []throttle.Limit{{Name: "calls", Rate: 1000, Per: 10 * time.Second, Algorithm: throttle.SlidingLog}},
			}}}, throttle.WithStore(store), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
				late.Add(int64(ev.Late))
				retimed.Add(int64(ev.Retimed))
				if ev.Late > 0 {
					lateCalls.Add(1)
				}
			}}))
			require.NoError(t, err)

			// Prompt answers first: the store's least lag.
			for range 20 {
				_, err = lim.Wait(context.Background(), "api")
				require.NoError(t, err)
			}
			late.Store(0)
			retimed.Store(0)
			lateCalls.Store(0)

			px.SetLatency(c.dir, held)
			for range c.calls {
				_, err = lim.Wait(context.Background(), "api")
				require.NoError(t, err)
			}
			px.SetLatency(c.dir, 0)
			if c.dir == faultproxy.ToClient {
				// Retimed, and each retime's reply held too: late again
				// until the request's tolerance has widened past it.
				assert.Positive(t, late.Load(), "late grants")
				assert.Positive(t, retimed.Load(), "late grants retimed")
			} else {
				// None late, but for what a loaded machine adds after the
				// charge (over 100 ms): not every call. A rule that judged
				// the call's latency makes all four late.
				assert.Less(t, lateCalls.Load(), int64(c.calls), "calls with a late grant")
			}
			t.Logf("%s: %d late grants in %d calls, %d retimed", c.name, late.Load(), c.calls, retimed.Load())
		})
	}
}
