package throttle_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
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

// ctxHandler records, for each record, the value of traceKey in the
// context the record was logged with, and the record's attribute keys.
type ctxHandler struct {
	mu      sync.Mutex
	traces  []string
	attrKey []string
}

type traceKey struct{}

func (h *ctxHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *ctxHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *ctxHandler) WithGroup(string) slog.Handler            { return h }
func (h *ctxHandler) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, _ := ctx.Value(traceKey{}).(string)
	h.traces = append(h.traces, r.Message+" trace="+v)
	r.Attrs(func(a slog.Attr) bool {
		h.attrKey = append(h.attrKey, a.Key)
		return true
	})
	return nil
}

// Records about a request are logged with the request's context, so a
// handler finds its trace; errors are under the key "err" everywhere.
func TestLogsCarryTheRequestContext(t *testing.T) {
	vendor := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "30")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer vendor.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	h := &ctxHandler{}
	tr, err := throttle.NewTransport(base, throttle.Policy{Instances: 1, Rules: []throttle.Rule{{
		Name: "api", Wait: waiters.FailFast(),
		Limits: []throttle.Limit{{Name: "l", Rate: 10, Per: time.Minute}},
	}}}, throttle.WithLogger(slog.New(h)), throttle.WithStore(pauseLosingStore{memstore.New()}))
	require.NoError(t, err)
	ctx := context.WithValue(context.Background(), traceKey{}, "trace-1")
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, vendor.URL, nil)
	resp, err := tr.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, vendor.URL, nil)
	_, err = tr.RoundTrip(req)
	require.ErrorIs(t, err, throttle.ErrLimited)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.traces)
	for _, tr := range h.traces {
		if strings.Contains(tr, "vendor asked") || strings.Contains(tr, "request not sent") {
			assert.Contains(t, tr, "trace=trace-1")
		}
	}
	assert.Contains(t, strings.Join(h.traces, "\n"), "could not be recorded", "the store lost the pause")
	assert.Contains(t, h.attrKey, "err")
	assert.NotContains(t, h.attrKey, "error")
}
