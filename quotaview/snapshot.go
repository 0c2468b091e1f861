package quotaview

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
)

// A Snapshot is what the page shows, as its JSON view serves it.
// Durations are in nanoseconds, as [time.Duration] marshals.
type Snapshot struct {
	Time  time.Time
	Key   string `json:",omitempty"` // the viewer's key filter
	Store StoreView
	Rules []RuleView

	// Counters are the fleet's counters, from the store: at most the
	// handler's MaxKeys, those with the least quota left first; Omitted
	// says how many more there were.
	Counters []CounterView
	Omitted  int
	Pauses   []PauseView
	Classes  []ClassView
	Traffic  *TrafficView `json:",omitempty"` // this instance's; nil without a Recorder
	Errors   []string     `json:",omitempty"` // what the store could not show
	Actions  bool         // the page may reset counters and clear pauses
}

// A StoreView describes the store and its health as this instance sees it.
type StoreView struct {
	Type      string           // the store's Go type
	Inspector bool             // it can show its counters (quota.Inspector)
	State     string           // up, failing or down (the breaker is open), as last reported
	Since     time.Time        `json:",omitzero"`  // when State was reported; zero: never changed
	Failures  int              `json:",omitempty"` // calls failed since the outage began
	Err       string           `json:",omitempty"` // the cause of the latest change to failing or down
	Fallbacks map[string]int64 `json:",omitempty"` // decisions made by each failure mode
}

// A RuleView is one rule as configured, with what this instance holds.
type RuleView struct {
	Name, Scope          string
	Host, Method, Path   string `json:",omitempty"`
	Class                string `json:",omitempty"`
	Cost                 string // "1", or "per request" for a Cost function
	Waiter               string
	OnStoreFailure       string
	MaxQueue             int    `json:",omitempty"`
	QueueFull            string `json:",omitempty"`
	Shadow               bool   `json:",omitempty"`
	Learn                string // what it learns from answers
	Limits               []LimitView
	Deciding, InFlight   int            // this instance's requests now (throttle.RuleStats)
	Outcomes             map[string]int `json:",omitempty"` // this instance's decisions over the recorded span
	WaitP50, WaitP99     time.Duration  `json:",omitempty"` // upper bounds (bins of powers of two ms)
	Why                  []WhyView      `json:",omitempty"` // the latest refusals and waits, newest first
	Binding              string         `json:",omitempty"` // the limit (or "pause", "queue full") that bound most of them
	BindingInferred      bool           `json:",omitempty"` // Binding is read from the store's counters, the events named none
	Tenants, ClassShares []ShareView    `json:",omitempty"`

	// Decisions and Held are this instance's decisions per step of the
	// Traffic's steps, and those of them refused or given up.
	Decisions, Held []int `json:",omitempty"`
}

// A LimitView is one limit of a rule as configured.
type LimitView struct {
	Name, Algorithm string
	Rate            int
	Per             time.Duration
	Burst           int    `json:",omitempty"`
	Capacity        int    // what it admits at once: burst, window, or slots
	Key             string // "per key", or "one counter"
	Tenant          bool   `json:",omitempty"` // shared fairly among tenants
	Cost            string `json:",omitempty"` // "per request" for a Cost function of its own
}

// A CounterView is one of the fleet's counters, as the store reports it.
type CounterView struct {
	Scope, Limit, Algorithm string
	Key                     string // as the store holds it: escaped, hashed when the policy hashes it
	Used, Remaining         int64
	Capacity                int64
	Reset                   time.Duration // until it is full again
	Fresh                   bool          `json:",omitempty"` // nothing charged: the store holds no state for it
}

// A PauseView is a pause the fleet honours now.
type PauseView struct {
	Scope, Key string
	Reset      time.Duration // until it ends
	Ends       time.Time
	Cause      string // the answer that paused it, if this instance saw it
}

// A WhyView is one recent refusal or wait.
type WhyView struct {
	At      time.Time
	Outcome string

	// Reason is what bound it: "limit NAME", "pause", "queue full",
	// "dropped from the queue", "gave up waiting", or "its reserved
	// instant" for a wait whose decision names no limit (a reservation's
	// delay, or a pause this instance learned).
	Reason string
	Limit  string        `json:",omitempty"` // the limit that bound it, if one did
	Wait   time.Duration // waited, or until it could succeed when refused
	Class  string        `json:",omitempty"`
	Tenant string        `json:",omitempty"` // as the store holds it
}

// A ShareView counts one class's or tenant's decisions.
type ShareView struct {
	Name                     string
	Allowed, Waited, Refused int64
	Other                    int64   // gave up or failed
	Share                    float64 // of the rule's decisions in this view
}

// A ClassView is a priority class as configured.
type ClassView struct {
	Name     string
	Headroom float64
}

// A TrafficView is this instance's traffic over the recorded span, all
// rules together, one Step per step of the [Recorder].
type TrafficView struct {
	Step  time.Duration
	Steps []StepView
}

