// Package policyfile loads a [throttle.Policy] from YAML or JSON, so that
// per-host quotas can change without a rebuild. A file is validated the
// same way as a policy built in code ([throttle.Policy.Validate]), and
// every problem is reported at once, each once, with the file, the line,
// the rule and the field, as the file names them:
//
//	policy.yaml:12: rule "slack-notify": limits[0].rate: must be positive, got 0
//
// A file whose name ends in .json is read as strict JSON: a trailing
// comma, a comment or a field given twice is an error. Any other file is
// read as YAML (anchors, aliases and << merge keys work).
//
//	instances: 4                  # instances sharing the store (local fallback share)
//	on_store_failure: local       # default | local | open | closed
//	refuse_unmatched: false
//	classes:                      # priority classes; headroom: a fraction or "20%"
//	  - {name: interactive}
//	  - {name: bulk, headroom: 20%}
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
// Rule fields: name, host, method, path, scope, wait, cost (a whole
// number), cost_by_method ({default: 5, GET: 1}), shadow,
// on_store_failure, limits, learn (off, max_pause, default_pause, jitter,
// sync, sync_resource, anchor, anchor_tolerance, anchor_grid, pause_by), retry (max,
// max_wait), settle_from_json (the JSON path of the cost an answer
// reports, such as data.rateLimit.cost: [throttle.SettleFromJSON]; cost is
// then the estimate charged until the answer comes) and class (a name
// from classes). Limit fields: name, rate and burst (whole numbers: 5.5
// is an error, not 5), per (a Go duration: 30m, 1h, 500ms), algorithm
// (the names of [throttle.Algorithm.String]: gcra, fixed-window,
// sliding-log, sliding-window, concurrency), phase (a duration: where the
// windows of a fixed or sliding window start, 8h for a day that starts at
// 08:00 UTC), key, one of "context:NAME",
// "header:NAME" (values of secret-bearing headers are hashed),
// "path:WILDCARD", "query:NAME", "body:FIELD", "constant:VALUE", each
// optionally prefixed "hash:" to hash the value, and tenant, a key of the
// same form that shares the limit fairly among the tenants it names. Failure modes are the
// names of [throttle.FailureMode.String]. Unknown fields are errors, so a
// typo does not silently drop a limit.
//
// A [Reloader] serves requests with the file's policy and takes up a new
// version of the file ([Reloader.Reload], or [Reloader.Watch] to poll)
// without dropping requests; the store, and so what was charged, carries
// over.
package policyfile

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/presets/githubquota"
	"github.com/quotakit/throttle/presets/slackquota"
)

// Presets are the presets a file can name, each giving its rules with the
// preset's default options. Add your own before loading files.
var Presets = map[string]func() []throttle.Rule{
	// The zero Options of both are valid: Rules gives no error.
	"slack":  func() []throttle.Rule { r, _ := slackquota.Rules(slackquota.Options{}); return r },
	"github": func() []throttle.Rule { r, _ := githubquota.Rules(githubquota.Options{}); return r },
}

func presetNames() string {
	names := make([]string, 0, len(Presets))
	for n := range Presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// LoadFile reads and loads the policy file at path.
func LoadFile(path string) (throttle.Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return throttle.Policy{}, fmt.Errorf("policyfile: %w", err)
	}
	return Load(path, data)
}

// Load parses data, the policy file called name, and returns the policy,
// validated. A file with no rules and no presets is an error: it would
// limit nothing. A name ending in .json is read as JSON, strictly (no
// trailing commas, no comments, each field once); any other name as YAML.
// All problems found are returned at once, joined ([errors.Join]) in the
// order of their lines; each is an [*Error].
func Load(name string, data []byte) (throttle.Policy, error) {
	p, _, err := load(name, data)
	return p, err
}

// load is Load that also returns the builder, whose line index places
// the problems that [throttle.NewTransport] finds (see [Reloader]).
func load(name string, data []byte) (throttle.Policy, *builder, error) {
	b := newBuilder(name)
	root, se := parse(name, data)
	if se != nil {
		return throttle.Policy{}, b, &Error{File: name, Line: se.line, Err: errors.New(se.msg)}
	}
	p := b.policy(root)
	b.validated(p.Validate())
	if len(p.Rules) == 0 && len(b.errs) == 0 {
		// Not an error of a Policy built in code, which may be filled
		// later; a file is the whole policy.
		b.bad(at{rule: -1, field: "rules"}, root.line, "the file has no rules and no presets, so it would limit nothing: give at least one")
	}
	if err := b.err(); err != nil {
		return throttle.Policy{}, b, err
	}
	return p, b, nil
}
