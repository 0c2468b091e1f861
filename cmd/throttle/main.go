// Command throttle shows and edits the live state of a policy's limits in
// the Redis that a fleet shares.
//
//	REDIS_URL=redis://localhost:6379 throttle -policy policy.yaml state
//	throttle -policy policy.yaml reset -rule slack-notify -limit category -key errors
//	throttle -policy policy.yaml clear-pause -rule slack-notify [-key KEY]
//	throttle -h
//
// state prints, per rule scope, every live counter (limit, key, used,
// remaining, time until full) and every active pause. Keys are shown as
// stored: escaped, with secrets already hashed by the key functions.
// reset forgets what one counter charged; clear-pause ends a pause in
// Redis (instances that learned it keep their local copy until it ends).
// -h prints the commands and flags and exits 0; a wrong command line
// prints what is wrong and the usage to stderr and exits 2; any other
// failure exits 1.
package main

import (
	"context"
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
	err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "throttle:", err)
	}
	os.Exit(exitCode(err))
}

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
	{"state", "print, per rule scope, every live counter (limit, key, used, remaining,\n" +
		"time until full) and every active pause", nil, nil},
	{"reset", "forget what one counter charged", []string{"rule", "limit", "key"}, []string{"rule", "limit"}},
	{"clear-pause", "end a pause in Redis (instances that learned it keep their local copy\n" +
		"until it ends)", []string{"rule", "key"}, []string{"rule"}},
}

// commandFlags are the commands' flags: placeholder and meaning.
var commandFlags = map[string][2]string{
	"rule":  {"RULE", "the rule, by name"},
	"limit": {"LIMIT", "the limit, by name"},
	"key":   {"KEY", "the counter's or pause's key, as state shows it; none for a limit without a key"},
}

// globalFlags are the flags before the command.
func globalFlags() (fs *flag.FlagSet, policyPath, prefix *string) {
	fs = flag.NewFlagSet("throttle", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	policyPath = fs.String("policy", "", "the policy `FILE`: YAML, or JSON if its name ends in .json (required)")
	prefix = fs.String("prefix", redisstore.DefaultPrefix, "the store's key `PREFIX`")
	return fs, policyPath, prefix
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
		b.WriteString("throttle -policy FILE [-prefix PREFIX] " + c.name)
		for _, f := range c.flags {
			arg := "-" + f + " " + commandFlags[f][0]
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
	for _, f := range []string{"rule", "limit", "key"} {
		fmt.Fprintf(&b, "  -%s %s\n        %s\n", f, commandFlags[f][0], commandFlags[f][1])
	}
	b.WriteString("\nFlags:\n")
	fs, _, _ := globalFlags()
	fs.VisitAll(func(f *flag.Flag) {
		name, about := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  -%s %s\n        %s", f.Name, name, about)
		if f.DefValue != "" {
			fmt.Fprintf(&b, " (default %q)", f.DefValue)
		}
		b.WriteString("\n")
	})
	b.WriteString("  -h, -help\n        print this help\n")
	b.WriteString("\nEnvironment:\n  REDIS_URL\n        the Redis (default redis://127.0.0.1:6379)\n")
	return b.String()
}

// run is the command, with its environment passed in for tests. Help
// (-h, -help, or the command help) goes to out; a wrong command line is
// a *usageError.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	bad := func(format string, a ...any) error {
		return &usageError{problem: fmt.Sprintf(format, a...), usage: synopsis() + "Run throttle -h for what each command and flag does."}
	}
	fs, policyPath, prefix := globalFlags()
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
	given := map[string]*string{}
	for _, f := range cmd.flags {
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
	if *policyPath == "" {
		return bad("-policy is required")
	}

	p, err := policyfile.LoadFile(*policyPath)
	if err != nil {
		return err
	}
	url := getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379"
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	s, err := redisstore.New(client, redisstore.WithPrefix(*prefix))
	if err != nil {
		return err
	}

	switch name {
	case "reset":
		r, err := findRule(p, *given["rule"])
		if err != nil {
			return err
		}
		for _, l := range r.Limits {
			if l.Name == *given["limit"] {
				if err := s.ResetLimit(ctx, scopeOf(r), l.Quota(), *given["key"]); err != nil {
					return err
				}
				fmt.Fprintf(out, "reset %s/%s key %q\n", r.Name, l.Name, *given["key"])
				return nil
			}
		}
		return fmt.Errorf("rule %s has no limit %q", r.Name, *given["limit"])
	case "clear-pause":
		r, err := findRule(p, *given["rule"])
		if err != nil {
			return err
		}
		if err := s.ClearPause(ctx, scopeOf(r), *given["key"]); err != nil {
			return err
		}
		fmt.Fprintf(out, "cleared pause of %s key %q\n", r.Name, *given["key"])
		return nil
	}
	return state(ctx, s, p, out)
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
func state(ctx context.Context, s quota.Inspector, p throttle.Policy, out io.Writer) error {
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
