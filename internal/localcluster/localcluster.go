// Package localcluster runs a tenure cluster inside the calling process:
// real nodes, their raft traffic over loopback TCP or raft's in-memory
// transport, each behind the real API server on a loopback port, so that
// clients talk to it exactly as to tenured. Members can be crashed,
// stopped, restarted from their data directories and, on the in-memory
// transport, cut off from the others.
//
// `tenure demo` runs on it; tests use it through internal/testcluster.
package localcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/server"
)

// Network is how the members' raft traffic travels.
type Network int

const (
	// TCP carries raft over loopback TCP, as between tenured processes.
	TCP Network = iota
	// InMemory carries raft over raft's in-memory transport, whose links
	// Partition can cut.
	InMemory
)

// Config configures a Cluster.
type Config struct {
	// Size is the number of members. Default 1.
	Size int
	// Network carries the raft traffic. Default TCP.
	Network Network
	// DataDir, if set, holds each member's raft state (bbolt log and
	// snapshots) in DataDir/<member ID>, which Restart starts from.
	// Default: raft state in memory, lost when a member stops.
	DataDir string
	// NoAPI leaves the API servers out: members advertise the placeholder
	// API address api-<member ID>, and Endpoints is empty.
	NoAPI bool
	// ElectionTimeout is every member's raft heartbeat and election
	// timeout; the leader lease timeout is half of it. Default 250ms:
	// failovers within a second, and a leader that keeps its lease (125ms
	// to hear from a quorum) on a loaded machine under the race detector,
	// where 100ms made leaders step down again and again.
	ElectionTimeout time.Duration
	// MinTTL is the shortest TTL the cluster accepts, at least twice the
	// election timeout (node raises it). Default: that.
	MinTTL time.Duration
	// Log receives the members' logs, each record with a node attribute.
	// Default: discarded.
	Log slog.Handler
	// RaftLog receives hashicorp/raft's own logs. Default: discarded.
	RaftLog io.Writer
	// ForwardTimeout bounds a request a follower forwards to the leader
	// without a deadline of its own. Default: the server's (30s).
	ForwardTimeout time.Duration
	// Node, if set, adjusts each member's node configuration after the
	// settings above, at every start.
	Node func(*node.Config)
	// Server, if set, adjusts each member's server configuration (auth,
	// forwarding TLS) at every start.
	Server func(id string, cfg *server.Config)
	// APITLS, if set, returns the TLS settings member id serves its API
	// with; nil (or no APITLS) serves plain HTTP.
	APITLS func(id string) *tls.Config
}

// Cluster is a running in-process cluster. Its methods may be called
// from any goroutine, but not for the same member at once.
type Cluster struct {
	cfg     Config
	mu      sync.Mutex // guards the members' Node, down and cut
	members []*Member
}

// Member is one node and its API server.
type Member struct {
	// ID is the node ID: n1, n2, ...
	ID string
	// Addr is the API address (host:port). It stays the same across
	// restarts.
	Addr string
	// DataDir holds the member's raft state; empty if it is in memory.
	DataDir string
	// Node is the member's node: the running one, or the last one while
	// the member is down. Restart replaces it.
	Node *node.Node

	raftAddr string // TCP: the raft address, kept across restarts
	tcp      *raft.NetworkTransport
	inmem    *raft.InmemTransport
	srv      *server.Server
	http     *http.Server
	served   chan struct{} // closed when http's Serve returned
	down     bool
	cut      bool // partitioned away from every other member
}

