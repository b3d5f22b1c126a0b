package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

	"github.com/tenure-io/tenure/internal/hclogslog"
	"github.com/tenure-io/tenure/internal/raftlog"
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
	// ErrCannotWrite is returned when the leader could not write a
	// request to its raft log because its data directory's file system
	// refuses writes (full, read-only, permissions). The request was not
	// applied; the leader steps down, and the cluster serves writes
	// again once a member that can write leads (the server answers
	// resource_exhausted, which clients do not retry on other members).
	ErrCannotWrite = errors.New("node: the leader cannot write its raft log (its data directory's file system is full, read-only or forbids writing); the request was not applied")
)

// Node is one member of a tenure cluster.
type Node struct {
	// votersGen and votersSeen keep the count of voters (see voters).
	votersGen  atomic.Uint64
	votersSeen atomic.Pointer[votersCount]
	cfg        Config
	log        *slog.Logger
	raft       *raft.Raft
	// raftRef is raft for the raft log's goroutines, which may run
	// before open returns.
	raftRef atomic.Pointer[raft.Raft]
	fsm     *fsm
	trans   raft.Transport
	stream  *clusterStream // nil with a custom transport
	// contact records when peers last answered; nil with a custom
	// transport.
	contact *contacts
	// troubles summarizes raft's failures to reach a peer; nil with
	// contact.
	troubles *troubles
	dir      *dataDir // nil in memory
	// clusterID is the cluster's ID once known; idMu serialises
	// recording it.
	clusterID atomic.Pointer[string]
	idMu      sync.Mutex
	// suspect is set while the heartbeat timeout is shortened because
	// the leader's connection broke (see peerGone).
	suspectMu sync.Mutex
	suspect   bool
	closer    []func() error // stores and transport, closed after raft
	limits    lease.Limits

	proposeCh chan *proposal
	inflight  chan *inflight

	// term is the state of this node's current term as leader, nil when
	// it does not lead or has not finished taking over.
	term atomic.Pointer[leaderTerm]
	// termMu orders publishing a term against ending it.
	termMu sync.Mutex

	hub     *hub
	metrics *metrics

	notify   chan bool     // raft's leadership notifications
	kick     chan struct{} // wakes the expirer after a batch applied
	closing  chan struct{}
	raftDown chan struct{} // closed once raft has shut down; see wait
	removed  chan struct{} // closed when this node was removed; see Removed
	// servers is the raft configuration as watchRemoval last saw it,
	// for code that must not call into raft (raft's own logging).
	servers atomic.Pointer[[]raft.Server]
	// transferUntil is, in Unix nanoseconds, when the last leadership
	// transfer this node started is surely over (see noteTransfer).
	transferUntil atomic.Int64
	// catch is whether this node is catching up (see catchup.go).
	catch catchUp
	// covered is the index of the newest snapshot stored (see
	// coveredLog).
	covered atomic.Uint64
	// prog is what this node learnt of its leader's commit index; hints
	// are the members' API addresses as its last run applied them, kept
	// in hintStore (nil in memory). See behind.go.
	prog      progress
	hints     map[string]string
	hintStore hintStore
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
		removed:   make(chan struct{}),
	}
	n.limits = cfg.Limits
	n.limits.MinTTL = cfg.MinTTL()
	n.fsm.onApply = n.onApply
	n.fsm.onRestore = n.onRestore
	n.fsm.onCluster = n.onClusterID
	n.fsm.onMembers = n.saveHints
	if err := n.open(); err != nil {
		n.closeStores()
		return nil, err
	}
	n.wg.Add(5)
	go n.proposer()
	go n.completer()
	go n.watchLeadership()
	go n.watchRemoval()
	go n.watchCatchUp()
	if n.troubles != nil {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.troubles.run(n.closing)
		}()
	}
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
	var hlog hclog.Logger
	if cfg.RaftLogOutput != nil {
		hlog = hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.LevelFromString(cfg.RaftLogLevel), Output: cfg.RaftLogOutput})
	} else {
		hlog = hclogslog.New(n.log, hclogslog.Options{
			Name: "raft", Level: hclog.LevelFromString(cfg.RaftLogLevel), Adjust: n.adjustRaftLog,
		})
	}
	if !cfg.InMemory {
		// Check the data directory before anything opens (and so
		// creates) a file in it.
		if n.dir, err = openDataDir(cfg.DataDir); err != nil {
			return err
		}
		if err := n.dir.checkRaftState(cfg.Bootstrap); err != nil {
			return err
		}
		if n.dir.initialised {
			if cfg.ID != "" && cfg.ID != n.dir.nodeID {
				return fmt.Errorf("node: data directory %s belongs to node %q, not %q", cfg.DataDir, n.dir.nodeID, cfg.ID)
			}
			cfg.ID = n.dir.nodeID
		}
	}
	n.trans = cfg.Transport
	if n.trans == nil {
		known := ""
		if n.dir != nil && n.dir.initialised {
			known = n.dir.clusterID
		}
		t, stream, err := newClusterTransport(cfg.RaftAddr, cfg.RaftAdvertise, known, cfg.PeerTLS, n.log, hlog)
		if err != nil {
			return err
		}
		n.contact = &contacts{}
		n.troubles = &troubles{log: n.log, contact: n.contact}
		stream.contacts = n.contact
		n.trans, n.stream = &contactTransport{NetworkTransport: t, c: n.contact}, stream
		n.closer = append(n.closer, func() error {
			// Close alone leaves pooled connections (and the goroutines
			// reading them) open.
			t.CloseStreams()
			return t.Close()
		})
	}
	tap := &commitTap{saw: n.prog.saw, beforeAppend: cfg.FaultBeforeAppend, stop: n.raftDown}
	if g := newVoteGate(n.trans, n.mayVote, tap); g != nil {
		n.trans = g
	}
	if cfg.ID == "" {
		cfg.ID = string(n.trans.LocalAddr())
	}
	if n.dir != nil && n.dir.initialised {
		n.setClusterID(n.dir.clusterID)
	}
	// A node with no raft state to vouch for catches up before it votes
	// (see catchup.go); one that bootstraps a cluster is that cluster.
	switch {
	case n.dir == nil || !n.dir.initialised:
		n.catch.done.Store(cfg.Bootstrap)
	default:
		n.catch.done.Store(!n.dir.catchingUp)
		n.catch.index = n.dir.catchUpIndex
		if n.dir.catchingUp {
			n.log.Warn("this node has not caught up since it joined its cluster with a new data directory: it votes "+
				"once its log reaches the catch-up index (0: not known until a join is answered; start it with --join)",
				"catch_up_index", n.dir.catchUpIndex)
		}
	}
	if cfg.InMemory {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		bolt, err := raftboltdb.New(raftboltdb.Options{
			Path:        filepath.Join(cfg.DataDir, fileRaftDB),
			BoltOptions: &bbolt.Options{Timeout: 2 * time.Second},
			NoSync:      cfg.FaultSkipFsync,
		})
		if err != nil {
			if errors.Is(err, bbolterr.ErrTimeout) {
				return fmt.Errorf("node: data directory %s is in use by another process", cfg.DataDir)
			}
			return n.dir.accessOr(fileRaftDB, err, &DataDirError{Dir: cfg.DataDir, File: fileRaftDB, Problem: "cannot be opened: " + err.Error()})
		}
		n.closer = append(n.closer, bolt.Close)
		n.hintStore = bolt
		n.hints = readHints(bolt)
		// The log goes to segment files with one fdatasync per append (a
		// leader's in the background: see synced.go);
		// raft.db keeps raft's term and vote, which change only at
		// elections.
		deferred := canHoldBackCommits(n.trans)
		logOpts := n.logOptions(deferred, boltMarks{bolt})
		logOpts.NoSync = cfg.FaultSkipFsync
		rl, err := raftlog.Open(filepath.Join(cfg.DataDir, dirRaftLog), logOpts)
		if err != nil {
			return n.dir.accessOr(dirRaftLog, err, &DataDirError{Dir: cfg.DataDir, File: dirRaftLog, Problem: "cannot be opened: " + err.Error()})
		}
		n.closer = append(n.closer, rl.Close)
		stable = bolt
		if deferred {
			stable = n.actOnlyOnSynced(rl, bolt)
		}
		if err := migrateLog(bolt, rl, n.log); err != nil {
			return err
		}
		if logs, err = raft.NewLogCache(512, coveredLog{Store: rl, covered: &n.covered}); err != nil {
			return err
		}
		fss, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
		if err != nil {
			return n.dir.accessOr(dirSnapshots, err, fmt.Errorf("node: open snapshot store: %w", err))
		}
		if metas, err := fss.List(); err == nil && len(metas) > 0 {
			noteCovered(&n.covered, metas[0].Index) // newest first
		}
		snaps = syncedSnapshots{FileSnapshotStore: fss, dir: filepath.Join(cfg.DataDir, dirSnapshots), rl: rl, covered: &n.covered}
	}
	stable = voteStable{StableStore: stable, may: n.mayVote}
	hasState, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return fmt.Errorf("node: inspect raft state: %w", err)
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
	bootstrap := !hasState && cfg.Bootstrap
	if bootstrap && n.ClusterID() == "" {
		// A new cluster: record its identity before raft writes a byte.
		id := NewClusterID()
		if n.dir != nil {
			if err := n.dir.initialise(cfg.ID, id, false); err != nil {
				return err
			}
		}
		n.setClusterID(id)
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, stable, snaps, n.trans)
	if err != nil {
		if n.dir != nil && strings.Contains(err.Error(), "snapshot") {
			return &DataDirError{Dir: cfg.DataDir, File: dirSnapshots, Problem: "cannot be restored: " + err.Error()}
		}
		return fmt.Errorf("node: start raft: %w", err)
	}
	n.raft = r
	n.raftRef.Store(r)
	if n.stream != nil {
		gone := n.peerGone
		n.stream.peerGone.Store(&gone)
	}
	if bootstrap {
		f := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{
			ID: rc.LocalID, Address: n.trans.LocalAddr(), Suffrage: raft.Voter,
		}}})
		if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("node: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new cluster", "id", cfg.ID, "cluster", n.ClusterID(), "raft", n.trans.LocalAddr())
	}
	n.log.Info("node started", "id", cfg.ID, "cluster", n.ClusterID(), "raft", n.trans.LocalAddr(), "existing_state", hasState, "min_ttl", n.limits.MinTTL)
	return nil
}

