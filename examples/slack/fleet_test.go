package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	slackgo "github.com/slack-go/slack"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/internal/redisweather"
	"github.com/quotakit/throttle/presets/slackquota"
	"github.com/quotakit/throttle/presets/slackquota/fakeslack"
	"github.com/quotakit/throttle/redisstore"
)

const (
	fleetInstances  = 8
	fleetGoroutines = 16
	fleetChannels   = 4
	fleetRun        = 5 * time.Second
	fleetFaultAt    = 2 * time.Second // into the run: when the weather's fault comes
)

// TestSlackGoFleet: 8 instances of 16 goroutines, each instance with its
// own go-redis client (through a loopback proxy), redisstore, the Slack
// preset's Transport as the README sets it up (Policy.Instances 8,
// calls wait for their slot) and slack-go client, post to 4 channels and
// read their history, as fast as the limits let them, against a fake
// Slack that enforces Slack's published limits and answers 429 over them.
// Each weather of Redis runs a new fleet for 5 s.
//
// While Redis answers, however late, the fake Slack refuses nothing and
// the fleet posts nearly every message the posting limit allows (1 a
// second per channel after a burst of 2). When Redis is killed, each
// instance posts on its local share (throttle.LocalShare: 1 message per
// channel every 8 s), which starts from what Redis last told the
// instance remained (nothing, while the fleet's waiting calls hold its
// slots ahead), the shares send no more than their pace allows, the fake
// Slack refuses no more than they sent (Redis's grants alone keep the
// limit), and the fleet posts at most one message per channel more than
// the limit allows in the run. Measured under -race, 3 runs: 24-25
// messages, 0-1 of them on local shares, no 429; with shares that start
// full, 31-33 messages, 10-12 on local shares, 2-3 refused.
func TestSlackGoFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("fleets of 128 goroutines on a real Redis")
	}
	for _, w := range redisweather.All() {
		t.Run(w.Name, func(t *testing.T) {
			r := runFleet(t, w)
			// The burst, then one a second: 2 at 0 s, one at 1 s to 4 s.
			quota := fleetChannels * (slackquota.PostBurst + int(fleetRun/time.Second) - 1)
			share := float64(r.messages) / float64(quota)
			t.Logf("%s: %d messages posted of the %d the posting limit allows in %v (%.1f%%); the fake Slack refused %d; %d sent by local shares; history read %d times",
				w.Name, r.messages, quota, fleetRun, 100*share, r.limited, r.local, r.history)
			assert.Zero(t, r.failed, "calls that failed other than by a limit")
			if w.Down {
				// Redis's grants keep the limit: every 429 answers a
				// message a local share sent, and those are within the
				// shares: each instance's burst and pace per channel
				// for the rest of the run.
				post := throttle.Limit{Name: slackquota.ChannelLimit, Rate: slackquota.PostRate, Per: time.Second, Burst: slackquota.PostBurst}
				ls := throttle.LocalShare(post, fleetInstances)
				down := fleetRun - fleetFaultAt
				perChannel := ls.Burst + int(int64(down)*int64(ls.Rate)/int64(ls.Per)) + 1
				assert.LessOrEqual(t, int64(r.limited), r.local, "429s, against the messages local shares sent")
				assert.LessOrEqual(t, r.local, int64(fleetInstances*fleetChannels*perChannel), "messages local shares sent")
				assert.LessOrEqual(t, r.messages, quota+fleetChannels, "messages posted: the local shares start from what Redis said remained")
				return
			}
			assert.Zero(t, r.limited, "429s from the fake Slack")
			assert.Zero(t, r.local, "messages sent on a local share: a slow store is not a down one")
			assert.GreaterOrEqual(t, share, 0.75, "share of the posting limit used")
		})
	}
}

// fleetResult is what one fleet of TestSlackGoFleet did.
type fleetResult struct {
	messages, limited int // the fake Slack's counts
	history, failed   int64
	local             int64 // messages a local share sent
}

// runFleet runs one fleet of TestSlackGoFleet in weather w.
func runFleet(t *testing.T, w redisweather.Weather) fleetResult {
	srv, px := w.Begin(t)
	prefix := redistest.Prefix(t)
	fake := fakeslack.NewServer(fakeslack.Options{})
	t.Cleanup(fake.Close)
	policy, err := slackquota.Policy(slackquota.Options{APIURL: fake.APIURL()})
	require.NoError(t, err)
	policy.Instances = fleetInstances

	var local, history, failed atomic.Int64
	hooks := throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
		if ev.Rule == slackquota.PostRule && ev.Fallback == throttle.FailLocal && (ev.Outcome == throttle.Allowed || ev.Outcome == throttle.Waited) {
			local.Add(1)
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), fleetRun)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range fleetInstances {
		rdb := redis.NewClient(&redis.Options{Addr: px.Addr(), PoolSize: fleetGoroutines})
		t.Cleanup(func() { _ = rdb.Close() })
		store, err := redisstore.New(rdb, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		base := &http.Transport{MaxIdleConnsPerHost: fleetGoroutines}
		t.Cleanup(base.CloseIdleConnections)
		tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store), throttle.WithHooks(hooks))
		require.NoError(t, err)
		api := slackgo.New("xoxb-fleet-token", slackgo.OptionHTTPClient(&http.Client{Transport: tr}),
			slackgo.OptionAPIURL(fake.APIURL()))
		for g := range fleetGoroutines {
			channel := fmt.Sprintf("C%07d", (i+g)%fleetChannels+1)
			wg.Go(func() {
				for n := g; ctx.Err() == nil; n++ {
					var err error
					if n%4 == 3 {
						_, err = api.GetConversationHistoryContext(ctx, &slackgo.GetConversationHistoryParameters{ChannelID: channel, Limit: 15})
						if err == nil {
							history.Add(1)
						}
					} else {
						_, _, err = api.PostMessageContext(ctx, channel, slackgo.MsgOptionText(fmt.Sprintf("from %d/%d", i, g), false))
					}
					var rl *slackgo.RateLimitedError
					var le *throttle.LimitError
					switch {
					case err == nil, ctx.Err() != nil:
					case errors.As(err, &rl):
						// Counted by the fake; the transport learned its pause.
					case errors.As(err, &le):
						// The local share refused it: wait its retry time.
						sleep(ctx, le.RetryAfter)
					default:
						failed.Add(1)
						t.Errorf("instance %d: %v", i, err)
						return
					}
				}
			})
		}
	}
	time.Sleep(time.Until(start.Add(fleetFaultAt))) // the fault's schedule, not an assertion
	w.Fault(t, srv)
	wg.Wait()
	st := fake.Stats()
	return fleetResult{
		messages: st.Messages, limited: st.Limited,
		history: history.Load(), local: local.Load(), failed: failed.Load(),
	}
}
