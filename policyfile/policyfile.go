// Package policyfile loads a [throttle.Policy] from YAML or JSON, so that
// per-host quotas can change without a rebuild. A file is validated the
// same way as a policy built in code ([throttle.Policy.Validate]), and
// every problem is reported with the file, the line, the rule and the
// field.
//
//	instances: 4                  # instances sharing the store (local fallback share)
//	on_store_failure: local       # local | open | closed
//	refuse_unmatched: false
//	rules:
//	  - name: slack-notify
//	    host: hooks.slack.com
//	    method: POST
//	    path: /services/{path...}
//	    wait: fail-fast           # block | fail-fast | up-to 30s
//	    limits:
//	      - {name: global, rate: 100, per: 30m}
//	      - {name: category, rate: 10, per: 30m, key: "context:category", algorithm: sliding-log}
//
// presets: [slack, github] appends the rules of those presets (with their
// default options; see [Presets]) after the file's own rules, so the
// file's rules take precedence.
//
// Rule fields: name, host, method, path, scope, wait, cost (a number),
// cost_by_method ({default: 5, GET: 1}), shadow, on_store_failure, limits,
// learn (off, max_pause, default_pause, jitter, sync, sync_resource,
// pause_by) and retry (max, max_wait). Limit fields: name, rate, per (a Go
// duration: 30m, 1h, 500ms), burst, algorithm (gcra, fixed-window,
// sliding-log, sliding-window, concurrency) and key, one of
// "context:NAME", "header:NAME" (values of secret-bearing headers are
// hashed), "path:WILDCARD", "query:NAME", "body:FIELD", "constant:VALUE",
// each optionally prefixed "hash:" to hash the value. Unknown fields are
// errors, so a typo does not silently drop a limit.
//
// A [Reloader] serves requests with the file's policy and takes up a new
// version of the file ([Reloader.Reload], or [Reloader.Watch] to poll)
// without dropping requests; the store, and so what was charged, carries
// over.
package policyfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/slackquota"
	"github.com/quotakit/throttle/waiters"
)

// Presets are the presets a file can name, each giving its rules with the
// preset's default options. Add your own before loading files.
var Presets = map[string]func() []throttle.Rule{
	"slack":  func() []throttle.Rule { return slackquota.Rules(slackquota.Options{}) },
	"github": func() []throttle.Rule { return githubquota.Rules(githubquota.Options{}) },
}

func presetNames() string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// An Error reports one problem in a policy file. It matches
// [throttle.ErrInvalidPolicy] with errors.Is, and unwraps to the
// underlying problem (a *throttle.PolicyError for what validation found).
type Error struct {
	// File is the file's name as given to Load.
	File string
	// Line is the 1-based line of the problem, or 0 when unknown.
	Line int
	// Rule is the rule's name (or "#N" when it has none); empty for
	// policy-wide problems.
	Rule string
	// Field is the field at fault, e.g. "limits[1].per".
	Field string
	// Err says what is wrong.
	Err error
}

// Error describes the problem as file:line: rule: field: what.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Rule != "" {
		fmt.Fprintf(&b, ": rule %s", e.Rule)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": %s", e.Field)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

// Unwrap returns the underlying problem.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is [throttle.ErrInvalidPolicy].
func (e *Error) Is(target error) bool { return target == throttle.ErrInvalidPolicy }

// LoadFile reads and loads the policy file at path.
func LoadFile(path string) (throttle.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return throttle.Policy{}, fmt.Errorf("policyfile: %w", err)
	}
	return Load(path, data)
}

// Load parses data, the YAML or JSON policy file called name (used in
// errors only), and returns the policy, validated. All problems found are
// returned, joined ([errors.Join]); each is an [*Error].
func Load(name string, data []byte) (throttle.Policy, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("empty file")
		}
		return throttle.Policy{}, &Error{File: name, Line: yamlLine(err), Err: err}
	}
	var f file
	if err := decodeStrict(&root, &f); err != nil {
		return throttle.Policy{}, &Error{File: name, Line: yamlLine(err), Err: err}
	}
	b := builder{name: name, lines: fieldLines(&root)}
	p := b.policy(f)
	if len(b.errs) == 0 {
		if err := p.Validate(); err != nil {
			b.fromValidation(err, f)
		}
	}
	if len(b.errs) > 0 {
		return throttle.Policy{}, errors.Join(b.errs...)
	}
	return p, nil
}

// decodeStrict decodes n into v, refusing unknown fields.
func decodeStrict(n *yaml.Node, v any) error {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	if err := enc.Encode(n); err != nil {
		return err
	}
	dec := yaml.NewDecoder(&buf)
	dec.KnownFields(true)
	return dec.Decode(v)
}

