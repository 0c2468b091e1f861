package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotakit/throttle/internal/pattern"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

// A Policy says which outbound requests are limited and how: an ordered
// list of rules. A request is decided by the first rule that matches it; a
// request that matches none is sent unlimited, unless RefuseUnmatched is
// set. A Policy is plain data: build it in code, validate it with
// [Policy.Validate], and hand it to [NewTransport], which validates it too.
type Policy struct {
	// Rules are tried in order; the first that matches decides.
	Rules []Rule

	// RefuseUnmatched fails a request that matches no rule with
	// [ErrNoRule] instead of sending it unlimited.
	RefuseUnmatched bool

	// OnStoreFailure is the [FailureMode] of rules that set none. Zero
	// means [FailLocal].
	OnStoreFailure FailureMode

	// Instances is how many instances share the store, for [FailLocal]'s
	// shares ([LocalShare]). Zero counts as 1: while a shared store is
	// down, every instance takes each FailLocal rule's whole quota, and
	// the fleet admits Instances times the quota. A fleet must set it;
	// [NewTransport] and [NewLimiter] log a warning when it is zero and a
	// rule falls back to FailLocal on a store other than the in-process
	// default.
	Instances int

	Classes []Class // the priority classes rules and requests may name
}

// A Rule matches a set of requests and names the limits they must all
// pass, atomically: a request is charged to every limit of its rule, or to
// none. The match fields (Host, Method, Path, Match) are ANDed; an empty
// one matches anything. docs/policy.md describes every field at length.
type Rule struct {
	// Name identifies the rule in errors, metrics and [Limiter] calls;
	// unique in the policy, letters, digits and ._- only.
	Name string

	// Host matches the URL's host: "api.github.com", or "*.slack.com"
	// for subdomains; with a port ("localhost:8080") only that port.
	Host string

	Method string // matches the request method exactly, in upper case, e.g. "POST"

	// Path matches the URL path in the [net/http.ServeMux] pattern syntax
	// ("/repos/{owner}/{repo}/issues", "/files/{path...}"); wildcards feed
	// [KeyFromPath].
	Path string

	Match func(*http.Request) bool // if set, must also report true; it must not modify the request

	// Limits are decided together, all or none: those that apply to a
	// request ([Limit].Match). A rule with no limits still matches and
	// honours pauses: use it to exempt requests.
	Limits []Limit

	// Cost is what a request is charged against every limit that has no
	// Cost of its own. Nil means 1; above a limit's capacity the request
	// fails with [ErrCostTooHigh].
	Cost func(*http.Request) int

	// Settle, if set, reads a request's real cost from its response, for
	// vendors that report it only there ([SettleFromJSON]): Cost is then
	// an estimate, and the charge of every limit without a Cost of its
	// own is settled to what Settle reports ([quota.Settler]) once the
	// caller has read the body to its end or closed it. Settle gets a copy
	// of the response holding what the caller read (its first MiB); ok
	// false leaves the estimate. The store must be a [quota.Settler].
	Settle func(*http.Response) (cost int, ok bool)

	// Wait says how long a request may wait for its quota (package
	// waiters). Nil means waiters.Block; [WithWaiter] overrides it.
	Wait Waiter

	Learn Learning // what the rule learns from responses
	Retry Retry    // resends "slow down" answers through the limiter

	// Shadow decides and reports the rule's requests as usual but never
	// makes one wait or fail: watch a new limit before enforcing it.
	Shadow bool

	// OnStoreFailure is what a request does when the store cannot decide
	// it. Zero means [Policy.OnStoreFailure].
	OnStoreFailure FailureMode

	// MaxQueue caps how many requests of the rule may wait at once in one
	// Transport; QueueFull ([RefuseNew], the zero value, or [DropOldest])
	// says what happens beyond it. Zero: no cap. The queue keeps the
	// reservations its requests wait for: a request that goes without
	// acting passes its slot to the next waiter of the same demand, so the
	// rule's reservations reach at most MaxQueue emission intervals ahead
	// per instance (see [DropOldest]).
	MaxQueue  int
	QueueFull QueueFull

	// Scope groups counters and pauses in the store (one Cluster slot).
	// Rules sharing a limit name must share a scope. Empty means Name.
	Scope string

	Class string // the [Class] of the rule's requests ([WithClass] overrides it); empty: none
}

// A Waiter states how long a request may wait for its quota. The standard
// ones are in the waiters package: waiters.FailFast, waiters.UpTo and
// waiters.Block. Transport caps the budget by the request context's
// deadline. Implementations must be safe for concurrent use.
type Waiter interface {
	// MaxWait returns the longest the request with context ctx may wait.
	MaxWait(ctx context.Context) time.Duration
}

