package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Catching up.
//
// A member that lost its raft log (its data directory was wiped, replaced
// by an empty one, or kept in memory) and comes back under its old ID and
// address is still a voter in the cluster's configuration, and raft would
// count its vote: a voter with an empty log grants its vote to any
// candidate. Entries it had acknowledged before (committed with its copy)
// can then be missing from a quorum, and a leader elected without them
// hands out their fencing tokens again.
//
// So a node that holds no raft state it can vouch for neither votes nor
// stands for election until its log holds every entry ever committed:
//
//   - A node catches up when it starts with a data directory that is not
//     initialised and does not bootstrap (it joins), when it starts in
//     memory and joins, and while its data directory holds the file
//     catching-up (written before the directory's cluster-id, removed once
//     the node caught up).
//   - Its join says so (JoinRequest.catching_up). The leader demotes a
//     voter with that ID to a non-voter (it catches up as one, and the
//     promoter makes it a voter again), records the member's API address
//     in the log, and answers with that entry's index: the catch-up index.
//     The leader holds every committed entry (it was elected without the
//     catching-up node's vote), and that entry comes after all of them,
//     so a log that reaches the catch-up index holds them all.
//   - The node keeps the catch-up index in catching-up. Once raft's last
//     index reaches it (entries, or a snapshot), the node votes again.
//
// Until then it records no vote (voteStable: raft records a vote, for
// another node or for itself, before it grants or counts it, and grants
// none it could not record), so it votes for nobody and cannot win an
// election; and it sends no vote or pre-vote request (voteGate). Its
// acknowledgements of entries still count, as they should: it
// acknowledges only what it has stored and synced.

// fileCatchingUp marks a data directory whose node has not caught up
// since it joined. It holds the catch-up index, 0 while it is not known.
const fileCatchingUp = "catching-up"

// errNotVoting answers vote requests while the node catches up.
var errNotVoting = errors.New("node: not voting: this node is catching up after it joined with a new data directory, or without one")

// catchUp is the state of a node's catching up.
type catchUp struct {
	done  atomic.Bool // caught up (or never behind): votes as usual
	mu    sync.Mutex
	index uint64 // the catch-up index; 0 while not known
	// warned is when the node last logged that it does not vote.
	warned time.Time
}

// readCatchUp reads the catching-up file of a data directory: whether the
// node is catching up, and to which index.
func readCatchUp(dir string) (catching bool, index uint64, err error) {
	data, err := os.ReadFile(filepath.Join(dir, fileCatchingUp))
	if errors.Is(err, os.ErrNotExist) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	index, err = strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return false, 0, fmt.Errorf("holds %q, not a raft index", strings.TrimSpace(string(data)))
	}
	return true, index, nil
}

// writeCatchUp records that the node catches up to index (0: not known).
func writeCatchUp(dir string, index uint64) error {
	if err := writeFileSync(filepath.Join(dir, fileCatchingUp), []byte(strconv.FormatUint(index, 10)+"\n")); err != nil {
		return err
	}
	return syncDir(dir)
}

// CatchingUp reports whether this node is catching up: it neither votes
// nor stands for election until its log reaches the catch-up index.
func (n *Node) CatchingUp() bool { return !n.logCaughtUp() }

// CatchUpIndex returns the raft index this node catches up to, 0 if it
// has caught up or does not know the index yet.
func (n *Node) CatchUpIndex() uint64 {
	if n.catch.done.Load() {
		return 0
	}
	n.catch.mu.Lock()
	defer n.catch.mu.Unlock()
	return n.catch.index
}

// Joined records that this node joined cluster id, with the catch-up
// index the leader gave it (0 if it was not catching up, or the leader
// gave none), and lets that cluster's raft traffic in. It fails with
// ErrOtherCluster if the node belongs to another cluster.
func (n *Node) Joined(id string, catchUpIndex uint64) error {
	if err := n.setCluster(id, true); err != nil {
		return err
	}
	if n.catch.done.Load() || catchUpIndex == 0 {
		return nil
	}
	n.catch.mu.Lock()
	defer n.catch.mu.Unlock()
	if n.dir != nil {
		if err := writeCatchUp(n.dir.path, catchUpIndex); err != nil {
			return fmt.Errorf("node: record the catch-up index: %w", err)
		}
	}
	n.catch.index = catchUpIndex
	n.log.Info("catching up: this node votes once its raft log reaches the catch-up index", "catch_up_index", catchUpIndex)
	return nil
}

// mayVote reports whether this node may vote and stand for election (see
// logCaughtUp); the vote gate asks it, and a refusal is logged (at most every
// ten seconds).
func (n *Node) mayVote() bool {
	if n.logCaughtUp() {
		return true
	}
	n.catch.mu.Lock()
	defer n.catch.mu.Unlock()
	if time.Since(n.catch.warned) > 10*time.Second {
		n.catch.warned = time.Now()
		if n.catch.index == 0 {
			n.log.Warn("not voting: this node joined with no raft state it can vouch for and has no catch-up index yet; "+
				"it gets one when its join is answered (start it with --join ADDR of a member)", "node_id", n.cfg.ID)
		} else {
			last := uint64(0)
			if r := n.raftRef.Load(); r != nil {
				last = r.LastIndex()
			}
			n.log.Warn("not voting until this node has caught up with the cluster", "catch_up_index", n.catch.index, "last_index", last)
		}
	}
	return false
}

