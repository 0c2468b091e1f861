package quotaview_test

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaview"
	"github.com/quotakit/throttle/waiters"
)

// heap returns the live heap after a collection.
func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// With 100,000 distinct keys in the store and 100,000 distinct tenants in
// the hooks, a view shows at most MaxKeys counters and says how many it
// left out, the recorder counts at most MaxTenants tenants, and neither
// the recorder nor the handler keeps memory that grows with the keys.
func TestMemoryBoundedWith100000Keys(t *testing.T) {
	const keys = 100_000
	store := memstore.New()
	rec := quotaview.NewRecorder()
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{{
		Name: "calls", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "per-key", Rate: 10, Per: time.Hour, Algorithm: throttle.FixedWindow, Key: throttle.KeyFromContext("k")}},
	}}}, throttle.WithStore(store), throttle.WithHooks(rec.Hooks(throttle.Hooks{})))
	require.NoError(t, err)
	page := quotaview.New(lim, quotaview.WithRecorder(rec), quotaview.WithMaxKeys(500))

	// A few through the limiter, the rest straight to the store (faster,
	// the same counters).
	ctx := context.Background()
	for i := range 10 {
		p, err := lim.Allow(throttle.WithKey(ctx, "k", "user-"+strconv.Itoa(i)), "calls")
		require.NoError(t, err)
		p.Done()
	}
	perKey := lim.Policy().Rules[0].Limits[0].Quota()
	for i := 10; i < keys; i++ {
		dec, err := store.Take(ctx, &quota.Demand{Scope: "calls", Limits: []quota.Bucket{{Limit: perKey, Key: "user-" + strconv.Itoa(i)}}, Cost: 1})
		require.NoError(t, err)
		require.True(t, dec.OK)
	}
	s := snapshot(t, page, "")
	assert.Len(t, s.Counters, 500)
	assert.Equal(t, keys-500, s.Omitted)
	assert.Equal(t, 10, s.Rules[0].Outcomes["allowed"])

	// The handler keeps nothing of a view.
	before := heap()
	for range 3 {
		code, _ := get(t, page, "/debug/throttle/")
		require.Equal(t, http.StatusOK, code)
	}
	grown := int64(heap()) - int64(before)
	t.Logf("heap after three views of %d keys: %+d bytes", keys, grown)
	assert.Less(t, grown, int64(1<<20))

	// The recorder's tenants are bounded: the rest count as "(other)".
	hooks := rec.Hooks(throttle.Hooks{})
	before = heap()
	for i := range keys {
		hooks.OnDecision(throttle.DecisionEvent{Rule: "calls", Outcome: throttle.Refused, Limit: "per-key", Tenant: "tenant-" + strconv.Itoa(i)})
	}
	grown = int64(heap()) - int64(before)
	t.Logf("heap after %d tenants: %+d bytes", keys, grown)
	assert.Less(t, grown, int64(1<<20))
	assert.Equal(t, quotaview.MaxTenants, rec.Tenants())
	s = snapshot(t, page, "")
	tenants := s.Rules[0].Tenants
	require.Len(t, tenants, quotaview.MaxTenants+1)
	var other int64
	for _, tv := range tenants {
		if tv.Name == "(other)" {
			other = tv.Refused
		}
	}
	assert.EqualValues(t, keys-quotaview.MaxTenants, other)
	assert.Len(t, s.Rules[0].Why, 8, "a few recent events per rule")
}