// Start starts a cluster: member n1 bootstraps, the others join through
// the leader. It returns once every member sees all of them as voters and
// knows the leader.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Size <= 0 {
		cfg.Size = 1
	}
	if cfg.ElectionTimeout <= 0 {
		cfg.ElectionTimeout = 250 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.DiscardHandler
	}
	if cfg.RaftLog == nil {
		cfg.RaftLog = io.Discard
	}
	c := &Cluster{cfg: cfg}
	for i := range cfg.Size {
		m := &Member{ID: fmt.Sprintf("n%d", i+1), down: true}
		if cfg.DataDir != "" {
			m.DataDir = filepath.Join(cfg.DataDir, m.ID)
		}
		c.members = append(c.members, m)
	}
	if err := c.form(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// form starts the members one by one, each joining through the leader,
// and waits until they all see each other as voters.
func (c *Cluster) form(ctx context.Context) error {
	for i, m := range c.members {
		if err := c.start(m, i == 0); err != nil {
			return err
		}
		// n1 joins itself: a no-op once it leads.
		err := Poll(ctx, m.ID+" to join", func() error {
			for _, l := range c.members[:i+1] {
				if l.Node.IsLeader() {
					index, err := l.Node.Join(ctx, node.JoinRequest{ID: m.ID, RaftAddr: m.Node.RaftAddr(), APIAddr: m.apiAddr(),
						CatchingUp: m.Node.CatchingUp()})
					if err != nil {
						return err
					}
					return m.Node.Joined(l.Node.ClusterID(), index)
				}
			}
			return node.ErrNoLeader
		})
		if err != nil {
			return err
		}
	}
	return Poll(ctx, "every member to see all members as voters", func() error {
		for _, m := range c.members {
			voters := 0
			for _, mm := range m.Node.Status().Members {
				if mm.Voter {
					voters++
				}
			}
			if voters != len(c.members) {
				return fmt.Errorf("%s sees %d voters", m.ID, voters)
			}
		}
		_, err := c.leader()
		return err
	})
}

// start starts m's node, and its API server unless cfg.NoAPI, on the
// addresses it had if it ran before. Every node.Config is made here.
func (c *Cluster) start(m *Member, bootstrap bool) (err error) {
	var undo []func() error
	defer func() {
		if err != nil {
			for _, f := range slices.Backward(undo) {
				f()
			}
			err = fmt.Errorf("localcluster: start %s: %w", m.ID, err)
		}
	}()
	var ln net.Listener
	if !c.cfg.NoAPI {
		if ln, err = listen(m.Addr); err != nil {
			return err
		}
		undo = append(undo, ln.Close)
		// Under the lock: peerProgress, on another member's goroutines,
		// reads every member's address.
		c.mu.Lock()
		m.Addr = ln.Addr().String()
		c.mu.Unlock()
	}
	cfg := node.DefaultConfig()
	cfg.ID = m.ID
	cfg.DataDir = m.DataDir
	cfg.InMemory = m.DataDir == ""
	cfg.APIAddr = m.apiAddr()
	cfg.Bootstrap = bootstrap
	cfg.HeartbeatTimeout = c.cfg.ElectionTimeout
	cfg.ElectionTimeout = c.cfg.ElectionTimeout
	cfg.LeaderLeaseTimeout = c.cfg.ElectionTimeout / 2
	cfg.Limits.MinTTL = c.cfg.MinTTL
	cfg.Logger = slog.New(c.cfg.Log).With("node", m.ID)
	cfg.RaftLogOutput = c.cfg.RaftLog
	cfg.PeerProgress = c.peerProgress
	switch c.cfg.Network {
	case TCP:
		var rln net.Listener
		if rln, err = listen(m.raftAddr); err != nil {
			return err
		}
		m.raftAddr = rln.Addr().String()
		m.tcp = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  newStreamLayer(rln),
			MaxPool: 3,
			Timeout: 10 * time.Second,
			Logger:  hclog.New(&hclog.LoggerOptions{Name: "raft-net", Level: hclog.Warn, Output: c.cfg.RaftLog}),
		})
		undo = append(undo, m.tcp.Close)
		cfg.Transport = m.tcp
	case InMemory:
		_, m.inmem = raft.NewInmemTransport(raft.ServerAddress(m.ID))
		cfg.Transport = m.inmem
	}
	if c.cfg.Node != nil {
		c.cfg.Node(&cfg)
	}
	n, err := node.New(cfg)
	if err != nil {
		return err
	}
	if !c.cfg.NoAPI {
		undo = append(undo, n.Abort)
		scfg := server.Config{Node: n, Logger: cfg.Logger, Registry: prometheus.NewRegistry(), ForwardTimeout: c.cfg.ForwardTimeout}
		if c.cfg.Server != nil {
			c.cfg.Server(m.ID, &scfg)
		}
		if m.srv, err = server.New(scfg); err != nil {
			return err
		}
		m.http = server.NewHTTPServer(m.Addr, m.srv.Handler())
		m.http.ErrorLog = slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn)
		m.served = make(chan struct{})
		var tc *tls.Config
		if c.cfg.APITLS != nil {
			tc = c.cfg.APITLS(m.ID)
		}
		m.http.TLSConfig = tc
		go func() {
			defer close(m.served)
			if tc != nil {
				m.http.ServeTLS(ln, "", "")
				return
			}
			m.http.Serve(server.ReadAhead(ln))
		}()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m.Node, m.down, m.cut = n, false, false
	c.link(m)
	return nil
}

