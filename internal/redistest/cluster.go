package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// clusterReadyTimeout bounds the wait for a new cluster to be ready.
const clusterReadyTimeout = 30 * time.Second

// A Cluster is a local Redis Cluster: masters that split the 16384 slots
// evenly in order, each with its replicas. Its methods are safe for
// concurrent use.
type Cluster struct {
	nodes    []*Node
	masters  []*Node
	replicas [][]*Node
}

// A Node is one server of a [Cluster]. Kill, Stop and Restart it through
// the embedded [Server]; a restarted node keeps its ID.
type Node struct {
	*Server

	// ID is the node's Cluster node ID.
	ID string

	// BusPort is the node's cluster bus port.
	BusPort int
}

// StartCluster starts a Redis Cluster of masters masters (at least 1), each
// with replicasPerMaster replicas, on loopback, and returns once every node
// reports cluster_state:ok with all slots covered, every node agrees on the
// topology, and every replica has synced with its master. Nodes run with a
// cluster-node-timeout of 2000 ms, so a killed master fails over in a few
// seconds. The opts apply to every node; they come after the cluster
// arguments, so they may override them. All nodes are stopped in t.Cleanup.
func StartCluster(t testing.TB, masters, replicasPerMaster int, opts ...Option) *Cluster {
	t.Helper()
	return startTest(t, masters*(1+replicasPerMaster), func(bin string, dirs []string) (*Cluster, error) {
		return startCluster(bin, dirs, masters, replicasPerMaster, newConfig(opts).args)
	})
}

// StartClusterMain is [StartCluster] for TestMain, as [StartMain] is
// [Start]: call the returned stop function after m.Run. It exits the test
// binary if the cluster cannot start.
func StartClusterMain(masters, replicasPerMaster int, opts ...Option) (*Cluster, func()) {
	return startMain("redistest-cluster-", func(bin, root string) (*Cluster, error) {
		dirs := make([]string, max(masters*(1+replicasPerMaster), 0))
		for i := range dirs {
			dirs[i] = filepath.Join(root, strconv.Itoa(i))
			if err := os.Mkdir(dirs[i], 0o755); err != nil {
				return nil, err
			}
		}
		return startCluster(bin, dirs, masters, replicasPerMaster, newConfig(opts).args)
	})
}

