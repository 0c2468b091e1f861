package githubquota_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/waiters"
)

// GraphQL's primary limit answers 200 with errors[].type RATE_LIMITED
// (and x-ratelimit-remaining 0): the preset reads it as "slow down", so
// the token's GraphQL pauses until the reset the headers give, for every
// instance, and settles the refused query down from its estimate to 1,
// the least a settlement can be (GitHub charged nothing).
func TestGraphQLRateLimited(t *testing.T) {
	const hourly = 3 // the fake's GraphQL points an hour; the preset believes 5,000
	fake := fakegithub.NewServer(fakegithub.Options{Hourly: hourly})
	defer fake.Close()
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: fake.BaseURL(), Wait: waiters.FailFast(), GraphQLEstimate: 20})
	require.NoError(t, err)
	store := memstore.New()
	var (
		mu      sync.Mutex
		pauses  []throttle.PauseEvent
		settled []throttle.SettleEvent
	)
	hooks := throttle.Hooks{
		OnPause:  func(ev throttle.PauseEvent) { mu.Lock(); pauses = append(pauses, ev); mu.Unlock() },
		OnSettle: func(ev throttle.SettleEvent) { mu.Lock(); settled = append(settled, ev); mu.Unlock() },
	}
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	instance := func() *http.Client {
		tr, err := throttle.NewTransport(base, policy, throttle.WithStore(store), throttle.WithHooks(hooks))
		require.NoError(t, err)
		return &http.Client{Transport: tr}
	}
	a, b := instance(), instance()
	query := func(c *http.Client) (*http.Response, string, error) {
		req, err := http.NewRequest(http.MethodPost, fake.URL+"/graphql", strings.NewReader(costQuery))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokenA)
		resp, err := c.Do(req)
		if err != nil {
			return nil, "", err
		}
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp, string(body), nil
	}
	// A client the limiter does not see spends the token's GraphQL.
	direct := &http.Client{Transport: base}
	for i := range hourly {
		resp, _, err := query(direct)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "query %d", i)
	}
	resp, body, err := query(a)
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode, "GitHub's limited GraphQL answer is a 200")
	assert.Contains(t, body, "RATE_LIMITED")
	assert.Equal(t, hourly, fake.Used(tokenA, "graphql"), "GitHub charged the refused query nothing")

	mu.Lock()
	require.Len(t, pauses, 1, "the RATE_LIMITED answer paused the token's GraphQL")
	pause := pauses[0]
	require.Len(t, settled, 1)
	refused := settled[0]
	mu.Unlock()
	assert.Equal(t, http.StatusOK, pause.Status)
	assert.Greater(t, pause.Pause, time.Hour-5*time.Second, "until the reset the headers give")
	assert.LessOrEqual(t, pause.Pause, time.Hour+2*time.Second)
	assert.Equal(t, 1, refused.Cost, "the refused query settled to the least a settlement can be")
	assert.Equal(t, 20, refused.Charged, "charged the estimate")
	assert.NoError(t, refused.Err)
	// Another instance does not send: the pause is the fleet's.
	_, _, err = query(b)
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le, "the pause holds every instance")
	assert.True(t, errors.Is(err, throttle.ErrLimited))
	assert.Positive(t, le.RetryAfter)
	assert.Equal(t, hourly, fake.Used(tokenA, "graphql"))
}
