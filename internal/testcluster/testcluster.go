// Package testcluster runs tenure clusters inside a test process: real
// nodes (raft over TCP on loopback, logs in memory) behind real API servers
// on loopback ports, so clients talk to them exactly as to tenured. Tests
// of the client and of package election use it, and so do their testable
// examples.
package testcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/server"
)

// Config configures a Cluster.
type Config struct {
	// Size is the number of members. Default 1.
	Size int
	// ElectionTimeout is the raft heartbeat and election timeout of every
	// member. Default 100ms.
	ElectionTimeout time.Duration
	// MinTTL is the shortest TTL the cluster accepts; it is raised to
	// twice the election timeout. Default 200ms.
	MinTTL time.Duration
	// Logger receives the members' logs. Default: discarded.
	Logger *slog.Logger
}

// Cluster is a running in-process cluster.
type Cluster struct {
	cfg     Config
	mu      sync.Mutex
	members []*Member
}

// Member is one node and its API server.
type Member struct {
	ID   string
	Node *node.Node
	// Addr is the API address (host:port).
	Addr string

	srv     *server.Server
	http    *http.Server
	trans   *raft.NetworkTransport
	stream  *streamLayer
	stopped bool
}

// New starts a cluster: member 0 bootstraps, the others join through the
// leader. It returns once every member sees all of them as voters.
func New(cfg Config) (*Cluster, error) {
	if cfg.Size <= 0 {
		cfg.Size = 1
	}
	if cfg.ElectionTimeout <= 0 {
		cfg.ElectionTimeout = 100 * time.Millisecond
	}
	if cfg.MinTTL <= 0 {
		cfg.MinTTL = 200 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c := &Cluster{cfg: cfg}
	for i := range cfg.Size {
		m, err := c.startMember(fmt.Sprintf("n%d", i+1), i == 0)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.members = append(c.members, m)
		if i == 0 {
			if err := c.waitLeader(10 * time.Second); err != nil {
				c.Close()
				return nil, err
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = c.join(ctx, m)
		cancel()
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.waitVoters(20 * time.Second); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Start is New for a test: it fails the test on error and closes the
// cluster when the test ends.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func (c *Cluster) startMember(id string, bootstrap bool) (*Member, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testcluster: listen: %w", err)
	}
	rln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("testcluster: listen: %w", err)
	}
	stream := &streamLayer{Listener: rln, conns: make(map[net.Conn]struct{})}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hclog.New(&hclog.LoggerOptions{Name: "raft-net", Output: io.Discard}),
	})
	ncfg := node.DefaultConfig()
	ncfg.ID = id
	ncfg.InMemory = true
	ncfg.Transport = trans
	ncfg.APIAddr = ln.Addr().String()
	ncfg.Bootstrap = bootstrap
	ncfg.HeartbeatTimeout = c.cfg.ElectionTimeout
	ncfg.ElectionTimeout = c.cfg.ElectionTimeout
	ncfg.LeaderLeaseTimeout = c.cfg.ElectionTimeout / 2
	ncfg.Limits.MinTTL = c.cfg.MinTTL
	ncfg.Logger = c.cfg.Logger.With("node", id)
	ncfg.RaftLogOutput = io.Discard
	n, err := node.New(ncfg)
	if err != nil {
		ln.Close()
		trans.Close()
		return nil, err
	}
	srv, err := server.New(server.Config{Node: n, Logger: ncfg.Logger, Registry: prometheus.NewRegistry()})
	if err != nil {
		ln.Close()
		n.Abort()
		trans.Close()
		return nil, err
	}
	hs := server.NewHTTPServer(ln.Addr().String(), srv.Handler())
	go hs.Serve(ln)
	return &Member{ID: id, Node: n, Addr: ln.Addr().String(), srv: srv, http: hs, trans: trans, stream: stream}, nil
}

