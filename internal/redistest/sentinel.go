package redistest

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// sentinelReadyTimeout bounds the wait for a new deployment to be
	// ready.
	sentinelReadyTimeout = 30 * time.Second

	// sentinelCount is the number of Sentinels of a deployment, and
	// sentinelQuorum how many must agree that the master is down.
	sentinelCount, sentinelQuorum = 3, 2

	// SentinelDownAfter is how long the Sentinels of [StartSentinel] wait
	// for a master to answer before they consider it down
	// (down-after-milliseconds).
	SentinelDownAfter = 500 * time.Millisecond

	// sentinelFailoverTimeout is the Sentinels' failover-timeout: a
	// Sentinel that failed to fail over tries again after twice this.
	sentinelFailoverTimeout = 2 * time.Second

	// sentinelMasterName is the name the Sentinels monitor the master by.
	sentinelMasterName = "redistest"
)

// A Sentinel is a local Redis Sentinel deployment: a master, one replica
// of it, and three Sentinels that monitor them under the name
// [Sentinel.MasterName] with a quorum of 2. Its methods are safe for
// concurrent use.
type Sentinel struct {
	servers   []*Server // [0] started as the master, [1] as its replica
	sentinels []*Server
}

// StartSentinel starts a master, its replica and three Sentinels on
// loopback, and returns once every Sentinel agrees on the master, sees the
// replica in sync and sees the two other Sentinels (see
// [Sentinel.WaitReady]). The Sentinels consider the master down after
// [SentinelDownAfter] without an answer, so a killed master fails over in
// about two seconds. The opts apply to the master and the replica, not to
// the Sentinels; they come after the replication arguments, so they may
// override them. Everything is stopped in t.Cleanup.
func StartSentinel(t testing.TB, opts ...Option) *Sentinel {
	t.Helper()
	return startTest(t, 2+sentinelCount, func(bin string, dirs []string) (*Sentinel, error) {
		return startSentinel(bin, dirs, newConfig(opts).args)
	})
}

func startSentinel(bin string, dirs []string, extra []string) (*Sentinel, error) {
	s := &Sentinel{}
	// Diskless sync without the default 5 s delay, so the replica (and a
	// demoted master) syncs at once.
	args := []string{"--repl-diskless-sync-delay", "0"}
	master := newServer(bin, dirs[0], append(slices.Clip(args), extra...))
	if err := master.startFresh(nil); err != nil {
		return nil, err
	}
	s.servers = append(s.servers, master)
	replica := newServer(bin, dirs[1], append(append(slices.Clip(args), "--replicaof", "127.0.0.1", strconv.Itoa(master.Port())), extra...))
	if err := replica.startFresh(nil); err != nil {
		_ = s.Stop()
		return nil, err
	}
	s.servers = append(s.servers, replica)
	if err := s.startSentinels(bin, dirs[2:], master.Port()); err != nil {
		_ = s.Stop()
		return nil, err
	}
	if err := s.WaitReady(sentinelReadyTimeout); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// startSentinels starts one Sentinel in each of dirs, monitoring the
// master on masterPort. Each Sentinel's configuration names the others
// (known-sentinel, with IDs chosen here), so they need not wait for each
// other's hello messages, which come every 2 s. Their ports are therefore
// chosen together, and chosen again if one is taken before its Sentinel
// binds it.
func (s *Sentinel) startSentinels(bin string, dirs []string, masterPort int) error {
	var err error
	for range portAttempts {
		var ports []int
		if ports, err = freePorts(len(dirs)); err != nil {
			return err
		}
		ids := make([]string, len(dirs))
		for i := range ids {
			var b [20]byte
			_, _ = rand.Read(b[:]) // never fails; see crypto/rand.Read
			ids[i] = hex.EncodeToString(b[:])
		}
		sentinels := make([]*Server, len(dirs))
		for i, dir := range dirs {
			conf := filepath.Join(dir, "sentinel.conf")
			if err := os.WriteFile(conf, []byte(sentinelConf(masterPort, ids, ports, i)), 0o644); err != nil {
				return err
			}
			sentinels[i] = newServer(bin, dir, []string{"--sentinel"})
			sentinels[i].conf = conf
		}
		errs := make([]error, len(dirs))
		var wg sync.WaitGroup
		for i, sn := range sentinels {
			wg.Go(func() {
				picked := false
				errs[i] = sn.startFresh(func() (int, []string, error) {
					if picked { // the others' configurations name this port
						return 0, nil, errPortTaken
					}
					picked = true
					return ports[i], nil, nil
				})
			})
		}
		wg.Wait()
		err = errors.Join(errs...)
		if err == nil {
			s.sentinels = sentinels
			return nil
		}
		for _, sn := range sentinels {
			_ = sn.Stop()
		}
		if !errors.Is(err, errPortTaken) {
			return err
		}
	}
	return err
}

// sentinelConf returns the configuration of Sentinel i of a deployment
// whose Sentinels have ids and ports. A Sentinel rewrites its file with
// what it learns, so a restarted Sentinel remembers the current master.
func sentinelConf(masterPort int, ids []string, ports []int, i int) string {
	var b strings.Builder
	name := sentinelMasterName
	fmt.Fprintf(&b, "sentinel myid %s\n", ids[i])
	fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", name, masterPort, sentinelQuorum)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", name, SentinelDownAfter.Milliseconds())
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", name, sentinelFailoverTimeout.Milliseconds())
	for j := range ids {
		if j != i {
			fmt.Fprintf(&b, "sentinel known-sentinel %s 127.0.0.1 %d %s\n", name, ports[j], ids[j])
		}
	}
	return b.String()
}

