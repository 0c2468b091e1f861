package throttle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
)

func TestLimiterPolicyAndStore(t *testing.T) {
	store := memstore.New()
	p := throttle.Policy{Instances: 3, Classes: []throttle.Class{{Name: "bulk", Headroom: 0.5}}, Rules: []throttle.Rule{
		{Name: "a", Limits: []throttle.Limit{{Name: "l", Rate: 1, Per: time.Second}}},
	}}
	tr, err := throttle.NewTransport(nil, p, throttle.WithStore(store))
	require.NoError(t, err)
	lim := tr.Limiter()
	assert.Same(t, store, lim.Store().(*memstore.Store))
	got := lim.Policy()
	assert.Equal(t, 3, got.Instances)
	assert.Equal(t, p.Classes, got.Classes)
	require.Len(t, got.Rules, 1)
	assert.Equal(t, "a", got.Rules[0].Name)
	got.Rules[0].Name, got.Rules[0].Limits[0].Rate = "changed", 99
	again := lim.Policy()
	assert.Equal(t, "a", again.Rules[0].Name, "a copy")
	assert.Equal(t, 1, again.Rules[0].Limits[0].Rate, "a copy")

	own, err := throttle.NewLimiter(p)
	require.NoError(t, err)
	assert.IsType(t, &memstore.Store{}, own.Store(), "the private store")
}

func TestLimiterStats(t *testing.T) {
	lim, err := throttle.NewLimiter(throttle.Policy{Rules: []throttle.Rule{
		{Name: "rate", Wait: waiters.Block(), Limits: []throttle.Limit{{Name: "hourly", Rate: 1, Per: time.Hour}}},
		{Name: "slots", Wait: waiters.FailFast(), Limits: []throttle.Limit{{Name: "two", Rate: 2, Per: time.Minute, Algorithm: throttle.Concurrency}}},
	}})
	require.NoError(t, err)
	stats := func() map[string]throttle.RuleStats {
		m := map[string]throttle.RuleStats{}
		for _, s := range lim.Stats() {
			m[s.Rule] = s
		}
		return m
	}
	assert.Equal(t, map[string]throttle.RuleStats{"rate": {Rule: "rate"}, "slots": {Rule: "slots"}}, stats())

	ctx := context.Background()
	p, err := lim.Wait(ctx, "rate")
	require.NoError(t, err)
	p.Done()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	go func() {
		_, err := lim.Wait(wctx, "rate") // waits an hour for its reservation
		done <- err
	}()
	for stats()["rate"].Deciding != 1 {
		time.Sleep(time.Millisecond) // until the request is being decided
	}
	cancel()
	assert.True(t, errors.Is(<-done, context.Canceled))
	assert.Equal(t, 0, stats()["rate"].Deciding)

	a, err := lim.Allow(ctx, "slots")
	require.NoError(t, err)
	b, err := lim.Allow(ctx, "slots")
	require.NoError(t, err)
	assert.Equal(t, 2, stats()["slots"].InFlight)
	a.Done()
	a.Done()
	assert.Equal(t, 1, stats()["slots"].InFlight, "Done twice frees one slot")
	b.Done()
	assert.Equal(t, 0, stats()["slots"].InFlight)
}
