package quotaview

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
)

// A Handler serves the page of one [throttle.Limiter] (see the package
// doc): the page at any path but these, under the path it is mounted at:
//
//	json    the same data as JSON ([Snapshot])
//	reset   POST scope, limit, key, token: forget a counter ([WithActions])
//	clear   POST scope, key, token: end a pause ([WithActions])
//
// The query parameter key filters the counters to the keys containing it.
// A Handler is safe for concurrent use; it serves one view at a time.
type Handler struct {
	lim     *throttle.Limiter
	store   quota.Store
	view    *view
	rec     *Recorder
	now     func() time.Time
	maxKeys int
	actions bool
	token   string        // the CSRF token of the actions' forms
	refresh time.Duration // how often the page refreshes itself
	timeout time.Duration // of the store calls of one view

	busy chan struct{} // a token per view in progress: one
}

// An Option configures a [Handler].
type Option func(*Handler)

// WithRecorder gives the page this instance's traffic, from rec, which
// must be installed in the limiter's hooks ([Recorder.Hooks]). Without
// it the page shows no traffic and no recent refusals.
func WithRecorder(rec *Recorder) Option {
	return func(h *Handler) { h.rec = rec }
}

// WithActions lets the page reset a counter ([quota.Inspector.ResetLimit])
// and clear a pause ([quota.Inspector.ClearPause]). Each action is a POST
// that must carry the page's CSRF token, a random value the handler
// makes when it is created. Without this option the page is read-only and
// the action URLs answer 403.
func WithActions() Option {
	return func(h *Handler) { h.actions = true }
}

// WithMaxKeys caps the counters one view shows at n, those with the least
// quota left first. The default is 1000.
func WithMaxKeys(n int) Option {
	return func(h *Handler) {
		if n > 0 {
			h.maxKeys = n
		}
	}
}

// WithRefresh sets how often the open page refreshes itself; the default
// is 2 seconds.
func WithRefresh(d time.Duration) Option {
	return func(h *Handler) {
		if d > 0 {
			h.refresh = d
		}
	}
}

// WithClock makes the handler read the time from now instead of
// [time.Now], for tests.
func WithClock(now func() time.Time) Option {
	return func(h *Handler) {
		if now != nil {
			h.now = now
		}
	}
}

// New returns a Handler that shows lim (for a [throttle.Transport] t,
// t.Limiter()): its policy as lim was given it, and its store.
func New(lim *throttle.Limiter, opts ...Option) *Handler {
	h := &Handler{lim: lim, store: lim.Store(), view: newView(lim.Policy()), now: time.Now,
		maxKeys: 1000, refresh: 2 * time.Second, timeout: 5 * time.Second, busy: make(chan struct{}, 1)}
	for _, o := range opts {
		o(h)
	}
	if h.rec != nil {
		h.rec.attach(lim.Stats)
	}
	if h.actions {
		var b [32]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		h.token = base64.RawURLEncoding.EncodeToString(b[:])
	}
	return h
}

// ServeHTTP serves the page, its JSON, or an action.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	switch last := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]; last {
	case "reset", "clear":
		h.act(w, r, last)
		return
	case "json":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		snap, ok := h.take(w, r)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(snap)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	snap, ok := h.take(w, r)
	if !ok {
		return
	}
	var buf bytes.Buffer
	nonce := newNonce()
	if err := h.render(&buf, snap, r.URL.Query().Get("partial") != "", nonce); err != nil {
		http.Error(w, "quotaview: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; script-src 'nonce-"+nonce+"'")
	_, _ = w.Write(buf.Bytes())
}

// take makes a snapshot for r, one view at a time.
func (h *Handler) take(w http.ResponseWriter, r *http.Request) (*Snapshot, bool) {
	select {
	case h.busy <- struct{}{}:
	case <-r.Context().Done():
		http.Error(w, "quotaview: "+r.Context().Err().Error(), http.StatusServiceUnavailable)
		return nil, false
	}
	defer func() { <-h.busy }()
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	return h.snapshot(ctx, r.URL.Query().Get("key")), true
}

// actionRefused begins the 403 answer to an action the handler does not
// allow: actions are off, or the token is missing or wrong.
const actionRefused = "quotaview: action refused"

// act performs the action named what: reset or clear.
func (h *Handler) act(w http.ResponseWriter, r *http.Request, what string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed: actions are POST", http.StatusMethodNotAllowed)
		return
	}
	if !h.actions {
		http.Error(w, actionRefused+": the page is read-only (quotaview.WithActions)", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "quotaview: "+err.Error(), http.StatusBadRequest)
		return
	}
	if got := r.PostForm.Get("token"); got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
		http.Error(w, actionRefused+": missing or wrong CSRF token", http.StatusForbidden)
		return
	}
	in, ok := h.store.(quota.Inspector)
	if !ok {
		http.Error(w, fmt.Sprintf("quotaview: the store (%T) is not a quota.Inspector", h.store), http.StatusNotImplemented)
		return
	}
	scope, key := r.PostForm.Get("scope"), r.PostForm.Get("key")
	var sc *scopeLimits
	for i := range h.view.scopes {
		if h.view.scopes[i].scope == scope {
			sc = &h.view.scopes[i]
		}
	}
	if sc == nil {
		http.Error(w, fmt.Sprintf("quotaview: the policy has no scope %q", scope), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	defer cancel()
	var err error
	switch what {
	case "reset":
		name := r.PostForm.Get("limit")
		l := limitNamed(sc.limits, name)
		if l.Name == "" {
			http.Error(w, fmt.Sprintf("quotaview: scope %s has no limit %q", scope, name), http.StatusBadRequest)
			return
		}
		err = in.ResetLimit(ctx, scope, l, key)
	case "clear":
		err = in.ClearPause(ctx, scope, key)
	}
	if err != nil {
		http.Error(w, "quotaview: "+clip(err.Error()), http.StatusBadGateway)
		return
	}
	back := "./"
	if k := r.PostForm.Get("view"); k != "" {
		back += "?key=" + url.QueryEscape(k)
	}
	http.Redirect(w, r, back, http.StatusSeeOther)
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawStdEncoding.EncodeToString(b[:])
}