// apiAddr is the API address m advertises.
func (m *Member) apiAddr() string {
	if m.Addr == "" {
		return "api-" + m.ID
	}
	return m.Addr
}

// listen listens on addr, or on a free loopback port if addr is empty.
func listen(addr string) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	return net.Listen("tcp", addr)
}

// link connects m both ways to every running member that is not cut off,
// on the in-memory network. c.mu is held.
func (c *Cluster) link(m *Member) {
	if m.inmem == nil || m.cut {
		return
	}
	for _, o := range c.members {
		if o != m && !o.down && !o.cut {
			m.inmem.Connect(raft.ServerAddress(o.ID), o.inmem)
			o.inmem.Connect(raft.ServerAddress(m.ID), m.inmem)
		}
	}
}

// unlink cuts every raft link of m.
func (c *Cluster) unlink(m *Member) {
	if m.tcp != nil {
		m.tcp.Close() // closes every connection; see streamLayer
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.members {
		if o != m && !o.down {
			o.inmem.Disconnect(raft.ServerAddress(m.ID))
		}
	}
	m.inmem.DisconnectAll()
}

// Crash stops m as abruptly as an in-process member can: its API server
// drops every connection, its raft links are cut and its node stops
// without handing leadership over. Crashing a member that is down does
// nothing.
func (c *Cluster) Crash(m *Member) error {
	return c.stop(m, func(n *node.Node) error {
		c.unlink(m)
		return n.Abort()
	})
}

// Stop shuts m down as tenured does when told to stop: a leader hands
// leadership over first. Stopping a member that is down does nothing.
func (c *Cluster) Stop(m *Member) error {
	return c.stop(m, func(n *node.Node) error {
		defer c.unlink(m)
		return n.Close()
	})
}

// stop marks m down, closes its API server and stops its node with
// stopNode.
func (c *Cluster) stop(m *Member, stopNode func(*node.Node) error) error {
	c.mu.Lock()
	down := m.down
	m.down = true
	c.mu.Unlock()
	if down {
		return nil
	}
	if m.http != nil {
		m.http.Close()
		<-m.served
		defer m.srv.Close()
	}
	if err := stopNode(m.Node); err != nil {
		return fmt.Errorf("localcluster: stop %s: %w", m.ID, err)
	}
	return nil
}

// Restart starts m again from its data directory, on the same addresses.
// Its raft state must be on disk (Config.DataDir).
func (c *Cluster) Restart(m *Member) error {
	c.mu.Lock()
	down := m.down
	c.mu.Unlock()
	switch {
	case !down:
		return fmt.Errorf("localcluster: restart %s: it is running", m.ID)
	case m.DataDir == "":
		return fmt.Errorf("localcluster: restart %s: its raft state was in memory", m.ID)
	}
	return c.start(m, false)
}

// Partition cuts every raft link between m and the other members, until
// Heal. It needs the InMemory network.
func (c *Cluster) Partition(m *Member) error {
	if c.cfg.Network != InMemory {
		return errors.New("localcluster: Partition needs the InMemory network")
	}
	c.mu.Lock()
	m.cut = true
	down := m.down
	c.mu.Unlock()
	if !down {
		c.unlink(m)
	}
	return nil
}

// Heal links every pair of running members again.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		m.cut = false
	}
	for _, m := range c.members {
		if !m.down {
			c.link(m)
		}
	}
}