// WaiterFunc adapts a function to a [Waiter].
type WaiterFunc func(ctx context.Context) time.Duration

// MaxWait returns f(ctx).
func (f WaiterFunc) MaxWait(ctx context.Context) time.Duration { return f(ctx) }

type waiterKey struct{}

// WithWaiter returns a copy of ctx whose requests use w instead of their
// rule's waiter: an interactive request can fail fast while a batch job
// blocks under the same rule.
func WithWaiter(ctx context.Context, w Waiter) context.Context {
	return context.WithValue(ctx, waiterKey{}, w)
}

// defaultWaiter is used by rules without a Wait.
var defaultWaiter Waiter = waiters.Block()

// CostByMethod returns a Rule.Cost (or Limit.Cost) that charges
// costs[method], or def for methods not listed; a request with no method
// is a GET, as net/http sends it. For GitHub's secondary limits:
//
//	throttle.CostByMethod(5, map[string]int{"GET": 1, "HEAD": 1, "OPTIONS": 1})
func CostByMethod(def int, costs map[string]int) func(*http.Request) int {
	m := make(map[string]int, len(costs))
	for k, v := range costs {
		m[strings.ToUpper(k)] = v
	}
	return func(r *http.Request) int {
		method := r.Method
		if method == "" {
			method = http.MethodGet
		}
		if c, ok := m[method]; ok {
			return c
		}
		return def
	}
}

// rule is a validated Rule with its patterns parsed.
type rule struct {
	Rule
	id    string // Name, for messages
	scope string
	host  *pattern.Host
	path  *pattern.Path
	wait  Waiter

	syncIdx   int // index in Limits of Learn.Sync, or -1
	anchorIdx int // index in Limits of Learn.Anchor, or -1
	pauseIdx  int // index in Limits of Learn.PauseBy, or -1

	// How much sooner than a learned pause its decisions may be made, for
	// the scope's pause key and the PauseBy limit's (pauselead.go).
	leadScope, leadBy time.Duration

	failMode  FailureMode   // resolved: never FailDefault
	instances int           // Policy.Instances
	class     *class        // Class, or nil
	limits    []quota.Limit // each of Limits as the store sees it
	local     []quota.Limit // LocalShare of each of Limits
	queue     *waitQueue    // nil when MaxQueue is 0
}

// inFlight returns the index of r's first Concurrency limit, or -1.
func (r *rule) inFlight() int {
	for j, l := range r.limits {
		if l.Algorithm == Concurrency {
			return j
		}
	}
	return -1
}

// compiledPolicy is a validated Policy, ready to match requests.
type compiledPolicy struct {
	rules     []rule
	refuse    bool
	classes   map[string]*class
	unclassed *class // the class of requests that name none (class.go)
}

// Validate reports every problem with the policy: each is a
// [*PolicyError] naming the rule and field, and all of them match
// [ErrInvalidPolicy]. It returns nil for a valid policy.
func (p Policy) Validate() error {
	_, err := p.compile()
	return err
}

