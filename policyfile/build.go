package policyfile

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
)

// The fields a file may give, in the order the docs list them.
var (
	documentFields = []string{"presets", "instances", "on_store_failure", "refuse_unmatched", "rules"}
	ruleFields     = []string{"name", "host", "method", "path", "scope", "wait", "cost", "cost_by_method", "shadow", "on_store_failure", "limits", "learn", "retry"}
	limitFields    = []string{"name", "rate", "per", "burst", "algorithm", "key"}
	learnFields    = []string{"off", "max_pause", "default_pause", "jitter", "sync", "sync_resource", "pause_by"}
	retryFields    = []string{"max", "max_wait"}
)

// at is where a value is: its rule and its field, as an Error names them.
type at struct {
	rule  int    // the rule's index in the file, -1 for the document
	id    string // the rule's name, or "#N"; "" for the document
	field string // e.g. "limits[0].rate"; "" for the rule itself
}

func (w at) in(name string) at {
	if w.field != "" {
		name = w.field + "." + name
	}
	return at{w.rule, w.id, name}
}

func (w at) index(i int) at { return at{w.rule, w.id, fmt.Sprintf("%s[%d]", w.field, i)} }

// builder turns a file's nodes into a Policy, collecting every problem
// with its line, and the lines of the fields it read, to place the
// problems validation finds.
type builder struct {
	name   string
	errs   []*Error
	lines  lineIndex
	failed map[int][]string // fields with a problem, by rule
	ids    []string         // the file's rules' names or "#N", by index
}

func newBuilder(name string) *builder {
	return &builder{name: name, lines: lineIndex{}, failed: map[int][]string{}}
}

// bad records a problem of the value at w, on line.
func (b *builder) bad(w at, line int, format string, args ...any) {
	b.errs = append(b.errs, &Error{File: b.name, Line: line, Rule: w.id, Field: w.field, Err: fmt.Errorf(format, args...)})
	b.failed[w.rule] = append(b.failed[w.rule], w.field)
}

// err returns the problems found, in the order of their lines, or nil.
func (b *builder) err() error {
	if len(b.errs) == 0 {
		return nil
	}
	slices.SortStableFunc(b.errs, func(x, y *Error) int {
		return lineOrder(x.Line) - lineOrder(y.Line)
	})
	errs := make([]error, len(b.errs))
	for i, e := range b.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// lineOrder puts problems without a line last.
func lineOrder(line int) int {
	if line == 0 {
		return math.MaxInt32
	}
	return line
}

// validated adds what validation (or [throttle.NewTransport]) found in
// the policy: each problem once, under the file's names for the rule and
// field, and none about a field whose value was already refused.
func (b *builder) validated(err error) {
	if err == nil {
		return
	}
	var pes []*throttle.PolicyError
	collectPolicyErrors(err, &pes)
	if len(pes) == 0 {
		b.errs = append(b.errs, &Error{File: b.name, Err: err})
		return
	}
	for _, pe := range pes {
		field := fieldName(pe.Field)
		idx := -1
		for i, id := range b.ids {
			if id == pe.Rule {
				idx = i // the last one: a duplicate name is reported on the later rule
			}
		}
		line := b.lines.line(idx, field)
		if pe.Rule != "" && idx < 0 {
			line = b.lines.line(-1, "presets") // a preset's rule
		}
		if slices.ContainsFunc(b.failed[idx], func(f string) bool { return within(field, f) || within(f, field) }) {
			continue // said already, as the file wrote it
		}
		b.errs = append(b.errs, &Error{File: b.name, Line: line, Rule: pe.Rule, Field: field, Err: pe})
	}
}

func collectPolicyErrors(err error, out *[]*throttle.PolicyError) {
	if pe, ok := err.(*throttle.PolicyError); ok {
		*out = append(*out, pe)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectPolicyErrors(e, out)
		}
		return
	}
	var pe *throttle.PolicyError
	if errors.As(err, &pe) {
		*out = append(*out, pe)
	}
}

