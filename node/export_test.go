package node

import (
	"io"
	"strconv"
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