func (c *Cluster) join(ctx context.Context, m *Member) error {
	for {
		l := c.Leader()
		var err error
		if l == nil {
			err = errors.New("no leader")
		} else if err = l.Node.Join(ctx, m.ID, m.Node.RaftAddr(), m.Addr); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: join %s: %w", m.ID, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// poll calls f every 10ms until it returns nil or timeout passes.
func poll(what string, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testcluster: waited %s for %s: %w", timeout, what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *Cluster) waitLeader(timeout time.Duration) error {
	return poll("a leader", timeout, func() error {
		if c.Leader() == nil {
			return errors.New("no member leads")
		}
		return nil
	})
}

func (c *Cluster) waitVoters(timeout time.Duration) error {
	return poll("every member to see all members as voters", timeout, func() error {
		for _, m := range c.Running() {
			voters := 0
			for _, mm := range m.Node.Status().Members {
				if mm.Voter {
					voters++
				}
			}
			if voters != len(c.members) {
				return fmt.Errorf("%s sees %d voters", m.ID, voters)
			}
			if _, _, err := m.Node.Leader(); err != nil {
				return fmt.Errorf("%s: %w", m.ID, err)
			}
		}
		return nil
	})
}

// WaitLeader waits until some running member leads and every running
// member knows it.
func (c *Cluster) WaitLeader(timeout time.Duration) (*Member, error) {
	var l *Member
	err := poll("a leader known to every running member", timeout, func() error {
		if l = c.Leader(); l == nil {
			return errors.New("no member leads")
		}
		for _, m := range c.Running() {
			if id, _, err := m.Node.Leader(); err != nil || id != l.ID {
				return fmt.Errorf("%s sees leader %q (%v)", m.ID, id, err)
			}
		}
		return nil
	})
	return l, err
}

// Members returns every member, stopped ones included.
func (c *Cluster) Members() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Member(nil), c.members...)
}

// Running returns the members that were not stopped.
func (c *Cluster) Running() []*Member {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Member
	for _, m := range c.members {
		if !m.stopped {
			out = append(out, m)
		}
	}
	return out
}

// Leader returns the running member that leads and has finished taking
// over, or nil.
func (c *Cluster) Leader() *Member {
	for _, m := range c.Running() {
		if m.Node.IsLeader() {
			return m
		}
	}
	return nil
}

// Endpoints returns the API addresses of all members.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members() {
		out = append(out, m.Addr)
	}
	return out
}

// Crash stops m as abruptly as an in-process member can: its API server
// closes its connections and the node stops without handing over the
// leadership.
func (c *Cluster) Crash(m *Member) {
	c.mu.Lock()
	if m.stopped {
		c.mu.Unlock()
		return
	}
	m.stopped = true
	c.mu.Unlock()
	m.http.Close()
	m.Node.Abort()
	m.trans.Close()
	m.srv.Close()
}

// streamLayer is raft's TCP stream layer, but it remembers its
// connections and closes them on Close: raft's NetworkTransport leaves the
// readers of accepted connections running after Close, which a crashed
// process would not.
type streamLayer struct {
	net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func (s *streamLayer) track(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	s.conns[c] = struct{}{}
	return c, nil
}

func (s *streamLayer) Accept() (net.Conn, error) { return s.track(s.Listener.Accept()) }

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return s.track(d.Dial("tcp", string(addr)))
}

// Close closes the listener and every connection.
func (s *streamLayer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
	return s.Listener.Close()
}

// Close crashes every member (without leadership transfers: nothing is
// left to serve).
func (c *Cluster) Close() {
	for _, m := range c.Members() {
		c.Crash(m)
	}
}

// TestingM is what a TestMain runs: *testing.M, or a wrapper of it such
// as the one goleak.VerifyTestMain takes.
type TestingM interface{ Run() int }

// RunWithCluster runs m with a one-node cluster for a package's tests and
// testable examples: it starts the cluster, stores its API addresses in
// *endpoints, runs m and stops the cluster, so that goleak, when it wraps
// the result, looks for leaks only after the cluster is gone. It returns
// m's exit code, or 1 if the cluster did not start.
func RunWithCluster(m TestingM, endpoints *[]string) int {
	c, err := New(Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*endpoints = c.Endpoints()
	code := m.Run()
	c.Close()
	return code
}
