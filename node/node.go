package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"
	bbolterr "go.etcd.io/bbolt/errors"

	"github.com/tenure-io/tenure/lease"
)

var (
	// ErrNotLeader is returned by calls that only the leader serves when
	// this node is not the leader (or has not finished taking over). The
	// request was not proposed; it is safe to retry elsewhere.
	ErrNotLeader = errors.New("node: not the leader")
	// ErrNoLeader is returned when the cluster has no known leader, e.g.
	// during an election or without a quorum.
	ErrNoLeader = errors.New("node: no leader")
	// ErrIndeterminate is returned when leadership was lost while a request
	// was in flight: it may or may not have been committed.
	ErrIndeterminate = errors.New("node: leadership lost; the request may or may not have been applied")
	// ErrClosed is returned after Close, and to requests in flight when
	// the node closes: those may or may not have been applied.
	ErrClosed = errors.New("node: closed")
)

// Node is one member of a tenure cluster.
type Node struct {
	cfg    Config
	log    *slog.Logger
	raft   *raft.Raft
	fsm    *fsm
	trans  raft.Transport
	closer []func() error // stores and transport, closed after raft
	limits lease.Limits

	proposeCh chan *proposal
	inflight  chan *inflight

	// term is the state of this node's current term as leader, nil when
	// it does not lead or has not finished taking over.
	term atomic.Pointer[leaderTerm]
	// termMu orders publishing a term against ending it.
	termMu sync.Mutex

	hub     *hub
	metrics *metrics

	notify    chan bool     // raft's leadership notifications
	kick      chan struct{} // wakes the expirer after a batch applied
	closing   chan struct{}
	raftDown  chan struct{} // closed once raft has shut down; see wait
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New opens (or creates) the node's stores and starts raft and the node's
// loops. A node with no raft state and cfg.Bootstrap set starts a new
// single-node cluster.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{
		cfg:       cfg,
		log:       cfg.Logger,
		fsm:       newFSM(),
		proposeCh: make(chan *proposal, 4096),
		inflight:  make(chan *inflight, cfg.MaxInflight),
		hub:       newHub(),
		metrics:   newMetrics(cfg.Registerer),
		kick:      make(chan struct{}, 1),
		closing:   make(chan struct{}),
		raftDown:  make(chan struct{}),
	}
	n.limits = cfg.Limits
	n.limits.MinTTL = cfg.MinTTL()
	n.fsm.onApply = n.onApply
	n.fsm.onRestore = n.onRestore
	if err := n.open(); err != nil {
		n.closeStores()
		return nil, err
	}
	n.wg.Add(3)
	go n.proposer()
	go n.completer()
	go n.watchLeadership()
	return n, nil
}

func (n *Node) open() error {
	cfg := &n.cfg
	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
		err    error
	)
	raftOut := cfg.RaftLogOutput
	if raftOut == nil {
		raftOut = os.Stderr
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.LevelFromString(cfg.RaftLogLevel), Output: raftOut})
	n.trans = cfg.Transport
	if n.trans == nil {
		t, err := newTCPTransport(cfg.RaftAddr, cfg.RaftAdvertise, hlog)
		if err != nil {
			return err
		}
		n.trans = t
		n.closer = append(n.closer, func() error {
			// Close alone leaves pooled connections (and the goroutines
			// reading them) open.
			t.CloseStreams()
			return t.Close()
		})
	}
	if cfg.InMemory {
		if cfg.ID == "" {
			cfg.ID = string(n.trans.LocalAddr())
		}
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return fmt.Errorf("node: create data directory: %w", err)
		}
		if cfg.ID, err = resolveID(cfg.DataDir, cfg.ID, string(n.trans.LocalAddr())); err != nil {
			return err
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(cfg.DataDir, "raft.db"),
			BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
		})
		if err != nil {
			if errors.Is(err, bbolterr.ErrTimeout) {
				return fmt.Errorf("node: data directory %s is in use by another process", cfg.DataDir)
			}
			return fmt.Errorf("node: open raft log: %w", err)
		}
		n.closer = append(n.closer, bolt.Close)
		cached, err := raft.NewLogCache(512, bolt)
		if err != nil {
			return err
		}
		logs, stable = cached, bolt
		snaps, err = raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
		if err != nil {
			return fmt.Errorf("node: open snapshot store: %w", err)
		}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.SnapshotInterval = cfg.SnapshotInterval
	rc.TrailingLogs = cfg.TrailingLogs
	rc.Logger = hlog
	n.notify = make(chan bool, 16)
	rc.NotifyCh = n.notify
	hasState, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("node: inspect raft state: %w", err)
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, stable, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("node: start raft: %w", err)
	}
	n.raft = r
	if !hasState && cfg.Bootstrap {
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: n.trans.LocalAddr(), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("node: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new cluster", "id", cfg.ID, "raft", n.trans.LocalAddr())
	}
	n.log.Info("node started", "id", cfg.ID, "raft", n.trans.LocalAddr(), "existing_state", hasState, "min_ttl", n.limits.MinTTL)
	return nil
}

