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
// anew with each sending, calling MarshalBinary for this one: the first
// writes first, every later one writes "R", which the scripts refuse
// with an error that begins "RESENT". Within one call go-redis writes its
// arguments from one goroutine at a time, so writes needs no lock.
type resendMark struct {
	first  string
	writes int
	buf    [8]byte // holds first's bytes when they fit: no allocation to write them
}

// MarshalBinary implements encoding.BinaryMarshaler for go-redis's writer,
// which copies the bytes before the next call.
func (m *resendMark) MarshalBinary() ([]byte, error) {
	m.writes++
	if m.writes > 1 {
		return resentArg, nil
	}
	if len(m.first) <= len(m.buf) {
		return m.buf[:copy(m.buf[:], m.first)], nil
	}
	return []byte(m.first), nil
}

// String is what hooks that print commands show.
func (m *resendMark) String() string { return m.first }

// detectable reports whether [ReplayAuto] picks [ReplayDetect] for
// client: a client that sends a call again only after a failure, not as
// part of normal operation (a Cluster redirect).
func detectable(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client, *redis.Ring:
		return true
	case *redis.ClusterClient:
		return c.Options().MaxRedirects <= 0
	}
	return false
}

// marked returns a script argument that writes first: a resendMark, also
// returned, when calls are marked; else plain (first's value, already
// boxed where it can be) and nil.
func (s *Store) marked(first string, plain any) (any, *resendMark) {
	if !s.detect {
		return plain, nil
	}
	m := &resendMark{first: first}
	return m, m
}

// run runs script as go-redis's Script.Run does: EVALSHA, then EVAL if
// Redis does not have the script. A NOSCRIPT reply means the script did
// not run, so mark (when not nil) is rewound for the EVAL, unless the call
// had already been sent more than once (an earlier sending may have run
// before the script cache was lost).
func (s *Store) run(ctx context.Context, script *redis.Script, mark *resendMark, keys []string, args ...any) *redis.Cmd {
	cmd := script.EvalSha(ctx, s.client, keys, args...)
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	if mark != nil && mark.writes == 1 {
		mark.writes = 0
	}
	return script.Eval(ctx, s.client, keys, args...)
}

// resent returns [ErrResent] for a script's refusal of a call sent again,
// and any other err as it is.
func resent(err error) error {
	if redis.HasErrorPrefix(err, "RESENT") {
		return ErrResent
	}
	return err
}
