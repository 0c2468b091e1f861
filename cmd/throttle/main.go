// Command throttle checks a policy file, and shows and edits the live
// state of its limits in the Redis that a fleet shares.
//
//	throttle -policy policy.yaml check
//	REDIS_URL=redis://localhost:6379 throttle -policy policy.yaml state
//	throttle state -policy policy.yaml -json
//	throttle -policy policy.yaml reset -rule slack-notify -limit category -key errors
//	throttle -policy policy.yaml clear-pause -rule slack-notify [-key KEY]
//	REDIS_URL='redis://node1:6379?addr=node2:6379' throttle -cluster -policy policy.yaml state
//	REDIS_URL='redis://sentinel1:26379?addr=sentinel2:26379' throttle -sentinel mymaster -policy policy.yaml state
//	throttle -h
//
// check loads the policy file as a transport would (every problem with its
// file:line) and, unless -offline, checks the Redis (address, password,
// client kind, scripts) and that the store can decide every rule. state
// prints, per rule scope, every live counter (limit, key, used, remaining,
// time until full) and every active pause. Keys are shown as stored:
// escaped, with secrets already hashed by the key functions. reset
// forgets what one counter charged; clear-pause ends a pause in Redis
// (instances that learned it keep their local copy until it ends); both
// fail when there is nothing to reset or clear (a wrong key, limit or
// prefix). Flags may come before or after the command; -json prints JSON.
// -h prints the commands and flags and exits 0; a wrong command line
// prints what is wrong and the usage to stderr and exits 2; any other
// failure, nothing to reset or clear among them, exits 1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/policyfile"
	"github.com/quotakit/throttle/quota"
	"github.com/quotakit/throttle/redisstore"
)

func main() {
	// go-redis logs every failed dial; the command reports the error once.
	redis.SetLogger(quiet{})
	err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "throttle:", err)
	}
	os.Exit(exitCode(err))
}

