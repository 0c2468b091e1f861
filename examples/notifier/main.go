// Command notifier is the Slack notifier case, run against a local fake
// webhook: at most 100 notifications per period in all AND at most 10 per
// period per event category, decided together by one throttle rule.
//
// The fake webhook enforces the same limits with a sliding window and
// answers 429 when they are broken, so the run shows that nothing the
// transport let through was over the limit. Time is scaled down (-per,
// 30m in production) so the run takes a few seconds.
//
//	go run ./examples/notifier
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/waiters"
)

func main() {
	per := flag.Duration("per", 2*time.Second, "the limits' period (30m for the real Slack case)")
	events := flag.Int("events", 160, "notifications to send")
	flag.Parse()
	if err := run(*per, *events); err != nil {
		fmt.Fprintln(os.Stderr, "notifier:", err)
		os.Exit(1)
	}
}

// category is an event category and how its notifications wait.
type category struct {
	name   string
	share  int // events out of 16
	waiter waiters.Waiter
}

var categories = []category{
	{"errors", 4, waiters.Block()},                // never drop an error: wait for a slot
	{"warnings", 4, waiters.UpTo(time.Second)},    // wait a little, then give up
	{"info", 4, waiters.FailFast()},               // drop at once when over
	{"deploys", 2, waiters.UpTo(3 * time.Second)}, // rare, may wait longer
	{"audit", 2, waiters.FailFast()},
}

func run(per time.Duration, events int) error {
	hook := newFakeWebhook(100, 10, per)
	defer hook.Close()

	// The webhook counts a notification when it lands, and a burst of
	// new connections lands over tens of milliseconds (over 100 ms on a
	// busy machine, under the race detector), while a notification sent
	// alone on a warm connection lands at once: the rule's windows are
	// kept a margin longer than the webhook's, so that the burst's last
	// and the next window's first never land in one of its windows
	// together. (A second is plenty for the real 30 minutes, as
	// presets/githubquota's Margin is for GitHub's hour.)
	window := per + min(per/5, time.Second)
	t, err := throttle.NewTransport(http.DefaultTransport, throttle.Policy{Rules: []throttle.Rule{{
		Name: "slack-notify", Host: "127.0.0.1", // hooks.slack.com in production
		// SlidingLog: never more than Rate in ANY window of length Per, as
		// the webhook counts. (The default, GCRA, is smoother but admits up
		// to Burst + Rate in a window after an idle spell.)
		Limits: []throttle.Limit{
			{Name: "global", Rate: 100, Per: window, Algorithm: throttle.SlidingLog},
			{Name: "category", Rate: 10, Per: window, Algorithm: throttle.SlidingLog,
				Key: throttle.KeyFromContext("category")},
		},
	}}})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: t}
	defer client.CloseIdleConnections()

	type tally struct{ sent, waited, refused, failed int }
	var mu sync.Mutex
	results := make(map[string]*tally)
	var order []string
	for _, c := range categories {
		results[c.name] = &tally{}
		order = append(order, c.name)
	}

	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < events; i++ {
		c := pick(i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := throttle.WithKey(context.Background(), "category", c.name)
			ctx = throttle.WithWaiter(ctx, c.waiter)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL,
				strings.NewReader(fmt.Sprintf(`{"text":"event %d","category":%q}`, i, c.name)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Category", c.name)
			began := time.Now()
			resp, err := client.Do(req)
			mu.Lock()
			defer mu.Unlock()
			r := results[c.name]
			var le *throttle.LimitError
			switch {
			case errors.As(err, &le):
				r.refused++
			case err != nil:
				r.failed++
			default:
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					r.failed++
					return
				}
				r.sent++
				if time.Since(began) > 50*time.Millisecond {
					r.waited++
				}
			}
		}()
	}
	wg.Wait()

	fmt.Printf("%d notifications in %v; limits: 100 per %v in all, 10 per %v per category\n\n", events, time.Since(start).Round(10*time.Millisecond), per, per)
	fmt.Printf("%-9s %-16s %5s %7s %8s %7s\n", "category", "waiter", "sent", "waited", "refused", "failed")
	var total tally
	for _, name := range order {
		r := results[name]
		fmt.Printf("%-9s %-16s %5d %7d %8d %7d\n", name, pickByName(name).waiter, r.sent, r.waited, r.refused, r.failed)
		total.sent += r.sent
		total.waited += r.waited
		total.refused += r.refused
		total.failed += r.failed
	}
	fmt.Printf("%-9s %-16s %5d %7d %8d %7d\n", "total", "", total.sent, total.waited, total.refused, total.failed)
	fmt.Printf("\nthe webhook received %d and answered 429 to %d (limit violations)\n\n", hook.received(), hook.violations())
	if hook.violations() > 0 {
		return errors.New("the limits were broken")
	}
	return nil
}

func pick(i int) category {
	slot := i % 16
	for _, c := range categories {
		if slot < c.share {
			return c
		}
		slot -= c.share
	}
	return categories[0]
}

func pickByName(name string) category {
	for _, c := range categories {
		if c.name == name {
			return c
		}
	}
	return category{}
}

// fakeWebhook answers like a Slack incoming webhook and enforces the limits
// exactly, over a sliding window, counting violations.
type fakeWebhook struct {
	*httptest.Server
	global, perCat int
	per            time.Duration

	mu    sync.Mutex
	times map[string][]time.Time // by category; "" holds all
	got   int
	bad   int
}

func newFakeWebhook(global, perCat int, per time.Duration) *fakeWebhook {
	f := &fakeWebhook{global: global, perCat: perCat, per: per, times: make(map[string][]time.Time)}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

func (f *fakeWebhook) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	cat := r.Header.Get("X-Category")
	f.mu.Lock()
	f.got++
	over := f.count("", now) >= f.global || f.count(cat, now) >= f.perCat
	if over {
		f.bad++
	} else {
		f.times[""] = append(f.times[""], now)
		f.times[cat] = append(f.times[cat], now)
	}
	f.mu.Unlock()
	if over {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "rate_limited", http.StatusTooManyRequests)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// count returns how many of key's sends are within the last period. The
// transport decides on the instant it admits a request, and the webhook
// sees it a little later (a new connection takes longer than a reused
// one), so the fake forgives a twentieth of the period, as real vendors'
// counters allow for jitter.
func (f *fakeWebhook) count(key string, now time.Time) int {
	ts := f.times[key]
	cut := sort.Search(len(ts), func(i int) bool { return ts[i].After(now.Add(-f.per + f.per/20)) })
	f.times[key] = ts[cut:]
	return len(ts) - cut
}

func (f *fakeWebhook) received() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.got
}

func (f *fakeWebhook) violations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bad
}
