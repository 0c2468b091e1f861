package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaview"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// chromium returns the path of a headless-capable Chromium. scripts/test
// installs Debian's package when it is missing, as it does redis-server.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testing.Short() {
		t.Skip("no chromium (scripts/test installs it)")
	}
	t.Fatal("no chromium on PATH: run scripts/test, which installs Debian's chromium package, or apt-get install chromium")
	return ""
}

// browse runs headless Chromium on url with args (--dump-dom,
// --screenshot=...) and returns its standard output.
func browse(t *testing.T, bin, url string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
		"--user-data-dir=" + t.TempDir()}
	cmd := exec.CommandContext(ctx, bin, append(append(base, args...), url)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	require.NoError(t, cmd.Run(), "chromium: %s", errOut.String())
	return out.String()
}

// fetchSnapshot reads a page's JSON view.
func fetchSnapshot(t *testing.T, url string) quotaview.Snapshot {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s quotaview.Snapshot
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

// The example's page in a real browser, while the fleet's traffic runs:
// the rules, a limit's remaining as the store's Inspect reports it, the
// traffic plot, the page's own refresh, and the pause a vendor's 429
// causes, seen by an instance that did not receive it. It saves a
// screenshot (to $QUOTAVIEW_SCREENSHOT if set: docs/quotaview.png is made
// so).
func TestPageInBrowser(t *testing.T) {
	bin := chromium(t)
	store := memstore.New()
	f, err := startFleet(context.Background(), store, 10)
	require.NoError(t, err)
	defer f.Close()
	pages := httptest.NewServer(f.mux)
	defer pages.Close()
	page := pages.URL + "/debug/throttle/"

	// Instance 1 sends three messages on channel "probe"; instance 0's page
	// shows what the fleet spent on it.
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/v1/messages", nil)
		req.Header.Set("X-Channel", "probe")
		resp, err := f.client[1].Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	perChannel := quota.Limit{Name: "per-channel", Rate: 600, Per: time.Hour, Algorithm: quota.FixedWindow}
	remaining := func() int64 {
		states, err := store.Inspect(context.Background(), "messages", []quota.Limit{perChannel})
		require.NoError(t, err)
		for _, st := range states {
			if st.Key == "probe" {
				return st.Remaining
			}
		}
		t.Fatal("no state for channel probe")
		return 0
	}
	// Wait for this instance's own traffic, so the plots have something.
	for deadline := time.Now().Add(30 * time.Second); ; {
		if s := fetchSnapshot(t, page+"json"); s.Rules[0].Outcomes["allowed"]+s.Rules[0].Outcomes["waited"] > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "instance 0 sent nothing")
		time.Sleep(100 * time.Millisecond)
	}

	// The page as the browser has it after its script refreshed it
	// (virtual time runs its timer at once).
	var dom string
	var want int64
	for {
		before := remaining()
		dom = browse(t, bin, page+"?key=probe", "--virtual-time-budget=5000", "--dump-dom")
		if want = remaining(); want == before {
			break // else the hour's window turned while the page loaded
		}
	}
	assert.EqualValues(t, 597, want)
	for _, rule := range []string{"messages", "search", "export"} {
		assert.Contains(t, dom, `data-rule="`+rule+`"`)
	}
	assert.Contains(t, dom, `data-scope="messages" data-limit="per-channel" data-key="probe" data-remaining="`+strconv.FormatInt(want, 10)+`"`)
	assert.Regexp(t, `<body data-refreshed="[1-9]`, dom, "the page refreshed itself")
	m := regexp.MustCompile(`<svg class="plot" data-series="decisions"[^>]*>.*?<polyline class="allowed" data-name="allowed" points="([^"]+)"`).FindStringSubmatch(dom)
	require.NotNil(t, m, "the decisions plot")
	assert.Regexp(t, `,(\d*[1-9]\d*|\d+\.\d*[1-9])`, m[1], "a point above zero: y below the axis")
	assert.NotContains(t, dom, `class="pause"`)

	// The vendor answers one message with 429 and Retry-After: 60; the
	// instance that got it pauses the rule in the store, and instance 0's
	// page shows the pause.
	f.vendor.trip.Add(1)
	for deadline := time.Now().Add(60 * time.Second); ; {
		if s := fetchSnapshot(t, page+"json"); len(s.Pauses) > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no pause after the vendor's 429")
		time.Sleep(100 * time.Millisecond)
	}
	dom = browse(t, bin, page, "--dump-dom")
	assert.Regexp(t, `<tr class="pause" data-scope="messages" data-key="">.*?<td class="n">([1-5]?[0-9]|1m0)s</td>`, dom, "ends within the minute")
	assert.NotContains(t, dom, "secret-token", "tokens are hashed")
	assert.Regexp(t, `data-limit="per-token" data-key="sha256:[0-9a-f]{32}"`, dom)
	for i := range instances {
		path := pages.URL + "/debug/throttle/"
		if i > 0 {
			path = fmt.Sprintf("%s/debug/throttle-%d/", pages.URL, i)
		}
		s := fetchSnapshot(t, path+"json")
		require.Len(t, s.Pauses, 1, "instance %d", i)
		if s.Pauses[0].Cause != "learned by another instance" {
			assert.Regexp(t, `^HTTP 429 to rule messages`, s.Pauses[0].Cause)
		}
	}

	shot := os.Getenv("QUOTAVIEW_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "quotaview.png")
	}
	browse(t, bin, page, "--window-size=1400,1900", "--hide-scrollbars", "--screenshot="+shot)
	png, err := os.ReadFile(shot)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")), "a PNG")
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