// MasterName returns the name under which the Sentinels monitor the
// master, for redis.FailoverOptions.MasterName.
func (s *Sentinel) MasterName() string { return sentinelMasterName }

// SentinelAddrs returns the addresses of the three Sentinels, for
// redis.FailoverOptions.SentinelAddrs.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Servers returns the two data servers: the one started as the master,
// then the one started as its replica. After a failover their roles may
// differ; see [Sentinel.Master].
func (s *Sentinel) Servers() []*Server { return slices.Clone(s.servers) }

// Sentinels returns the three Sentinel processes.
func (s *Sentinel) Sentinels() []*Server { return slices.Clone(s.sentinels) }

// Master returns the server that every running Sentinel names as the
// master (SENTINEL GET-MASTER-ADDR-BY-NAME), or an error if they do not
// agree. Just after the master died they still name it, until they have
// failed over.
func (s *Sentinel) Master() (*Server, error) {
	var addr string
	for _, sn := range s.sentinels {
		if !sn.Running() {
			continue
		}
		a, err := s.masterAddr(sn)
		if err != nil {
			return nil, err
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("redistest: Sentinels disagree on the master: %s and %s", addr, a)
		}
		addr = a
	}
	for _, srv := range s.servers {
		if srv.Addr() == addr {
			return srv, nil
		}
	}
	return nil, fmt.Errorf("redistest: Sentinels name %q as the master, not one of the servers", addr)
}

// masterAddr asks one Sentinel for the master's address.
func (s *Sentinel) masterAddr(sn *Server) (string, error) {
	v, err := sn.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName())
	if err != nil {
		return "", fmt.Errorf("redistest: %s: SENTINEL GET-MASTER-ADDR-BY-NAME: %w", sn.Addr(), err)
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("redistest: %s: SENTINEL GET-MASTER-ADDR-BY-NAME: reply %v", sn.Addr(), v)
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	return host + ":" + port, nil
}

// KillMaster kills the current master (see [Sentinel.Master]) with
// SIGKILL, as a crash would, and returns it once it has exited. Follow it
// with [Sentinel.WaitFailover]. A killed master that is restarted
// ([Server.Restart]) comes back as an empty master, which the Sentinels
// demote to a replica only after about ten seconds; tests had better leave
// it dead.
func (s *Sentinel) KillMaster() (*Server, error) {
	m, err := s.Master()
	if err != nil {
		return nil, err
	}
	return m, m.Kill()
}

