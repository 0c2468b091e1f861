package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	gogithub "github.com/google/go-github/v89/github"
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
	sum, err := run(context.Background(), config{instances: 2, workers: 5, duration: 4 * time.Second, progress: time.Second}, io.Discard)
	require.NoError(t, err)
	assert.Zero(t, sum.rateLimited, "go-github saw rate-limit answers")
	assert.Zero(t, sum.fake.Limited, "the fake GitHub refused requests")
	// Each limit's first window, exactly, in 4 s (of its 61).
	assert.Equal(t, githubquota.ContentPerMinute, sum.fake.Created)
	assert.Equal(t, githubquota.SearchPerMinute, sum.fake.ByResource["search"])
	assert.Equal(t, githubquota.CodeSearchPerMinute, sum.fake.ByResource["code_search"])
	// The reads spend the token's points left by the comments and the
	// searches only if the machine keeps up (under -race on a loaded
	// machine it may not in 4 s): never more.
	r := sum.fake.ByResource
	reads := r["core"] - sum.fake.Created
	assert.LessOrEqual(t, reads+githubquota.WritePoints*sum.fake.Created+r["search"]+r["code_search"], githubquota.RESTPoints, "the points, shared by every endpoint")
	assert.Positive(t, reads)
}

// Two processes of the example side by side, sharing a Redis and the
// GitHub they talk to, stay within GitHub's limits together.
func TestRunsShareRedis(t *testing.T) {
	srv := redistest.Start(t)
	fake := fakegithub.NewServer(fakegithub.Options{Enterprise: true})
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

// host is a GitHub the real go-github client reaches on loopback: the fake
// at its root (go-github's WithURLs), as GitHub Enterprise Server (its
// WithEnterpriseURLs), or as GHE.com (api.acme.ghe.com, dialed to the
// fake whatever the address).
type host struct {
	name       string
	enterprise bool
	gheCom     bool
}

var hosts = []host{{name: "a fake at its root"}, {name: "Enterprise Server", enterprise: true}, {name: "GHE.com", gheCom: true}}

// client returns go-github through the preset's transport with its own
// store (an instance), pointed at fake as h says.
func (h host) client(t *testing.T, fake *fakegithub.Server) *gogithub.Client {
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	baseURL, uploadURL := fake.BaseURL(), fake.UploadURL()
	if h.gheCom {
		baseURL, uploadURL = "http://api.acme.ghe.com/", "http://uploads.acme.ghe.com/"
		addr := fake.Listener.Addr().String()
		base.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr) // loopback only
		}
	}
	policy, err := githubquota.Policy(githubquota.Options{BaseURL: baseURL, Wait: waiters.FailFast()})
	require.NoError(t, err)
	tr, err := throttle.NewTransport(base, policy)
	require.NoError(t, err)
	opts := []gogithub.ClientOptionsFunc{
		gogithub.WithTransport(tr),
		gogithub.WithAuthToken(testToken),
		gogithub.WithDisableRateLimitCheck(), // else go-github refuses on its own, per client
	}
	if h.enterprise || h.gheCom {
		opts = append(opts, gogithub.WithEnterpriseURLs(baseURL, uploadURL))
	} else {
		opts = append(opts, gogithub.WithURLs(&baseURL, &uploadURL))
	}
	gh, err := gogithub.NewClient(opts...)
	require.NoError(t, err)
	require.Equal(t, baseURL, gh.BaseURL(), "the preset and go-github agree")
	return gh
}

const testToken = "ghp_test_token"

// The real go-github client, through the preset's transport, on every
// host: the limits apply, and it learns from the fake's headers.
func TestGoGitHubOnEachHost(t *testing.T) {
	for _, h := range hosts {
		t.Run(h.name, func(t *testing.T) {
			fake := fakegithub.NewServer(fakegithub.Options{Enterprise: h.enterprise, NoRetryAfter: true})
			defer fake.Close()
			gh := h.client(t, fake)
			ctx := context.Background()

			// Search: 30, then refused before sending; go-github passes
			// our error through.
			for range githubquota.SearchPerMinute {
				_, _, err := gh.Search.Issues(ctx, "is:open", nil)
				require.NoError(t, err)
			}
			_, _, err := gh.Search.Issues(ctx, "is:open", nil)
			assert.ErrorIs(t, err, throttle.ErrLimited)
			var le *throttle.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, "github-search", le.Rule)

			// A plain permission 403 is go-github's ErrorResponse, and
			// no pause.
			for range 2 {
				_, _, err = gh.Repositories.Get(ctx, "o", "private")
				var er *gogithub.ErrorResponse
				require.ErrorAs(t, err, &er)
				assert.Equal(t, http.StatusForbidden, er.Response.StatusCode)
			}

			// 80 comments; then another instance (a store of its own)
			// makes an 81st, and GitHub answers a secondary-limit 403
			// without Retry-After: go-github's AbuseRateLimitError. That
			// instance pauses the token for GitHub's minute.
			for range githubquota.ContentPerMinute {
				_, _, err = gh.Issues.CreateComment(ctx, "o", "r", 1, &gogithub.IssueComment{Body: gogithub.Ptr("x")})
				require.NoError(t, err)
			}
			_, _, err = gh.Issues.CreateComment(ctx, "o", "r", 1, &gogithub.IssueComment{Body: gogithub.Ptr("x")})
			require.ErrorAs(t, err, &le, "the 81st is not sent")
			assert.Equal(t, githubquota.ContentMinuteLimit, le.Limit)
			other := h.client(t, fake)
			_, _, err = other.Issues.CreateComment(ctx, "o", "r", 1, &gogithub.IssueComment{Body: gogithub.Ptr("x")})
			var al *gogithub.AbuseRateLimitError
			require.True(t, errors.As(err, &al), "got %v", err)
			_, _, err = other.Issues.ListByRepo(ctx, "o", "r", nil)
			require.ErrorAs(t, err, &le, "the token is paused")
			assert.Equal(t, githubquota.CoreLimit, le.Pause)
			assert.InDelta(t, githubquota.SecondaryPause.Seconds(), le.RetryAfter.Seconds(), 1.5)
			assert.Equal(t, 1, fake.Stats().Limited)

			// Another service spends the token's hourly quota but 3: the
			// fake's x-ratelimit-remaining lowers a third instance's
			// counter, which sends 3 and then holds back until the reset.
			st := fake.Stats()
			used := st.ByResource["core"] - st.Limited // what the fake charged
			fake.Use(testToken, "core", 5000-used-3)
			third := h.client(t, fake)
			sent := 0
			for range 10 {
				if _, _, err = third.Users.Get(ctx, ""); err != nil {
					break
				}
				sent++
			}
			assert.Equal(t, 3, sent, "what GitHub said remained")
			require.ErrorAs(t, err, &le)
			assert.Equal(t, githubquota.CoreLimit, le.Pause, "no quota left: paused until the reset")
			assert.Equal(t, 1, fake.Stats().Limited, "GitHub refused nothing more")
		})
	}
}