// quiet is a go-redis logger that drops what it is given.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// exitCode is 0 for success (-h too), 2 for a wrong command line and 1
// for any other failure.
func exitCode(err error) int {
	var ue *usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

// A usageError is a wrong command line; it says what is wrong, then the
// usage.
type usageError struct{ problem, usage string }

func (e *usageError) Error() string { return e.problem + "\n" + e.usage }

// A command is one of the commands: its name, what it does, its flags
// (in commandFlags) and which of those it needs.
type command struct {
	name, about string
	flags, need []string
}

var commands = []command{
	{"check", "load the policy file as a transport would and, unless -offline, check the\n" +
		"Redis and that the store can decide every rule", []string{"offline"}, nil},
	{"state", "print, per rule scope, every live counter (limit, key, used, remaining,\n" +
		"time until full) and every active pause", nil, nil},
	{"reset", "forget what one counter charged; fails if it has nothing charged", []string{"rule", "limit", "key"}, []string{"rule", "limit"}},
	{"clear-pause", "end a pause in Redis (instances that learned it keep their local copy\n" +
		"until it ends); fails if there is no such pause", []string{"rule", "key"}, []string{"rule"}},
}

// commandFlags are the commands' flags: placeholder and meaning. A flag
// with no placeholder is a switch.
var commandFlags = map[string][2]string{
	"rule":    {"RULE", "the rule, by name"},
	"limit":   {"LIMIT", "the limit, by name"},
	"key":     {"KEY", "the counter's or pause's key, as state shows it; none for a limit without a key"},
	"offline": {"", "check the policy file only, not the Redis"},
}

// options are the flags every command takes, before or after it.
type options struct {
	policy, prefix, sentinel string
	cluster, json            bool
}

// register adds o's flags to fs, with o's values as their defaults, so
// that the flags after the command keep those given before it.
func (o *options) register(fs *flag.FlagSet) {
	fs.StringVar(&o.policy, "policy", o.policy, "the policy `FILE`: YAML, or JSON if its name ends in .json (required)")
	fs.StringVar(&o.prefix, "prefix", o.prefix, "the store's key `PREFIX`")
	fs.BoolVar(&o.cluster, "cluster", o.cluster, "REDIS_URL names Redis Cluster nodes (redis://node1:6379?addr=node2:6379)")
	fs.StringVar(&o.sentinel, "sentinel", o.sentinel, "the `MASTER` name: REDIS_URL names its Sentinels (redis://s1:26379?addr=s2:26379)")
	fs.BoolVar(&o.json, "json", o.json, "print JSON")
}

// globalFlags are the flags before the command.
func globalFlags() (*flag.FlagSet, *options) {
	o := &options{prefix: redisstore.DefaultPrefix}
	fs := flag.NewFlagSet("throttle", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.register(fs)
	return fs, o
}

// synopsis is the usage of each command, which a wrong command line is
// answered with.
func synopsis() string {
	var b strings.Builder
	for i, c := range commands {
		if i == 0 {
			b.WriteString("usage: ")
		} else {
			b.WriteString("       ")
		}
		b.WriteString("throttle -policy FILE [-prefix PREFIX] [-cluster | -sentinel MASTER] [-json] " + c.name)
		for _, f := range c.flags {
			arg := strings.TrimSpace("-" + f + " " + commandFlags[f][0])
			if !slices.Contains(c.need, f) {
				arg = "[" + arg + "]"
			}
			b.WriteString(" " + arg)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// usage is the help text: the commands, their flags, the flags before
// them and the environment.
func usage() string {
	var b strings.Builder
	b.WriteString(synopsis())
	b.WriteString("\nShows and edits the live state of a policy's limits in the Redis a fleet shares.\n\nCommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %s\n", c.name)
		for _, l := range strings.Split(c.about, "\n") {
			fmt.Fprintf(&b, "        %s\n", l)
		}
	}
	b.WriteString("\nCommand flags:\n")
	for _, f := range []string{"rule", "limit", "key", "offline"} {
		fmt.Fprintf(&b, "  %s\n        %s\n", strings.TrimSpace("-"+f+" "+commandFlags[f][0]), commandFlags[f][1])
	}
	b.WriteString("\nFlags (before or after the command):\n")
	fs, _ := globalFlags()
	fs.VisitAll(func(f *flag.Flag) {
		name, about := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  %s\n        %s", strings.TrimSpace("-"+f.Name+" "+name), about)
		if f.DefValue != "" && f.DefValue != "false" {
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		}
		b.WriteString("\n")
	})
	b.WriteString("  -h, -help\n        print this help\n")
	b.WriteString("\nEnvironment:\n  REDIS_URL\n        the Redis, as go-redis's ParseURL, ParseClusterURL (-cluster) or\n        ParseFailoverURL (-sentinel) reads it (default redis://127.0.0.1:6379)\n")
	return b.String()
}

// run is the command, with its environment passed in for tests. Help
// (-h, -help, or the command help) goes to out; a wrong command line is
// a *usageError.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	bad := func(format string, a ...any) error {
		return &usageError{problem: fmt.Sprintf(format, a...), usage: synopsis() + "Run throttle -h for what each command and flag does."}
	}
	fs, o := globalFlags()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err := io.WriteString(out, usage())
			return err
		}
		return bad("%v", err)
	}
	if fs.NArg() == 0 {
		return bad("no command")
	}
	name := fs.Arg(0)
	if name == "help" {
		_, err := io.WriteString(out, usage())
		return err
	}
	i := slices.IndexFunc(commands, func(c command) bool { return c.name == name })
	if i < 0 {
		return bad("unknown command %q", name)
	}
	cmd := commands[i]
	sub := flag.NewFlagSet(name, flag.ContinueOnError)
	sub.SetOutput(io.Discard)
	o.register(sub)
	given := map[string]*string{}
	offline := false
	for _, f := range cmd.flags {
		if f == "offline" {
			sub.BoolVar(&offline, f, false, commandFlags[f][1])
			continue
		}
		given[f] = sub.String(f, "", commandFlags[f][1])
	}
	if err := sub.Parse(fs.Args()[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err := io.WriteString(out, usage())
			return err
		}
		return bad("%s: %v", name, err)
	}
	if sub.NArg() > 0 {
		return bad("%s: unexpected argument %q", name, sub.Arg(0))
	}
	for _, f := range cmd.need {
		if *given[f] == "" {
			return bad("%s needs -%s", name, f)
		}
	}
	if o.policy == "" {
		return bad("-policy is required")
	}
	if o.cluster && o.sentinel != "" {
		return bad("-cluster and -sentinel exclude each other")
	}

	p, err := policyfile.LoadFile(o.policy)
	if err != nil {
		return err
	}
	if name == "check" && offline {
		return report(out, o.json, checkResult{Policy: o.policy, Rules: len(p.Rules), Redis: "not checked (-offline)"},
			"%s: %d rules, valid; Redis not checked (-offline)\n", o.policy, len(p.Rules))
	}
	client, where, err := newClient(o, getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	defer client.Close()
	s, err := redisstore.New(client, redisstore.WithPrefix(o.prefix))
	if err != nil {
		return err
	}
	err = runOnRedis(ctx, name, s, p, o, given, out)
	if err != nil && strings.HasPrefix(err.Error(), "redisstore: ") {
		// The store's errors (each says "redisstore: ") say which Redis.
		return fmt.Errorf("store at %s: %w", where, err)
	}
	return err
}

// runOnRedis runs the command name, which needs Redis, on s.
func runOnRedis(ctx context.Context, name string, s *redisstore.Store, p throttle.Policy, o *options, given map[string]*string, out io.Writer) error {

	switch name {
	case "check":
		if err := s.Check(ctx); err != nil {
			return err
		}
		if _, err := throttle.NewLimiter(p, throttle.WithStore(s)); err != nil { // its warnings go to stderr
			return err
		}
		return report(out, o.json, checkResult{Policy: o.policy, Rules: len(p.Rules), Redis: "ok"},
			"%s: %d rules, valid; Redis ok, and the store can decide every rule\n", o.policy, len(p.Rules))
	case "reset":
		r, err := findRule(p, *given["rule"])
		if err != nil {
			return err
		}
		li := slices.IndexFunc(r.Limits, func(l throttle.Limit) bool { return l.Name == *given["limit"] })
		if li < 0 {
			return fmt.Errorf("rule %s has no limit %q", r.Name, *given["limit"])
		}
		l := r.Limits[li]
		key := *given["key"]
		if err := live(ctx, s, r, func(st quota.LimitState) bool { return !st.Pause() && st.Limit == l.Name && st.Key == key },
			fmt.Sprintf("limit %s of rule %s has nothing charged to key %q under prefix %q", l.Name, r.Name, key, o.prefix)); err != nil {
			return err
		}
		if err := s.ResetLimit(ctx, scopeOf(r), l.Quota(), key); err != nil {
			return err
		}
		return report(out, o.json, editResult{Command: name, Rule: r.Name, Limit: l.Name, Key: key},
			"reset %s/%s key %q\n", r.Name, l.Name, key)
	case "clear-pause":
		r, err := findRule(p, *given["rule"])
		if err != nil {
			return err
		}
		key := *given["key"]
		if err := live(ctx, s, r, func(st quota.LimitState) bool { return st.Pause() && st.Key == key },
			fmt.Sprintf("rule %s has no pause with key %q under prefix %q", r.Name, key, o.prefix)); err != nil {
			return err
		}
		if err := s.ClearPause(ctx, scopeOf(r), key); err != nil {
			return err
		}
		return report(out, o.json, editResult{Command: name, Rule: r.Name, Key: key},
			"cleared pause of %s key %q\n", r.Name, key)
	}
	return state(ctx, s, p, out, o.json)
}

// errNothing is wrapped when reset or clear-pause finds nothing to act on.
var errNothing = errors.New("nothing matched")

// live fails with errNothing, saying what, unless the state of r's scope
// has an entry that match accepts.
func live(ctx context.Context, s quota.Inspector, r throttle.Rule, match func(quota.LimitState) bool, what string) error {
	var limits []quota.Limit
	for _, l := range r.Limits {
		limits = append(limits, l.Quota())
	}
	states, err := s.Inspect(ctx, scopeOf(r), limits)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(states, match) {
		return nil
	}
	return fmt.Errorf("%w: %s (state shows what is live)", errNothing, what)
}

// newClient returns the client REDIS_URL (url) names: a Cluster client
// for -cluster, a Sentinel-backed one for -sentinel, else a plain one;
// and where it connects, for errors (addresses only, never a password).
func newClient(o *options, url string) (redis.UniversalClient, string, error) {
	unset := ""
	if url == "" {
		url, unset = "redis://127.0.0.1:6379", " (REDIS_URL unset: the default)"
	}
	switch {
	case o.cluster:
		opts, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, "", fmt.Errorf("REDIS_URL: %w", err)
		}
		return redis.NewClusterClient(opts), "Cluster nodes " + strings.Join(opts.Addrs, ", ") + unset, nil
	case o.sentinel != "":
		opts, err := redis.ParseFailoverURL(url)
		if err != nil {
			return nil, "", fmt.Errorf("REDIS_URL: %w", err)
		}
		opts.MasterName = o.sentinel
		return redis.NewFailoverClient(opts), "master " + o.sentinel + " of Sentinels " + strings.Join(opts.SentinelAddrs, ", ") + unset, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", fmt.Errorf("REDIS_URL: %w", err)
	}
	return redis.NewClient(opts), opts.Addr + unset, nil
}