// Failover asks a Sentinel to fail over at once (SENTINEL FAILOVER), with
// the master still running, and returns the master it replaces, without
// waiting; follow it with [Sentinel.WaitFailover]. The Sentinels switch to
// the promoted replica within about a second, but the old master goes on
// answering as a master until they demote it, about ten seconds later
// (Redis Sentinel's +convert-to-slave); a client still connected to it
// meanwhile writes to a server whose writes will be discarded.
func (s *Sentinel) Failover() (*Server, error) {
	m, err := s.Master()
	if err != nil {
		return nil, err
	}
	for _, sn := range s.sentinels {
		if sn.Running() {
			if _, err := sn.Do("SENTINEL", "FAILOVER", s.MasterName()); err != nil {
				return nil, fmt.Errorf("redistest: %s: SENTINEL FAILOVER: %w", sn.Addr(), err)
			}
			return m, nil
		}
	}
	return nil, errors.New("redistest: no Sentinel is running")
}

// WaitFailover waits up to timeout until every running Sentinel names a
// master other than old, and that server answers ROLE as a master; it
// returns the new master. It does not wait for the rest of the deployment
// to settle (a demoted master to resync): use [Sentinel.WaitReady] for
// that.
func (s *Sentinel) WaitFailover(old *Server, timeout time.Duration) (*Server, error) {
	var m *Server
	err := poll(timeout, func() error {
		var err error
		m, err = s.Master()
		switch {
		case err != nil:
			return err
		case m == old:
			return fmt.Errorf("the Sentinels still name %s", old.Addr())
		}
		return isRole(m, "master")
	})
	if err != nil {
		return nil, fmt.Errorf("redistest: no failover from %s after %v: %w", old.Addr(), timeout, err)
	}
	return m, nil
}

// isRole reports an error unless srv answers ROLE with role.
func isRole(srv *Server, role string) error {
	v, err := srv.Do("ROLE")
	if err != nil {
		return fmt.Errorf("%s: ROLE: %w", srv.Addr(), err)
	}
	r, _ := v.([]any)
	if len(r) == 0 || r[0] != role {
		return fmt.Errorf("%s: ROLE is %v, want %s", srv.Addr(), v, role)
	}
	return nil
}

// WaitReady waits up to timeout until the running processes agree on a
// healthy deployment: every running Sentinel names the same master, which
// answers as a master; each sees it without a down or failover flag, sees
// every other running Sentinel as connected and up, and sees every other
// running server as a replica of it whose link is up; SENTINEL CKQUORUM
// passes; each such replica reports its link up and no sync in progress,
// and acknowledges a write to the master (WAIT), so the master streams
// its writes to it. A killed server that is not restarted is left out.
// Use it after a fault before the next step; after [Sentinel.Failover] it
// waits for the old master's demotion, about ten seconds.
func (s *Sentinel) WaitReady(timeout time.Duration) error {
	if err := poll(timeout, s.ready); err != nil {
		return fmt.Errorf("redistest: Sentinel deployment not ready after %v: %w", timeout, err)
	}
	return nil
}

