package node

import (
	"io"
	"strconv"

	"github.com/hashicorp/raft"
)

// For the cluster tests in package node_test, which cannot be in package
// node: the cluster helper they use imports node.

// WriteState writes n's lease state in the lease snapshot format, which is
// deterministic: equal states give equal bytes.
func (n *Node) WriteState(w io.Writer) error {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.st.WriteSnapshot(w)
}

// SnapshotIndex returns the index of n's last raft snapshot, 0 if none.
func (n *Node) SnapshotIndex() uint64 {
	v, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
	return v
}

// SetAfterBarrier makes every takeover of a node made with cfg call f
// right after its barrier, with a channel closed when the term ends.
func SetAfterBarrier(cfg *Config, f func(n *Node, termEnded <-chan struct{})) {
	cfg.afterBarrier = func(n *Node, t *leaderTerm) { f(n, t.ctx.Done()) }
}

// RaftState returns raft's own view of n's role.
func (n *Node) RaftState() raft.RaftState { return n.raft.State() }

// TransferAway asks raft to hand n's leadership to another voter.
func (n *Node) TransferAway() error { return n.raft.LeadershipTransfer().Error() }

// Snapshot takes a raft snapshot now.
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// SetBeforeLogSync makes every node made with cfg call f before each
// background sync of its raft log (only a leader's appends are synced in
// the background).
func SetBeforeLogSync(cfg *Config, f func()) { cfg.beforeLogSync = f }

// FSMApplied returns the index of the last entry n's state machine
// applied. (raft's AppliedIndex counts entries once they are handed to
// the state machine, before it applies them.)
func (n *Node) FSMApplied() uint64 {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.applied
}

// lead returns n's published leader term, or nil.
func (n *Node) lead() *leaderTerm { return n.term.Load() }

// Voters returns the count of voters that memory renewals go by.
func (n *Node) Voters() int { return n.voters() }
