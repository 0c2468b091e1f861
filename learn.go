package throttle

import (
	"context"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/quotaheader"

	"github.com/cenkalti/backoff/v4"
)

// Learning along one request's path: Transport.RoundTrip (transport.go),
// and a Limiter's call (limiter.go) without the HTTP, enters it at these
// points, in order:
//
//  1. Its demand (decide, admit.go) gets, for each Anchor limit, a
//     sliding log that counts it in every vendor window that may hold it
//     ([demand.anchorLog], anchor.go), for as long as the instance's
//     recent sends and answers say ([Limiter.anchorExpiry], obtainOnce).
//  2. Before it is decided (obtainOnce, admit.go): how long a pause this
//     instance learned holds it back, even if the store lost the pause
//     ([Limiter.pausedFor], learnreq.go).
//  3. Once granted (obtainOnce): when the store charged the grant to each
//     Anchor limit's log ([Limiter.learnGrant], learnreq.go); then, once
//     the grant's delay is over, whether it is sent ([sendPlan.clear]): a
//     late grant (late.go, from what noteGrant in storecall.go noted of
//     the store call) retimed or held, a wait of sendLag after the
//     charges, a hold out of the instants at which an anchored window may
//     end (anchor.go). obtain gives a held grant back and decides the
//     demand again. A reservation's caller waits the pace instead
//     ([sendPlan.pace]).
//  4. Its response, once (RoundTrip; [Permit.Report] without HTTP):
//     [Limiter.learn] parses the headers into one [quotaheader.Feedback]
//     and asks whether it says "slow down"; [Limiter.report] decides and
//     applies, in order, the reset on the vendor's clock (vendorclock.go),
//     the anchor (anchor.go), the sync and the pause (the store's and
//     this instance's copy, read again at 2).
//
// A resend (retry.go) takes the same path again.