// yamlLine finds "line N" in a yaml error, or 0.
func yamlLine(err error) int {
	s := err.Error()
	i := strings.Index(s, "line ")
	if i < 0 {
		return 0
	}
	j := i + len("line ")
	k := j
	for k < len(s) && s[k] >= '0' && s[k] <= '9' {
		k++
	}
	n, _ := strconv.Atoi(s[j:k])
	return n
}

// file is the document's schema.
type file struct {
	Presets         []string `yaml:"presets"`
	Instances       int      `yaml:"instances"`
	OnStoreFailure  string   `yaml:"on_store_failure"`
	RefuseUnmatched bool     `yaml:"refuse_unmatched"`
	Rules           []rule   `yaml:"rules"`
}

type rule struct {
	Name           string         `yaml:"name"`
	Host           string         `yaml:"host"`
	Method         string         `yaml:"method"`
	Path           string         `yaml:"path"`
	Scope          string         `yaml:"scope"`
	Wait           string         `yaml:"wait"`
	Cost           int            `yaml:"cost"`
	CostByMethod   map[string]int `yaml:"cost_by_method"`
	Shadow         bool           `yaml:"shadow"`
	OnStoreFailure string         `yaml:"on_store_failure"`
	Limits         []limit        `yaml:"limits"`
	Learn          learning       `yaml:"learn"`
	Retry          retry          `yaml:"retry"`
}

type limit struct {
	Name      string `yaml:"name"`
	Rate      int    `yaml:"rate"`
	Per       string `yaml:"per"`
	Burst     int    `yaml:"burst"`
	Algorithm string `yaml:"algorithm"`
	Key       string `yaml:"key"`
}

type learning struct {
	Off          bool   `yaml:"off"`
	MaxPause     string `yaml:"max_pause"`
	DefaultPause string `yaml:"default_pause"`
	Jitter       string `yaml:"jitter"`
	Sync         string `yaml:"sync"`
	SyncResource string `yaml:"sync_resource"`
	PauseBy      string `yaml:"pause_by"`
}

type retry struct {
	Max     int    `yaml:"max"`
	MaxWait string `yaml:"max_wait"`
}

// builder turns a decoded file into a Policy, collecting errors.
type builder struct {
	name  string
	lines lineIndex
	errs  []error
}

func (b *builder) bad(rule int, ruleName, field string, err error) {
	b.errs = append(b.errs, &Error{File: b.name, Line: b.lines.line(rule, field), Rule: ruleName, Field: field, Err: err})
}

func ruleID(i int, r rule) string {
	if r.Name != "" {
		return r.Name
	}
	return fmt.Sprintf("#%d", i)
}

func (b *builder) policy(f file) throttle.Policy {
	p := throttle.Policy{Instances: f.Instances, RefuseUnmatched: f.RefuseUnmatched}
	var err error
	if p.OnStoreFailure, err = failureMode(f.OnStoreFailure); err != nil {
		b.bad(-1, "", "on_store_failure", err)
	}
	for i, fr := range f.Rules {
		p.Rules = append(p.Rules, b.rule(i, fr))
	}
	for i, name := range f.Presets {
		rules, ok := Presets[name]
		if !ok {
			b.bad(-1, "", fmt.Sprintf("presets[%d]", i), fmt.Errorf("unknown preset %q (%s)", name, presetNames()))
			continue
		}
		p.Rules = append(p.Rules, rules()...)
	}
	return p
}

func (b *builder) rule(i int, fr rule) throttle.Rule {
	id := ruleID(i, fr)
	r := throttle.Rule{Name: fr.Name, Host: fr.Host, Method: fr.Method, Path: fr.Path, Scope: fr.Scope, Shadow: fr.Shadow}
	var err error
	if r.Wait, err = waiter(fr.Wait); err != nil {
		b.bad(i, id, "wait", err)
	}
	if r.OnStoreFailure, err = failureMode(fr.OnStoreFailure); err != nil {
		b.bad(i, id, "on_store_failure", err)
	}
	switch {
	case fr.Cost != 0 && fr.CostByMethod != nil:
		b.bad(i, id, "cost", errors.New("give cost or cost_by_method, not both"))
	case fr.Cost < 0:
		b.bad(i, id, "cost", fmt.Errorf("must be at least 1, got %d", fr.Cost))
	case fr.Cost > 0:
		c := fr.Cost
		r.Cost = throttle.CostByMethod(c, nil)
	case fr.CostByMethod != nil:
		def, ok := fr.CostByMethod["default"]
		if !ok {
			def = 1
		}
		costs := map[string]int{}
		for m, c := range fr.CostByMethod {
			if c < 1 {
				b.bad(i, id, "cost_by_method."+m, fmt.Errorf("must be at least 1, got %d", c))
			}
			if m != "default" {
				costs[strings.ToUpper(m)] = c
			}
		}
		r.Cost = throttle.CostByMethod(def, costs)
	}
	for j, fl := range fr.Limits {
		r.Limits = append(r.Limits, b.limit(i, id, j, fl))
	}
	r.Learn = throttle.Learning{Off: fr.Learn.Off, Sync: fr.Learn.Sync, SyncResource: fr.Learn.SyncResource, PauseBy: fr.Learn.PauseBy}
	r.Learn.MaxPause = b.duration(i, id, "learn.max_pause", fr.Learn.MaxPause)
	r.Learn.DefaultPause = b.duration(i, id, "learn.default_pause", fr.Learn.DefaultPause)
	if fr.Learn.Jitter == "off" {
		r.Learn.Jitter = -1
	} else {
		r.Learn.Jitter = b.duration(i, id, "learn.jitter", fr.Learn.Jitter)
	}
	r.Retry = throttle.Retry{Max: fr.Retry.Max, MaxWait: b.duration(i, id, "retry.max_wait", fr.Retry.MaxWait)}
	if fr.Retry.Max < 0 {
		b.bad(i, id, "retry.max", fmt.Errorf("must not be negative, got %d", fr.Retry.Max))
	}
	return r
}