// fieldName maps a Policy field path ("Limits[1].Rate", "Learn.Sync")
// to the file's ("limits[1].rate", "learn.sync").
func fieldName(f string) string {
	var b strings.Builder
	for i, part := range strings.Split(f, ".") {
		if i > 0 {
			b.WriteByte('.')
		}
		idx := ""
		if k := strings.IndexByte(part, '['); k >= 0 {
			part, idx = part[:k], part[k:]
		}
		for k, c := range part {
			if 'A' <= c && c <= 'Z' {
				if k > 0 {
					b.WriteByte('_')
				}
				c += 'a' - 'A'
			}
			b.WriteRune(c)
		}
		b.WriteString(idx)
	}
	return b.String()
}

// fields calls set with each field of the mapping n, in file order, and
// reports any other value, an unknown field (known nil: any name goes)
// and a field given twice. A null value counts as not given.
func (b *builder) fields(n *node, w at, known []string, set func(name string, v *node, w at)) {
	if n.kind != mappingNode {
		if known == nil {
			b.bad(w, n.line, "must be a mapping, got %s", n.describe())
		} else {
			b.bad(w, n.line, "must be a mapping of fields (%s), got %s", strings.Join(known, ", "), n.describe())
		}
		return
	}
	seen := map[string]int{}
	for _, e := range n.entries {
		fw := w.in(e.key)
		if first, ok := seen[e.key]; ok {
			b.bad(fw, e.line, "given twice (first on line %d)", first)
			continue
		}
		seen[e.key] = e.line
		if known != nil && !slices.Contains(known, e.key) {
			b.bad(fw, e.line, "unknown field (%s)", strings.Join(known, ", "))
			continue
		}
		b.lines.set(fw, e.line)
		if e.val.kind == scalarNode && e.val.typ == nullScalar {
			continue
		}
		set(e.key, e.val, fw)
	}
}

// describe says what n is, for messages: "5.5", "\"5\"", "a list".
func (n *node) describe() string {
	switch {
	case n.kind == mappingNode:
		return "a mapping"
	case n.kind == listNode:
		return "a list"
	case n.typ == stringScalar:
		return strconv.Quote(n.text)
	case n.typ == nullScalar:
		return "null"
	}
	return n.text
}

func (b *builder) list(n *node, w at) []*node {
	if n.kind != listNode {
		b.bad(w, n.line, "must be a list, got %s", n.describe())
		return nil
	}
	for i, item := range n.items {
		b.lines.set(w.index(i), item.line)
	}
	return n.items
}

func (b *builder) str(n *node, w at) string {
	if n.kind == scalarNode && (n.typ == stringScalar || n.loose) {
		return n.text
	}
	b.bad(w, n.line, "must be a string, got %s", n.describe())
	return ""
}

func (b *builder) boolean(n *node, w at) bool {
	if n.kind == scalarNode && n.typ == boolScalar {
		return n.truth
	}
	b.bad(w, n.line, "must be true or false, got %s", n.describe())
	return false
}

// integer returns n as an int and true, or reports it and returns false
// and its nearest int, so validation can still check the other fields.
func (b *builder) integer(n *node, w at) (int, bool) {
	if n.kind != scalarNode || n.typ != numberScalar {
		b.bad(w, n.line, "must be a whole number, got %s", n.describe())
		return 0, false
	}
	if i, err := strconv.ParseInt(n.num, 10, 0); err == nil {
		return int(i), true
	}
	f, err := strconv.ParseFloat(n.num, 64)
	switch {
	case err == nil && (math.IsNaN(f) || math.IsInf(f, 0)), err != nil && !math.IsInf(f, 0): // .nan, .inf, 1e-400
		b.bad(w, n.line, "must be a whole number, got %s", n.text)
		return 0, false
	case math.IsInf(f, 0) || f < math.MinInt || f >= -math.MinInt:
		b.bad(w, n.line, "out of range: %s", n.text)
		return 0, false
	case f != math.Trunc(f):
		b.bad(w, n.line, "must be a whole number, got %s", n.text)
		return int(f), false
	}
	return int(f), true // 5.0, 1e3
}

func (b *builder) duration(n *node, w at) time.Duration {
	if n.kind == scalarNode && (n.typ == stringScalar || n.loose) {
		if d, err := time.ParseDuration(n.text); err == nil {
			return d
		}
	}
	b.bad(w, n.line, "not a duration (such as 30s, 5m, 1h): %s", n.describe())
	return 0
}

