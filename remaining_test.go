package throttle_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecisionEventRemaining checks that hooks see what the store says is
// left after each grant, and nothing after a refusal, on a store whose
// clock stands still.
func TestDecisionEventRemaining(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer vendor.Close()
	at := time.Unix(1_700_000_000, 0)
	var events []throttle.DecisionEvent
	tr, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{{
		Name: "r", Limits: []throttle.Limit{{Name: "per-min", Rate: 3, Per: time.Minute}},
		Wait: waiters.FailFast(),
	}}}, throttle.WithStore(memstore.New(memstore.WithClock(func() time.Time { return at }))),
		throttle.WithHooks(throttle.Hooks{OnDecision: func(e throttle.DecisionEvent) { events = append(events, e) }}))
	require.NoError(t, err)
	client := &http.Client{Transport: tr}
	for range 4 {
		resp, err := client.Get(vendor.URL)
		if err == nil {
			require.NoError(t, resp.Body.Close())
		}
	}
	type left struct {
		Outcome    throttle.Outcome
		Remaining  int64
		ResetAfter time.Duration
	}
	var got []left
	for _, e := range events {
		got = append(got, left{e.Outcome, e.Remaining, e.ResetAfter})
	}
	assert.Equal(t, []left{
		{throttle.Allowed, 2, 20 * time.Second},
		{throttle.Allowed, 1, 40 * time.Second},
		{throttle.Allowed, 0, time.Minute},
		{throttle.Refused, 0, 0},
	}, got)
}
