package throttle_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/waiters"
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
	assertReadmeShows(t, "stack_example_test.go", "stacked", "GitHub's limits are one rule", "  ")
}
