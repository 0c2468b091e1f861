package policyfile_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/policyfile"
	"github.com/quotakit/throttle/quota"
)

// A Reloader puts a new version of the policy file in force without
// dropping requests, keeps what was charged, and refuses a bad file.
func ExampleNewReloader() {
	dir, err := os.MkdirTemp("", "policy")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policy.yaml")
	write := func(rate int) {
		doc := fmt.Sprintf(`rules:
  - name: api
    host: api.example.com
    wait: fail-fast
    limits:
      - {name: calls, rate: %d, per: 1h, algorithm: fixed-window}
`, rate)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			fmt.Println(err)
		}
	}

	write(1)
	r, err := policyfile.NewReloader(path, okTransport{}) // okTransport: a vendor answering 200
	if err != nil {
		fmt.Println(err)
		return
	}
	client := &http.Client{Transport: r}
	call := func() {
		resp, err := client.Get("https://api.example.com/x")
		if err != nil {
			fmt.Println("refused:", errors.Is(err, throttle.ErrLimited))
			return
		}
		resp.Body.Close()
		fmt.Println("sent")
	}
	call()
	call()

	write(2) // in production: go r.Watch(ctx, 5*time.Second, report)
	changed, err := r.Reload()
	fmt.Println("reloaded:", changed, err)
	call() // the first call still counts: 2 of 2
	call()

	write(0)
	_, err = r.Reload()
	var fe *policyfile.Error
	if errors.As(err, &fe) {
		fmt.Printf("kept the old policy: line %d, rule %s, field %s\n", fe.Line, fe.Rule, fe.Field)
	}
	// Output:
	// sent
	// refused: true
	// reloaded: true <nil>
	// sent
	// refused: true
	// kept the old policy: line 6, rule api, field limits[0].rate
}

// Load reports every problem of a file at once, each once, with its line,
// rule and field as the file names them: what the file gets wrong and
// what validation finds.
func ExampleLoad() {
	doc := `rules:
  - name: slack-notify
    host: hooks.slack.com
    wiat: fail-fast
    limits:
      - {name: global, rate: 100.5, per: 30m}
      - {name: category, rate: 0, per: 30 minutes}
`
	_, err := policyfile.Load("policy.yaml", []byte(doc))
	fmt.Println(err)
	fmt.Println(errors.Is(err, quota.ErrInvalid))
	// Output:
	// policy.yaml:4: rule "slack-notify": wiat: unknown field (name, host, method, path, scope, wait, cost, cost_by_method, shadow, on_store_failure, limits, learn, retry, settle_from_json, class)
	// policy.yaml:6: rule "slack-notify": limits[0].rate: must be a whole number, got 100.5
	// policy.yaml:7: rule "slack-notify": limits[1].per: not a duration (such as 30s, 5m, 1h): "30 minutes"
	// policy.yaml:7: rule "slack-notify": limits[1].rate: must be positive, got 0
	// true
}
