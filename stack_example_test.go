package throttle_test

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ExampleLimit_stacked is the README's rule of GitHub's stacked limits:
// a write costs 5 points and a content creation, a read 1 point; every
// request takes a primary unit and an in-flight slot. The lines between
// the markers are the README's (TestReadmeStacked checks).
func ExampleLimit_stacked() {
	// readme:stacked:begin
	writes := func(r *http.Request) bool { return r.Method != "GET" && r.Method != "HEAD" }
	token := throttle.KeyFromHeader("Authorization") // hashed before it reaches a store
	github := throttle.Rule{Name: "github", Host: "api.github.com", Limits: []throttle.Limit{
		{Name: "primary", Rate: 5000, Per: time.Hour, Key: token},
		{Name: "points", Rate: 900, Per: time.Minute, Key: token, // a write costs 5, a read 1
			Cost: throttle.CostByMethod(5, map[string]int{"GET": 1, "HEAD": 1})},
		{Name: "content", Rate: 80, Per: time.Minute, Key: token, Match: writes},
		{Name: "in-flight", Rate: 100, Per: time.Minute, Algorithm: throttle.Concurrency, Key: token},
	}}
	// readme:stacked:end
	github.Wait = waiters.FailFast()
	at := time.Unix(1_700_000_000, 0) // a clock that stands still
	tr, err := throttle.NewTransport(answer200{}, throttle.Policy{Rules: []throttle.Rule{github}},
		throttle.WithStore(memstore.New(memstore.WithClock(func() time.Time { return at }))))
	if err != nil {
		panic(err)
	}
	var sent int
	for {
		req, _ := http.NewRequest(http.MethodPost, "https://api.github.com/repos/o/r/issues", nil)
		req.Header.Set("Authorization", "Bearer t")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			fmt.Printf("%d writes sent, then: %v\n", sent, err)
			break
		}
		resp.Body.Close()
		sent++
	}
	// Output:
	// 80 writes sent, then: throttle: rule github: limit content: retry after 750ms
}

// answer200 answers every request 200, in memory.
type answer200 struct{}

func (answer200) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}, Request: req}, nil
}

// TestReadmeStacked checks that the README shows ExampleLimit_stacked's
// rule word for word.
func TestReadmeStacked(t *testing.T) {
	src, err := os.ReadFile("stack_example_test.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(src), "// readme:stacked:begin\n")
	require.True(t, ok)
	body, _, ok := strings.Cut(rest, "\t// readme:stacked:end\n")
	require.True(t, ok)
	var want []string
	for _, line := range strings.Split(strings.TrimRight(body, "\n"), "\n") {
		want = append(want, strings.TrimPrefix(line, "\t"))
	}
	_, block, ok := strings.Cut(string(readme), "GitHub's limits are one rule")
	require.True(t, ok)
	_, block, ok = strings.Cut(block, "```go\n")
	require.True(t, ok)
	block, _, ok = strings.Cut(block, "\n  ```")
	require.True(t, ok)
	var got []string
	for _, line := range strings.Split(block, "\n") {
		got = append(got, strings.TrimPrefix(line, "  "))
	}
	assert.Equal(t, want, got)
}
