package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/faultfs"
	"github.com/tenure-io/tenure/internal/tenuredproc"
)

// FindTenured returns the path of a tenured binary: next to this
// executable if there is one, otherwise built with `go build` into dir.
// It never takes one from PATH, which may be stale.
func FindTenured(dir string) (string, error) {
	return tenuredproc.Lookup{BuildDir: dir}.Find()
}

// Node is one tenured process, restartable with the same identity.
type Node struct {
	Index     int
	ID        string
	API       string
	RaftAddr  string // where tenured listens for raft
	ProxyAddr string // what it advertises: the proxy in front of RaftAddr
	DataDir   string
	LogPath   string

	mu   sync.Mutex
	proc *tenuredproc.Process
}

// Cluster is N tenured processes behind raft proxies. Its API and raft
// ports stay reserved (tenuredproc.ReservePorts) while nodes are down, so
// no other cluster on the machine can take them.
type Cluster struct {
	Bin string
	// Dir holds the nodes' data directories and logs (n1.log, ...).
	Dir      string
	Nodes    []*Node
	Net      *Network
	Election time.Duration
	// Extra is appended to every node's command line.
	Extra []string
	// NodeExtra, if set, gives flags of node ID's own (its certificates).
	NodeExtra func(id string) []string
	// Disks, if set (MountDisks), are the faultfs mounts the nodes' data
	// directories live on.
	Disks []*faultfs.FS
	ports *tenuredproc.Ports
	join  string
	// booted is set once the first node has bootstrapped the cluster:
	// from then on a node without an initialised data directory must
	// join a member, node 0 included.
	booted atomic.Bool
}

// NewCluster prepares n nodes with data under dir; Start launches them.
func NewCluster(bin, dir string, n int, election time.Duration) (*Cluster, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := tenuredproc.ReservePorts(2 * n)
	if err != nil {
		return nil, err
	}
	addrs := ports.Addrs()
	c := &Cluster{Bin: bin, Dir: dir, Election: election, ports: ports}
	c.Net = NewNetwork(c.pids)
	for i := range n {
		api, raft := addrs[2*i], addrs[2*i+1]
		proxy, err := c.Net.AddProxy(i, raft)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, &Node{
			Index: i, ID: fmt.Sprintf("n%d", i+1), API: api, RaftAddr: raft, ProxyAddr: proxy,
			DataDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), LogPath: filepath.Join(dir, fmt.Sprintf("n%d.log", i+1)),
		})
	}
	c.join = c.Nodes[0].API
	return c, nil
}

func (c *Cluster) pids() map[int]int {
	out := map[int]int{}
	for _, n := range c.Nodes {
		n.mu.Lock()
		if n.proc != nil && n.proc.Running() {
			out[n.proc.Pid()] = n.Index
		}
		n.mu.Unlock()
	}
	return out
}

// Endpoints returns every node's API address.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.API)
	}
	return out
}

// Start launches node i with clock rate rate.
func (c *Cluster) Start(i int, rate float64) error {
	_, err := c.StartWith(i, rate, nil, "")
	return err
}

// StartWith launches node i with clock rate rate and extra arguments, and
// returns the process. join, if set, is the API address it joins through.
// Else, once the cluster is up, a node whose data directory is not
// initialised (it was wiped) joins through a live member (JoinAddr), node
// 0 included: started without --join it would make a cluster of its own.
// Every other node but the first joins a live member too, which a member
// treats as a no-op; node 0 with its data starts without --join.
func (c *Cluster) StartWith(i int, rate float64, extra []string, join string) (*tenuredproc.Process, error) {
	n := c.Nodes[i]
	spec := tenuredproc.Node{ID: n.ID, API: n.API, Raft: n.RaftAddr, RaftAdvertise: n.ProxyAddr, DataDir: n.DataDir,
		Extra: append(append([]string{"--election-timeout", c.Election.String(), "--fault-inject-clock-rate", fmt.Sprint(rate)}, c.Extra...), extra...)}
	if c.NodeExtra != nil {
		spec.Extra = append(spec.Extra, c.NodeExtra(n.ID)...)
	}
	switch {
	case join != "":
		spec.Join = join
	case c.booted.Load() && (i != 0 || !c.Initialised(i)):
		spec.Join = c.JoinAddr(context.Background(), i)
	case i != 0:
		spec.Join = c.join
	}
	logf, err := os.OpenFile(n.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(logf, "=== %s start rate=%v %v\n", time.Now().UTC().Format(time.RFC3339Nano), rate, extra)
	p, err := tenuredproc.Start(c.Bin, spec.Args(), logf)
	if err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", n.ID, err)
	}
	go func() { <-p.Exited(); logf.Close() }()
	n.mu.Lock()
	n.proc = p
	n.mu.Unlock()
	return p, nil
}

// Kill sends SIGKILL to node i and waits for it to exit (SIGKILL ends a
// paused process too).
func (c *Cluster) Kill(i int) {
	n := c.Nodes[i]
	n.mu.Lock()
	p := n.proc
	n.proc = nil
	n.mu.Unlock()
	if p != nil {
		p.Kill()
	}
}

// Running reports whether node i has a live process.
func (c *Cluster) Running(i int) bool {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && n.proc.Running()
}

