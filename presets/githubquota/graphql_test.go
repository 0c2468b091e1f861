package githubquota_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
)

// The GraphQL requests of these tests: a query that asks for its cost, one
// that does not, and a mutation that does.
const (
	costQuery    = `{"query":"query { rateLimit { cost } viewer { login } }"}`
	plainQuery   = `{"query":"query { viewer { login } }"}`
	costMutation = `{"query":"mutation { addStar(input: {}) { clientMutationId } rateLimit { cost } }"}`
	maxCost      = 50 // the most a query of these tests costs
)

// randomCosts returns a fakegithub.Options.GraphQLCost of seeded random
// costs, 1 to maxCost points (the fake calls it one request at a time),
// and a func returning the latest.
func randomCosts(seed uint64) (cost func(*http.Request) int, last func() int) {
	rng := rand.New(rand.NewPCG(seed, 19))
	var latest atomic.Int64
	return func(*http.Request) int {
			c := 1 + rng.IntN(maxCost)
			latest.Store(int64(c))
			return c
		}, func() int {
			return int(latest.Load())
		}
}

// counted returns what store counts on the preset's limit name, for every
// key of GitHub's scope.
func counted(t *testing.T, store *redisstore.Store, policy throttle.Policy, name string) int {
	t.Helper()
	var limit *quota.Limit
	for _, r := range policy.Rules {
		for _, l := range r.Limits {
			if l.Name == name && r.Scope == githubquota.Scope {
				q := l.Quota()
				limit = &q
			}
		}
	}
	require.NotNil(t, limit, "limit %s", name)
	states, err := store.Inspect(t.Context(), githubquota.Scope, []quota.Limit{*limit})
	require.NoError(t, err)
	used := 0
	for _, s := range states {
		if !s.Pause() {
			used += int(s.Used)
		}
	}
	return used
}

// A GraphQL request is charged the estimate and settled to the cost
// GitHub reports, query by query: the store counts what the fake counted,
// to the point. A query that does not ask for its cost keeps the estimate;
// a mutation's content limits and GraphQL points keep their own costs.
func TestGraphQLSettledToReportedCost(t *testing.T) {
	rdb := redistest.Start(t)
	cost, last := randomCosts(1)
	fake := fakegithub.NewServer(fakegithub.Options{Hourly: 5000, GraphQLCost: cost})
	defer fake.Close()
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: fake.BaseURL(), GraphQLEstimate: maxCost, Wait: waiters.FailFast()})
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: rdb.Addr()})
	defer c.Close()
	store, err := redisstore.New(c, redisstore.WithPrefix(redistest.Prefix(t)))
	require.NoError(t, err)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	var settled []throttle.SettleEvent
	tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store),
		throttle.WithHooks(throttle.Hooks{OnSettle: func(ev throttle.SettleEvent) { ev.Context = nil; settled = append(settled, ev) }}))
	require.NoError(t, err)
	client := &http.Client{Transport: tr}

	// send sends a GraphQL request and returns the cost its answer reports
	// (0: none).
	send := func(body string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, fake.URL+"/graphql", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokenA)
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var answer struct {
			Data struct{ RateLimit struct{ Cost int } }
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
		_, _ = io.Copy(io.Discard, resp.Body) // the end: settled
		return answer.Data.RateLimit.Cost
	}

	const queries = 30
	for i := range queries {
		reported := send(costQuery)
		assert.Equal(t, last(), reported, "query %d: the answer reports what the fake charged", i)
		assert.Equal(t, fake.Used(tokenA, "graphql"), counted(t, store, policy, githubquota.GraphQLLimit), "query %d", i)
	}
	require.Len(t, settled, queries)
	for _, ev := range settled {
		assert.Equal(t, maxCost, ev.Charged)
		assert.NoError(t, ev.Err)
	}

	assert.Zero(t, send(plainQuery), "a query that does not ask reports nothing")
	keep := maxCost - last() // the estimate stays
	assert.Equal(t, fake.Used(tokenA, "graphql")+keep, counted(t, store, policy, githubquota.GraphQLLimit))

	reported := send(costMutation)
	assert.Equal(t, last(), reported)
	assert.Equal(t, fake.Used(tokenA, "graphql")+keep, counted(t, store, policy, githubquota.GraphQLLimit))
	assert.Equal(t, 1, counted(t, store, policy, githubquota.ContentMinuteLimit), "a mutation creates one piece of content, whatever its points")
	assert.Equal(t, 1, counted(t, store, policy, githubquota.ContentHourLimit))
	assert.Equal(t, queries+1+githubquota.WritePoints, counted(t, store, policy, githubquota.GraphQLPointsLimit), "GraphQL's points a minute keep their costs")
	assert.Zero(t, fake.Stats().Limited)
}

// graphQLFleetResult is what a run of runGraphQLFleet saw.
type graphQLFleetResult struct {
	finished    bool // the run ended in a round where every request was refused
	rounds      int  // rounds run
	admitted    int  // 2xx answers
	stats       fakegithub.Stats
	used        int            // GraphQL points the fake counted
	stored      int            // GraphQL points the store counts at the end
	lastRefusal map[string]int // the last round's refusals, by limit or pause
}

