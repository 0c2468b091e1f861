package policyfile_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/policyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stackedYAML is GitHub's kind of stacked limits: shared points where a
// write costs 5, writes alone on the content limit, searches alone on the
// search limit.
const stackedYAML = `
rules:
  - name: github
    host: api.github.com
    wait: fail-fast
    limits:
      - {name: points, rate: 90, per: 1m, cost_by_method: {default: 5, GET: 1, HEAD: 1}}
      - {name: content, rate: 8, per: 1m, match: {method: [POST, PATCH, PUT, DELETE]}}
      - {name: search, rate: 6, per: 1m, match: {method: GET, path: "/search/{kind}"}}
`

// TestStackedLimits: a policy file's stacked limits decide as they would
// written in Go: each request charged to the limits that apply to it,
// each its own cost.
func TestStackedLimits(t *testing.T) {
	p, err := policyfile.Load("github.yaml", []byte(stackedYAML))
	require.NoError(t, err)
	at := time.Unix(1_700_000_000, 0)
	tr, err := throttle.NewTransport(okTransport{}, p, throttle.WithStore(memstore.New(memstore.WithClock(func() time.Time { return at }))))
	require.NoError(t, err)
	send := func(method, path string) string {
		req, err := http.NewRequest(method, "https://api.github.com"+path, nil)
		require.NoError(t, err)
		resp, err := tr.RoundTrip(req)
		var le *throttle.LimitError
		switch {
		case err == nil:
			resp.Body.Close()
			return "sent"
		case errors.As(err, &le):
			return "refused by " + le.Limit
		}
		return err.Error()
	}
	for i := range 8 {
		require.Equal(t, "sent", send(http.MethodPost, "/repos/o/r/issues"), "write %d", i)
	}
	assert.Equal(t, "refused by content", send(http.MethodPatch, "/repos/o/r/issues/1"))
	for i := range 6 {
		require.Equal(t, "sent", send(http.MethodGet, "/search/code"), "search %d", i)
	}
	assert.Equal(t, "refused by search", send(http.MethodGet, "/search/issues"))
	// 40 + 6 points so far: 44 reads fit, the 45th does not.
	for i := range 44 {
		require.Equal(t, "sent", send(http.MethodGet, "/repos/o/r"), "read %d", i)
	}
	assert.Equal(t, "refused by points", send(http.MethodGet, "/repos/o/r"))
}
