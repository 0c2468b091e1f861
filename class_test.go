package throttle_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClassesValidate: every problem with classes, a rule's class and a
// limit's tenant is a PolicyError naming its field.
func TestClassesValidate(t *testing.T) {
	limit := throttle.Limit{Name: "l", Rate: 10, Per: time.Second}
	tests := []struct {
		name    string
		classes []throttle.Class
		rule    throttle.Rule
		fields  []string // the PolicyErrors' fields; none: valid
	}{
		{"valid", []throttle.Class{{Name: "interactive"}, {Name: "bulk", Headroom: 0.2}}, throttle.Rule{Class: "bulk"}, nil},
		{"no classes, no class", nil, throttle.Rule{}, nil},
		{"empty name", []throttle.Class{{Headroom: 0.1}}, throttle.Rule{}, []string{"Classes[0].Name"}},
		{"bad name", []throttle.Class{{Name: "a b"}}, throttle.Rule{}, []string{"Classes[0].Name"}},
		{"duplicate", []throttle.Class{{Name: "a"}, {Name: "a", Headroom: 0.5}}, throttle.Rule{}, []string{"Classes[1].Name"}},
		{"headroom 1", []throttle.Class{{Name: "a", Headroom: 1}}, throttle.Rule{}, []string{"Classes[0].Headroom"}},
		{"negative headroom", []throttle.Class{{Name: "a", Headroom: -0.1}}, throttle.Rule{}, []string{"Classes[0].Headroom"}},
		{"NaN headroom", []throttle.Class{{Name: "a", Headroom: math.NaN()}}, throttle.Rule{}, []string{"Classes[0].Headroom"}},
		{"unknown class", []throttle.Class{{Name: "a"}}, throttle.Rule{Class: "b"}, []string{"Class"}},
		{"tenant on a concurrency limit", nil, throttle.Rule{Limits: []throttle.Limit{
			limit, {Name: "c", Rate: 2, Per: time.Second, Algorithm: throttle.Concurrency, Tenant: throttle.KeyFromContext("t")},
		}}, []string{"Limits[1].Tenant"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rule
			r.Name = "r"
			if r.Limits == nil {
				r.Limits = []throttle.Limit{limit}
			}
			err := throttle.Policy{Classes: tt.classes, Rules: []throttle.Rule{r}}.Validate()
			if tt.fields == nil {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, throttle.ErrInvalidPolicy)
			var fields []string
			for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
				var pe *throttle.PolicyError
				require.ErrorAs(t, e, &pe)
				fields = append(fields, pe.Field)
			}
			assert.Equal(t, tt.fields, fields)
		})
	}
}

// classPolicy is one rule of 10 an hour with a burst of 10 (T = 6 min:
// nothing refills while a case runs), of class bulk (headroom 20%: 2
// units), and a class interactive without headroom.
func classPolicy(tenant throttle.KeyFunc) throttle.Policy {
	return throttle.Policy{
		Classes: []throttle.Class{{Name: "interactive"}, {Name: "bulk", Headroom: 0.2}},
		Rules: []throttle.Rule{{Name: "r", Class: "bulk", Wait: waiters.FailFast(),
			Limits: []throttle.Limit{{Name: "calls", Rate: 10, Per: time.Hour, Tenant: tenant}}}},
	}
}

// TestClassHeadroom, on both stores: a class stops at its headroom, the
// class above it takes the rest, a request of a class with a headroom is
// never reserved far ahead, and hooks name the class.
func TestClassHeadroom(t *testing.T) {
	for name, stores := range limiterStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var classes []string
			var mu sync.Mutex
			lim := fleetOf(t, 1, classPolicy(nil), stores(t), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
				mu.Lock()
				classes = append(classes, ev.Class)
				mu.Unlock()
			}}))[0]
			bulk, inter := t.Context(), throttle.WithClass(t.Context(), "interactive")

			for i := range 8 {
				_, err := lim.Allow(bulk, "r")
				require.NoError(t, err, "bulk %d", i)
			}
			_, err := lim.Allow(bulk, "r")
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le, "bulk past its headroom")
			assert.Equal(t, "calls", le.Limit)
			assert.InDelta(t, 6*time.Minute, le.RetryAfter, float64(time.Second))

			// Reserve: never for bulk, which may not hold quota ahead.
			block := func(ctx context.Context) context.Context { return throttle.WithWaiter(ctx, waiters.Block()) }
			_, err = lim.Reserve(block(bulk), "r", 1)
			require.ErrorAs(t, err, &le, "bulk Reserve")

			p, err := lim.Allow(inter, "r")
			require.NoError(t, err)
			assert.Equal(t, int64(1), p.Remaining, "what interactive may still take")
			_, err = lim.Allow(inter, "r")
			require.NoError(t, err)
			_, err = lim.Allow(inter, "r")
			require.ErrorIs(t, err, throttle.ErrLimited, "interactive past the burst")
			p, err = lim.Reserve(block(inter), "r", 1)
			require.NoError(t, err, "interactive Reserve")
			assert.InDelta(t, 6*time.Minute, p.Delay, float64(time.Second))

			_, err = lim.Allow(throttle.WithClass(t.Context(), "urgent"), "r")
			require.ErrorIs(t, err, throttle.ErrInvalidPolicy)

			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, []string{"bulk", "bulk", "bulk", "bulk", "bulk", "bulk", "bulk", "bulk", "bulk", "bulk",
				"interactive", "interactive", "interactive", "interactive", ""}, classes)
		})
	}
}

// takeCounter counts the Take calls of a store that have returned.
type takeCounter struct {
	quota.Store
	takes atomic.Int64
}