// Learning configures what a [Rule] learns from the vendor's responses.
// The zero value learns with the defaults below; set Off to learn nothing.
//
// A "slow down" answer (a 429, a 503 with Retry-After, or what the
// vendor's [quotaheader.Profile] says) pauses the rule's scope in the
// store, so every instance waits or fails before sending: for the answer's
// Retry-After, until its reset, or for DefaultPause doubling while such
// answers go on. A response with no quota left pauses until its reset even
// before a 429. Pauses are capped at MaxPause, get a random jitter added
// (not a pause until a quota's reset, which ends at the vendor's reset),
// and are also kept in each instance's memory, so a store that loses them
// does not send a request early. docs/learning.md has the details.
type Learning struct {
	Off      bool          // disables learning for the rule
	MaxPause time.Duration // caps every learned pause; zero means [DefaultMaxPause]

	// DefaultPause is the first pause after a "slow down" answer that says
	// nothing about when to resume. Zero means the vendor profile's, else
	// 5 s (GitHub's profile: 60 s).
	DefaultPause time.Duration

	// Jitter is the most added, at random, to a pause. Zero means a tenth
	// of the pause, at most 1 s; negative disables it.
	Jitter time.Duration

	// Limited classifies a response as "slow down". Nil means the vendor
	// profile's, else [quotaheader.DefaultLimited].
	Limited func(resp *http.Response, fb quotaheader.Feedback) bool

	// ResetFormat says how the vendor writes *-Reset headers. Zero means
	// the profile's, else by the value's shape.
	ResetFormat quotaheader.ResetFormat

	// Sync names a limit of the rule whose shared counter is lowered (never
	// raised) to what the vendor reports remains before its reset, so a
	// quota shared with clients we do not control holds. The store must be
	// a [quota.Syncer]. Empty: no sync.
	Sync string

	// SyncResource restricts Sync and Anchor to responses about one of
	// the vendor's quotas (GitHub's "core" or "search").
	SyncResource string

	// Anchor names a [FixedWindow] or [SlidingWindow] limit of the rule
	// whose windows follow the vendor's: its counters start their first
	// window at their first charge, and a response whose reset
	// (X-RateLimit-Reset, the IETF RateLimit reset, ...) says when the
	// vendor's current window ends moves the shared windows so that one
	// ends there, for every instance (see [quota.Anchorer] for what
	// happens to what they counted). The limit is anchored in every rule
	// that uses it, and must have no Phase; the store must be a
	// [quota.Anchorer]. When Sync names the same limit, the vendor's
	// remaining count is applied to the anchored window. Empty: no
	// anchoring. docs/learning.md has the details.
	Anchor string

	// AnchorTolerance widens the span in which one of the store's window
	// ends may be, around the vendor's end as its answers bound it,
	// before the windows move: from the earliest instant less the
	// tolerance to the latest plus the evidence's width, the tolerance
	// and twice the log's margin (a tenth of Per, at most a second). A
	// move puts the end a margin after the latest instant. Zero: the
	// evidence and the margin alone (see docs/learning.md, "Evidence, not
	// trust").
	AnchorTolerance time.Duration

	// AnchorGrid says that the vendor's windows of the Anchor limit are a
	// fixed grid: they end a whole number of windows apart whatever the
	// requests do, as windows on the clock's seconds or minutes do. Once
	// their phase is known, the limit's log then counts each request only
	// in the vendor windows that may hold it ([quota.LogExpiry]), and a
	// saturated fleet can use the whole quota. Leave it false for a
	// vendor whose windows start at the first request after the last one
	// ended, as GitHub's do: such windows end later after every gap, and
	// a log that follows an earlier phase lets a burst in before the
	// vendor's window has ended. False: the log counts each request for
	// the window and its reach after its charge (what the instance's
	// recent sends and answers say a request may take to reach the
	// vendor: from a fortieth of the window to the margin), which holds
	// whatever the vendor's windows do; once the request is answered,
	// until the end of the vendor window that its reset names (on a store
	// that can shorten entries, [quota.Shortener]: both of this module),
	// so that a saturated fleet's bursts still come a window apart.
	// Requires Anchor.
	AnchorGrid bool

	// PauseBy names a limit of the rule whose key scopes learned pauses
	// (one Slack workspace, one GitHub token) instead of the whole scope.
	PauseBy string
}

const defaultPause = 5 * time.Second

// A lesson is what learning took from one answer: its headers, parsed
// once into one Feedback, whether it said "slow down", and, if it did,
// until when this instance then held the request's pause scope back
// (zero: not held).
type lesson struct {
	fb      quotaheader.Feedback
	limited bool
	until   time.Time
}

// learn is where a response enters learning, once per response: it
// parses resp, the answer to req under rule r whose demand was d, into
// one [quotaheader.Feedback], asks Limited (the rule's, the profile's or
// [quotaheader.DefaultLimited]) whether it says "slow down", and reports
// it ([Limiter.report]), which decides and applies the anchor, the sync
// and the pause. Nothing is learned when the rule's Learning is Off.
func (lim *Limiter) learn(ctx context.Context, r *rule, d *demand, req *http.Request, resp *http.Response) lesson {
	if r.Learn.Off {
		return lesson{}
	}
	now := lim.now()
	c := lim.learnConfig(r, req.URL.Host)
	fb := quotaheader.Parse(resp.Header, now, quotaheader.Options{ResetFormat: c.resetFormat, MaxPause: c.maxPause})
	ls := lesson{fb: fb, limited: c.limited(resp, fb)}
	id := lim.report(ctx, r, d, c, ls.limited, fb, resp.StatusCode, now)
	if ls.limited { // for Retry
		ls.until, _ = lim.learned.localPause(id, now)
	}
	return ls
}

