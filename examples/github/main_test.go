package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	gogithub "github.com/google/go-github/v75/github"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/githubquota/fakegithub"
	"github.com/quotakit/throttle/waiters"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunOffline(t *testing.T) {
	sum, err := run(context.Background(), config{instances: 2, workers: 5, duration: 2 * time.Second, progress: time.Second}, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, sum.rateLimited, "go-github saw rate-limit answers")
	assert.Zero(t, sum.fake.Limited, "the fake GitHub refused requests")
	// Each limit's first window, exactly, in 2 s.
	assert.Equal(t, githubquota.ContentPerMinute, sum.fake.Created)
	assert.Equal(t, githubquota.SearchPerMinute, sum.fake.ByResource["search"])
	assert.Equal(t, githubquota.CodeSearchPerMinute, sum.fake.ByResource["code_search"])
	// The reads fill two endpoints' windows only if the machine keeps up
	// (under -race on a loaded machine it may not in 2 s): never more.
	assert.LessOrEqual(t, sum.fake.ByResource["core"], 2*githubquota.EndpointPoints+githubquota.ContentPerMinute, "two read endpoints and the comments")
	assert.Greater(t, sum.fake.ByResource["core"], githubquota.ContentPerMinute)
}

// Two processes of the example side by side, sharing a Redis and the
// GitHub they talk to, stay within GitHub's limits together.
func TestRunsShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	fake := fakegithub.NewServer(fakegithub.Options{})
	defer fake.Close()
	cfg := config{instances: 2, workers: 5, duration: 2 * time.Second, redisURL: "redis://" + srv.Addr(), fake: fake}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, err := run(context.Background(), cfg, io.Discard)
			if assert.NoError(t, err) {
				assert.Zero(t, sum.rateLimited)
			}
		}()
	}
	wg.Wait()
	st := fake.Stats()
	assert.Zero(t, st.Limited, "the fake GitHub refused requests")
	assert.Equal(t, githubquota.ContentPerMinute, st.Created, "both processes together")
	assert.Equal(t, githubquota.SearchPerMinute, st.ByResource["search"])
	assert.Equal(t, githubquota.CodeSearchPerMinute, st.ByResource["code_search"])
}

// The real go-github client, through the preset's transport.
func TestGoGitHubThroughTransport(t *testing.T) {
	fake := fakegithub.NewServer(fakegithub.Options{NoRetryAfter: true})
	defer fake.Close()
	newClient := func() (*gogithub.Client, func()) {
		tr, err := throttle.NewTransport(nil, githubquota.Policy(githubquota.Options{Host: fake.Host(), Wait: waiters.FailFast()}))
		require.NoError(t, err)
		hc := &http.Client{Transport: tr}
		gh := gogithub.NewClient(hc).WithAuthToken("ghp_test_token")
		gh.DisableRateLimitCheck = true // else go-github refuses on its own, per client
		gh.BaseURL, _ = url.Parse(fake.URL + "/")
		return gh, hc.CloseIdleConnections
	}
	gh, done := newClient()
	defer done()
	ctx := context.Background()

	// Search: 30, then refused before sending; go-github passes our error
	// through.
	for range githubquota.SearchPerMinute {
		_, _, err := gh.Search.Issues(ctx, "is:open", nil)
		require.NoError(t, err)
	}
	_, _, err := gh.Search.Issues(ctx, "is:open", nil)
	assert.ErrorIs(t, err, throttle.ErrLimited)
	var le *throttle.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "github-search", le.Rule)

	// A plain permission 403 is go-github's ErrorResponse, and no pause.
	for range 2 {
		_, _, err = gh.Repositories.Get(ctx, "o", "private")
		var er *gogithub.ErrorResponse
		require.ErrorAs(t, err, &er)
		assert.Equal(t, http.StatusForbidden, er.Response.StatusCode)
	}

	// 80 comments; then another instance (a store of its own) makes an
	// 81st, and GitHub answers a secondary-limit 403 without Retry-After:
	// go-github's AbuseRateLimitError. That instance pauses the token for
	// a minute.
	for range githubquota.ContentPerMinute {
		_, _, err = gh.Issues.CreateComment(ctx, "o", "r", 1, &gogithub.IssueComment{Body: gogithub.Ptr("x")})
		require.NoError(t, err)
	}
	other, done2 := newClient()
	defer done2()
	_, _, err = other.Issues.CreateComment(ctx, "o", "r", 1, &gogithub.IssueComment{Body: gogithub.Ptr("x")})
	var al *gogithub.AbuseRateLimitError
	require.True(t, errors.As(err, &al), "got %v", err)
	_, _, err = other.Issues.ListByRepo(ctx, "o", "r", nil)
	require.ErrorAs(t, err, &le, "the token is paused")
	assert.InDelta(t, time.Minute.Seconds(), le.RetryAfter.Seconds(), 1.5)
	assert.Equal(t, 1, fake.Stats().Limited)
}