// policy builds the document's policy: its rules, then its presets'.
func (b *builder) policy(n *node) throttle.Policy {
	var p throttle.Policy
	var rules, presets []*node
	var presetsAt at
	b.fields(n, at{rule: -1}, documentFields, func(name string, v *node, w at) {
		switch name {
		case "presets":
			presets, presetsAt = b.list(v, w), w
		case "instances":
			p.Instances, _ = b.integer(v, w)
		case "on_store_failure":
			p.OnStoreFailure = b.failureMode(v, w)
		case "refuse_unmatched":
			p.RefuseUnmatched = b.boolean(v, w)
		case "rules":
			rules = b.list(v, w)
		}
	})
	for i, item := range rules {
		p.Rules = append(p.Rules, b.rule(i, item))
	}
	for i, item := range presets {
		w := presetsAt.index(i)
		name := b.str(item, w)
		rules, ok := Presets[name]
		switch {
		case ok:
			p.Rules = append(p.Rules, rules()...)
		case name != "" || item.typ == stringScalar:
			b.bad(w, item.line, "unknown preset %q (%s)", name, presetNames())
		}
	}
	return p
}

func (b *builder) rule(i int, n *node) throttle.Rule {
	w := at{rule: i, id: fmt.Sprintf("#%d", i)}
	for _, e := range n.entries {
		if e.key == "name" {
			if v := e.val; v.kind == scalarNode && (v.typ == stringScalar || v.loose) && v.text != "" {
				w.id = v.text
			}
			break
		}
	}
	b.ids = append(b.ids, w.id)
	b.lines.set(w, n.line)
	var r throttle.Rule
	var cost, costs *node
	var costAt, costsAt at
	b.fields(n, w, ruleFields, func(name string, v *node, w at) {
		switch name {
		case "name":
			r.Name = b.str(v, w)
		case "host":
			r.Host = b.str(v, w)
		case "method":
			r.Method = b.str(v, w)
		case "path":
			r.Path = b.str(v, w)
		case "scope":
			r.Scope = b.str(v, w)
		case "wait":
			r.Wait = b.waiter(v, w)
		case "cost":
			cost, costAt = v, w
		case "cost_by_method":
			costs, costsAt = v, w
		case "shadow":
			r.Shadow = b.boolean(v, w)
		case "on_store_failure":
			r.OnStoreFailure = b.failureMode(v, w)
		case "limits":
			for j, item := range b.list(v, w) {
				r.Limits = append(r.Limits, b.limit(item, w.index(j)))
			}
		case "learn":
			r.Learn = b.learning(v, w)
		case "retry":
			r.Retry = b.retry(v, w)
		}
	})
	switch {
	case cost != nil && costs != nil:
		b.bad(costAt, cost.line, "give cost or cost_by_method, not both")
	case cost != nil:
		if c, ok := b.integer(cost, costAt); ok {
			if c < 1 {
				b.bad(costAt, cost.line, "must be at least 1, got %d", c)
			}
			r.Cost = throttle.CostByMethod(c, nil)
		}
	case costs != nil:
		def, byMethod := 1, map[string]int{}
		b.fields(costs, costsAt, nil, func(method string, v *node, w at) {
			c, ok := b.integer(v, w)
			switch {
			case !ok:
			case c < 1:
				b.bad(w, v.line, "must be at least 1, got %d", c)
			case method == "default":
				def = c
			default:
				byMethod[strings.ToUpper(method)] = c
			}
		})
		r.Cost = throttle.CostByMethod(def, byMethod)
	}
	return r
}

func (b *builder) limit(n *node, w at) throttle.Limit {
	var l throttle.Limit
	perGiven := false
	b.fields(n, w, limitFields, func(name string, v *node, w at) {
		switch name {
		case "name":
			l.Name = b.str(v, w)
		case "rate":
			l.Rate, _ = b.integer(v, w)
		case "per":
			l.Per, perGiven = b.duration(v, w), true
		case "burst":
			l.Burst, _ = b.integer(v, w)
		case "algorithm":
			l.Algorithm = b.algorithm(v, w)
		case "key":
			l.Key = b.key(v, w)
		}
	})
	if n.kind == mappingNode && !perGiven {
		b.bad(w.in("per"), n.line, "missing: give a duration such as 1m or 30m")
	}
	return l
}