// learnFrom is [Limiter.learn] for an answer that comes already parsed,
// from [Permit.Report] (a call without HTTP): fb is what the answer said
// of its quota and limited whether it said "slow down". fb is capped at
// the rule's MaxPause, as [quotaheader.Parse] caps what it reads, and
// reported ([Limiter.report]) as learn reports a response. Nothing is
// learned when the rule's Learning is Off.
func (lim *Limiter) learnFrom(ctx context.Context, r *rule, d *demand, limited bool, fb quotaheader.Feedback) {
	if r.Learn.Off {
		return
	}
	now := lim.now()
	c := lim.learnConfig(r, "") // no host: the rule's settings and the defaults
	if !fb.Reset.IsZero() && fb.Reset.After(now.Add(c.maxPause)) {
		fb.Reset, fb.Capped = now.Add(c.maxPause), true
	}
	if fb.RetryAfter > c.maxPause {
		fb.RetryAfter, fb.Capped = c.maxPause, true
	}
	lim.report(ctx, r, d, c, limited, fb, 0, now)
}

// wait returns how much longer after now the pause that ls found holds
// the request back: zero when none does.
func (ls lesson) wait(now time.Time) time.Duration {
	return max(ls.until.Sub(now), 0)
}

// learnConfig is a rule's Learning with the vendor profile applied.
type learnConfig struct {
	limited      func(*http.Response, quotaheader.Feedback) bool
	resetFormat  quotaheader.ResetFormat
	defaultPause time.Duration
	maxPause     time.Duration
}

// learnConfig resolves r's learning settings for a request to host: the rule's
// own fields first, then the profile's, then the defaults.
func (lim *Limiter) learnConfig(r *rule, host string) learnConfig {
	c := learnConfig{limited: r.Learn.Limited, resetFormat: r.Learn.ResetFormat,
		defaultPause: r.Learn.DefaultPause, maxPause: r.Learn.MaxPause}
	if p := profileFor(lim.profiles, host); p != nil {
		if c.limited == nil {
			c.limited = p.Limited
		}
		if c.resetFormat == quotaheader.ResetAuto {
			c.resetFormat = p.ResetFormat
		}
		if c.defaultPause <= 0 {
			c.defaultPause = p.DefaultPause
		}
	}
	if c.limited == nil {
		c.limited = quotaheader.DefaultLimited
	}
	if c.defaultPause <= 0 {
		c.defaultPause = defaultPause
	}
	if c.maxPause <= 0 {
		c.maxPause = DefaultMaxPause
	}
	return c
}

// report is the one place that decides what an answer to a call under
// rule r, whose demand was d, teaches, and applies it; limited says the
// answer was "slow down", status is its HTTP status (0 without HTTP).
// It returns the id of the pause the answer applies to ([rule.pauseID]).
// In order:
//
//  1. the reset, read on the vendor's clock (vendorclock.go);
//  2. the Anchor limit's windows moved to the vendor's (anchor.go);
//  3. the Sync limit lowered to what the vendor says remains ([Limiter.sync]);
//  4. the pause the answer calls for ([Limiter.pauseOf]);
//  5. that pause recorded, locally and in the store, and reported to the
//     hooks and the log ([Limiter.recordPause]).
func (lim *Limiter) report(ctx context.Context, r *rule, d *demand, c learnConfig, limited bool, fb quotaheader.Feedback, status int, now time.Time) (id string) {
	if d != nil {
		fb.Reset = lim.learned.clockReset(r.scope, d.sent, now, fb) // Date's whole seconds
	}
	var windowEnd time.Time // when the anchored window of now ends, if known
	if r.anchorIdx >= 0 && d != nil {
		windowEnd = lim.anchor(ctx, r, d, fb, now)
	}
	if r.syncIdx >= 0 && d != nil {
		if r.syncIdx != r.anchorIdx {
			windowEnd = time.Time{}
		}
		lim.sync(ctx, r, d, fb, now, windowEnd)
	}
	pk := r.pauseKey(d) // pauseby.go: the scope, or one key of the PauseBy limit
	id = r.pauseID(pk)
	p, exact := lim.pauseOf(r, d, id, c, limited, fb, now)
	if p <= 0 {
		return id
	}
	lim.recordPause(ctx, r, pk, p, exact, fb.Capped, status, now)
	return id
}

