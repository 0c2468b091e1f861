package githubquota_test

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/waiters"
)

// Search is limited to 30 requests a minute per token: the 31st is
// refused before it is sent, and GitHub refuses nothing. GitHub's answer
// to the 30th said no search quota remains, so the token's search is
// paused until GitHub's reset (the limit would refuse it too).
func ExamplePolicy() {
	fake := fakegithub.NewServer(fakegithub.Options{}) // a fake GitHub; drop it and BaseURL in production
	defer fake.Close()

	policy, err := githubquota.Policy(githubquota.Options{
		BaseURL: fake.BaseURL(),
		Wait:    waiters.FailFast(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	t, err := throttle.NewTransport(nil, policy)
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: t}
	defer client.CloseIdleConnections()

	sent := 0
	for range 31 {
		req, _ := http.NewRequest(http.MethodGet, fake.BaseURL()+"search/issues?q=is:open", nil)
		req.Header.Set("Authorization", "Bearer ghp_example")
		resp, err := client.Do(req)
		var le *throttle.LimitError
		if errors.As(err, &le) {
			fmt.Printf("refused by rule %s (limit %q, pause %q)\n", le.Rule, le.Limit, le.Pause)
			continue
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		sent++
	}
	fmt.Println("sent:", sent)
	fmt.Println("refused by GitHub:", fake.Stats().Limited)
	// Output:
	// refused by rule github-search (limit "", pause "search")
	// sent: 30
	// refused by GitHub: 0
}
