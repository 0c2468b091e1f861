package policyfile_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/policyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClassesAndTenants: classes, a rule's class and a limit's tenant
// read from YAML and from JSON decide as they would written in Go: bulk
// stops at its headroom (20% of 10: 2), interactive takes the rest, and
// hooks see the class and the tenant.
func TestClassesAndTenants(t *testing.T) {
	for name, doc := range map[string]string{
		"sync.yaml": `
classes:
  - {name: interactive}
  - {name: bulk, headroom: 20%}
rules:
  - name: sync
    class: bulk
    wait: fail-fast
    limits:
      - {name: calls, rate: 10, per: 1h, tenant: "context:customer"}
`,
		"sync.json": `{"classes": [{"name": "interactive"}, {"name": "bulk", "headroom": 0.2}],
 "rules": [{"name": "sync", "class": "bulk", "wait": "fail-fast",
  "limits": [{"name": "calls", "rate": 10, "per": "1h", "tenant": "context:customer"}]}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			p, err := policyfile.Load(name, []byte(doc))
			require.NoError(t, err)
			at := time.Unix(1_700_000_000, 0)
			var events []throttle.DecisionEvent
			tr, err := throttle.NewTransport(okTransport{}, p,
				throttle.WithStore(memstore.New(memstore.WithClock(func() time.Time { return at }))),
				throttle.WithHooks(throttle.Hooks{OnDecision: func(ev throttle.DecisionEvent) { events = append(events, ev) }}))
			require.NoError(t, err)
			send := func(ctx context.Context) bool {
				req, err := http.NewRequestWithContext(throttle.WithKey(ctx, "customer", "acme"), http.MethodPost, "https://api.example.com/", nil)
				require.NoError(t, err)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					require.ErrorIs(t, err, throttle.ErrLimited)
					return false
				}
				resp.Body.Close()
				return true
			}
			sent := 0
			for range 12 {
				if send(context.Background()) {
					sent++
				}
			}
			assert.Equal(t, 8, sent, "bulk")
			assert.True(t, send(throttle.WithClass(context.Background(), "interactive")))
			assert.True(t, send(throttle.WithClass(context.Background(), "interactive")))
			assert.False(t, send(throttle.WithClass(context.Background(), "interactive")))
			require.Len(t, events, 15)
			assert.Equal(t, "bulk", events[0].Class)
			assert.Equal(t, "interactive", events[14].Class)
			assert.Equal(t, "acme", events[14].Tenant)
		})
	}
}