func (b *builder) learning(n *node, w at) throttle.Learning {
	var l throttle.Learning
	b.fields(n, w, learnFields, func(name string, v *node, w at) {
		switch name {
		case "off":
			l.Off = b.boolean(v, w)
		case "max_pause":
			l.MaxPause = b.duration(v, w)
		case "default_pause":
			l.DefaultPause = b.duration(v, w)
		case "jitter":
			if v.kind == scalarNode && v.text == "off" {
				l.Jitter = -1
			} else {
				l.Jitter = b.duration(v, w)
			}
		case "sync":
			l.Sync = b.str(v, w)
		case "sync_resource":
			l.SyncResource = b.str(v, w)
		case "pause_by":
			l.PauseBy = b.str(v, w)
		}
	})
	return l
}

func (b *builder) retry(n *node, w at) throttle.Retry {
	var r throttle.Retry
	b.fields(n, w, retryFields, func(name string, v *node, w at) {
		switch name {
		case "max":
			r.Max, _ = b.integer(v, w)
		case "max_wait":
			r.MaxWait = b.duration(v, w)
		}
	})
	return r
}

// algorithm reads one of the names [quota.ParseAlgorithm] knows; none
// is GCRA.
func (b *builder) algorithm(n *node, w at) throttle.Algorithm {
	return enum(b, n, w, "algorithm", throttle.GCRA, quota.ParseAlgorithm)
}

// failureMode reads one of the names [throttle.ParseFailureMode] knows;
// none is FailDefault.
func (b *builder) failureMode(n *node, w at) throttle.FailureMode {
	return enum(b, n, w, "failure mode", throttle.FailDefault, throttle.ParseFailureMode)
}

// enum reads one of the names parse knows, or none (zero); a name it
// does not know is reported with the ones it does.
func enum[T interface {
	~int
	String() string
}](b *builder, n *node, w at, what string, zero T, parse func(string) (T, error)) T {
	s := b.str(n, w)
	if s == "" {
		return zero
	}
	v, err := parse(s)
	if err != nil {
		b.bad(w, n.line, "unknown %s %q (%s)", what, s, names(parse))
	}
	return v
}

// names lists what parse accepts: the names of 0, 1, 2, ... up to the
// first it refuses.
func names[T interface {
	~int
	String() string
}](parse func(string) (T, error)) string {
	var all []string
	for v := T(0); ; v++ {
		if _, err := parse(v.String()); err != nil {
			return strings.Join(all, ", ")
		}
		all = append(all, v.String())
	}
}

func (b *builder) waiter(n *node, w at) throttle.Waiter {
	switch s := strings.TrimSpace(b.str(n, w)); {
	case s == "":
		return nil // the default: block
	case s == "block":
		return waiters.Block()
	case s == "fail-fast":
		return waiters.FailFast()
	case strings.HasPrefix(s, "up-to "):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(s, "up-to ")))
		if err != nil || d <= 0 {
			b.bad(w, n.line, "up-to needs a positive duration, as in \"up-to 30s\": %q", s)
			return nil
		}
		return waiters.UpTo(d)
	default:
		b.bad(w, n.line, "unknown waiter %q (block, fail-fast, up-to DURATION)", s)
		return nil
	}
}

func (b *builder) key(n *node, w at) throttle.KeyFunc {
	s := b.str(n, w)
	k, err := keyFunc(s)
	if err != nil {
		b.bad(w, n.line, "%v", err)
	}
	return k
}

func keyFunc(s string) (throttle.KeyFunc, error) {
	if s == "" {
		return nil, nil
	}
	if rest, ok := strings.CutPrefix(s, "hash:"); ok {
		k, err := keyFunc(rest)
		if err != nil || k == nil {
			return nil, fmt.Errorf("hash: needs a key after it: %q", s)
		}
		return throttle.HashKey(k), nil
	}
	kind, arg, ok := strings.Cut(s, ":")
	if !ok || arg == "" {
		return nil, fmt.Errorf("want KIND:NAME (context, header, path, query, body, constant), got %q", s)
	}
	switch kind {
	case "context":
		return throttle.KeyFromContext(arg), nil
	case "header":
		return throttle.KeyFromHeader(arg), nil
	case "path":
		return throttle.KeyFromPath(arg), nil
	case "query":
		return throttle.KeyFromQuery(arg), nil
	case "body":
		return throttle.KeyFromBody(arg), nil
	case "constant":
		return throttle.ConstantKey(arg), nil
	}
	return nil, fmt.Errorf("unknown key kind %q (context, header, path, query, body, constant)", kind)
}
