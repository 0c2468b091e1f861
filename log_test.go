package throttle_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
)

func TestLoggerLogsPausesAndRefusalsWithoutSecrets(t *testing.T) {
	const secret = "Bearer xoxb-SECRET-token"
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer vendor.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()

	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		t.Run(level.String(), func(t *testing.T) {
			var buf bytes.Buffer
			logger := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level}))
			tr, err := throttle.NewTransport(base, throttle.Policy{Rules: []throttle.Rule{{
				Name: "api", Wait: waiters.FailFast(),
				Limits: []throttle.Limit{{Name: "per-token", Rate: 1, Per: time.Minute, Key: throttle.KeyFromHeader("Authorization")}},
			}}}, throttle.WithLogger(logger))
			require.NoError(t, err)
			send := func(path string) error {
				req, _ := http.NewRequest(http.MethodGet, vendor.URL+path, nil)
				req.Header.Set("Authorization", secret)
				resp, err := tr.RoundTrip(req)
				if err == nil {
					resp.Body.Close()
				}
				return err
			}
			require.NoError(t, send("/busy"))                   // 429: a pause
			require.ErrorIs(t, send("/x"), throttle.ErrLimited) // refused

			logs := buf.String()
			assert.Contains(t, logs, `"msg":"throttle: vendor asked to slow down; every instance pauses the rule"`)
			assert.Contains(t, logs, `"rule":"api"`)
			assert.Contains(t, logs, `"status":429`)
			assert.NotContains(t, logs, "SECRET")
			lines := strings.Count(strings.TrimSpace(logs), "\n") + 1
			if level == slog.LevelDebug {
				assert.Contains(t, logs, `"msg":"throttle: request not sent as asked"`)
				assert.Contains(t, logs, `"outcome":"refused"`)
				assert.Equal(t, 2, lines, logs)
			} else {
				assert.Equal(t, 1, lines, "refusals only at Debug: %s", logs)
			}
		})
	}
}