// Members returns every member, down ones included.
func (c *Cluster) Members() []*Member { return slices.Clone(c.members) }

// Running returns the members that are not down.
func (c *Cluster) Running() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Member
	for _, m := range c.members {
		if !m.down {
			out = append(out, m)
		}
	}
	return out
}

// Endpoints returns the API addresses of all members, down ones included:
// a client is configured once and finds the running ones itself.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.members {
		if m.Addr != "" {
			out = append(out, m.Addr)
		}
	}
	return out
}

// WaitLeader waits until exactly one of the running members that are not
// cut off leads (raft leader, takeover done) and all of them know it,
// and returns it.
func (c *Cluster) WaitLeader(ctx context.Context) (*Member, error) {
	var l *Member
	err := Poll(ctx, "one leader known to every running member", func() (err error) {
		l, err = c.leader()
		return err
	})
	return l, err
}

// leader returns the member WaitLeader waits for, or why there is none.
func (c *Cluster) leader() (*Member, error) {
	c.mu.Lock()
	var reachable []*Member
	for _, m := range c.members {
		if !m.down && !m.cut {
			reachable = append(reachable, m)
		}
	}
	c.mu.Unlock()
	var leaders []*Member
	for _, m := range reachable {
		// Status says "leader" once raft leads and the node has taken
		// over, and not after either has stepped down.
		if m.Node.Status().State == "leader" {
			leaders = append(leaders, m)
		}
	}
	if len(leaders) != 1 {
		ids := make([]string, len(leaders))
		for i, m := range leaders {
			ids[i] = m.ID
		}
		return nil, fmt.Errorf("leaders %v", ids)
	}
	for _, m := range reachable {
		if id, _, err := m.Node.Leader(); err != nil || id != leaders[0].ID {
			return nil, fmt.Errorf("%s sees leader %q (%v)", m.ID, id, err)
		}
	}
	return leaders[0], nil
}

// Close crashes every running member (there is nothing left to hand
// leadership to) and returns what went wrong.
func (c *Cluster) Close() error {
	var errs []error
	for _, m := range c.members {
		errs = append(errs, c.Crash(m))
	}
	return errors.Join(errs...)
}

// Poll calls cond every 10ms until it returns nil, or until ctx ends;
// then it returns an error that says what was awaited and cond's last
// answer.
func Poll(ctx context.Context, what string, cond func() error) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("localcluster: waiting for %s: %w (last: %v)", what, ctx.Err(), err)
		case <-t.C:
		}
	}
}

// peerProgress is what tenured learns from a member's Status over its
// API, read from the member's node directly.
func (c *Cluster) peerProgress(_ context.Context, apiAddr string) (node.PeerProgress, error) {
	c.mu.Lock()
	var n *node.Node
	for _, m := range c.members {
		if m.apiAddr() == apiAddr && !m.down {
			n = m.Node
		}
	}
	c.mu.Unlock()
	if n == nil {
		return node.PeerProgress{}, fmt.Errorf("localcluster: no running member has API address %s", apiAddr)
	}
	st := n.Status()
	return node.PeerProgress{Applied: st.AppliedIndex, CatchingUp: st.CatchingUp, Behind: st.Behind}, nil
}
