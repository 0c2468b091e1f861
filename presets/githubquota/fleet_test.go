package githubquota_test

import (
	"context"
	"errors"
	"io"
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
	"github.com/quotakit/throttle/redisstore"
)

// A fleetOp is one kind of request of the fleet test.
type fleetOp struct {
	kind               string // "read", "write", "search", "code", "query", "mutation"
	method, path, body string
}

var (
	opRead     = fleetOp{"read", "GET", "repos/o/r", ""}
	opRead2    = fleetOp{"read", "GET", "repos/o/r/issues", ""}
	opComment  = fleetOp{"write", "POST", "repos/o/r/issues/1/comments", `{"body":"x"}`}
	opEdit     = fleetOp{"write", "PATCH", "repos/o/r/issues/1", `{"title":"x"}`}
	opSearch   = fleetOp{"search", "GET", "search/issues?q=x", ""}
	opCode     = fleetOp{"code", "GET", "search/code?q=x", ""}
	opQuery    = fleetOp{"query", "POST", "graphql", `{"query":"{ viewer { login } }"}`}
	opMutation = fleetOp{"mutation", "POST", "graphql", `{"query":"mutation { addStar(input: {}) { clientMutationId } }"}`}
)

// TestFleet: 8 instances of 16 goroutines, each instance with its own
// Redis client, store, Transport and HTTP client, send through the preset
// to the fake GitHub, with six tokens whose demand is above their quota:
// one reads (the points bind: 900), one writes (content creation binds:
// 80), one searches (30), one searches code (9), one mixes reads, writes
// and searches (the shared points bind: 900), one sends GraphQL queries
// and mutations (the GraphQL quota binds: Hourly, 1,000; mutations are
// content). Each goroutine sends its token's kinds of request in turn
// until each kind is refused: every request waits for its slot
// (waiters.Block), and one whose slot is after the run's end is refused
// at once.
//
// What it asserts holds on any machine. The run ends well within
// GitHub's minute, so every request of it lies in one window of each
// limit: GitHub refuses none, and no limit of a token is charged more
// than its rate. When every goroutine stopped on a refusal (the run did
// not reach its end), each token's binding limit is used to the unit.
// A machine too loaded to send the ~2,600 requests before the run's end
// uses less: that share is logged, with a lenient floor.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of 128 goroutines on a real Redis")
	}
	const (
		instances, goroutines = 8, 16
		hourly                = 1000 // above the points, so GraphQL's quota binds before its points
		run                   = 30 * time.Second
	)
	rdb := redistest.Start(t)
	prefix := redistest.Prefix(t)
	fake := fakegithub.NewServer(fakegithub.Options{Hourly: hourly})
	defer fake.Close()
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: fake.BaseURL(), Hourly: hourly})
	require.NoError(t, err)

	tokens := []struct {
		name string
		ops  []fleetOp
	}{
		{"reads", []fleetOp{opRead, opRead2}},
		{"writes", []fleetOp{opComment, opEdit}},
		{"search", []fleetOp{opSearch}},
		{"code", []fleetOp{opCode}},
		{"mixed", []fleetOp{opRead, opComment, opRead2, opSearch, opRead, opCode, opRead2, opEdit}},
		{"graphql", []fleetOp{opQuery, opQuery, opMutation}},
	}
	var mu sync.Mutex
	accepted := map[string]map[string]int{} // token -> kind -> 2xx answers
	var unexpected atomic.Int64

	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	for range instances {
		c := redis.NewClient(&redis.Options{Addr: rdb.Addr(), PoolSize: goroutines})
		defer c.Close()
		store, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		base := &http.Transport{MaxIdleConnsPerHost: goroutines}
		defer base.CloseIdleConnections()
		tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store))
		require.NoError(t, err)
		client := &http.Client{Transport: tr}
		for g := range goroutines {
			tok := tokens[g%len(tokens)]
			wg.Go(func() {
				spent := map[string]bool{}
				for i := g; len(spent) < len(kinds(tok.ops)) && ctx.Err() == nil; i++ {
					op := tok.ops[i%len(tok.ops)]
					if spent[op.kind] {
						continue
					}
					req, err := http.NewRequestWithContext(ctx, op.method, fake.BaseURL()+op.path, strings.NewReader(op.body))
					if err != nil {
						unexpected.Add(1)
						return
					}
					req.Header.Set("Authorization", "Bearer "+tok.name)
					resp, err := client.Do(req)
					var le *throttle.LimitError
					switch {
					case errors.As(err, &le):
						spent[op.kind] = true // its slot is after the run's end
					case err != nil:
						if ctx.Err() == nil {
							unexpected.Add(1)
							t.Errorf("%s %s: %v", op.method, op.path, err)
						}
					default:
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						if resp.StatusCode/100 == 2 {
							mu.Lock()
							if accepted[tok.name] == nil {
								accepted[tok.name] = map[string]int{}
							}
							accepted[tok.name][op.kind]++
							mu.Unlock()
						}
					}
				}
			})
		}
	}
	wg.Wait()
	finished := ctx.Err() == nil // every goroutine stopped on refusals
	st := fake.Stats()
	t.Logf("finished before the run's end: %v; GitHub received %d, refused %d", finished, st.Requests, st.Limited)
	assert.Zero(t, st.Limited, "GitHub refused requests")
	assert.Zero(t, unexpected.Load())

	// What each token spent of each limit, from the answers it got.
	spentOn := func(token string) map[string]int {
		a := accepted[token]
		return map[string]int{
			githubquota.PointsLimit:        a["read"] + a["search"] + a["code"] + githubquota.WritePoints*a["write"],
			githubquota.ContentMinuteLimit: a["write"] + a["mutation"],
			githubquota.SearchLimit:        a["search"],
			githubquota.CodeSearchLimit:    a["code"],
			githubquota.GraphQLLimit:       a["query"] + a["mutation"],
			githubquota.GraphQLPointsLimit: a["query"] + githubquota.WritePoints*a["mutation"],
			githubquota.CoreLimit:          a["read"] + a["write"],
		}
	}
	rates := map[string]int{
		githubquota.PointsLimit: githubquota.RESTPoints, githubquota.ContentMinuteLimit: githubquota.ContentPerMinute,
		githubquota.SearchLimit: githubquota.SearchPerMinute, githubquota.CodeSearchLimit: githubquota.CodeSearchPerMinute,
		githubquota.GraphQLLimit: hourly, githubquota.GraphQLPointsLimit: githubquota.GraphQLPoints, githubquota.CoreLimit: hourly,
	}
	binding := map[string]string{
		"reads": githubquota.PointsLimit, "writes": githubquota.ContentMinuteLimit, "search": githubquota.SearchLimit,
		"code": githubquota.CodeSearchLimit, "mixed": githubquota.PointsLimit, "graphql": githubquota.GraphQLLimit,
	}
	for _, tok := range tokens {
		spent := spentOn(tok.name)
		for name, n := range spent {
			assert.LessOrEqual(t, n, rates[name], "token %s: limit %s over its rate in one window", tok.name, name)
		}
		bind := binding[tok.name]
		t.Logf("token %-7s %s %d of %d (%.1f%%); %v", tok.name, bind, spent[bind], rates[bind],
			100*float64(spent[bind])/float64(rates[bind]), accepted[tok.name])
		if finished {
			assert.Equal(t, rates[bind], spent[bind], "token %s: its binding limit %s not used to the unit", tok.name, bind)
		} else {
			assert.GreaterOrEqual(t, float64(spent[bind]), 0.6*float64(rates[bind]), "token %s: limit %s used below 60%%", tok.name, bind)
		}
	}
	assert.Equal(t, accepted["writes"]["write"]+accepted["mixed"]["write"]+accepted["graphql"]["mutation"], st.Created,
		"the fake counted the same content")
}

// kinds returns the distinct kinds of ops.
func kinds(ops []fleetOp) map[string]bool {
	k := map[string]bool{}
	for _, op := range ops {
		k[op.kind] = true
	}
	return k
}