// ClusterID returns the ID of the cluster this node belongs to, or "" if
// it has not learnt it yet (a new node before it joined).
func (n *Node) ClusterID() string {
	if p := n.clusterID.Load(); p != nil {
		return *p
	}
	return ""
}

func (n *Node) setClusterID(id string) {
	n.clusterID.Store(&id)
	if n.stream != nil {
		n.stream.setClusterID(id)
	}
}

// SetClusterID records the ID of the cluster this node joined (a joining
// node learns it from the member that added it, or from the log) and lets
// raft traffic of that cluster in. It fails with ErrOtherCluster if the
// node already belongs to another cluster. A node that joined with its
// catch-up index calls Joined instead.
func (n *Node) SetClusterID(id string) error { return n.setCluster(id, true) }

// setCluster records the cluster ID; a data directory it initialises is
// marked as catching up (see catchup.go).
func (n *Node) setCluster(id string, joining bool) error {
	n.idMu.Lock()
	defer n.idMu.Unlock()
	if id == "" {
		return errors.New("node: empty cluster ID")
	}
	switch cur := n.ClusterID(); {
	case cur == id:
		return nil
	case cur != "":
		return fmt.Errorf("%w: this node belongs to cluster %s, not %s", ErrOtherCluster, cur, id)
	}
	if n.dir != nil && !n.dir.initialised {
		if err := n.dir.initialise(n.cfg.ID, id, joining); err != nil {
			return err
		}
	}
	n.setClusterID(id)
	n.log.Info("joined cluster", "cluster", id)
	return nil
}

