package policyfile

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/internal/pattern"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/waiters"
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

	pathKeys []pathKey // the path keys of the rule being read
}

// A pathKey is a "path:NAME" key of a limit, checked against its rule's
// path once the rule is read.
type pathKey struct {
	w    at
	line int
	name string
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

// field is a field a mapping may give: its name in the file and what
// reads its value. A mapping's table lists its fields in the order the
// docs list them, which is also the order messages name them in.
type field struct {
	name string
	read func(v *node, w at)
}

// mapping reads the mapping n by table: each field it gives is read by
// the reader of that name. It reports what [builder.fields] reports.
func (b *builder) mapping(n *node, w at, table []field) {
	names := make([]string, len(table))
	for i, f := range table {
		names[i] = f.name
	}
	b.fields(n, w, names, func(name string, v *node, w at) {
		table[slices.Index(names, name)].read(v, w)
	})
}

// into returns a field reader that stores what read makes of the value
// in dst.
func into[T any](dst *T, read func(*node, at) T) func(*node, at) {
	return func(v *node, w at) { *dst = read(v, w) }
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

// whole is [builder.integer] for a field whose range validation checks.
func (b *builder) whole(n *node, w at) int {
	i, _ := b.integer(n, w)
	return i
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
	b.mapping(n, at{rule: -1}, []field{
		{"presets", func(v *node, w at) { presets, presetsAt = b.list(v, w), w }},
		{"instances", into(&p.Instances, b.whole)},
		{"on_store_failure", into(&p.OnStoreFailure, b.failureMode)},
		{"refuse_unmatched", into(&p.RefuseUnmatched, b.boolean)},
		{"classes", func(v *node, w at) {
			for i, item := range b.list(v, w) {
				p.Classes = append(p.Classes, b.class(item, w.index(i)))
			}
		}},
		{"rules", func(v *node, w at) { rules = b.list(v, w) }},
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
	var c costFields
	b.pathKeys = b.pathKeys[:0]
	b.mapping(n, w, []field{
		{"name", into(&r.Name, b.str)},
		{"host", into(&r.Host, b.str)},
		{"method", into(&r.Method, b.str)},
		{"path", into(&r.Path, b.str)},
		{"scope", into(&r.Scope, b.str)},
		{"wait", into(&r.Wait, b.waiter)},
		{"cost", c.readCost},
		{"cost_by_method", c.readByMethod},
		{"shadow", into(&r.Shadow, b.boolean)},
		{"on_store_failure", into(&r.OnStoreFailure, b.failureMode)},
		{"limits", func(v *node, w at) {
			for j, item := range b.list(v, w) {
				r.Limits = append(r.Limits, b.limit(item, w.index(j)))
			}
		}},
		{"learn", into(&r.Learn, b.learning)},
		{"retry", into(&r.Retry, b.retry)},
		{"settle_from_json", func(v *node, w at) {
			path := b.str(v, w)
			if path == "" || slices.Contains(strings.Split(path, "."), "") {
				if v.kind == scalarNode && (v.typ == stringScalar || v.loose) {
					b.bad(w, v.line, "must be a dot-separated path of JSON keys, such as data.rateLimit.cost; got %q", path)
				}
				return
			}
			r.Settle = throttle.SettleFromJSON(path)
		}},
		{"class", into(&r.Class, b.str)},
	})
	r.Cost = b.costFunc(c)
	b.checkPathKeys(r.Path)
	return r
}

// checkPathKeys reports each path key of the rule just read whose
// wildcard its path (the rule's path) does not have: every request would
// fail with throttle.ErrMissingKey.
func (b *builder) checkPathKeys(path string) {
	var names []string
	if p, err := pattern.ParsePath(path); err == nil {
		names = p.Wildcards()
	}
	for _, k := range b.pathKeys {
		if !slices.Contains(names, k.name) {
			if path == "" {
				b.bad(k.w, k.line, "path:%s names a wildcard of the rule's path, but the rule has no path; give it one with {%s}", k.name, k.name)
			} else {
				b.bad(k.w, k.line, "path:%s names no wildcard of the rule's path %q (it has %s)", k.name, path, wildcardList(names))
			}
		}
	}
}

// wildcardList names wildcards for a message.
func wildcardList(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return "{" + strings.Join(names, "}, {") + "}"
}

// costFields holds the cost fields of a rule or a limit, read by
// costFunc once the mapping is read.
type costFields struct {
	cost, costs     *node
	costAt, costsAt at
}

func (c *costFields) readCost(v *node, w at)     { c.cost, c.costAt = v, w }
func (c *costFields) readByMethod(v *node, w at) { c.costs, c.costsAt = v, w }

// costFunc returns the cost that c gives: cost (a whole number) or
// cost_by_method (methods to costs, "default" for the others), nil for
// neither.
func (b *builder) costFunc(c costFields) func(*http.Request) int {
	switch {
	case c.cost != nil && c.costs != nil:
		b.bad(c.costAt, c.cost.line, "give cost or cost_by_method, not both")
	case c.cost != nil:
		if n, ok := b.integer(c.cost, c.costAt); ok {
			if n < 1 {
				b.bad(c.costAt, c.cost.line, "must be at least 1, got %d", n)
			}
			return throttle.CostByMethod(n, nil)
		}
	case c.costs != nil:
		def, byMethod := 1, map[string]int{}
		b.fields(c.costs, c.costsAt, nil, func(method string, v *node, w at) {
			n, ok := b.integer(v, w)
			switch {
			case !ok:
			case n < 1:
				b.bad(w, v.line, "must be at least 1, got %d", n)
			case method == "default":
				def = n
			default:
				byMethod[strings.ToUpper(method)] = n
			}
		})
		return throttle.CostByMethod(def, byMethod)
	}
	return nil
}

// match reads a limit's match: method (one, or a list) and path (a
// pattern as a rule's path), ANDed; it must give at least one.
func (b *builder) match(n *node, w at) func(*http.Request) bool {
	var methods []string
	var path *pattern.Path
	b.mapping(n, w, []field{
		{"method", func(v *node, w at) {
			items := []*node{v}
			if v.kind == listNode {
				items = b.list(v, w)
			}
			for _, item := range items {
				if m := b.str(item, w); m != "" {
					methods = append(methods, strings.ToUpper(m))
				}
			}
		}},
		{"path", func(v *node, w at) {
			p, err := pattern.ParsePath(b.str(v, w))
			if err != nil {
				b.bad(w, v.line, "%v", err)
				return
			}
			path = p
		}},
	})
	if n.kind == mappingNode && methods == nil && path == nil {
		b.bad(w, n.line, "give method or path")
	}
	return func(r *http.Request) bool {
		if methods != nil && !slices.Contains(methods, r.Method) {
			return false
		}
		if path != nil {
			_, _, ok := path.Match(r.URL)
			return ok
		}
		return true
	}
}

func (b *builder) limit(n *node, w at) throttle.Limit {
	var l throttle.Limit
	var c costFields
	perGiven := false
	b.mapping(n, w, []field{
		{"name", into(&l.Name, b.str)},
		{"rate", into(&l.Rate, b.whole)},
		{"per", func(v *node, w at) { l.Per, perGiven = b.duration(v, w), true }},
		{"burst", into(&l.Burst, b.whole)},
		{"algorithm", into(&l.Algorithm, b.algorithm)},
		{"phase", into(&l.Phase, b.duration)},
		{"key", into(&l.Key, b.key)},
		{"match", into(&l.Match, b.match)},
		{"cost", c.readCost},
		{"cost_by_method", c.readByMethod},
		{"tenant", into(&l.Tenant, b.key)},
	})
	if n.kind == mappingNode && !perGiven {
		b.bad(w.in("per"), n.line, "missing: give a duration such as 1m or 30m")
	}
	l.Cost = b.costFunc(c)
	return l
}

// class reads a priority class: its name and headroom.
func (b *builder) class(n *node, w at) throttle.Class {
	var c throttle.Class
	b.mapping(n, w, []field{
		{"name", into(&c.Name, b.str)},
		{"headroom", into(&c.Headroom, b.fraction)},
	})
	return c
}

// fraction reads a share: a number (0.2) or a percentage ("20%").
// Validation checks its range.
func (b *builder) fraction(n *node, w at) float64 {
	if n.kind == scalarNode {
		text, div := n.num, 1.0
		if n.typ != numberScalar {
			text, div = strings.TrimSuffix(n.text, "%"), 100
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(text), 64); err == nil && (div == 1 || text != n.text) {
			return f / div
		}
	}
	b.bad(w, n.line, "must be a fraction (0.2) or a percentage (\"20%%\"), got %s", n.describe())
	return 0
}

func (b *builder) learning(n *node, w at) throttle.Learning {
	var l throttle.Learning
	b.mapping(n, w, []field{
		{"off", into(&l.Off, b.boolean)},
		{"max_pause", into(&l.MaxPause, b.duration)},
		{"default_pause", into(&l.DefaultPause, b.duration)},
		{"jitter", func(v *node, w at) {
			if v.kind == scalarNode && v.text == "off" {
				l.Jitter = -1
			} else {
				l.Jitter = b.duration(v, w)
			}
		}},
		{"sync", into(&l.Sync, b.str)},
		{"sync_resource", into(&l.SyncResource, b.str)},
		{"anchor", into(&l.Anchor, b.str)},
		{"anchor_tolerance", into(&l.AnchorTolerance, b.duration)},
		{"anchor_grid", into(&l.AnchorGrid, b.boolean)},
		{"pause_by", into(&l.PauseBy, b.str)},
	})
	return l
}

func (b *builder) retry(n *node, w at) throttle.Retry {
	var r throttle.Retry
	b.mapping(n, w, []field{
		{"max", into(&r.Max, b.whole)},
		{"max_wait", into(&r.MaxWait, b.duration)},
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
	} else {
		inner := s
		for ok := true; ok; inner, ok = strings.CutPrefix(inner, "hash:") {
		}
		if name, ok := strings.CutPrefix(inner, "path:"); ok {
			b.pathKeys = append(b.pathKeys, pathKey{w: w, line: n.line, name: name})
		}
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