func startCluster(bin string, dirs []string, masters, replicasPerMaster int, extra []string) (*Cluster, error) {
	if masters < 1 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("StartCluster: need at least 1 master and no negative replica count, got %d and %d", masters, replicasPerMaster)
	}
	c := &Cluster{nodes: make([]*Node, len(dirs))}
	var wg sync.WaitGroup
	errs := make([]error, len(dirs))
	for i, dir := range dirs {
		args := append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
			"--cluster-announce-ip", "127.0.0.1",
			"--repl-diskless-sync-delay", "0",
		}, extra...)
		node := &Node{Server: newServer(bin, dir, args)}
		c.nodes[i] = node
		wg.Go(func() {
			errs[i] = node.startFresh(func() (int, []string, error) {
				ports, err := freePorts(2)
				if err != nil {
					return 0, nil, err
				}
				node.BusPort = ports[1]
				return ports[0], []string{"--cluster-port", strconv.Itoa(ports[1])}, nil
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = c.Stop()
		return nil, err
	}
	c.masters = c.nodes[:masters]
	c.replicas = make([][]*Node, masters)
	for i := range c.replicas {
		start := masters + i*replicasPerMaster
		c.replicas[i] = c.nodes[start : start+replicasPerMaster]
	}
	if err := c.form(); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("form cluster: %w", err)
	}
	if err := c.WaitReady(clusterReadyTimeout); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// form assigns slots, joins the nodes and attaches the replicas, the way
// redis-cli --cluster create does, without its fixed one-second waits.
func (c *Cluster) form() error {
	for i, n := range c.nodes {
		id, err := doString(n.Addr(), "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("CLUSTER MYID on %s: %w", n.Addr(), err)
		}
		n.ID = id
		// Distinct config epochs up front, so no epoch collision has to be
		// resolved later.
		if _, err := doString(n.Addr(), "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("CLUSTER SET-CONFIG-EPOCH on %s: %w", n.Addr(), err)
		}
	}
	for i, m := range c.masters {
		first, last := i*Slots/len(c.masters), (i+1)*Slots/len(c.masters)-1
		if _, err := doString(m.Addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(first), strconv.Itoa(last)); err != nil {
			return fmt.Errorf("CLUSTER ADDSLOTSRANGE on %s: %w", m.Addr(), err)
		}
	}
	first := c.nodes[0]
	for _, n := range c.nodes[1:] {
		if _, err := doString(first.Addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(n.Port()), strconv.Itoa(n.BusPort)); err != nil {
			return fmt.Errorf("CLUSTER MEET %s: %w", n.Addr(), err)
		}
	}
	// A replica can only follow a master it knows.
	for i, rs := range c.replicas {
		for _, r := range rs {
			err := poll(clusterReadyTimeout, func() error {
				_, err := doString(r.Addr(), "CLUSTER", "REPLICATE", c.masters[i].ID)
				return err
			})
			if err != nil {
				return fmt.Errorf("CLUSTER REPLICATE on %s: %w", r.Addr(), err)
			}
		}
	}
	return nil
}

// poll calls f until it succeeds or timeout passes, and returns f's last
// error.
func poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// Addrs returns the addresses of all nodes: the masters first, in slot
// order, then the replicas, in the order of their masters.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns all nodes, in the order of [Cluster.Addrs].
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Masters returns the nodes started as masters, in slot order: master i
// was given slots i*16384/n through (i+1)*16384/n-1. After a failover a
// node's role may differ; see [Cluster.Owner].
func (c *Cluster) Masters() []*Node { return append([]*Node(nil), c.masters...) }

// Replicas returns the nodes started as replicas of Masters()[i].
func (c *Cluster) Replicas(i int) []*Node { return append([]*Node(nil), c.replicas[i]...) }

// Stop stops every node (concurrently) and waits for them to exit.
func (c *Cluster) Stop() error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, master string
	flags      map[string]bool
	slots      [][2]int
}

func clusterNodes(addr string) (map[string]clusterNode, error) {
	s, err := doString(addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	out := map[string]clusterNode{}
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("malformed CLUSTER NODES line %q", line)
		}
		n := clusterNode{id: f[0], master: f[3], flags: map[string]bool{}}
		for fl := range strings.SplitSeq(f[2], ",") {
			n.flags[fl] = true
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, found := strings.Cut(r, "-")
			if !found {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("malformed slot range %q", r)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		out[n.id] = n
	}
	return out, nil
}

// WaitReady waits up to timeout until the running nodes agree on a healthy
// cluster: each reports cluster_state:ok with all 16384 slots served, each
// sees every other running node as reachable and in the role that node
// claims, and every running replica has a synced link to its master. Use it
// after a fault (a killed master, a restart) before the next step.
func (c *Cluster) WaitReady(timeout time.Duration) error {
	err := poll(timeout, c.ready)
	if err != nil {
		return fmt.Errorf("cluster not ready after %v: %w", timeout, err)
	}
	return nil
}

func (c *Cluster) ready() error {
	var running []*Node
	for _, n := range c.nodes {
		if n.Running() {
			running = append(running, n)
		}
	}
	views := map[string]map[string]clusterNode{}
	for _, n := range running {
		info, err := doString(n.Addr(), "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", n.Addr(), err)
		}
		for _, want := range [][2]string{
			{"cluster_state", "ok"},
			{"cluster_slots_assigned", strconv.Itoa(Slots)},
			{"cluster_slots_ok", strconv.Itoa(Slots)},
		} {
			if got, _ := infoField(info, want[0]); got != want[1] {
				return fmt.Errorf("%s: %s is %q, want %q", n.Addr(), want[0], got, want[1])
			}
		}
		v, err := clusterNodes(n.Addr())
		if err != nil {
			return fmt.Errorf("%s: CLUSTER NODES: %w", n.Addr(), err)
		}
		views[n.ID] = v
	}
	for _, n := range running {
		self, ok := views[n.ID][n.ID]
		if !ok {
			return fmt.Errorf("%s does not list itself", n.Addr())
		}
		for _, o := range running {
			seen, ok := views[o.ID][n.ID]
			switch {
			case !ok:
				return fmt.Errorf("%s does not know %s", o.Addr(), n.Addr())
			case seen.flags["handshake"] || seen.flags["noaddr"] || seen.flags["fail"] || seen.flags["fail?"]:
				return fmt.Errorf("%s sees %s as %v", o.Addr(), n.Addr(), seen.flags)
			case seen.flags["master"] != self.flags["master"] || seen.master != self.master:
				return fmt.Errorf("%s and %s disagree on the role of %s", o.Addr(), n.Addr(), n.Addr())
			}
		}
		if self.flags["slave"] {
			info, err := doString(n.Addr(), "INFO", "replication")
			if err != nil {
				return fmt.Errorf("%s: INFO: %w", n.Addr(), err)
			}
			if got, _ := infoField(info, "master_link_status"); got != "up" {
				return fmt.Errorf("replica %s: master_link_status is %q", n.Addr(), got)
			}
			if got, _ := infoField(info, "master_sync_in_progress"); got != "0" {
				return fmt.Errorf("replica %s: sync in progress", n.Addr())
			}
		}
	}
	return nil
}

// Owner returns the node that currently serves key's slot as a master, as
// the running nodes see it (it follows failovers).
func (c *Cluster) Owner(key string) (*Node, error) {
	slot := Slot(key)
	for _, n := range c.nodes {
		if !n.Running() {
			continue
		}
		view, err := clusterNodes(n.Addr())
		if err != nil {
			continue
		}
		for _, cn := range view {
			if !cn.flags["master"] || cn.flags["fail"] {
				continue
			}
			for _, r := range cn.slots {
				if slot >= r[0] && slot <= r[1] {
					for _, m := range c.nodes {
						if m.ID == cn.id {
							return m, nil
						}
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("redistest: no running master serves slot %d of key %q", slot, key)
}