// ExpectCluster lets raft traffic of cluster id in before this node has
// joined it, so that the leader's first messages after it adds this node
// are not refused while the join's answer is still on its way. It does
// nothing once the node belongs to a cluster; SetClusterID records the
// cluster when the join succeeded.
func (n *Node) ExpectCluster(id string) {
	n.idMu.Lock()
	defer n.idMu.Unlock()
	if id == "" || n.ClusterID() != "" || n.stream == nil {
		return
	}
	n.stream.setClusterID(id)
}

// onClusterID runs when the log or a snapshot names the cluster.
func (n *Node) onClusterID(id string) {
	if err := n.SetClusterID(id); err != nil {
		n.log.Error("the raft log names another cluster than this node's", "err", err)
	}
}

// ID returns the node's raft server ID.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr returns the address other nodes reach raft at: the advertised
// address if one was set, else the bound one.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// Limits returns the request limits, with MinTTL derived from raft timing.
func (n *Node) Limits() lease.Limits { return n.limits }

// HistoryRetention returns the lease history's retention in this node's
// applied state (set by a leader from its Config.History).
func (n *Node) HistoryRetention() lease.HistoryRetention { return n.fsm.historyRetention() }

// IsLeader reports whether this node leads and has finished taking over.
func (n *Node) IsLeader() bool { return n.term.Load() != nil }

