package policyfile_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/memstore"
	"github.com/quotakit/throttle/policyfile"
	"github.com/quotakit/throttle/quota"
)

// apiPolicy is a one-rule policy for api.example.com: rate per hour in
// one fixed window, refused at once when spent.
func apiPolicy(rate int) string {
	return fmt.Sprintf(`rules:
  - name: api
    host: api.example.com
    wait: fail-fast
    limits:
      - {name: calls, rate: %d, per: 1h, algorithm: fixed-window}
`, rate)
}

// writeFile replaces path's contents atomically, as a deployment tool
// would, so a reader never sees half a file.
func writeFile(t *testing.T, path, doc string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(doc), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

// countingTransport answers 200 and counts the requests it received.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return okTransport{}.RoundTrip(req)
}

func get(rt http.RoundTripper, url string) error {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

func TestReloaderKeepsCountersAndRefusesBadFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, apiPolicy(3))
	base := &countingTransport{}
	r, err := policyfile.NewReloader(path, base)
	require.NoError(t, err)

	for range 3 {
		require.NoError(t, get(r, "https://api.example.com/x"))
	}
	assert.ErrorIs(t, get(r, "https://api.example.com/x"), throttle.ErrLimited)

	// Raised to 5: the 3 already charged count, so 2 more pass.
	writeFile(t, path, apiPolicy(5))
	changed, err := r.Reload()
	require.NoError(t, err)
	assert.True(t, changed)
	assert.NoError(t, get(r, "https://api.example.com/x"))
	assert.NoError(t, get(r, "https://api.example.com/x"))
	assert.ErrorIs(t, get(r, "https://api.example.com/x"), throttle.ErrLimited)

	changed, err = r.Reload()
	require.NoError(t, err)
	assert.False(t, changed, "the same contents")

	// A bad file is refused with its line and field; the policy in force
	// stays (still refusing), and refusing again gives the same error.
	writeFile(t, path, apiPolicy(-1))
	changed, err = r.Reload()
	assert.False(t, changed)
	var fe *policyfile.Error
	require.ErrorAs(t, err, &fe)
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	assert.Equal(t, "policy.yaml", filepath.Base(fe.File))
	assert.Equal(t, 6, fe.Line)
	assert.Equal(t, "api", fe.Rule)
	assert.Equal(t, "limits[0].rate", fe.Field)
	_, again := r.Reload()
	assert.Equal(t, err, again)
	assert.ErrorIs(t, get(r, "https://api.example.com/x"), throttle.ErrLimited)

	require.NoError(t, os.Remove(path))
	_, err = r.Reload()
	assert.ErrorIs(t, err, os.ErrNotExist)
	assert.ErrorIs(t, get(r, "https://api.example.com/x"), throttle.ErrLimited, "a missing file changes nothing")

	assert.Equal(t, int64(5), base.n.Load(), "sent: 3, then 2")

	_, err = policyfile.NewReloader(path, base)
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// blockingTransport holds every request until release is closed.
type blockingTransport struct {
	started chan struct{}
	release chan struct{}
}

func (b *blockingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	b.started <- struct{}{}
	<-b.release
	return okTransport{}.RoundTrip(req)
}

func TestReloaderFinishesRequestsInFlight(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, apiPolicy(1))
	base := &blockingTransport{started: make(chan struct{}, 1), release: make(chan struct{})}
	r, err := policyfile.NewReloader(path, base)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() { done <- get(r, "https://api.example.com/x") }()
	<-base.started // in the base transport, under version 1
	old := r.Transport()

	writeFile(t, path, apiPolicy(2))
	changed, err := r.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	assert.NotSame(t, old, r.Transport())

	close(base.release)
	assert.NoError(t, <-done, "the request begun before the reload completes")
	assert.NoError(t, get(r, "https://api.example.com/x"), "version 2 admits a second")
	<-base.started
	assert.ErrorIs(t, get(r, "https://api.example.com/x"), throttle.ErrLimited)
}

func TestReloaderUnderLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, apiPolicy(1_000_000))
	base := &countingTransport{}
	r, err := policyfile.NewReloader(path, base)
	require.NoError(t, err)

	const goroutines, each = 4, 200
	var (
		wg     sync.WaitGroup
		failed atomic.Int64
		stop   = make(chan struct{})
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				if err := get(r, "https://api.example.com/x"); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	reloads := 0
	go func() {
		wg.Wait()
		close(stop)
	}()
	// Reload at least once (i = 1 changes the file), however soon the
	// requests are done.
loop:
	for i := 1; ; i++ {
		writeFile(t, path, apiPolicy(1_000_000+i%2))
		changed, err := r.Reload()
		require.NoError(t, err)
		if changed {
			reloads++
		}
		select {
		case <-stop:
			break loop
		default:
		}
	}
	assert.Zero(t, failed.Load())
	assert.Equal(t, int64(goroutines*each), base.n.Load(), "every request sent, none dropped")
	assert.Positive(t, reloads)
	t.Logf("%d requests during %d reloads", goroutines*each, reloads)
}

func TestReloaderWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, apiPolicy(1))
	r, err := policyfile.NewReloader(path, &countingTransport{})
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan error, 10)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		r.Watch(ctx, 10*time.Millisecond, func(err error) { reports <- err })
	}()
	next := func() error {
		t.Helper()
		select {
		case err := <-reports:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("no reload reported within 10s")
			return nil
		}
	}

	require.NoError(t, get(r, "https://api.example.com/x"))
	writeFile(t, path, apiPolicy(2))
	assert.NoError(t, next(), "version 2 in force")
	assert.NoError(t, get(r, "https://api.example.com/x"))

	writeFile(t, path, "rules: [")
	err = next()
	var fe *policyfile.Error
	assert.ErrorAs(t, err, &fe)
	writeFile(t, path, apiPolicy(3))
	assert.NoError(t, next(), "the bad file was reported once, then version 3")
	assert.NoError(t, get(r, "https://api.example.com/x"))
	assert.ErrorIs(t, get(r, "https://api.example.com/x"), throttle.ErrLimited)

	cancel()
	<-watching
	assert.Empty(t, reports)
}

// pickyStore is a store that can decide only rules that do not wait, as
// redisstore's MULTI/EXEC mode.
type pickyStore struct{ *memstore.Store }

func (pickyStore) CheckLimits(_ []quota.Limit, mayWait bool) error {
	if mayWait {
		return &quota.FieldError{Field: "Wait", Err: fmt.Errorf("picky: a request cannot wait")}
	}
	return nil
}

// What the store refuses at NewTransport is reported like a problem of
// the file: its line, rule and field, once.
func TestReloaderReportsTheStoresRefusal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	writeFile(t, path, "rules:\n  - name: api\n    host: api.example.com\n    limits:\n      - {name: calls, rate: 1, per: 1h}\n")
	_, err := policyfile.NewReloader(path, okTransport{}, throttle.WithStore(pickyStore{memstore.New()}))
	var fe *policyfile.Error
	require.ErrorAs(t, err, &fe)
	assert.ErrorIs(t, err, throttle.ErrInvalidPolicy)
	assert.Equal(t, path+`:2: rule "api": wait: picky: a request cannot wait`, err.Error())
}