// compile validates p and parses its patterns.
func (p Policy) compile() (*compiledPolicy, error) {
	var errs []error
	bad := func(ruleID, field string, format string, args ...any) {
		errs = append(errs, &PolicyError{Rule: ruleID, Field: field, Err: fmt.Errorf(format, args...)})
	}
	type limitUse struct {
		rule  string
		scope string
		limit Limit
	}
	names := make(map[string]bool)
	limits := make(map[string]limitUse) // by limit name
	anchored := make(map[string]bool)   // limit names some rule's Learn.Anchor names
	cp := &compiledPolicy{refuse: p.RefuseUnmatched}
	if !p.OnStoreFailure.valid() {
		bad("", "OnStoreFailure", "unknown failure mode %v", p.OnStoreFailure)
	}
	if p.Instances < 0 {
		bad("", "Instances", "must not be negative, got %d", p.Instances)
	}
	cp.classes = compileClasses(p.Classes, bad) // class.go
	cp.unclassed = unclassed(cp.classes)

	for i, r := range p.Rules {
		id := r.Name
		if id == "" {
			id = fmt.Sprintf("#%d", i)
		}
		cr := rule{Rule: r, id: id, scope: r.Scope, wait: r.Wait, syncIdx: -1, anchorIdx: -1, pauseIdx: -1}
		cr.Limits = append([]Limit(nil), r.Limits...)
		if cr.scope == "" {
			cr.scope = r.Name
		}
		if cr.wait == nil {
			cr.wait = defaultWaiter
		}
		switch {
		case r.Name == "":
			bad(id, "Name", "must not be empty")
		case !quota.ValidName(r.Name):
			bad(id, "Name", "%q must use only letters, digits and ._- (at most 64 bytes)", r.Name)
		case names[r.Name]:
			bad(id, "Name", "duplicate rule name %q", r.Name)
		}
		names[r.Name] = true
		if r.Scope != "" && !quota.ValidName(r.Scope) {
			bad(id, "Scope", "%q must use only letters, digits and ._- (at most 64 bytes)", r.Scope)
		}
		if r.Host != "" {
			h, err := pattern.ParseHost(r.Host)
			if err != nil {
				bad(id, "Host", "%v", err)
			} else {
				cr.host = &h
			}
		}
		if r.Path != "" {
			pp, err := pattern.ParsePath(r.Path)
			if err != nil {
				bad(id, "Path", "%v", err)
			} else {
				cr.path = pp
			}
		}
		switch {
		case r.Learn.MaxPause < 0:
			bad(id, "Learn.MaxPause", "must not be negative, got %v", r.Learn.MaxPause)
		case r.Learn.DefaultPause < 0:
			bad(id, "Learn.DefaultPause", "must not be negative, got %v", r.Learn.DefaultPause)
		case r.Learn.AnchorTolerance < 0:
			bad(id, "Learn.AnchorTolerance", "must not be negative, got %v", r.Learn.AnchorTolerance)
		case r.Retry.Max < 0:
			bad(id, "Retry.Max", "must not be negative, got %d", r.Retry.Max)
		case r.Retry.MaxWait < 0:
			bad(id, "Retry.MaxWait", "must not be negative, got %v", r.Retry.MaxWait)
		}
		switch {
		case r.MaxQueue < 0:
			bad(id, "MaxQueue", "must not be negative, got %d", r.MaxQueue)
		case !r.QueueFull.valid():
			bad(id, "QueueFull", "unknown choice %v", r.QueueFull)
		case r.MaxQueue > 0:
			cr.queue = &waitQueue{max: r.MaxQueue, full: r.QueueFull}
		}
		cr.failMode = r.OnStoreFailure
		if cr.failMode == FailDefault {
			cr.failMode = p.OnStoreFailure
		}
		if cr.failMode == FailDefault {
			cr.failMode = FailLocal
		}
		if !r.OnStoreFailure.valid() {
			bad(id, "OnStoreFailure", "unknown failure mode %v", r.OnStoreFailure)
		}
		switch {
		case r.Method != "" && !validMethod(r.Method):
			bad(id, "Method", "%q is not an HTTP method token", r.Method)
		case r.Method != strings.ToUpper(r.Method):
			// Methods are case-sensitive (RFC 9110) and net/http sends
			// them as given: "post" would never match a POST.
			bad(id, "Method", "%q is not upper case; methods are case-sensitive, so it would never match %q", r.Method, strings.ToUpper(r.Method))
		}
		if r.Class != "" {
			if cr.class = cp.classes[r.Class]; cr.class == nil {
				bad(id, "Class", "names no class of the policy: %q", r.Class)
			}
		}
		inRule := make(map[string]bool)
		for j, l := range r.Limits {
			field := fmt.Sprintf("Limits[%d]", j)
			if err := l.Quota().Validate(); err != nil {
				errs = append(errs, policyError(id, field+".", err))
				continue
			}
			if inRule[l.Name] {
				bad(id, field+".Name", "duplicate limit name %q in the rule", l.Name)
				continue
			}
			inRule[l.Name] = true
			checkPathKeys(cr.path, r.Path, l, func(sub, format string, args ...any) {
				bad(id, field+sub, format, args...)
			})
			if l.Tenant != nil && l.Algorithm == Concurrency {
				bad(id, field+".Tenant", "a concurrency limit cannot be shared among tenants")
			}
			prev, seen := limits[l.Name]
			if !seen {
				limits[l.Name] = limitUse{rule: id, scope: cr.scope, limit: l}
				continue
			}
			if prev.scope != cr.scope {
				bad(id, field+".Name", "limit %q is shared with rule %s, so both rules need the same Scope (have %q and %q)", l.Name, prev.rule, cr.scope, prev.scope)
			}
			if a, b := prev.limit, l; a.Rate != b.Rate || a.Per != b.Per || a.Quota().BurstOrRate() != b.Quota().BurstOrRate() || a.Algorithm != b.Algorithm || a.Phase != b.Phase {
				bad(id, field, "limit %q is also defined by rule %s with other parameters; one name is one counter", l.Name, prev.rule)
			}
		}
		if r.Learn.Sync != "" {
			for j, l := range r.Limits {
				if l.Name == r.Learn.Sync {
					cr.syncIdx = j
				}
			}
			switch {
			case cr.syncIdx < 0:
				bad(id, "Learn.Sync", "names no limit of the rule: %q", r.Learn.Sync)
			case r.Limits[cr.syncIdx].Algorithm == Concurrency:
				bad(id, "Learn.Sync", "names a concurrency limit, %q; a vendor's remaining quota is a rate", r.Learn.Sync)
			}
		}
		if r.Learn.AnchorGrid && r.Learn.Anchor == "" {
			bad(id, "Learn.AnchorGrid", "scores the entries of an Anchor limit's log, and Learn.Anchor names none")
		}
		if r.Learn.Anchor != "" {
			for j, l := range r.Limits {
				if l.Name == r.Learn.Anchor {
					cr.anchorIdx = j
				}
			}
			switch {
			case cr.anchorIdx < 0:
				bad(id, "Learn.Anchor", "names no limit of the rule: %q", r.Learn.Anchor)
			case !r.Limits[cr.anchorIdx].Quota().Windowed():
				bad(id, "Learn.Anchor", "names a %v limit, %q; only fixed-window and sliding-window limits have windows to anchor", r.Limits[cr.anchorIdx].Algorithm, r.Learn.Anchor)
			case r.Limits[cr.anchorIdx].Phase != 0:
				bad(id, "Learn.Anchor", "names limit %q, which has a Phase; an anchored limit's windows start at its first charge, then where the vendor's do", r.Learn.Anchor)
			default:
				anchored[r.Learn.Anchor] = true
			}
		}
		if i, err := pauseByIndex(r); err != nil {
			bad(id, "Learn.PauseBy", "%v", err)
		} else {
			cr.pauseIdx = i
		}
		cr.instances = p.Instances
		for _, l := range cr.Limits {
			cr.limits = append(cr.limits, l.Quota())
			cr.local = append(cr.local, LocalShare(l, p.Instances).Quota())
		}
		cp.rules = append(cp.rules, cr)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	// A limit one rule anchors is anchored in every rule that uses it:
	// one name is one counter, on one set of windows.
	for i := range cp.rules {
		for j := range cp.rules[i].limits {
			if anchored[cp.rules[i].limits[j].Name] {
				cp.rules[i].limits[j].Anchored = true
				cp.rules[i].local[j].Anchored = true
			}
		}
	}
	cp.setPauseLeads() // pauselead.go
	return cp, nil
}

// checkPathKeys reports each path wildcard l's Key or Tenant reads
// through [KeyFromPath] that the rule's path (p, parsed from src; nil when
// the rule has none or it did not parse) does not have: every request
// would fail for want of its key.
func checkPathKeys(p *pattern.Path, src string, l Limit, bad func(field, format string, args ...any)) {
	for _, kf := range []struct {
		field string
		f     KeyFunc
	}{{".Key", l.Key}, {".Tenant", l.Tenant}} {
		if kf.f == nil {
			continue
		}
		for _, name := range pathKeysRead(kf.f) {
			switch {
			case src == "":
				bad(kf.field, "KeyFromPath(%q) reads a wildcard of the rule's path, but the rule has no Path; give it one with {%s}", name, name)
			case p != nil && !slices.Contains(p.Wildcards(), name):
				bad(kf.field, "KeyFromPath(%q) names no wildcard of the rule's Path %q; add {%s} to it or read another wildcard", name, src, name)
			}
		}
	}
}

// validMethod reports whether m is an HTTP token (RFC 9110).
func validMethod(m string) bool {
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return m != ""
}

// match returns the first rule that matches req, and a copy of req that
// carries the rule's path wildcards; or nil if no rule matches.
func (cp *compiledPolicy) match(req *http.Request) (*rule, *http.Request) {
	host := req.URL.Host
	if host == "" {
		host = req.Host
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet // as net/http sends it
	}
	for i := range cp.rules {
		r := &cp.rules[i]
		if r.Method != "" && r.Method != method {
			continue
		}
		if r.host != nil && !r.host.Match(host) {
			continue
		}
		var names, values []string
		if r.path != nil {
			var ok bool
			if names, values, ok = r.path.Match(req.URL); !ok {
				continue
			}
		}
		// The request the rule's functions see and the base transport
		// sends: a copy, so that a key function may replace its Body
		// (KeyFromBody) and not the caller's. A shallow one, sharing the
		// URL and headers, which no function may change (KeyFunc,
		// Rule.Match), unless the path's wildcards are set on it:
		// SetPathValue writes into the request's own matches.
		var out *http.Request
		if len(names) == 0 {
			out = req.WithContext(req.Context())
		} else {
			out = req.Clone(req.Context())
			for j, n := range names {
				out.SetPathValue(n, values[j])
			}
		}
		if r.Match != nil && !r.Match(out) {
			continue
		}
		return r, out
	}
	return nil, nil
}