// Leader returns the leader's ID and client API address.
func (n *Node) Leader() (id, apiAddr string, err error) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", "", ErrNoLeader
	}
	addr, ok := n.memberAPI(string(lid))
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
			n.handOver()
		}
		var peers []raft.Server
		if transfer {
			peers = n.peers()
			n.sayGoodbye(peers)
		}
		close(n.closing)
		err = n.raft.Shutdown().Error()
		// Again: raft may have answered a peer since the first one.
		n.sayGoodbye(peers)
		close(n.raftDown)
		n.wg.Wait()
		n.hub.closeAll()
		if cerr := n.closeStores(); err == nil {
			err = cerr
		}
	})
	return err
}

// handOver hands leadership to a voter that answered lately, before
// this leader stops. With none (the others stopped before), it stops
// without: there is nobody to hand over to. Raft gives the chosen voter
// one election timeout to win; on a starved machine it can win just
// after (it was told to campaign), so a timed-out transfer waits one more
// election timeout for the leadership to move, and tries again (up to
// three times) if it did not.
func (n *Node) handOver() {
	const attempts = 3
	var err error
	for range attempts {
		var tried bool
		if tried, err = n.transferOnce(); !tried {
			return
		}
		if err == nil || n.leadershipMoved(n.cfg.ElectionTimeout) {
			n.log.Info("transferred leadership before shutdown")
			return
		}
		if n.raft.State() != raft.Leader {
			break
		}
	}
	n.log.Warn("leadership transfer on shutdown failed", "err", err)
}

// transferOnce asks raft to hand leadership to the voter that answered
// last; tried is false when there is no voter to ask.
func (n *Node) transferOnce() (tried bool, err error) {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return false, nil
	}
	var fut raft.Future
	if n.contact == nil {
		n.noteTransfer()
		fut = n.raft.LeadershipTransfer()
	} else {
		var best raft.Server
		var bestAt time.Time
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Voter || s.ID == raft.ServerID(n.cfg.ID) || n.contact.departed(string(s.Address)) {
				continue
			}
			if at, ok := n.contact.last(s.Address); ok && time.Since(at) < n.cfg.HeartbeatTimeout && at.After(bestAt) {
				best, bestAt = s, at
			}
		}
		if best.ID == "" {
			n.log.Info("no other voter answered lately; stopping without handing over leadership")
			return false, nil
		}
		n.noteTransfer()
		fut = n.raft.LeadershipTransferToServer(best.ID, best.Address)
	}
	err = fut.Error()
	n.noteTransfer()
	return true, err
}

// leadershipMoved waits up to d for another member to lead.
func (n *Node) leadershipMoved(d time.Duration) bool {
	deadline := time.Now().Add(d)
	t := time.NewTicker(max(n.cfg.HeartbeatTimeout/10, 5*time.Millisecond))
	defer t.Stop()
	for {
		if _, id := n.raft.LeaderWithID(); n.raft.State() != raft.Leader && id != "" && id != raft.ServerID(n.cfg.ID) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		<-t.C
	}
}

// peers returns the other members of the raft configuration.
func (n *Node) peers() []raft.Server {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []raft.Server
	for _, s := range f.Configuration().Servers {
		if s.ID != raft.ServerID(n.cfg.ID) {
			out = append(out, s)
		}
	}
	return out
}

// noteTransfer records that this node hands its leadership over now:
// raft's complaints about the new leader's higher term, until a little
// after, are part of it (see adjustRaftLog).
func (n *Node) noteTransfer() {
	n.transferUntil.Store(time.Now().Add(n.cfg.ElectionTimeout + time.Second).UnixNano())
}

// transferring reports whether a transfer noted by noteTransfer may still
// be under way.
func (n *Node) transferring() bool { return time.Now().UnixNano() < n.transferUntil.Load() }