// resolveID returns the ID stored in dir, storing want (or def) there if
// the directory has none. A data directory keeps its ID for life.
func resolveID(dir, want, def string) (string, error) {
	path := filepath.Join(dir, "node-id")
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(data))
		if want != "" && want != id {
			return "", fmt.Errorf("node: data directory %s belongs to node %q, not %q", dir, id, want)
		}
		return id, nil
	case !errors.Is(err, os.ErrNotExist):
		return "", fmt.Errorf("node: read node id: %w", err)
	}
	id := want
	if id == "" {
		id = def
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("node: write node id: %w", err)
	}
	return id, nil
}

func newTCPTransport(bind, advertise string, logger hclog.Logger) (*raft.NetworkTransport, error) {
	var adv net.Addr
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			return nil, fmt.Errorf("node: raft advertise address: %w", err)
		}
		adv = a
	}
	t, err := raft.NewTCPTransportWithLogger(bind, adv, 3, 10*time.Second, logger)
	if err != nil {
		return nil, fmt.Errorf("node: raft listen on %s: %w", bind, err)
	}
	return t, nil
}

// ID returns the node's raft server ID.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr returns the address other nodes reach raft at: the advertised
// address if one was set, else the bound one.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// Limits returns the request limits, with MinTTL derived from raft timing.
func (n *Node) Limits() lease.Limits { return n.limits }

// IsLeader reports whether this node leads and has finished taking over.
func (n *Node) IsLeader() bool { return n.term.Load() != nil }

// Leader returns the leader's ID and client API address.
func (n *Node) Leader() (id, apiAddr string, err error) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", "", ErrNoLeader
	}
	addr, ok := n.fsm.member(string(lid))
	if !ok {
		return string(lid), "", fmt.Errorf("%w: leader %s has not published its API address yet", ErrNoLeader, lid)
	}
	return string(lid), addr, nil
}

// WaitLeader blocks until the cluster has a leader that has finished taking
// over, as seen from this node, or ctx ends.
func (n *Node) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if n.IsLeader() {
			return nil
		}
		if _, _, err := n.Leader(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node: waiting for a leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops the node. A leader first hands leadership to another voter
// so the cluster does not wait for an election timeout.
func (n *Node) Close() error { return n.stop(true) }

// Abort stops the node at once without handing leadership over: as close
// to a crash as an in-process node gets. Demos and tests use it; a server
// uses Close.
func (n *Node) Abort() error { return n.stop(false) }

// stop shuts the node down; without transfer it stops as abruptly as raft
// allows (tests use that to simulate a crash).
func (n *Node) stop(transfer bool) error {
	var err error
	n.closeOnce.Do(func() {
		if transfer && n.IsLeader() && n.voters() > 1 {
			if ferr := n.raft.LeadershipTransfer().Error(); ferr != nil {
				n.log.Warn("leadership transfer on shutdown failed", "err", ferr)
			} else {
				n.log.Info("transferred leadership before shutdown")
			}
		}
		close(n.closing)
		err = n.raft.Shutdown().Error()
		close(n.raftDown)
		n.wg.Wait()
		n.hub.closeAll()
		if cerr := n.closeStores(); err == nil {
			err = cerr
		}
	})
	return err
}

func (n *Node) closeStores() error {
	var first error
	for i := len(n.closer) - 1; i >= 0; i-- {
		if err := n.closer[i](); err != nil && first == nil {
			first = err
		}
	}
	n.closer = nil
	return first
}

func (n *Node) voters() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}