// sync lowers the rule's Sync limit to the vendor's remaining quota, when
// the response gives one with a reset and it is less than the limit could
// admit before that reset (otherwise the store call could change nothing).
// windowEnd, when not zero, is when the anchored window of now ends
// ([Limiter.anchor]). The vendor's window is then one of the anchored
// windows: the one whose end is nearest the vendor's (this one, or the
// next when the vendor's window has already turned while ours, anchored
// late by the evidence's width, has not), as the reset or, when earlier,
// the answers bound it ([learner.vendorEnd]): the reset alone, read late
// by its rounding and the Date's, put the vendor's last units of a 1 s
// window in our next one, which they filled. The reset is moved inside
// that window, a tolerance before its end, so that the store applies the
// remaining quota to it, however late the store gets the call.
func (lim *Limiter) sync(ctx context.Context, r *rule, d *demand, fb quotaheader.Feedback, now, windowEnd time.Time) {
	if fb.Remaining < 0 || fb.Reset.IsZero() || r.Learn.SyncResource != "" && fb.Resource != r.Learn.SyncResource {
		return
	}
	i := d.limitOf(r.syncIdx)
	if i < 0 {
		return // the Sync limit does not apply to this request
	}
	b := d.Limits[i]
	within := fb.Reset.Sub(now)
	if !windowEnd.IsZero() {
		// The vendor's window ends by its reset, read late by the reset's
		// rounding and the Date's (on windows of a second or two, nearer
		// the end of our next window than of this one), and by the end
		// the evidence of its windows allows.
		// It ends after the request was sent, and after the earliest
		// instant the evidence allows: where those leave it more than a
		// window wide, the middle of the two bounds picks our window, so
		// that a reset read late (by up to the time between a burst's
		// last answer and the next one's first, with whole-second resets)
		// does not put the vendor's "nothing remaining" in our next
		// window, which would then get nothing (TestAnchoredSearchFleet
		// after a move: [30 30 0 30] in 1 run of 8). Our window the
		// earlier of the two costs nothing: the log bounds what the
		// vendor counts.
		id := windowID{r.scope, b.Limit.Name, b.Key}
		reset := fb.Reset
		if end, ok := lim.learned.vendorEnd(id, now, fb); ok && end.Before(reset) {
			reset = end
		}
		from := d.sent
		if after, ok := lim.learned.vendorEndAfter(id, fb); ok && after.After(from) {
			from = after
		}
		if !from.IsZero() && from.Before(reset) {
			reset = from.Add(reset.Sub(from) / 2)
		}
		per := b.Limit.Per
		ahead := max((reset.Sub(windowEnd)+per/2)/per, 0) // windows between ours and the vendor's
		end := windowEnd.Add(ahead * per)
		within = max(end.Sub(now)-syncMargin(b.Limit), time.Microsecond)
	}
	l := b.Limit
	// The most the limit could admit before the reset: a full burst (or
	// window) plus what accrues meanwhile.
	most := int64(l.Capacity()) + int64(float64(l.Rate)*(float64(within)/float64(l.Per))) + 1
	if lb, ok := d.anchorLogOf(b); ok && windowEnd.IsZero() {
		// Anchored windows whose end this instance does not know: the
		// reset may fall in our next window as well as in this one, and
		// a sync of the windows would fill this one whole. The limit's
		// log (anchor.go) counts the vendor's window wherever it ends,
		// within Per of now: the vendor's remaining goes there, and
		// changes nothing when the log already holds what the vendor
		// counted.
		b, l = lb, lb.Limit
		most = int64(l.Capacity())
	}
	if fb.Remaining >= most {
		return
	}
	s, ok := lim.store.(quota.Syncer)
	if !ok {
		return // not reached: NewLimiter refuses a Sync on such a store
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	err := lim.guard(sctx, func(ctx context.Context) error {
		return s.Sync(ctx, r.scope, b, int(min(fb.Remaining, int64(l.Capacity()))), within)
	})
	if lim.hooks.OnSync != nil {
		lim.hooks.OnSync(SyncEvent{Rule: r.id, Limit: l.Name, Remaining: fb.Remaining, Reset: within, Err: err})
	}
}

// syncMargin is how far before the end of an anchored window a sync
// places the vendor's reset, so that the store applies it to that window
// however late it gets the call.
func syncMargin(l quota.Limit) time.Duration {
	return min(time.Second, l.Per/4)
}

// pauseOf returns how long the answer fb to a call under rule r, whose
// demand was d, pauses id (see [learner.pauseFor]), and whether the
// pause ends exactly when the vendor's window does: quota spent until the
// reset. The vendor's window ends then (its rounding only delays it), so
// the pause ends there, with no jitter, which would only waste the next
// window's quota: the instances all wait on the one shared pause and the
// store spreads their grants. With evidence of where the vendor's windows
// end (Anchor), the pause ends at the latest instant the window may end
// ([learner.vendorEnd]), when that is no later than the reset, to its
// resolution; none when that instant is past.
func (lim *Limiter) pauseOf(r *rule, d *demand, id string, c learnConfig, limited bool, fb quotaheader.Feedback, now time.Time) (p time.Duration, exact bool) {
	p = lim.learned.pauseFor(id, c, limited, fb, now)
	if p <= 0 {
		return 0, false
	}
	exact = fb.Remaining == 0 && !fb.HasRetryAfter && !fb.Reset.IsZero() && !fb.Capped
	if exact && r.anchorIdx >= 0 && d != nil {
		if i := d.limitOf(r.anchorIdx); i >= 0 {
			b := d.Limits[i]
			end, ok := lim.learned.vendorEnd(windowID{r.scope, b.Limit.Name, b.Key}, now, fb)
			switch {
			case !ok || end.After(fb.Reset.Add(fb.ResetResolution)):
			case !end.After(now):
				return 0, false // the window that counted it is over
			default:
				p = min(end.Sub(now), c.maxPause)
			}
		}
	}
	return p, exact
}

// pauseFor returns how long pause id must last after an answer that
// limited says was "slow down" (or not) and whose feedback is fb, at most
// c.maxPause: the answer's retry time; until its reset, when the quota is
// spent; else, for "slow down", an exponential backoff per id from
// c.defaultPause, which an answer that is not "slow down" ends.
func (l *learner) pauseFor(id string, c learnConfig, limited bool, fb quotaheader.Feedback, now time.Time) time.Duration {
	if !limited {
		l.mu.Lock()
		delete(l.backoff, id)
		l.mu.Unlock()
		if fb.Remaining == 0 && fb.Reset.After(now) {
			return min(fb.Reset.Sub(now), c.maxPause) // quota spent: wait for the reset
		}
		return 0
	}
	if d := fb.PauseFor(now); d > 0 || fb.HasRetryAfter {
		return min(d, c.maxPause)
	}
	// "Slow down" with no time given: back off exponentially per scope.
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.backoff[id]
	if b == nil {
		b = &backoff.ExponentialBackOff{
			InitialInterval:     c.defaultPause,
			RandomizationFactor: 0, // jitter is added by record, and only ever adds
			Multiplier:          2,
			MaxInterval:         c.maxPause,
			MaxElapsedTime:      0,
			Stop:                backoff.Stop,
			Clock:               backoff.SystemClock,
		}
		b.Reset()
		if l.backoff == nil {
			l.backoff = make(map[string]*backoff.ExponentialBackOff)
		}
		l.backoff[id] = b
	}
	return min(b.NextBackOff(), c.maxPause)
}

// recordPause records a pause of p for pause key pk of rule r's scope:
// with jitter unless exact, in this instance's memory and in the store,
// and reports it to the hooks and the log. capped and status describe
// the answer, for the event.
//
// The pause holds the requests it pauses until p is over: where every
// rule that pause key pk holds back sends its requests no earlier than
// the send lag of an Anchor limit after their charge (rule.pauseLead,
// pauselead.go), the store and the local copy hold their decisions that
// much less, so that they are sent as the pause ends, not a lag after
// it. The event reports p.
func (lim *Limiter) recordPause(ctx context.Context, r *rule, pk string, p time.Duration, exact, capped bool, status int, now time.Time) {
	id := r.pauseID(pk)
	lead := r.pauseLead(pk)
	p = lim.learned.record(r, id, now, p, exact, lead)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeCallTimeout)
	defer cancel()
	var err error
	if p > lead {
		err = lim.pause(sctx, r.scope, pk, p-lead)
		// The store counted it from when it got the call: the local copy
		// must not end before the shared pause does.
		lim.learned.keep(id, lim.now().Add(p-lead))
	}
	if lim.hooks.OnPause != nil || lim.logger != nil {
		ev := PauseEvent{Context: ctx, Rule: r.id, Status: status, Pause: p, Capped: capped, Err: err}
		if lim.hooks.OnPause != nil {
			lim.hooks.OnPause(ev)
		}
		lim.logPause(ev)
	}
}

