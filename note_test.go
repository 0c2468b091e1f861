package throttle_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNotePlacement: NewLimiter notes, at Info, a GCRA limit that waiting
// requests share with limits that delay only some of them (docs/policy.md,
// "GCRA keeps one arrival time"), and nothing otherwise.
func TestNotePlacement(t *testing.T) {
	writes := func(r *http.Request) bool { return r.Method != http.MethodGet }
	stacked := func(alg throttle.Algorithm, w throttle.Waiter) throttle.Rule {
		return throttle.Rule{Name: "github", Wait: w, Limits: []throttle.Limit{
			{Name: "points", Rate: 900, Per: time.Minute, Algorithm: alg},
			{Name: "content", Rate: 80, Per: time.Minute, Algorithm: throttle.SlidingLog, Match: writes},
			{Name: "in-flight", Rate: 100, Per: time.Minute, Algorithm: throttle.Concurrency},
		}}
	}
	shared := func(alg throttle.Algorithm) []throttle.Rule {
		return []throttle.Rule{
			{Name: "writes", Scope: "api", Wait: waiters.Block(), Method: http.MethodPost, Limits: []throttle.Limit{
				{Name: "points", Rate: 300, Per: time.Second, Algorithm: alg},
				{Name: "content", Rate: 100, Per: time.Second, Algorithm: throttle.SlidingLog},
			}},
			{Name: "reads", Scope: "api", Wait: waiters.Block(), Limits: []throttle.Limit{
				{Name: "points", Rate: 300, Per: time.Second, Algorithm: alg},
			}},
		}
	}
	for _, tc := range []struct {
		name  string
		rules []throttle.Rule
		want  []string // the notes' rule and limit, "rule/limit"
	}{
		{"GCRA and a limit of some requests", []throttle.Rule{stacked(throttle.GCRA, waiters.Block())}, []string{"github/points"}},
		{"sliding log", []throttle.Rule{stacked(throttle.SlidingLog, waiters.Block())}, nil},
		{"requests that never wait", []throttle.Rule{stacked(throttle.GCRA, waiters.FailFast())}, nil},
		{"GCRA shared by rules with other limits", shared(throttle.GCRA), []string{"writes/points", "reads/points"}},
		{"fixed window shared by rules", shared(throttle.FixedWindow), nil},
		{"GCRA alone", []throttle.Rule{{Name: "one", Wait: waiters.Block(), Limits: []throttle.Limit{{Name: "calls", Rate: 10, Per: time.Second}}}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
				if a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}}))
			_, err := throttle.NewLimiter(throttle.Policy{Rules: tc.rules}, throttle.WithLogger(log))
			require.NoError(t, err)
			var got []string
			for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
				if len(line) == 0 {
					continue
				}
				assert.Contains(t, string(line), "level=INFO")
				assert.Contains(t, string(line), "GCRA limit keeps one arrival time")
				var rule, limit string
				for _, f := range bytes.Fields(line) {
					if v, ok := bytes.CutPrefix(f, []byte("rule=")); ok {
						rule = string(v)
					}
					if v, ok := bytes.CutPrefix(f, []byte("limit=")); ok {
						limit = string(v)
					}
				}
				got = append(got, rule+"/"+limit)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}