// checkResult is what check prints with -json.
type checkResult struct {
	Policy string `json:"policy"`
	Rules  int    `json:"rules"`
	Redis  string `json:"redis"`
}

// editResult is what reset and clear-pause print with -json.
type editResult struct {
	Command string `json:"command"`
	Rule    string `json:"rule"`
	Limit   string `json:"limit,omitempty"`
	Key     string `json:"key"`
}

// report prints v as JSON when asJSON is set, else the text format gives.
func report(out io.Writer, asJSON bool, v any, format string, args ...any) error {
	if asJSON {
		return json.NewEncoder(out).Encode(v)
	}
	_, err := fmt.Fprintf(out, format, args...)
	return err
}

func findRule(p throttle.Policy, name string) (throttle.Rule, error) {
	for _, r := range p.Rules {
		if r.Name == name {
			return r, nil
		}
	}
	return throttle.Rule{}, fmt.Errorf("the policy has no rule %q", name)
}

func scopeOf(r throttle.Rule) string {
	if r.Scope != "" {
		return r.Scope
	}
	return r.Name
}

// state prints every scope's counters and pauses, as any
// [quota.Inspector] reports them.
func state(ctx context.Context, s quota.Inspector, p throttle.Policy, out io.Writer, asJSON bool) error {
	var scopes []string
	limits := map[string][]quota.Limit{}
	for _, r := range p.Rules {
		sc := scopeOf(r)
		if _, ok := limits[sc]; !ok {
			scopes = append(scopes, sc)
		}
		for _, l := range r.Limits {
			limits[sc] = append(limits[sc], l.Quota())
		}
	}
	if asJSON {
		return stateJSON(ctx, s, scopes, limits, out)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for _, sc := range scopes {
		states, err := s.Inspect(ctx, sc, limits[sc])
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "scope %s\n", sc)
		if len(states) == 0 {
			fmt.Fprintln(tw, "  (nothing charged, no pause)")
			continue
		}
		fmt.Fprintln(tw, "  LIMIT\tKEY\tUSED\tREMAINING\tFULL IN")
		for _, st := range states {
			k := st.Key
			if k == "" {
				k = "-"
			}
			if st.Pause() {
				fmt.Fprintf(tw, "  (pause)\t%s\t\t\t%s\n", k, round(st.Reset))
				continue
			}
			fmt.Fprintf(tw, "  %s\t%s\t%d\t%d\t%s\n", st.Limit, k, st.Used, st.Remaining, round(st.Reset))
		}
	}
	return tw.Flush()
}