// record keeps a pause of d from now for id locally, with jitter added
// unless exact (r's Learning.Jitter; zero: a tenth of d, at most 1 s) and
// rounded up to the microsecond, and returns it, for the store. The
// local copy holds decisions lead less (recordPause).
func (l *learner) record(r *rule, id string, now time.Time, d time.Duration, exact bool, lead time.Duration) time.Duration {
	j := r.Learn.Jitter
	if exact {
		j = 0 // the vendor's window ends then: later wastes its quota
	}
	if j == 0 && !exact {
		j = min(d/10, time.Second)
	}
	if j > 0 {
		d += rand.N(j + 1)
	}
	// Stores count whole microseconds and round a pause up; do the same
	// here so the local copy and the reported pause match the store's.
	d = (d + time.Microsecond - 1).Truncate(time.Microsecond)
	if d > lead {
		l.keep(id, now.Add(d-lead))
	}
	return d
}

// keep makes the local pause id last at least until until.
func (l *learner) keep(id string, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pauses == nil {
		l.pauses = make(map[string]time.Time)
	}
	if until.After(l.pauses[id]) {
		l.pauses[id] = until
	}
}

// learner holds what a Limiter (or the Transport on it) learned: the
// latest pause per pause id (a scope, or one key of its PauseBy limit), as
// a local copy of what it recorded in the store, the backoff state of
// pause ids whose "slow down" answers carried no retry time, and the
// evidence of the vendor's windows and clock.
type learner struct {
	mu      sync.Mutex
	pauses  map[string]time.Time
	backoff map[string]*backoff.ExponentialBackOff
	windows map[windowID]*phase    // Anchor limits: where the vendor's and the store's windows end (anchor.go)
	clocks  map[string]vendorClock // per scope: the vendor's clock offset (vendorclock.go)
}

// localPause returns the end of the latest pause learned for id, if it
// is after now.
func (l *learner) localPause(id string, now time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, ok := l.pauses[id]
	if !ok {
		return time.Time{}, false
	}
	if !until.After(now) {
		delete(l.pauses, id)
		return time.Time{}, false
	}
	return until, true
}

// DefaultMaxPause caps learned pauses and retry waits when a rule sets no
// other: 10 minutes.
const DefaultMaxPause = quotaheader.DefaultMaxPause

// LearnedPause reports how much longer the rule that matches req is held
// back by the latest pause this transport learned from a response (its
// local copy; see [Learning]), or zero when there is none or no rule
// matches. A retry loop outside the transport, such as go-retryablehttp's,
// can wait this long instead of guessing. Where every rule the pause
// holds back sends its requests a send lag after their charge (an
// anchored limit, see [Learning].Anchor), it holds their decisions that
// lag less than the vendor's pause, so that they are sent as it ends.
func (t *Transport) LearnedPause(req *http.Request) time.Duration {
	r, out := t.lim.policy.match(req)
	if r == nil {
		return 0
	}
	return t.lim.pausedFor(r, r.pauseKeyOf(out), t.lim.now()) // learnreq.go
}