func (b *builder) limit(i int, id string, j int, fl limit) throttle.Limit {
	field := fmt.Sprintf("limits[%d]", j)
	l := throttle.Limit{Name: fl.Name, Rate: fl.Rate, Burst: fl.Burst}
	if fl.Per == "" {
		b.bad(i, id, field+".per", errors.New("missing: give a duration such as 1m or 30m"))
	} else {
		l.Per = b.duration(i, id, field+".per", fl.Per)
	}
	var err error
	if l.Algorithm, err = algorithm(fl.Algorithm); err != nil {
		b.bad(i, id, field+".algorithm", err)
	}
	if l.Key, err = keyFunc(fl.Key); err != nil {
		b.bad(i, id, field+".key", err)
	}
	return l
}

func (b *builder) duration(i int, id, field, s string) time.Duration {
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.bad(i, id, field, fmt.Errorf("not a duration (such as 30s, 5m, 1h): %q", s))
		return 0
	}
	return d
}

// fromValidation reports what Policy.Validate found, with the line of the
// field where the file has it.
func (b *builder) fromValidation(err error, f file) {
	var pes []*throttle.PolicyError
	collectPolicyErrors(err, &pes)
	if len(pes) == 0 {
		b.errs = append(b.errs, &Error{File: b.name, Err: err})
		return
	}
	for _, pe := range pes {
		idx := -1
		for i, r := range f.Rules {
			if ruleID(i, r) == pe.Rule {
				idx = i // the last one: a duplicate name is reported on the later rule
			}
		}
		field := fieldName(pe.Field)
		b.errs = append(b.errs, &Error{File: b.name, Line: b.lines.line(idx, field), Rule: pe.Rule, Field: field, Err: pe})
	}
}

func collectPolicyErrors(err error, out *[]*throttle.PolicyError) {
	var pe *throttle.PolicyError
	if errors.As(err, &pe) && err == error(pe) {
		*out = append(*out, pe)
		return
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			collectPolicyErrors(e, out)
		}
		return
	}
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
		b.WriteString(snake(part))
		b.WriteString(idx)
	}
	return b.String()
}

func snake(s string) string {
	var b strings.Builder
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			c += 'a' - 'A'
		}
		b.WriteRune(c)
	}
	return b.String()
}

func waiter(s string) (throttle.Waiter, error) {
	switch s = strings.TrimSpace(s); {
	case s == "":
		return nil, nil // the default: block
	case s == "block":
		return waiters.Block(), nil
	case s == "fail-fast":
		return waiters.FailFast(), nil
	case strings.HasPrefix(s, "up-to "):
		d, err := time.ParseDuration(strings.TrimSpace(strings.TrimPrefix(s, "up-to ")))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("up-to needs a positive duration, as in \"up-to 30s\": %q", s)
		}
		return waiters.UpTo(d), nil
	}
	return nil, fmt.Errorf("unknown waiter %q (block, fail-fast, up-to DURATION)", s)
}

func failureMode(s string) (throttle.FailureMode, error) {
	switch s {
	case "":
		return throttle.FailDefault, nil
	case "local":
		return throttle.FailLocal, nil
	case "open":
		return throttle.FailOpen, nil
	case "closed":
		return throttle.FailClosed, nil
	}
	return throttle.FailDefault, fmt.Errorf("unknown failure mode %q (local, open, closed)", s)
}

func algorithm(s string) (throttle.Algorithm, error) {
	switch s {
	case "", "gcra":
		return throttle.GCRA, nil
	case "fixed-window":
		return throttle.FixedWindow, nil
	case "sliding-log":
		return throttle.SlidingLog, nil
	case "sliding-window":
		return throttle.SlidingWindow, nil
	case "concurrency":
		return throttle.Concurrency, nil
	}
	return throttle.GCRA, fmt.Errorf("unknown algorithm %q (gcra, fixed-window, sliding-log, sliding-window, concurrency)", s)
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