func (s *Sentinel) ready() error {
	m, err := s.Master()
	if err != nil {
		return err
	}
	if !m.Running() {
		return fmt.Errorf("the master %s is not running", m.Addr())
	}
	if err := isRole(m, "master"); err != nil {
		return err
	}
	var running []*Server
	for _, sn := range s.sentinels {
		if sn.Running() {
			running = append(running, sn)
		}
	}
	name := s.MasterName()
	for _, sn := range running {
		master, err := sentinelMaps(sn, "MASTER", name)
		if err != nil {
			return err
		}
		if flags := master[0]["flags"]; flags != "master" {
			return fmt.Errorf("%s sees the master with flags %q", sn.Addr(), flags)
		}
		others, err := sentinelMaps(sn, "SENTINELS", name)
		if err != nil {
			return err
		}
		for _, o := range running {
			if o == sn {
				continue
			}
			// master_down is this Sentinel's record of o's opinion of an
			// earlier master, kept for 5 s after a failover; it does not
			// stop o from taking part in the next one.
			if f, ok := find(others, o.Addr(), "flags"); !ok || strings.TrimSuffix(f, ",master_down") != "sentinel" {
				return fmt.Errorf("%s sees Sentinel %s with flags %q", sn.Addr(), o.Addr(), f)
			}
		}
		replicas, err := sentinelMaps(sn, "REPLICAS", name)
		if err != nil {
			return err
		}
		for _, r := range s.servers {
			if r == m || !r.Running() {
				continue
			}
			if f, ok := find(replicas, r.Addr(), "flags"); !ok || f != "slave" {
				return fmt.Errorf("%s sees replica %s with flags %q", sn.Addr(), r.Addr(), f)
			}
			if l, _ := find(replicas, r.Addr(), "master-link-status"); l != "ok" {
				return fmt.Errorf("%s sees replica %s with link %q", sn.Addr(), r.Addr(), l)
			}
		}
		if _, err := sn.Do("SENTINEL", "CKQUORUM", name); err != nil {
			return fmt.Errorf("%s: SENTINEL CKQUORUM: %w", sn.Addr(), err)
		}
	}
	replicas := 0
	for _, r := range s.servers {
		if r == m || !r.Running() {
			continue
		}
		replicas++
		info, err := doString(r.Addr(), "INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: INFO: %w", r.Addr(), err)
		}
		for _, want := range [][2]string{
			{"role", "slave"},
			{"master_port", strconv.Itoa(m.Port())},
			{"master_link_status", "up"},
			{"master_sync_in_progress", "0"},
		} {
			if got, _ := infoField(info, want[0]); got != want[1] {
				return fmt.Errorf("replica %s: %s is %q, want %q", r.Addr(), want[0], got, want[1])
			}
		}
	}
	return streaming(m, replicas)
}

// streaming reports an error unless replicas replicas acknowledge a write
// on master m within a second. A replica that has just loaded its first
// copy reports its link up at once, but after a diskless sync the master
// holds the stream of writes back until the replica's first REPLCONF ACK,
// which may come a second later; a master killed meanwhile takes every
// write since the sync with it. PUBLISH is replicated and creates no key.
func streaming(m *Server, replicas int) error {
	if replicas == 0 {
		return nil
	}
	c, err := dial(m.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.send([]string{"PUBLISH", "__redistest__:ready", "1"}, []string{"WAIT", strconv.Itoa(replicas), "1000"}); err != nil {
		return err
	}
	if _, err := c.read(); err != nil {
		return fmt.Errorf("%s: PUBLISH: %w", m.Addr(), err)
	}
	v, err := c.read()
	if err != nil {
		return fmt.Errorf("%s: WAIT: %w", m.Addr(), err)
	}
	if n, _ := v.(int64); n < int64(replicas) {
		return fmt.Errorf("%s: WAIT: %v of %d replicas acknowledged a write", m.Addr(), v, replicas)
	}
	return nil
}

// sentinelMaps runs SENTINEL args on sn and returns its reply as maps: one
// for SENTINEL MASTER, one per instance for REPLICAS and SENTINELS.
func sentinelMaps(sn *Server, args ...string) ([]map[string]string, error) {
	v, err := sn.Do(append([]string{"SENTINEL"}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("%s: SENTINEL %s: %w", sn.Addr(), args[0], err)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: SENTINEL %s: reply %T", sn.Addr(), args[0], v)
	}
	if args[0] == "MASTER" {
		list = []any{list}
	}
	out := make([]map[string]string, len(list))
	for i, e := range list {
		kv, ok := e.([]any)
		if !ok || len(kv)%2 != 0 {
			return nil, fmt.Errorf("%s: SENTINEL %s: malformed reply %v", sn.Addr(), args[0], e)
		}
		out[i] = map[string]string{}
		for j := 0; j < len(kv); j += 2 {
			k, _ := kv[j].(string)
			out[i][k], _ = kv[j+1].(string)
		}
	}
	return out, nil
}

// find returns field of the instance at addr ("ip:port") in maps.
func find(maps []map[string]string, addr, field string) (string, bool) {
	for _, m := range maps {
		if m["ip"]+":"+m["port"] == addr {
			return m[field], true
		}
	}
	return "", false
}

// Stop stops the Sentinels and the servers (concurrently) and waits for
// them to exit.
func (s *Sentinel) Stop() error {
	all := append(slices.Clone(s.sentinels), s.servers...)
	var wg sync.WaitGroup
	errs := make([]error, len(all))
	for i, p := range all {
		wg.Go(func() { errs[i] = p.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
