package quotaview

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/quotakit/throttle"
)

// A Recorder keeps what one instance's [throttle.Limiter] or
// [throttle.Transport] decided over the last minutes, from its hooks, for
// the page's traffic plots and its "why is it waiting" list. Its memory is
// bounded: a fixed ring of steps per rule, a few recent events per rule,
// and at most [MaxTenants] tenants per rule (later ones are counted
// together as "(other)"). A Recorder is safe for concurrent use.
//
// Install it with [Recorder.Hooks] when the limiter is built, and give it
// to the page with [WithRecorder]:
//
//	rec := quotaview.NewRecorder()
//	t, err := throttle.NewTransport(nil, policy, throttle.WithHooks(rec.Hooks(throttle.Hooks{})))
//	page := quotaview.New(t.Limiter(), quotaview.WithRecorder(rec))
type Recorder struct {
	step  time.Duration
	steps int
	now   func() time.Time

	mu    sync.Mutex
	rules map[string]*ruleSeries
	order []string // rule names in the order first seen

	state      throttle.StoreEvent // the latest reported
	stateAt    time.Time           // when it was reported; zero: never
	fallbacks  map[throttle.FailureMode]int64
	sampleHook func() []throttle.RuleStats // the limiter's Stats, once a page has one
	sampled    time.Time                   // when sampleHook was last called
}

// sampleEvery is how often, at most, decisions sample the limiter's
// gauges (throttle.RuleStats); page views always do.
const sampleEvery = 100 * time.Millisecond

// MaxTenants is how many tenants a [Recorder] counts one by one per rule.
const MaxTenants = 50

// recentEvents is how many refusals and waits a Recorder keeps per rule.
const recentEvents = 8

// A RecorderOption configures a [Recorder].
type RecorderOption func(*Recorder)

// RecordSpan makes the recorder keep steps of length step covering span
// (rounded up to whole steps). The default is 10 minutes in 5-second
// steps; span/step is capped at 1440 steps.
func RecordSpan(span, step time.Duration) RecorderOption {
	return func(r *Recorder) {
		if step > 0 && span >= step {
			r.step = step
			r.steps = min(int((span+step-1)/step), 1440)
		}
	}
}

// RecorderClock makes the recorder read the time from now instead of
// [time.Now], for tests.
func RecorderClock(now func() time.Time) RecorderOption {
	return func(r *Recorder) {
		if now != nil {
			r.now = now
		}
	}
}