// logCaughtUp reports whether this node is not catching up, or its log
// has reached the catch-up index (then it stops catching up for good).
func (n *Node) logCaughtUp() bool {
	if n.catch.done.Load() {
		return true
	}
	n.catch.mu.Lock()
	defer n.catch.mu.Unlock()
	if n.catch.done.Load() {
		return true
	}
	r := n.raftRef.Load()
	if n.catch.index == 0 || r == nil || r.LastIndex() < n.catch.index {
		return false
	}
	if n.dir != nil {
		if err := os.Remove(filepath.Join(n.dir.path, fileCatchingUp)); err != nil && !errors.Is(err, os.ErrNotExist) {
			n.log.Error("cannot remove the catching-up mark; still not voting", "err", err)
			return false
		}
		if err := syncDir(n.dir.path); err != nil {
			n.log.Error("cannot sync the data directory; still not voting", "err", err)
			return false
		}
	}
	n.catch.done.Store(true)
	n.log.Info("caught up with the cluster: voting from now on", "catch_up_index", n.catch.index, "last_index", r.LastIndex())
	return true
}

// watchCatchUp checks, while this node is catching up, whether its log
// has reached the catch-up index, so that it says so (and votes again)
// without waiting for the next election to ask.
func (n *Node) watchCatchUp() {
	defer n.wg.Done()
	t := time.NewTicker(max(n.cfg.HeartbeatTimeout/2, 10*time.Millisecond))
	defer t.Stop()
	for !n.catch.done.Load() {
		select {
		case <-n.closing:
			return
		case <-t.C:
			n.logCaughtUp()
		}
	}
}

// voteGate is a raft transport that sends no vote or pre-vote request
// while the node may not vote (see Catching up): it does not stand for
// election. It also reads the leader's commit index from the requests
// raft receives (see Falling behind).
type voteGate struct {
	raft.Transport
	may func() bool
	tap *commitTap
}

// newVoteGate wraps t, or returns nil if t lacks what raft needs of a
// transport beyond the interface (see canHoldBackCommits).
func newVoteGate(t raft.Transport, may func() bool, tap *commitTap) *voteGate {
	if !canHoldBackCommits(t) {
		return nil
	}
	return &voteGate{Transport: t, may: may, tap: tap}
}

// commitTap passes the requests raft receives on to raft, and tells saw
// the commit index of each AppendEntries (and the last index of each
// snapshot) on the way. Heartbeats, which carry none, go to raft on a
// path of their own.
type commitTap struct {
	saw func(commit uint64)
	// beforeAppend, if set, runs before raft gets an AppendEntries that
	// carries entries, and may block (Config.FaultBeforeAppend).
	beforeAppend func(first, last uint64)
	// stop ends the tap once raft has shut down.
	stop <-chan struct{}

	once sync.Once
	out  chan raft.RPC
}

// Consumer returns the requests for raft: raft calls it once, when it
// starts.
func (g *voteGate) Consumer() <-chan raft.RPC {
	t := g.tap
	t.once.Do(func() {
		t.out = make(chan raft.RPC)
		go t.run(g.Transport.Consumer())
	})
	return t.out
}

func (t *commitTap) run(in <-chan raft.RPC) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-t.stop:
			return
		}
		switch req := rpc.Command.(type) {
		case *raft.AppendEntriesRequest:
			t.saw(req.LeaderCommitIndex)
			if t.beforeAppend != nil && len(req.Entries) > 0 {
				t.beforeAppend(req.Entries[0].Index, req.Entries[len(req.Entries)-1].Index)
			}
		case *raft.InstallSnapshotRequest:
			t.saw(req.LastLogIndex)
		}
		select {
		case t.out <- rpc:
		case <-t.stop:
			return
		}
	}
}

func (g *voteGate) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	if !g.may() {
		return errNotVoting
	}
	return g.Transport.RequestVote(id, target, args, resp)
}

func (g *voteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	if !g.may() {
		return errNotVoting
	}
	return g.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

func (g *voteGate) Close() error { return g.Transport.(raft.WithClose).Close() }

// Where raft keeps its vote in the stable store.
var (
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

// voteStable is a stable store that refuses to record a vote while the
// node may not vote (see Catching up). raft records every vote, for
// another node or for itself as a candidate, before it counts or grants
// it, and grants none it could not record: so the node votes for nobody,
// and cannot win an election. Refusing here costs nothing on the path of
// entries, which a gate on the transport's incoming RPCs would.
type voteStable struct {
	raft.StableStore
	may func() bool
}

func (s voteStable) Set(key, val []byte) error {
	if string(key) == string(keyLastVoteCand) && !s.may() {
		return errNotVoting
	}
	return s.StableStore.Set(key, val)
}

func (s voteStable) SetUint64(key []byte, val uint64) error {
	if string(key) == string(keyLastVoteTerm) && !s.may() {
		return errNotVoting
	}
	return s.StableStore.SetUint64(key, val)
}