// runGraphQLFleet runs 8 instances of 16 goroutines, each instance with
// its own Redis client, store and Transport, sending GraphQL queries that
// ask for their cost with one token to a fake GitHub whose queries cost 1
// to 50 points (seeded), an hourly quota of hourly points, and the
// preset's estimate. It runs in rounds: in each, every goroutine sends
// until it is refused (the quota's next slot is an hour away: at once);
// the run ends after a round in which no request was admitted. That round
// started with nothing in flight, every charge settled.
func runGraphQLFleet(t *testing.T, hourly, estimate int) graphQLFleetResult {
	const instances, goroutines = 8, 16
	rdb := redistest.Start(t)
	prefix := redistest.Prefix(t)
	cost, _ := randomCosts(7)
	fake := fakegithub.NewServer(fakegithub.Options{Hourly: hourly, GraphQLCost: cost, Latency: 2 * time.Millisecond})
	defer fake.Close()
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: fake.BaseURL(), Hourly: hourly, GraphQLEstimate: estimate})
	require.NoError(t, err)

	var clients []*http.Client
	var store0 *redisstore.Store
	for range instances {
		c := redis.NewClient(&redis.Options{Addr: rdb.Addr(), PoolSize: goroutines})
		defer c.Close()
		store, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		if store0 == nil {
			store0 = store
		}
		base := &http.Transport{MaxIdleConnsPerHost: goroutines}
		defer base.CloseIdleConnections()
		tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store),
			// A slow call on a loaded machine must not fall back to a local
			// share, which would admit more than the fleet's quota.
			throttle.WithBreaker(throttle.Breaker{CallTimeout: 20 * time.Second}))
		require.NoError(t, err)
		clients = append(clients, &http.Client{Transport: tr})
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res := graphQLFleetResult{}
	var unexpected atomic.Int64
	for ctx.Err() == nil {
		res.rounds++
		var (
			admitted atomic.Int64
			mu       sync.Mutex
			refusals = map[string]int{}
			wg       sync.WaitGroup
		)
		for _, client := range clients {
			for range goroutines {
				wg.Go(func() {
					for ctx.Err() == nil {
						req, err := http.NewRequestWithContext(ctx, http.MethodPost, fake.URL+"/graphql", strings.NewReader(costQuery))
						if err != nil {
							unexpected.Add(1)
							return
						}
						req.Header.Set("Authorization", "Bearer "+tokenA)
						resp, err := client.Do(req)
						var le *throttle.LimitError
						switch {
						case errors.As(err, &le):
							mu.Lock()
							refusals[le.Limit+le.Pause]++
							mu.Unlock()
							return
						case err != nil:
							if ctx.Err() == nil {
								unexpected.Add(1)
								t.Errorf("query: %v", err)
							}
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body) // to the end: settled
						_ = resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							admitted.Add(1)
						}
					}
				})
			}
		}
		wg.Wait()
		res.admitted += int(admitted.Load())
		res.lastRefusal = refusals
		if admitted.Load() == 0 && ctx.Err() == nil {
			res.finished = true
			break
		}
	}
	assert.Zero(t, unexpected.Load())
	res.stats = fake.Stats()
	res.used = fake.Used(tokenA, "graphql")
	res.stored = counted(t, store0, policy, githubquota.GraphQLLimit)
	t.Logf("estimate %d: finished %v after %d rounds; %d queries answered, GitHub refused %d; GitHub counted %d points of %d (%.1f%%), the store %d; the last round's refusals %v",
		estimate, res.finished, res.rounds, res.admitted, res.stats.Limited, res.used, hourly,
		100*float64(res.used)/float64(hourly), res.stored, res.lastRefusal)
	return res
}

// TestGraphQLFleet: a fleet of 8 instances of 16 goroutines, each
// instance with its own Redis client, store and Transport, asks for more
// GraphQL points than the token's hourly quota (2,000 here), in queries
// costing 1 to 50 points that GitHub reports only in its answers.
//
// With the estimate at the largest cost, GitHub refuses nothing, and the
// store ends at exactly the points GitHub counted. When the run ended on a
// round of refusals only (it started with every charge settled), the
// store refused a query that could cost 50 on what GitHub counted, so
// GitHub counted over 1,950 points, over 97.5% of the quota. A machine too
// loaded to end the run in its time uses less: that share is logged, with
// a lenient floor.
//
// With an estimate of 1 (the control), the fleet sends queries on the
// count of their estimates while the earlier ones are in flight, and
// GitHub refuses some.
func TestGraphQLFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of 128 goroutines on a real Redis")
	}
	const hourly = 2000
	t.Run("estimate at the largest cost", func(t *testing.T) {
		res := runGraphQLFleet(t, hourly, maxCost)
		assert.Zero(t, res.stats.Limited, "GitHub refused queries")
		assert.Equal(t, res.used, res.stored, "the store counts what GitHub counted, to the point")
		if res.finished {
			assert.Greater(t, res.used, hourly-maxCost, "GitHub counted too little for the store to refuse the last round")
			assert.Equal(t, []string{githubquota.GraphQLLimit}, keysOf(res.lastRefusal), "the last round was refused by the hourly GraphQL quota")
			assert.GreaterOrEqual(t, res.used, hourly*9/10)
		} else {
			assert.GreaterOrEqual(t, res.used, hourly/2, "share of the quota used")
		}
	})
	t.Run("control: an estimate of 1", func(t *testing.T) {
		res := runGraphQLFleet(t, hourly, 1)
		assert.Positive(t, res.stats.Limited, "GitHub refused no query charged below its cost")
	})
}

// keysOf returns m's keys.
func keysOf(m map[string]int) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	return keys
}