// A StepView is one step of a series.
type StepView struct {
	At                                       time.Time
	Allowed, Waited, Refused, GaveUp, Failed int
	Fallback                                 int
	Deciding, InFlight                       int           // the most seen in the step
	WaitP50, WaitP99                         time.Duration `json:",omitempty"`
}

// scopeLimits are the limits of one scope, as the policy defines them.
type scopeLimits struct {
	scope  string
	limits []quota.Limit
	keyed  map[string]bool // by limit name: has a Key
}

// view is what a Handler derives from the policy once.
type view struct {
	policy throttle.Policy
	scopes []scopeLimits
	rules  []RuleView // without live fields
}

func newView(p throttle.Policy) *view {
	v := &view{policy: p}
	idx := map[string]int{}
	for _, r := range p.Rules {
		sc := cmp.Or(r.Scope, r.Name)
		i, ok := idx[sc]
		if !ok {
			i = len(v.scopes)
			idx[sc] = i
			v.scopes = append(v.scopes, scopeLimits{scope: sc, keyed: map[string]bool{}})
		}
		s := &v.scopes[i]
		for _, l := range r.Limits {
			if !slices.ContainsFunc(s.limits, func(q quota.Limit) bool { return q.Name == l.Name }) {
				s.limits = append(s.limits, l.Quota())
			}
			s.keyed[l.Name] = s.keyed[l.Name] || l.Key != nil
		}
		rv := ruleView(r)
		if r.OnStoreFailure == throttle.FailDefault {
			rv.OnStoreFailure = cmp.Or(p.OnStoreFailure, throttle.FailLocal).String()
		}
		v.rules = append(v.rules, rv)
	}
	return v
}

func ruleView(r throttle.Rule) RuleView {
	rv := RuleView{Name: r.Name, Scope: cmp.Or(r.Scope, r.Name), Host: r.Host, Method: r.Method, Path: r.Path,
		Class: r.Class, Cost: "1", Waiter: "block", OnStoreFailure: r.OnStoreFailure.String(), Shadow: r.Shadow}
	if r.Cost != nil {
		rv.Cost = "per request"
	}
	if r.Wait != nil {
		rv.Waiter = fmt.Sprint(r.Wait)
		if _, ok := r.Wait.(fmt.Stringer); !ok {
			rv.Waiter = fmt.Sprintf("%T", r.Wait)
		}
	}
	if r.MaxQueue > 0 {
		rv.MaxQueue, rv.QueueFull = r.MaxQueue, r.QueueFull.String()
	}
	var learn []string
	switch {
	case r.Learn.Off:
		learn = append(learn, "off")
	default:
		learn = append(learn, "pauses")
		if r.Learn.Sync != "" {
			learn = append(learn, "syncs "+r.Learn.Sync)
		}
		if r.Learn.Anchor != "" {
			learn = append(learn, "anchors "+r.Learn.Anchor)
		}
		if r.Learn.PauseBy != "" {
			learn = append(learn, "pauses by "+r.Learn.PauseBy)
		}
	}
	if r.Retry.Max > 0 {
		learn = append(learn, fmt.Sprintf("retries %d", r.Retry.Max))
	}
	rv.Learn = strings.Join(learn, ", ")
	for _, l := range r.Limits {
		q := l.Quota()
		lv := LimitView{Name: l.Name, Algorithm: algorithmName(l.Algorithm), Rate: l.Rate, Per: l.Per, Burst: l.Burst,
			Capacity: capacity(q), Key: "one counter", Tenant: l.Tenant != nil}
		if l.Key != nil {
			lv.Key = "per key"
		}
		if l.Cost != nil {
			lv.Cost = "per request"
		}
		rv.Limits = append(rv.Limits, lv)
	}
	return rv
}

func algorithmName(a quota.Algorithm) string {
	switch a {
	case quota.GCRA:
		return "gcra"
	case quota.FixedWindow:
		return "fixed-window"
	case quota.SlidingLog:
		return "sliding-log"
	case quota.SlidingWindow:
		return "sliding-window"
	case quota.Concurrency:
		return "concurrency"
	}
	return fmt.Sprint(a)
}

func capacity(l quota.Limit) int {
	if l.Algorithm == quota.Concurrency {
		return l.Rate
	}
	return l.Capacity()
}

// snapshot reads the store and the recorder into a Snapshot.
func (h *Handler) snapshot(ctx context.Context, key string) *Snapshot {
	now := h.now()
	snap := &Snapshot{Time: now, Key: key, Actions: h.actions}
	snap.Store = StoreView{Type: fmt.Sprintf("%T", h.store), State: throttle.StoreUp.String()}
	for _, c := range h.view.policy.Classes {
		snap.Classes = append(snap.Classes, ClassView{Name: c.Name, Headroom: c.Headroom})
	}

	in, ok := h.store.(quota.Inspector)
	snap.Store.Inspector = ok
	if ok {
		h.readStore(ctx, in, key, now, snap)
	} else {
		snap.Errors = append(snap.Errors, fmt.Sprintf("the store (%T) cannot show its counters: it is not a quota.Inspector", h.store))
	}

	stats := map[string]throttle.RuleStats{}
	for _, s := range h.lim.Stats() {
		stats[s.Rule] = s
	}
	snap.Rules = make([]RuleView, len(h.view.rules))
	for i, rv := range h.view.rules {
		rv.Limits = slices.Clone(rv.Limits)
		rv.Deciding, rv.InFlight = stats[rv.Name].Deciding, stats[rv.Name].InFlight
		snap.Rules[i] = rv
	}
	if h.rec != nil {
		h.rec.read(now, snap)
	}
	for i := range snap.Rules {
		inferBinding(&snap.Rules[i], snap)
	}
	return snap
}

