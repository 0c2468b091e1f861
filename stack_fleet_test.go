package throttle_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/redisstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rollingVendor enforces GitHub-like stacked limits per token as a vendor
// does, at the arrival of each request, over rolling windows of per:
// points (a write 5, a read 1), content (writes), search (paths under
// /search/). A request over any limit gets a 429 and is not counted.
type rollingVendor struct {
	per    time.Duration
	limits map[string]int

	mu       sync.Mutex
	log      map[string][]rollingEntry // per token and limit
	accepted map[string]int            // units per token and limit
	rejected int
}

type rollingEntry struct {
	at   time.Time
	cost int
}

func (v *rollingVendor) costs(r *http.Request) map[string]int {
	c := map[string]int{"points": 1}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		c["points"], c["content"] = 5, 1
	}
	if strings.HasPrefix(r.URL.Path, "/search/") {
		c["search"] = 1
	}
	return c
}

func (v *rollingVendor) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	token := r.Header.Get("Authorization")
	v.mu.Lock()
	defer v.mu.Unlock()
	costs := v.costs(r)
	for name, cost := range costs {
		log := v.log[token+" "+name]
		for len(log) > 0 && !log[0].at.After(now.Add(-v.per)) {
			log = log[1:]
		}
		v.log[token+" "+name] = log
		used := 0
		for _, e := range log {
			used += e.cost
		}
		if used+cost > v.limits[name] {
			v.rejected++
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
	}
	for name, cost := range costs {
		v.log[token+" "+name] = append(v.log[token+" "+name], rollingEntry{now, cost})
		v.accepted[token+" "+name] += cost
	}
}

// TestStackedLimitsFleet: 8 instances of 16 goroutines, each instance
// with its own Redis client, store and Transport, send requests through
// one rule of stacked limits with per-limit costs (githubLike) to a vendor
// that enforces them over rolling windows, with four tokens: one only
// reads (the points bind), one only writes (content binds, 5 points
// each), one only searches (search binds), one mixes all three in one
// queue (content binds). Every request waits for its reservation. The
// vendor refuses nothing, every binding limit is used to at least 95% of
// what the vendor could have accepted, and the writer's points are
// exactly 5 per write. The rule's windows are 200 ms longer than the
// vendor's (as presets/githubquota's Margin), to cover the time from a
// decision to the request's arrival.
func TestStackedLimitsFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet run of 7 s")
	}
	const (
		per     = 2 * time.Second
		margin  = 200 * time.Millisecond
		run     = 7 * time.Second // 3.5 windows: the vendor could accept 4 windows' worth
		windows = 4
	)
	v := &rollingVendor{per: per, limits: map[string]int{"points": 90, "content": 8, "search": 6},
		log: map[string][]rollingEntry{}, accepted: map[string]int{}}
	srv := httptest.NewServer(v)
	defer srv.Close()
	rdb := redistest.Start(t)
	prefix := redistest.Prefix(t)
	rule := githubLike(per + margin)
	rule.Wait = waiters.Block()

	type op struct{ method, path string }
	read, write, search := op{http.MethodGet, "/repos/o/r"}, op{http.MethodPost, "/repos/o/r/issues"}, op{http.MethodGet, "/search/code"}
	mixed := []op{read, read, read, read, read, write, write, write, search, search}
	tokens := []string{"reads", "writes", "search", "mixed"}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		c := redis.NewClient(&redis.Options{Addr: rdb.Addr()})
		defer c.Close()
		store, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		tr, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{rule}}, throttle.WithStore(store))
		require.NoError(t, err)
		client := &http.Client{Transport: tr}
		for g := range 16 {
			token := tokens[g%len(tokens)]
			wg.Go(func() {
				for i := g; ctx.Err() == nil; i++ {
					o := map[string]op{"reads": read, "writes": write, "search": search}[token]
					if token == "mixed" {
						o = mixed[i%len(mixed)]
					}
					req, _ := http.NewRequestWithContext(ctx, o.method, srv.URL+o.path, nil)
					req.Header.Set("Authorization", token)
					if resp, err := client.Do(req); err == nil {
						_ = resp.Body.Close()
					}
				}
			})
		}
	}
	wg.Wait()
	v.mu.Lock()
	defer v.mu.Unlock()
	assert.Zero(t, v.rejected, "the vendor refused requests")
	for _, bind := range [][2]string{{"reads", "points"}, {"writes", "content"}, {"search", "search"}, {"mixed", "content"}} {
		got, most := v.accepted[bind[0]+" "+bind[1]], windows*v.limits[bind[1]]
		t.Logf("token %s: %s %d of %d units (%.1f%%); points %d", bind[0], bind[1], got, most, 100*float64(got)/float64(most), v.accepted[bind[0]+" points"])
		assert.GreaterOrEqual(t, float64(got), 0.95*float64(most), "token %s: limit %s used below 95%%", bind[0], bind[1])
	}
	assert.Equal(t, 5*v.accepted["writes content"], v.accepted["writes points"], "a write costs 5 points")
}
