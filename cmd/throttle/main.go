// Command throttle shows and edits the live state of a policy's limits in
// the Redis that a fleet shares.
//
//	REDIS_URL=redis://localhost:6379 throttle -policy policy.yaml state
//	throttle -policy policy.yaml reset -rule slack-notify -limit category -key errors
//	throttle -policy policy.yaml clear-pause -rule slack-notify [-key KEY]
//
// state prints, per rule scope, every live counter (limit, key, used,
// remaining, time until full) and every active pause. Keys are shown as
// stored: escaped, with secrets already hashed by the key functions.
// reset forgets what one counter charged; clear-pause ends a pause in
// Redis (instances that learned it keep their local copy until it ends).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotakit/throttle"
	"github.com/quotakit/throttle/policyfile"
	"github.com/quotakit/throttle/redisstore"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "throttle:", err)
		os.Exit(1)
	}
}

const usage = `usage: throttle -policy FILE [-prefix P] state
       throttle -policy FILE [-prefix P] reset -rule RULE -limit LIMIT [-key KEY]
       throttle -policy FILE [-prefix P] clear-pause -rule RULE [-key KEY]
REDIS_URL gives the Redis (default redis://127.0.0.1:6379).`

// run is the command, with its environment passed in for tests.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("throttle", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	policyPath := fs.String("policy", "", "the policy file (YAML or JSON)")
	prefix := fs.String("prefix", redisstore.DefaultPrefix, "the store's key prefix")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	if *policyPath == "" || fs.NArg() == 0 {
		return errors.New(usage)
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

	sub := flag.NewFlagSet(fs.Arg(0), flag.ContinueOnError)
	sub.SetOutput(io.Discard)
	ruleName := sub.String("rule", "", "the rule")
	limitName := sub.String("limit", "", "the limit")
	key := sub.String("key", "", "the counter's or pause's key, as state shows it")
	if err := sub.Parse(fs.Args()[1:]); err != nil {
		return fmt.Errorf("%w\n%s", err, usage)
	}
	switch fs.Arg(0) {
	case "state":
		return state(ctx, s, p, out)
	case "reset":
		r, err := findRule(p, *ruleName)
		if err != nil {
			return err
		}
		for _, l := range r.Limits {
			if l.Name == *limitName {
				if err := s.ResetLimit(ctx, scopeOf(r), l, *key); err != nil {
					return err
				}
				fmt.Fprintf(out, "reset %s/%s key %q\n", r.Name, l.Name, *key)
				return nil
			}
		}
		return fmt.Errorf("rule %s has no limit %q", r.Name, *limitName)
	case "clear-pause":
		r, err := findRule(p, *ruleName)
		if err != nil {
			return err
		}
		if err := s.ClearPause(ctx, scopeOf(r), *key); err != nil {
			return err
		}
		fmt.Fprintf(out, "cleared pause of %s key %q\n", r.Name, *key)
		return nil
	}
	return fmt.Errorf("unknown command %q\n%s", fs.Arg(0), usage)
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
// [throttle.Inspector] reports them.
func state(ctx context.Context, s throttle.Inspector, p throttle.Policy, out io.Writer) error {
	var scopes []string
	limits := map[string][]throttle.Limit{}
	for _, r := range p.Rules {
		sc := scopeOf(r)
		if _, ok := limits[sc]; !ok {
			scopes = append(scopes, sc)
		}
		limits[sc] = append(limits[sc], r.Limits...)
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