// readStore adds the fleet's counters and pauses to snap.
func (h *Handler) readStore(ctx context.Context, in quota.Inspector, key string, now time.Time, snap *Snapshot) {
	var counters []CounterView
	for _, sc := range h.view.scopes {
		states, err := in.Inspect(ctx, sc.scope, sc.limits)
		if err != nil {
			snap.Errors = append(snap.Errors, fmt.Sprintf("scope %s: %s", sc.scope, clip(err.Error())))
			continue
		}
		seen := map[string]bool{} // limit names with a state for the key shown
		for _, st := range states {
			if st.Pause() {
				snap.Pauses = append(snap.Pauses, PauseView{Scope: sc.scope, Key: st.Key, Reset: st.Reset, Ends: now.Add(st.Reset)})
				continue
			}
			if key != "" && !strings.Contains(st.Key, key) {
				continue
			}
			if st.Key == key {
				seen[st.Limit] = true
			}
			l := limitNamed(sc.limits, st.Limit)
			counters = append(counters, CounterView{Scope: sc.scope, Limit: st.Limit, Algorithm: algorithmName(st.Algorithm),
				Key: st.Key, Used: st.Used, Remaining: st.Remaining, Capacity: int64(capacity(l)), Reset: st.Reset})
			if len(counters) > 4*h.maxKeys {
				counters = keepTight(counters, h.maxKeys, &snap.Omitted)
			}
		}
		// A limit with nothing charged to the key shown is full: show it
		// so, the single counter of an unkeyed limit, or the typed key.
		for _, l := range sc.limits {
			if seen[l.Name] || sc.keyed[l.Name] != (key != "") {
				continue
			}
			counters = append(counters, CounterView{Scope: sc.scope, Limit: l.Name, Algorithm: algorithmName(l.Algorithm),
				Key: key, Remaining: int64(capacity(l)), Capacity: int64(capacity(l)), Fresh: true})
		}
	}
	snap.Counters = keepTight(counters, h.maxKeys, &snap.Omitted)
}

// keepTight sorts cs, those with the least quota left first, and keeps at
// most n, adding the number dropped to omitted.
func keepTight(cs []CounterView, n int, omitted *int) []CounterView {
	slices.SortFunc(cs, func(a, b CounterView) int {
		// a.Remaining/a.Capacity < b.Remaining/b.Capacity, in integers.
		if c := cmp.Compare(a.Remaining*max(b.Capacity, 1), b.Remaining*max(a.Capacity, 1)); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Reset, a.Reset); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.Scope, b.Scope), strings.Compare(a.Limit, b.Limit), strings.Compare(a.Key, b.Key))
	})
	if len(cs) > n {
		*omitted += len(cs) - n
		cs = slices.Clip(cs[:n])
	}
	return cs
}

func limitNamed(ls []quota.Limit, name string) quota.Limit {
	for _, l := range ls {
		if l.Name == name {
			return l
		}
	}
	return quota.Limit{}
}

// clip shortens an error message for the page.
func clip(s string) string {
	const most = 300
	if len(s) > most {
		return s[:most] + "…"
	}
	return s
}

// inferBinding sets rv.Binding from its recent events: the limit most of
// them name, or "pause"; when they name none (a wait for a reservation),
// the rule's limit with the least quota left in the store now, or
// "pause" if its scope is paused.
func inferBinding(rv *RuleView, snap *Snapshot) {
	if len(rv.Why) == 0 {
		return
	}
	count := map[string]int{}
	for _, w := range rv.Why {
		switch {
		case w.Limit != "":
			count[w.Limit]++
		case w.Reason == reasonPause || w.Reason == reasonQueue || w.Reason == reasonDropped:
			count[w.Reason]++
		}
	}
	best := ""
	for name, n := range count {
		if best == "" || n > count[best] || n == count[best] && name < best {
			best = name
		}
	}
	if best != "" {
		rv.Binding = best
		return
	}
	for _, p := range snap.Pauses {
		if p.Scope == rv.Scope && p.Key == "" {
			rv.Binding, rv.BindingInferred = reasonPause, true
			return
		}
	}
	var tight *CounterView
	for i := range snap.Counters { // sorted: the tightest first
		c := &snap.Counters[i]
		if c.Scope == rv.Scope && slices.ContainsFunc(rv.Limits, func(l LimitView) bool { return l.Name == c.Limit }) {
			tight = c
			break
		}
	}
	if tight != nil {
		rv.Binding, rv.BindingInferred = tight.Limit, true
	}
}
