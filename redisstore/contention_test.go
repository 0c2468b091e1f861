package redisstore_test

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// grant is one granted decision, as recorded by a contention worker.
type grant struct {
	cat   int
	marks []int64
	id    string
}

// hammer runs instances x workers goroutines, each on its own category
// (worker % cats), taking d(cat) until the store's clock passes run, and
// returns every grant. Any error fails the test.
func hammer(t *testing.T, stores []*redisstore.Store, workers, cats int, run time.Duration, d func(cat int) *quota.Demand) []grant {
	t.Helper()
	var (
		mu     sync.Mutex
		grants []grant
		wg     sync.WaitGroup
	)
	stop := time.Now().Add(run)
	for _, s := range stores {
		for w := range workers {
			wg.Go(func() {
				cat := w % cats
				dem := d(cat)
				for time.Now().Before(stop) {
					dec, err := s.Take(ctx(t), dem)
					if !assert.NoError(t, err) {
						return
					}
					if dec.OK {
						mu.Lock()
						grants = append(grants, grant{cat: cat, marks: dec.Reservation.Marks, id: dec.Reservation.ID})
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	return grants
}

func instances(t *testing.T, n int, prefix string) []*redisstore.Store {
	ss := make([]*redisstore.Store, n)
	for i := range ss {
		ss[i] = newStore(t, prefix) // each on its own client and pool
	}
	return ss
}

// TestContentionFixedWindows: 8 instances x 16 goroutines on a rule of a
// global and a per-category fixed window. Every window in which demand
// lasted throughout admits exactly the global rate, none over, none lost;
// no category is ever over its own rate.
func TestContentionFixedWindows(t *testing.T) {
	const (
		global, perCat, cats = 40, 15, 4 // 4 categories could take 60 > 40
		per                  = 500 * time.Millisecond
	)
	stores := instances(t, 8, redistest.Prefix(t))
	scope := "contention-fw"
	grants := hammer(t, stores, 16, cats, 5*per/2, func(cat int) *quota.Demand {
		return &quota.Demand{Scope: scope, Cost: 1, Limits: []quota.Bucket{
			{Limit: quota.Limit{Name: "global", Rate: global, Per: per, Algorithm: quota.FixedWindow}},
			{Limit: quota.Limit{Name: "cat", Rate: perCat, Per: per, Algorithm: quota.FixedWindow}, Key: strconv.Itoa(cat)},
		}}
	})

	byWindow := map[int64]int{}
	byCat := map[[2]int64]int{}
	for _, g := range grants {
		require.Equal(t, g.marks[0], g.marks[1], "both limits are charged in the same window")
		byWindow[g.marks[0]]++
		byCat[[2]int64{g.marks[0], int64(g.cat)}]++
	}
	windows := make([]int64, 0, len(byWindow))
	for k := range byWindow {
		windows = append(windows, k)
	}
	slices.Sort(windows)
	require.GreaterOrEqual(t, len(windows), 3, "the run spans at least one whole window")
	for i, k := range windows {
		if i == 0 || i == len(windows)-1 {
			assert.LessOrEqual(t, byWindow[k], global, "window %d", k) // partly covered
			continue
		}
		assert.Equal(t, global, byWindow[k], "window %d", k)
		assert.Equal(t, windows[i-1]+1, k, "a window without grants")
	}
	for wc, n := range byCat {
		assert.LessOrEqual(t, n, perCat, "window %d, category %d", wc[0], wc[1])
	}
}

// TestContentionSlidingLog: 8 instances x 16 goroutines on a global
// sliding log and a per-category GCRA. The grant instants, in Redis's
// clock, are checked against every sliding window; what Redis holds at the
// end is exactly what was granted.
func TestContentionSlidingLog(t *testing.T) {
	const (
		global, cats = 30, 4
		per          = 300 * time.Millisecond
	)
	prefix := redistest.Prefix(t)
	stores := instances(t, 8, prefix)
	scope := "contention-log"
	grants := hammer(t, stores, 16, cats, 4*per, func(cat int) *quota.Demand {
		return &quota.Demand{Scope: scope, Cost: 1, Limits: []quota.Bucket{
			{Limit: quota.Limit{Name: "global", Rate: global, Per: per, Algorithm: quota.SlidingLog}},
			{Limit: quota.Limit{Name: "cat", Rate: 12, Per: per}, Key: strconv.Itoa(cat)},
		}}
	})
	require.Greater(t, len(grants), 2*global)

	at := make([]int64, len(grants))
	for i, g := range grants {
		at[i] = g.marks[0]
	}
	slices.Sort(at)
	P := per.Microseconds()
	for i := global; i < len(at); i++ {
		// At most global grants in (at[i]-P, at[i]].
		assert.GreaterOrEqual(t, at[i]-at[i-global], P, "%d grants within %dµs", global+1, at[i]-at[i-global])
	}

	// Every member Redis still holds was granted, and every grant newer
	// than the last one minus P is still held. Members are
	// "instant:cost:id", in order of instant, and scored with the running
	// total of the costs.
	c := newClient(t, srv.Addr())
	held, err := c.ZRangeWithScores(ctx(t), prefix+"v1:{"+scope+"}:l:global:", 0, -1).Result()
	require.NoError(t, err)
	if len(held) == 0 {
		// The log lives until Per after its newest entry: on a loaded
		// machine that may have passed before this read. Then it must
		// have, on Redis's clock.
		now, err := c.Time(ctx(t)).Result()
		require.NoError(t, err)
		require.GreaterOrEqual(t, now.UnixMicro(), at[len(at)-1]+per.Microseconds(), "the log expired before Per after its newest grant")
		t.Logf("the log expired before it was read (a loaded machine); its grants were checked above")
		return
	}
	want := map[string]int64{}
	last := at[len(at)-1]
	for _, g := range grants {
		if g.marks[0] > last-P {
			want["1:"+g.id] = g.marks[0]
		}
	}
	got := map[string]int64{}
	var prevAt, prevTotal int64
	for i, z := range held {
		instant, rest, _ := strings.Cut(z.Member.(string), ":")
		n, err := strconv.ParseInt(instant, 10, 64)
		require.NoError(t, err, "member %q", z.Member)
		if i > 0 {
			assert.GreaterOrEqual(t, n, prevAt, "member %q out of order", z.Member)
			assert.Equal(t, prevTotal+1, int64(z.Score), "member %q: running total", z.Member)
		}
		prevAt, prevTotal = n, int64(z.Score)
		if n > last-P {
			got[rest] = n
		}
	}
	assert.Equal(t, want, got)
}