// sayGoodbye tells peers that this node is stopping (see goodbyeMagic),
// all at once, each within a short timeout.
func (n *Node) sayGoodbye(peers []raft.Server) {
	if n.stream == nil {
		return
	}
	var wg sync.WaitGroup
	for _, s := range peers {
		wg.Go(func() {
			if err := n.stream.goodbye(s.Address, n.cfg.ID, 500*time.Millisecond); err != nil {
				n.log.Debug("could not say goodbye to a raft peer", "peer", s.Address, "err", err)
			}
		})
	}
	wg.Wait()
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

// voters returns how many voters the cluster has, as raft's latest
// configuration says. Memory renewals ask on every call, so the count is
// kept until the generation changes: before and after every promotion
// to voter (the only change that adds one; a stale count that is too
// high costs a needless quorum check, never a wrong answer) and at every
// new leader term.
func (n *Node) voters() int {
	g := n.votersGen.Load()
	if v := n.votersSeen.Load(); v != nil && v.gen == g {
		return v.n
	}
	c := n.countVoters()
	n.votersSeen.Store(&votersCount{gen: g, n: c})
	return c
}

// votersCount is a count of voters and the generation it is of.
type votersCount struct {
	gen uint64
	n   int
}

// votersChanging makes the next voters read the configuration again.
func (n *Node) votersChanging() { n.votersGen.Add(1) }

func (n *Node) countVoters() int {
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

// migrateLog moves the raft log of a data directory made by an older
// tenure from raft.db into the segment log. raft.db's entries are deleted
// only after all of them are in the segment log and synced, so a crash
// at any point leaves them in raft.db, and the next start moves them
// again from scratch.
func migrateLog(bolt *raftboltdb.BoltStore, rl *raftlog.Store, log *slog.Logger) error {
	first, err := bolt.FirstIndex()
	if err != nil {
		return fmt.Errorf("node: read the log in raft.db: %w", err)
	}
	last, err := bolt.LastIndex()
	if err != nil || last == 0 {
		return err
	}
	if rf, _ := rl.FirstIndex(); rf != 0 {
		// Left by a migration that did not finish: start again.
		rlast, _ := rl.LastIndex()
		if err := rl.DeleteRange(rf, rlast); err != nil {
			return fmt.Errorf("node: clear an unfinished log migration: %w", err)
		}
	}
	const chunk = 256
	for i := first; i <= last; i += chunk {
		var batch []*raft.Log
		for j := i; j <= min(last, i+chunk-1); j++ {
			var l raft.Log
			if err := bolt.GetLog(j, &l); err != nil {
				return fmt.Errorf("node: read entry %d of raft.db: %w", j, err)
			}
			batch = append(batch, &l)
		}
		if err := rl.StoreLogs(batch); err != nil {
			return fmt.Errorf("node: move the log to %s: %w", dirRaftLog, err)
		}
	}
	if err := bolt.DeleteRange(first, last); err != nil {
		return fmt.Errorf("node: remove the moved log from raft.db: %w", err)
	}
	log.Info("moved the raft log from raft.db to the segment log", "entries", last-first+1, "dir", dirRaftLog)
	return nil
}

// peerGone runs when a raft connection from the peer at addr broke. If
// that peer is the leader, it has probably died (a killed process takes
// its connections with it): rather than wait out the whole heartbeat
// timeout, the follower shortens it for a while, so that it stands for
// election as soon as the leader has been silent for the shorter time. A
// leader that is alive (its connection closed for another reason) keeps
// sending heartbeats far more often than that, so nothing changes.
func (n *Node) peerGone(addr string) {
	if n.raft.State() != raft.Follower {
		return
	}
	if leader, _ := n.raft.LeaderWithID(); string(leader) != addr {
		return
	}
	n.suspectMu.Lock()
	defer n.suspectMu.Unlock()
	if n.suspect {
		return
	}
	normal := n.raft.ReloadableConfig()
	fast := normal
	fast.HeartbeatTimeout = max(n.cfg.LeaderLeaseTimeout, normal.HeartbeatTimeout/4)
	if fast.HeartbeatTimeout >= normal.HeartbeatTimeout {
		return
	}
	if err := n.raft.ReloadConfig(fast); err != nil {
		n.log.Warn("shortening the heartbeat timeout failed", "err", err)
		return
	}
	n.suspect = true
	n.log.Info("the leader's raft connection broke; waiting only a short heartbeat timeout for it", "leader", addr, "timeout", fast.HeartbeatTimeout)
	time.AfterFunc(2*normal.HeartbeatTimeout+normal.ElectionTimeout, func() {
		n.suspectMu.Lock()
		defer n.suspectMu.Unlock()
		n.suspect = false
		select {
		case <-n.closing:
			return
		default:
		}
		if err := n.raft.ReloadConfig(normal); err != nil {
			n.log.Warn("restoring the heartbeat timeout failed", "err", err)
		}
	})
}
