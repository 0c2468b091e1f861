package throttle_test

import (
	"context"
	"net/http"
	"os"
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
// /search/). A request over any limit gets a 429 and is not counted. It
// records every request's span, from the call's start to its arrival.
type rollingVendor struct {
	per    time.Duration
	limits map[string]int

	mu       sync.Mutex
	log      map[string][]rollingEntry // per token and limit
	accepted map[string]int            // units per token and limit
	rejected int
	sends    map[string][]stackSend // per token
}

type rollingEntry struct {
	at   time.Time
	cost int
}

// A stackSend is a request that reached the vendor: its decision was
// made in [lo, hi], lo when its call began, hi when it arrived.
type stackSend struct {
	lo, hi time.Time
	costs  map[string]int
}

type callStartKey struct{}

// stackOpKey keys a request's stackOp in its context.
type stackOpKey struct{}

// A stackOp is a request of TestStackedLimitsFleet and its token, for the
// decision hook.
type stackOp struct {
	token string
	req   *http.Request
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

// RoundTrip is the vendor in process, the base transport of every
// instance.
func (v *rollingVendor) RoundTrip(r *http.Request) (*http.Response, error) {
	now := time.Now()
	token := r.Header.Get("Authorization")
	costs := v.costs(r)
	lo, _ := r.Context().Value(callStartKey{}).(time.Time)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.sends[token] = append(v.sends[token], stackSend{lo: lo, hi: now, costs: costs})
	status := http.StatusOK
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
			status = http.StatusTooManyRequests
		}
	}
	if status == http.StatusOK {
		for name, cost := range costs {
			v.log[token+" "+name] = append(v.log[token+" "+name], rollingEntry{now, cost})
			v.accepted[token+" "+name] += cost
		}
	} else {
		v.rejected++
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// worstSpan returns the most units of limit name that sends surely
// decided within one span shorter than span hold: those whose lo is at
// or after a and whose hi is before a+span, for every a among the lo.
func worstSpan(sends []stackSend, name string, span time.Duration) int {
	worst := 0
	for _, s := range sends {
		n := 0
		for _, o := range sends {
			if !o.lo.Before(s.lo) && o.hi.Before(s.lo.Add(span)) {
				n += o.costs[name]
			}
		}
		worst = max(worst, n)
	}
	return worst
}

// TestStackedLimitsFleet: 8 instances of 16 goroutines, each instance
// with its own Redis client, store and Transport, send requests through
// one rule of stacked limits with per-limit costs (githubLike) to a vendor
// that enforces them over rolling windows, with four tokens: one only
// reads (the points bind), one only writes (content binds, 5 points
// each), one only searches (search binds), one mixes all three in one
// queue (the points bind). Every request waits for its reservation.
//
// What it asserts holds on any machine: no span of the rule's window
// holds more units of a limit than its rate, counting every request
// surely decided in it (its call began at or after the span's start and
// reached the vendor before its end), and a write costs exactly 5 points.
// What a loaded machine changes is logged: the vendor's 429s (the rule's
// windows are 200 ms longer than the vendor's, as presets/githubquota's
// Margin, to cover the time from a decision to the arrival) and the share
// of each binding limit used (measured: 0 429s and 100% on a quiet
// machine; the floor asserted is 60%, for a 2-core machine running -race
// beside other tests). The quotas are small (20 points, 4 writes, 3
// searches a window) so that the clients keep up.
//
// A grant this process could only send late is given back (late.go), and
// its units, charged at an instant that has passed, are lost: the floor
// holds for what the vendor accepted and what was given back so
// (THROTTLE_FLEET_STRICT=1: for what it accepted alone). In the whole
// suite beside three CPU burners (2026-11-28) writes got 9 of 16 and
// searches 7 of 12; run alone beside four, the same 9 and 7 with 3 and 3
// given back late, and in two more runs 13 and 9 writes with 3 and 6.
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
	v := &rollingVendor{per: per, limits: map[string]int{"points": 20, "content": 4, "search": 3},
		log: map[string][]rollingEntry{}, accepted: map[string]int{}, sends: map[string][]stackSend{}}
	rdb := redistest.Start(t)
	prefix := redistest.Prefix(t)
	rule := githubLike(per + margin)
	rule.Wait = waiters.Block()
	for i, n := range []int{20, 4, 3} { // githubLike's limits, at the vendor's numbers
		rule.Limits[i].Rate = n
	}

	type op struct{ method, path string }
	read, write, search := op{http.MethodGet, "/repos/o/r"}, op{http.MethodPost, "/repos/o/r/issues"}, op{http.MethodGet, "/search/code"}
	// The mixed token spends 2.2 points a request, so the points bind
	// it (2.7 writes and 0.9 searches a window). A write waits until 5
	// points are free; reads take the points free before its
	// reservation (docs/policy.md).
	mixed := []op{read, read, read, read, read, read, write, write, write, search}
	tokens := []string{"reads", "writes", "search", "mixed"}
	// The units of grants given back because this process could only send
	// them late (late.go), per token and limit: charged instants that have
	// passed, which no later request can take.
	var lostMu sync.Mutex
	lost := map[string]int{}
	hooks := throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
		s, ok := ev.Context.Value(stackOpKey{}).(stackOp)
		if given := ev.Late - ev.Retimed; ok && given > 0 {
			lostMu.Lock()
			for name, c := range v.costs(s.req) {
				lost[s.token+" "+name] += given * c
			}
			lostMu.Unlock()
		}
	}}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	var wg sync.WaitGroup
	for range 8 {
		c := redis.NewClient(&redis.Options{Addr: rdb.Addr()})
		defer c.Close()
		store, err := redisstore.New(c, redisstore.WithPrefix(prefix))
		require.NoError(t, err)
		tr, err := throttle.NewTransport(v, throttle.Policy{Rules: []throttle.Rule{rule}}, throttle.WithStore(store), throttle.WithHooks(hooks))
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
					cctx := context.WithValue(ctx, callStartKey{}, time.Now())
					req, _ := http.NewRequestWithContext(cctx, o.method, "https://api.example.com"+o.path, nil)
					req.Header.Set("Authorization", token)
					req = req.WithContext(context.WithValue(cctx, stackOpKey{}, stackOp{token, req}))
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
	t.Logf("the vendor's 429s: %d", v.rejected)
	for token, sends := range v.sends {
		for name, n := range v.limits {
			assert.LessOrEqual(t, worstSpan(sends, name, per+margin), n, "token %s: limit %s over its rate in one window", token, name)
		}
	}
	lostMu.Lock()
	defer lostMu.Unlock()
	strict := os.Getenv("THROTTLE_FLEET_STRICT") != ""
	for _, bind := range [][2]string{{"reads", "points"}, {"writes", "content"}, {"search", "search"}, {"mixed", "points"}} {
		key := bind[0] + " " + bind[1]
		got, most := v.accepted[key], windows*v.limits[bind[1]]
		t.Logf("token %s: %s %d of %d units (%.1f%%), %d more given back late; points %d", bind[0], bind[1], got, most, 100*float64(got)/float64(most), lost[key], v.accepted[bind[0]+" points"])
		if !strict {
			got += lost[key]
		}
		assert.GreaterOrEqual(t, float64(got), 0.6*float64(most), "token %s: limit %s used below 60%%", bind[0], bind[1])
	}
	assert.Equal(t, 5*v.accepted["writes content"], v.accepted["writes points"], "a write costs 5 points")
}
