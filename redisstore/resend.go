package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// ErrResent reports a call that go-redis sent to Redis a second time (a
// retry after its connection failed with the call written, or a Cluster
// redirect) under [ReplayDetect]. The script refused to decide again, but
// the first sending may have been run: the demand may or may not have been
// charged. Treat it as not granted.
var ErrResent = errors.New("call sent again after a failure and not decided again; its first sending may have charged")

// resentArg is what a resendMark writes when the call is sent again.
var resentArg = []byte("R")

// A resendMark is a script argument that tells the script whether go-redis
// is sending the call for the first time. go-redis writes every argument
// anew with each sending, calling MarshalBinary for this one: it writes
// first while every earlier sending is known not to have run, and "R"
// otherwise, which the scripts refuse with an error that begins "RESENT".
//
// A sending is known not to have run when Redis refused it before running
// it: a Cluster redirect (MOVED, ASK), TRYAGAIN, CLUSTERDOWN, LOADING,
// READONLY, or NOSCRIPT. The call's command (markedCmd) hears of each such
// reply, since go-redis sets a command's error after each sending to a
// node, before it follows a redirect. So a Cluster client's redirects are
// followed and decided once, while a resend after a lost reply is refused.
// Within one call go-redis writes its arguments and sets its error from
// one goroutine at a time, so the fields need no lock.
type resendMark struct {
	first  string
	writes int     // sendings so far
	notRun int     // sendings refused before they ran, as far as is known
	buf    [8]byte // holds first's bytes when they fit: no allocation to write them
	cmd    markedCmd
	all    [12]any // the command's arguments when they fit (Store.send)
}

// newResendMark returns a mark whose first sending writes first, with its
// command in the same allocation (send fills it in).
func newResendMark(first string) *resendMark {
	m := &resendMark{first: first}
	m.cmd.mark = m
	return m
}

// MarshalBinary implements encoding.BinaryMarshaler for go-redis's writer,
// which copies the bytes before the next call.
func (m *resendMark) MarshalBinary() ([]byte, error) {
	m.writes++
	if m.writes-1 > m.notRun {
		return resentArg, nil
	}
	if len(m.first) <= len(m.buf) {
		return m.buf[:copy(m.buf[:], m.first)], nil
	}
	return []byte(m.first), nil
}

// String is what hooks that print commands show.
func (m *resendMark) String() string { return m.first }

// heard records the outcome of the latest sending.
func (m *resendMark) heard(err error) {
	if err != nil && notRun(err) && m.notRun == m.writes-1 {
		m.notRun = m.writes
	}
}

// notRunPrefixes are the replies of a Redis that refused a command before
// running any of it.
var notRunPrefixes = []string{"MOVED ", "ASK ", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "READONLY", "NOSCRIPT", "MASTERDOWN"}

// notRun reports whether err is a reply of Redis refusing to run the
// command at all.
func notRun(err error) bool {
	for _, p := range notRunPrefixes {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// markedCmd is the command of a marked call: go-redis sets its error after
// each sending to a node, which tells the mark whether that sending ran.
// It lives in its mark, and holds the redis.Cmd by value: one allocation
// for the three.
type markedCmd struct {
	redis.Cmd
	mark *resendMark
}

// SetErr implements redis.Cmder: it records err, and tells the mark.
func (c *markedCmd) SetErr(err error) {
	c.Cmd.SetErr(err)
	c.mark.heard(err)
}

// detectable reports whether [ReplayAuto] picks [ReplayDetect] for
// client: one of go-redis's own clients, whose commands it sends again
// only through the paths a resendMark sees (a retry after a failure, and
// a Cluster redirect, which the mark knows did not run).
func detectable(client redis.UniversalClient) bool {
	switch client.(type) {
	case *redis.Client, *redis.Ring, *redis.ClusterClient:
		return true
	}
	return false
}

// run runs script as go-redis's Script.Run does: EVALSHA, then EVAL if
// Redis does not have the script. A marked call (mark not nil) is sent as
// a markedCmd, so the mark hears which sendings Redis refused before they
// ran (a NOSCRIPT reply among them: the EVAL after it is not a resend).
func (s *Store) run(ctx context.Context, script luaScript, mark *resendMark, keys []string, args ...any) *redis.Cmd {
	if mark == nil {
		cmd := script.EvalSha(ctx, s.client, keys, args...)
		if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
			return cmd
		}
		return script.Eval(ctx, s.client, keys, args...)
	}
	cmd := s.send(ctx, mark, evalshaArg, script.hashArg, keys, args)
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	mark.heard(cmd.Err())
	return s.send(ctx, mark, evalArg, script.srcArg, keys, args)
}

// The command names, boxed once: a string made an interface value
// allocates.
var evalshaArg, evalArg any = "evalsha", "eval"

// send sends one marked EVALSHA or EVAL, as redis.Script's methods build
// it: name, then script (the SHA or the source), boxed by the caller. The
// arguments go in the mark's own array when they fit; args may already
// be there, in place (Store.markedArgs), and then copying them moves
// nothing.
func (s *Store) send(ctx context.Context, mark *resendMark, name, script any, keys []string, args []any) *redis.Cmd {
	n := 3 + len(keys) + len(args)
	all := mark.all[:0]
	if n > len(mark.all) {
		all = make([]any, 0, n)
	}
	all = append(all, name, script, len(keys))
	for _, k := range keys {
		all = append(all, k)
	}
	all = append(all, args...) // args in place: each copied onto itself
	cmd := &mark.cmd
	cmd.Cmd = *redis.NewCmd(ctx, all...)
	_ = s.client.Process(ctx, cmd)
	return &cmd.Cmd
}

// resent returns [ErrResent] for a script's refusal of a call sent again,
// and any other err as it is.
func resent(err error) error {
	if redis.HasErrorPrefix(err, "RESENT") {
		return ErrResent
	}
	return err
}