func (s *takeCounter) Take(ctx context.Context, d *quota.Demand) (quota.Decision, error) {
	defer s.takes.Add(1)
	return s.Store.Take(ctx, d)
}

// TestBacklogHoldsNoQuota, on both stores: 50 bulk requests that block
// for their quota, 42 more than its burst allows, leave the headroom
// free: an interactive request that fails fast still goes at once, twice.
// Then the bulk ones give up (their context ends) and leave nothing
// charged: 8 went.
func TestBacklogHoldsNoQuota(t *testing.T) {
	for name, stores := range limiterStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			store := &takeCounter{Store: stores(t)()}
			p := classPolicy(nil)
			p.Rules[0].Wait = waiters.Block()
			lim, err := throttle.NewLimiter(p, throttle.WithStore(store))
			require.NoError(t, err)

			ctx, cancel := context.WithCancel(t.Context())
			var went, gaveUp atomic.Int64
			var wg sync.WaitGroup
			for range 50 {
				wg.Go(func() {
					_, err := lim.Wait(ctx, "r")
					switch {
					case err == nil:
						went.Add(1)
					case errors.Is(err, context.Canceled):
						gaveUp.Add(1)
					default:
						t.Errorf("bulk: %v", err)
					}
				})
			}
			for store.takes.Load() < 50 { // every bulk request has had its answer
				time.Sleep(time.Millisecond)
			}
			inter := throttle.WithWaiter(throttle.WithClass(t.Context(), "interactive"), waiters.FailFast())
			for i := range 2 {
				_, err := lim.Allow(inter, "r")
				require.NoError(t, err, "interactive %d behind the backlog", i)
			}
			cancel()
			wg.Wait()
			assert.Equal(t, int64(8), went.Load())
			assert.Equal(t, int64(42), gaveUp.Load())
			assert.Equal(t, int64(52), store.takes.Load(), "one store call each: the line's first sleeps for 6 minutes")
		})
	}
}

// TestLineAsksOncePerGrant, on both stores: 16 bulk requests block for a
// limit of 50 a second whose headroom leaves the class one unit at once.
// All go, and none asks the store more than three times (once on
// arrival, once when its turn in line comes, once more at the instant
// the store names): the waiting requests take turns instead of all
// asking at every instant.
func TestLineAsksOncePerGrant(t *testing.T) {
	for name, stores := range limiterStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var tries []int
			var mu sync.Mutex
			p := throttle.Policy{
				Classes: []throttle.Class{{Name: "bulk", Headroom: 0.5}},
				Rules: []throttle.Rule{{Name: "r", Class: "bulk", Wait: waiters.Block(),
					Limits: []throttle.Limit{{Name: "calls", Rate: 50, Per: time.Second, Burst: 2}}}},
			}
			lim := fleetOf(t, 1, p, stores(t), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
				mu.Lock()
				tries = append(tries, ev.Tries)
				mu.Unlock()
			}}))[0]
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					_, err := lim.Wait(t.Context(), "r")
					assert.NoError(t, err)
				})
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			require.Len(t, tries, 16)
			for i, n := range tries {
				assert.LessOrEqual(t, n, 3, "request %d asked %d times", i, n)
			}
		})
	}
}

// TestTenantShares, on both stores: with two tenants active, a tenant
// may use what the other leaves; then the limit's next unit goes to the
// tenant below its share, whose refusal holds the other back; and hooks
// name the tenant. (n = 2: a's share clock is 1 h ahead, a burst's time, after 5 of
// its 9 units, and 12 min beyond that, one grant's step, after the 9th.)
func TestTenantShares(t *testing.T) {
	for name, stores := range limiterStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var tenants []string
			var mu sync.Mutex
			p := classPolicy(throttle.KeyFromContext("tenant"))
			p.Rules[0].Class = "" // no headroom
			lim := fleetOf(t, 1, p, stores(t), throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) {
				mu.Lock()
				tenants = append(tenants, ev.Tenant)
				mu.Unlock()
			}}))[0]
			a := throttle.WithKey(t.Context(), "tenant", "a")
			b := throttle.WithKey(t.Context(), "tenant", "b")
			_, err := lim.Allow(b, "r")
			require.NoError(t, err, "b")
			for i := range 9 {
				_, err := lim.Allow(a, "r")
				require.NoError(t, err, "a, %d", i)
			}
			_, err = lim.Allow(b, "r")
			require.ErrorIs(t, err, throttle.ErrLimited, "the limit is used up")
			block := func(ctx context.Context) context.Context { return throttle.WithWaiter(ctx, waiters.Block()) }
			// A tenant's request reserves at most T/2 (3 min) ahead: b is
			// refused until the next unit, 6 min on, and claims it; a, over
			// its share, waits T behind b's claim.
			_, err = lim.Reserve(block(b), "r", 1)
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le, "b")
			assert.InDelta(t, 6*time.Minute, le.RetryAfter, float64(time.Second))
			_, err = lim.Reserve(block(a), "r", 1)
			require.ErrorAs(t, err, &le, "a")
			assert.InDelta(t, 12*time.Minute, le.RetryAfter, float64(time.Second), "a waits behind b's claim")
			_, err = lim.Allow(t.Context(), "r")
			require.ErrorIs(t, err, throttle.ErrMissingKey, "no tenant")

			mu.Lock()
			defer mu.Unlock()
			assert.Equal(t, []string{"b", "a", "a", "a", "a", "a", "a", "a", "a", "a", "b", "b", "a", ""}, tenants)
		})
	}
}