// NewRecorder returns an empty Recorder.
func NewRecorder(opts ...RecorderOption) *Recorder {
	r := &Recorder{step: 5 * time.Second, steps: 120, now: time.Now, rules: map[string]*ruleSeries{}, fallbacks: map[throttle.FailureMode]int64{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Hooks returns next with OnDecision, OnPause and OnStoreState wrapped to
// record into r first; next's own functions (any may be nil) are still
// called, so it chains with otelthrottle.Hooks.
func (r *Recorder) Hooks(next throttle.Hooks) throttle.Hooks {
	h := next
	h.OnDecision = func(ev throttle.DecisionEvent) {
		r.decision(ev)
		if next.OnDecision != nil {
			next.OnDecision(ev)
		}
	}
	h.OnPause = func(ev throttle.PauseEvent) {
		r.pause(ev)
		if next.OnPause != nil {
			next.OnPause(ev)
		}
	}
	h.OnStoreState = func(ev throttle.StoreEvent) {
		r.mu.Lock()
		r.state, r.stateAt = ev, r.now()
		r.mu.Unlock()
		if next.OnStoreState != nil {
			next.OnStoreState(ev)
		}
	}
	return h
}

// waitBins are the upper bounds of the wait histogram's bins: 0, then
// powers of two from 1 ms to about 17 minutes; the last bin holds longer.
var waitBins = func() []time.Duration {
	b := []time.Duration{0}
	for d := time.Millisecond; d <= 1<<20*time.Millisecond; d *= 2 {
		b = append(b, d)
	}
	return b
}()

// step is one step of one rule's series.
type step struct {
	at       int64 // the step's index since the epoch; steps of other indexes are stale
	outcomes [int(throttle.Failed) + 1]uint32
	fallback uint32
	waits    [22]uint32 // by waitBins; len(waitBins)+1
	deciding int32      // the most seen in the step
	inFlight int32
}

func (s *step) waitBin(d time.Duration) int {
	i := sort.Search(len(waitBins), func(i int) bool { return waitBins[i] >= d })
	return min(i, len(s.waits)-1)
}

// event is one recent refusal or wait.
type event struct {
	at      time.Time
	outcome throttle.Outcome
	reason  string // what bound it (see reason)
	limit   string
	wait    time.Duration
	class   string
	tenant  string
}

// The reasons of WhyView.Reason.
const (
	reasonPause    = "pause"
	reasonQueue    = "queue full"
	reasonDropped  = "dropped from the queue"
	reasonReserved = "its reserved instant"
	reasonGaveUp   = "gave up waiting"
)

// reason says what bound a refused or waiting request: a limit, a pause,
// the rule's queue, or, for a wait the event names no limit of, the
// instant its reservation was granted for.
func reason(ev throttle.DecisionEvent) string {
	var le *throttle.LimitError
	switch {
	case ev.Limit != "":
		return "limit " + ev.Limit
	case errors.Is(ev.Err, throttle.ErrQueueFull):
		return reasonQueue
	case errors.Is(ev.Err, throttle.ErrQueueDropped):
		return reasonDropped
	case ev.Outcome == throttle.Refused && errors.As(ev.Err, &le) && le.Limit == "" && le.Err == nil:
		return reasonPause // a refusal by no limit: a pause
	case ev.Outcome == throttle.GaveUp:
		return reasonGaveUp
	}
	return reasonReserved
}

// pauseCause is the latest pause this instance learned for a rule.
type pauseCause struct {
	at     time.Time
	status int
	pause  time.Duration
	capped bool
	failed bool // the store could not share it
}

// ruleSeries is what a Recorder keeps for one rule.
type ruleSeries struct {
	steps   []step
	recent  [recentEvents]event
	nRecent int // events recorded in all, the newest at (nRecent-1)%recentEvents
	pause   pauseCause
	classes map[string]*share
	tenants map[string]*share
	other   share // tenants beyond MaxTenants
}

// share counts a class's or tenant's decisions.
type share struct{ allowed, waited, refused, other int64 }

func (s *share) add(o throttle.Outcome) {
	switch o {
	case throttle.Allowed:
		s.allowed++
	case throttle.Waited:
		s.waited++
	case throttle.Refused:
		s.refused++
	default:
		s.other++
	}
}

func (r *Recorder) series(rule string) *ruleSeries {
	s := r.rules[rule]
	if s == nil {
		s = &ruleSeries{steps: make([]step, r.steps), classes: map[string]*share{}, tenants: map[string]*share{}}
		r.rules[rule] = s
		r.order = append(r.order, rule)
	}
	return s
}

// stepAt returns s's step for instant now, cleared if it was stale.
func (r *Recorder) stepAt(s *ruleSeries, now time.Time) *step {
	idx := now.UnixNano() / int64(r.step)
	st := &s.steps[int(idx%int64(len(s.steps)))]
	if st.at != idx {
		*st = step{at: idx}
	}
	return st
}

func (r *Recorder) decision(ev throttle.DecisionEvent) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.series(ev.Rule)
	st := r.stepAt(s, now)
	if int(ev.Outcome) >= 0 && int(ev.Outcome) < len(st.outcomes) {
		st.outcomes[ev.Outcome]++
	}
	if ev.Fallback != throttle.FailDefault {
		st.fallback++
		r.fallbacks[ev.Fallback]++
	}
	if ev.Outcome == throttle.Waited || ev.Outcome == throttle.GaveUp {
		st.waits[st.waitBin(ev.Wait)]++
	}
	if ev.Outcome != throttle.Allowed && ev.Outcome != throttle.Failed {
		s.recent[s.nRecent%recentEvents] = event{at: now, outcome: ev.Outcome, reason: reason(ev), limit: ev.Limit, wait: ev.Wait, class: ev.Class, tenant: ev.Tenant}
		s.nRecent++
	}
	if ev.Class != "" {
		c := s.classes[ev.Class]
		if c == nil && len(s.classes) < MaxTenants {
			c = &share{}
			s.classes[ev.Class] = c
		}
		if c != nil {
			c.add(ev.Outcome)
		}
	}
	if ev.Tenant != "" {
		t := s.tenants[ev.Tenant]
		if t == nil && len(s.tenants) < MaxTenants {
			t = &share{}
			s.tenants[ev.Tenant] = t
		}
		if t == nil {
			t = &s.other
		}
		t.add(ev.Outcome)
	}
	if d := now.Sub(r.sampled); d >= sampleEvery || d < 0 {
		r.sampleLocked(now)
	}
}

// sampleLocked records the limiter's gauges into the current steps.
func (r *Recorder) sampleLocked(now time.Time) {
	if r.sampleHook == nil {
		return
	}
	r.sampled = now
	for _, rs := range r.sampleHook() {
		s := r.series(rs.Rule)
		st := r.stepAt(s, now)
		st.deciding = max(st.deciding, int32(rs.Deciding))
		st.inFlight = max(st.inFlight, int32(rs.InFlight))
	}
}

func (r *Recorder) pause(ev throttle.PauseEvent) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.series(ev.Rule).pause = pauseCause{at: now, status: ev.Status, pause: ev.Pause, capped: ev.Capped, failed: ev.Err != nil}
}

// attach makes r sample stats at every decision and page view.
func (r *Recorder) attach(stats func() []throttle.RuleStats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sampleHook = stats
}

// read adds what r recorded to snap, whose rules come from the policy.
func (r *Recorder) read(now time.Time, snap *Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sampleLocked(now)
	if !r.stateAt.IsZero() {
		snap.Store.State, snap.Store.Since, snap.Store.Failures = r.state.State.String(), r.stateAt, r.state.Failures
		if r.state.Err != nil && r.state.State != throttle.StoreUp {
			snap.Store.Err = clip(r.state.Err.Error())
		}
	}
	for m, n := range r.fallbacks {
		if snap.Store.Fallbacks == nil {
			snap.Store.Fallbacks = map[string]int64{}
		}
		snap.Store.Fallbacks[m.String()] = n
	}

	last := now.UnixNano() / int64(r.step)
	first := last - int64(r.steps) + 1
	total := make([]step, r.steps)
	for i := range snap.Rules {
		rv := &snap.Rules[i]
		s := r.rules[rv.Name]
		if s == nil {
			continue
		}
		var hist [len(step{}.waits)]uint32
		rv.Outcomes = map[string]int{}
		rv.Decisions, rv.Held = make([]int, r.steps), make([]int, r.steps)
		for _, st := range s.steps {
			if st.at < first || st.at > last {
				continue
			}
			t := &total[st.at-first]
			for _, n := range st.outcomes {
				rv.Decisions[st.at-first] += int(n)
			}
			rv.Held[st.at-first] = int(st.outcomes[throttle.Refused] + st.outcomes[throttle.GaveUp])
			for o, n := range st.outcomes {
				t.outcomes[o] += n
				if n > 0 {
					rv.Outcomes[throttle.Outcome(o).String()] += int(n)
				}
			}
			t.fallback += st.fallback
			t.deciding += st.deciding
			t.inFlight += st.inFlight
			for b, n := range st.waits {
				t.waits[b] += n
				hist[b] += n
			}
		}
		rv.WaitP50, rv.WaitP99 = percentile(hist[:], 0.5), percentile(hist[:], 0.99)
		for k := range min(s.nRecent, recentEvents) {
			e := s.recent[(s.nRecent-1-k)%recentEvents]
			rv.Why = append(rv.Why, WhyView{At: e.at, Outcome: e.outcome.String(), Reason: e.reason, Limit: e.limit, Wait: e.wait, Class: e.class, Tenant: e.tenant})
		}
		rv.ClassShares = shares(s.classes, nil)
		rv.Tenants = shares(s.tenants, &s.other)
	}
	tv := &TrafficView{Step: r.step, Steps: make([]StepView, r.steps)}
	for i, t := range total {
		tv.Steps[i] = StepView{At: time.Unix(0, (first+int64(i))*int64(r.step)),
			Allowed: int(t.outcomes[throttle.Allowed]), Waited: int(t.outcomes[throttle.Waited]), Refused: int(t.outcomes[throttle.Refused]),
			GaveUp: int(t.outcomes[throttle.GaveUp]), Failed: int(t.outcomes[throttle.Failed]), Fallback: int(t.fallback),
			Deciding: int(t.deciding), InFlight: int(t.inFlight), WaitP50: percentile(t.waits[:], 0.5), WaitP99: percentile(t.waits[:], 0.99)}
	}
	snap.Traffic = tv
	for i := range snap.Pauses {
		snap.Pauses[i].Cause = r.causeLocked(snap, &snap.Pauses[i], now)
	}
}

// causeLocked says what paused p, if this instance learned it: the latest
// pause learned for a rule of p's scope, if it ends about when p does.
func (r *Recorder) causeLocked(snap *Snapshot, p *PauseView, now time.Time) string {
	for _, rv := range snap.Rules {
		s := r.rules[rv.Name]
		if rv.Scope != p.Scope || s == nil || s.pause.at.IsZero() {
			continue
		}
		c := s.pause
		end := c.at.Add(c.pause)
		if d := end.Sub(p.Ends); d < -2*time.Second || d > 2*time.Second {
			continue // another pause, learned elsewhere
		}
		what := "a \"slow down\" answer"
		if c.status != 0 {
			what = fmt.Sprintf("HTTP %d", c.status)
		}
		msg := fmt.Sprintf("%s to rule %s, %s ago: paused %s", what, rv.Name, now.Sub(c.at).Round(time.Second), c.pause.Round(time.Millisecond))
		if c.capped {
			msg += " (capped by MaxPause)"
		}
		if c.failed {
			msg += " (not shared: the store failed)"
		}
		return msg
	}
	return "learned by another instance"
}

// percentile returns the upper bound of the bin holding quantile q of
// hist, by waitBins; zero for an empty hist.
func percentile(hist []uint32, q float64) time.Duration {
	var n uint64
	for _, c := range hist {
		n += uint64(c)
	}
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n-1)) + 1
	var seen uint64
	for b, c := range hist {
		if seen += uint64(c); seen >= rank {
			if b >= len(waitBins) {
				return waitBins[len(waitBins)-1] * 2
			}
			return waitBins[b]
		}
	}
	return 0
}

func shares(m map[string]*share, other *share) []ShareView {
	var all int64
	var out []ShareView
	add := func(name string, s *share) {
		n := s.allowed + s.waited + s.refused + s.other
		if n == 0 {
			return
		}
		all += n
		out = append(out, ShareView{Name: name, Allowed: s.allowed, Waited: s.waited, Refused: s.refused, Other: s.other})
	}
	for name, s := range m {
		add(name, s)
	}
	if other != nil {
		add("(other)", other)
	}
	for i := range out {
		o := &out[i]
		o.Share = float64(o.Allowed+o.Waited+o.Refused+o.Other) / float64(all)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Share != out[j].Share {
			return out[i].Share > out[j].Share
		}
		return out[i].Name < out[j].Name
	})
	return out
}