// Signal sends sig (SIGSTOP, SIGCONT) to node i.
func (c *Cluster) Signal(i int, sig syscall.Signal) {
	n := c.Nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc != nil {
		n.proc.Signal(sig)
	}
}

// Close kills every node, stops the proxies and gives the ports back.
func (c *Cluster) Close() {
	for i := range c.Nodes {
		c.Signal(i, syscall.SIGCONT)
		c.Kill(i)
	}
	c.Net.Close()
	c.ports.Release()
}

// Client returns a client of every node.
func (c *Cluster) Client() (*client.Client, error) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = c.Endpoints()
	cfg.RequestTimeout = 2 * time.Second
	cfg.DialTimeout = time.Second
	return newClient(cfg)
}

func nodeReady(api string) bool { return tenuredproc.Ready(api) == nil }

// Boot starts every node and waits until all are members and ready.
func (c *Cluster) Boot(ctx context.Context) error {
	if err := c.Start(0, 1); err != nil {
		return err
	}
	if err := waitFor(ctx, 20*time.Second, "the first node to be ready", func() bool { return nodeReady(c.Nodes[0].API) }); err != nil {
		return err
	}
	c.booted.Store(true)
	for i := 1; i < len(c.Nodes); i++ {
		if err := c.Start(i, 1); err != nil {
			return err
		}
	}
	cl, err := c.Client()
	if err != nil {
		return err
	}
	defer cl.Close()
	// Joiners start as non-voters and are promoted once caught up; the
	// faults only make sense against a cluster of voters.
	var last string // what the last look saw, for the error
	err = waitFor(ctx, 30*time.Second, "every node to join, be promoted to voter and be ready", func() bool {
		st, err := cl.Status(ctx)
		if err != nil {
			last = fmt.Sprintf("status: %v", err)
			return false
		}
		var seen []string
		ok := len(st.Members) == len(c.Nodes)
		for _, m := range st.Members {
			seen = append(seen, m.ID+" "+m.Suffrage)
			ok = ok && m.Suffrage == "voter"
		}
		for _, n := range c.Nodes {
			if !nodeReady(n.API) {
				seen = append(seen, n.ID+" not ready")
				ok = false
			}
		}
		last = fmt.Sprintf("leader %s lists %s", st.LeaderID, strings.Join(seen, ", "))
		return ok
	})
	if err != nil {
		return fmt.Errorf("%w; the last look: %s (node logs in %s)", err, last, c.Dir)
	}
	return nil
}

// Leader returns the index of the node the cluster reports as leader.
func (c *Cluster) Leader(ctx context.Context) (int, bool) {
	for _, n := range c.Nodes {
		cfg := client.DefaultConfig()
		cfg.Endpoints = []string{n.API}
		cfg.RequestTimeout = 500 * time.Millisecond
		cl, err := newClient(cfg)
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 700*time.Millisecond)
		st, err := cl.Status(sctx)
		cancel()
		cl.Close()
		if err != nil || st.LeaderID == "" {
			continue
		}
		for _, m := range c.Nodes {
			if m.ID == st.LeaderID {
				return m.Index, true
			}
		}
	}
	return 0, false
}

// fileClusterID is the file that makes a data directory initialised
// (node/datadir.go): tenured refuses to start on an initialised directory
// with a piece missing or empty, and starts a new node on any other.
const fileClusterID = "cluster-id"

// Initialised reports whether node i's data directory is initialised:
// it has a cluster-id file. A wiped directory is not, nor is that of a
// node that has not joined yet.
func (c *Cluster) Initialised(i int) bool {
	_, err := os.Stat(filepath.Join(c.Nodes[i].DataDir, fileClusterID))
	return err == nil
}

// LeaderStatus returns the index and status of the node that reports
// itself as leader, asking each running node in turn. Unlike Leader it
// does not trust a node's word about another: a removed node may still
// name an old leader.
func (c *Cluster) LeaderStatus(ctx context.Context) (int, client.Status, bool) {
	for i := range c.Nodes {
		if !c.Running(i) {
			continue
		}
		st, err := nodeStatus(ctx, c, i)
		if err == nil && strings.HasPrefix(st.State, "leader") && st.NodeID == c.Nodes[i].ID {
			return i, st, true
		}
	}
	return 0, client.Status{}, false
}

// JoinAddr returns the API address through which node i (not running, or
// about to be restarted) should join the cluster: the leader's, if a node
// other than i reports itself leader, else that of the first other
// running node with an initialised data directory, else node 0's or, for
// node 0, node 1's. A joiner keeps retrying the one address it was
// given, so it must be a member's: a node that is not a member itself
// (removed, or wiped and not yet re-added) could never let it in.
func (c *Cluster) JoinAddr(ctx context.Context, i int) string {
	if l, _, ok := c.LeaderStatus(ctx); ok && l != i {
		return c.Nodes[l].API
	}
	for j := range c.Nodes {
		if j != i && c.Running(j) && c.Initialised(j) {
			return c.Nodes[j].API
		}
	}
	if i == 0 {
		return c.Nodes[1%len(c.Nodes)].API
	}
	return c.join
}

// waitFor is tenuredproc.WaitFor.
var waitFor = tenuredproc.WaitFor