// jsonState is one counter or pause in state's JSON.
type jsonState struct {
	Scope     string  `json:"scope"`
	Limit     string  `json:"limit,omitempty"` // empty for a pause
	Pause     bool    `json:"pause,omitempty"`
	Key       string  `json:"key"`
	Used      int64   `json:"used"`
	Remaining int64   `json:"remaining"`
	ResetSecs float64 `json:"reset_seconds"` // until full again, or until the pause ends
}

// stateJSON prints every scope's counters and pauses as one JSON object:
// {"states": [...]}.
func stateJSON(ctx context.Context, s quota.Inspector, scopes []string, limits map[string][]quota.Limit, out io.Writer) error {
	all := []jsonState{}
	for _, sc := range scopes {
		states, err := s.Inspect(ctx, sc, limits[sc])
		if err != nil {
			return err
		}
		for _, st := range states {
			js := jsonState{Scope: sc, Key: st.Key, Used: st.Used, Remaining: st.Remaining, ResetSecs: st.Reset.Seconds()}
			if st.Pause() {
				js = jsonState{Scope: sc, Pause: true, Key: st.Key, ResetSecs: st.Reset.Seconds()}
			} else {
				js.Limit = st.Limit
			}
			all = append(all, js)
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(struct {
		States []jsonState `json:"states"`
	}{all})
}

// round shows d to the second (to the millisecond under a second).
func round(d time.Duration) string {
	switch {
	case d <= 0:
		return "now"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
