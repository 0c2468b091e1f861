package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestFbBound(t *testing.T) {
	tests := []struct {
		name            string
		rate, instances int
		want            int
	}{
		{"the part's", 200, 4, 400},
		{"share rounded down", 10, 3, 19},
		{"share at least 1", 10, 20, 30},
		{"one instance: the whole quota again", 10, 1, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := throttle.Limit{Name: "l", Rate: tt.rate, Per: time.Second, Algorithm: throttle.SlidingLog}
			if got := fbBound(l, tt.instances); got != tt.want {
				t.Errorf("fbBound = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	s := time.Second
	reqs := []fbReq{
		{due: 500 * ms, start: 500 * ms, end: 501 * ms, sent: 501 * ms},     // warm-up: not counted
		{due: 999 * ms, start: s, end: s + ms, sent: s + ms},                // started late: the warm-up's, but sent in the span
		{due: s, start: s, end: s + ms, sent: s + ms},                       // in the span
		{due: s + 2*ms, start: s + 2*ms, end: s + 3*ms, sent: -1},           // refused
		{due: s + 900*ms, start: s + 900*ms, end: 2*s + 50*ms, sent: 2 * s}, // slow
		{due: 2*s + 10*ms, start: 2*s + 10*ms, end: 2*s + 11*ms, sent: 2*s + 11*ms},
		{due: 2*s + 600*ms, start: 2*s + 600*ms, end: 2*s + 601*ms, sent: 2*s + 601*ms}, // after the whole second
	}
	tests := []struct {
		name string
		from time.Duration
		want fbFigures
	}{
		// Span [1 s, 2.7 s): the rate counts [1 s, 2 s), a whole second.
		{"from the span's start", s, fbFigures{offered: 5, admitted: 2, perSecond: 2, observed: 3, certain: 3, p50: ms, p99: 150 * ms}},
		// From 1.5 s: [1.5 s, 2.5 s).
		{"from a fault", s + 500*ms, fbFigures{offered: 5, admitted: 2, perSecond: 2, observed: 3, certain: 3, p50: ms, p99: 150 * ms}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarize(reqs, s, 2*s+700*ms, tt.from); got != tt.want {
				t.Errorf("summarize =\n%+v, want\n%+v", got, tt.want)
			}
		})
	}
}

func TestReplyDelayDraw(t *testing.T) {
	var none *replyDelay
	if d := none.draw(); d != 0 {
		t.Errorf("nil: %v, want 0", d)
	}
	if d := (&replyDelay{fraction: 0, lo: ms, hi: 2 * ms}).draw(); d != 0 {
		t.Errorf("fraction 0: %v, want 0", d)
	}
	all := &replyDelay{fraction: 1, lo: 150 * ms, hi: 350 * ms}
	for range 1000 {
		if d := all.draw(); d < all.lo || d > all.hi {
			t.Fatalf("fraction 1: %v, want within [%v, %v]", d, all.lo, all.hi)
		}
	}
}

// echoServer answers each line with itself until the listener closes.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestSlowProxy(t *testing.T) {
	px, err := newSlowProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer px.close()
	c, err := net.Dial("tcp", px.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	roundTrips := func(n int, tag string) {
		t.Helper()
		for i := range n {
			msg := fmt.Sprintf("%s %d\n", tag, i)
			if _, err := io.WriteString(c, msg); err != nil {
				t.Fatal(err)
			}
			got, err := r.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			if got != msg {
				t.Fatalf("echo %q, want %q", got, msg)
			}
		}
	}
	roundTrips(5, "plain")
	if n := px.delayed.Load(); n != 0 {
		t.Errorf("no delay set: %d replies delayed", n)
	}
	px.setDelay(1, ms, ms)
	roundTrips(5, "delayed")
	if n := px.delayed.Load(); n < 5 {
		t.Errorf("every reply delayed: %d delayed, want at least 5", n)
	}
	px.setDelay(0, 0, 0)
	before := px.delayed.Load()
	roundTrips(5, "plain again")
	if n := px.delayed.Load(); n != before {
		t.Errorf("delay removed: %d more replies delayed", n-before)
	}

	px.close()
	if _, err := r.ReadString('\n'); err == nil {
		t.Error("a connection survived close")
	}
	if c2, err := net.Dial("tcp", px.addr()); err == nil {
		c2.Close()
		t.Error("dial after close succeeded, want refused")
	}
}

// TestFbRunDown runs the down state against a real redis-server, briefly:
// the counts the part reports agree with one another and with the bound.
func TestFbRunDown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server and runs for about 4 s")
	}
	var lines fbLogCounter // the pools' failed dials after the kill
	redis.SetLogger(&lines)
	srv := redistest.Start(t)
	px, err := newSlowProxy(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.close)
	states := fbStates(srv, px)
	down := states[len(states)-1]
	span := 3 * time.Second
	r, err := fbRun(context.Background(), px.addr(), "test", down, span)
	if err != nil {
		t.Fatal(err)
	}
	// Open loop: every request of the span started, whatever happened.
	if want := int(span.Seconds()) * fbOffered; r.fig.offered != want {
		t.Errorf("offered %d, want %d", r.fig.offered, want)
	}
	if got, want := r.sent, int64(r.outcomes[throttle.Allowed]+r.outcomes[throttle.Waited]); got != want {
		t.Errorf("the base got %d requests, the hooks report %d sent", got, want)
	}
	if r.modes[throttle.FailLocal] == 0 {
		t.Error("no request was decided by FailLocal after the kill")
	}
	if n := r.modes[throttle.FailOpen] + r.modes[throttle.FailClosed]; n != 0 {
		t.Errorf("%d requests decided by FailOpen or FailClosed, want none", n)
	}
	if r.reported[throttle.StoreDown] == 0 {
		t.Error("no transport reported the store down")
	}
	if bound := fbBound(fbLimit(""), fbInstances); r.fig.certain > bound {
		t.Errorf("certainly %d in one 1 s window, over the bound %d", r.fig.certain, bound)
	}
	if r.firstErr != nil {
		t.Errorf("a request failed other than by a limit: %v", r.firstErr)
	}
}
