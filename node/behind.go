package node

import (
	"encoding/json"
	"fmt"
	"sync"

	"github.com/hashicorp/raft"
)

// Falling behind.
//
// A member that was down, cut off or slow has applied less than its
// leader has committed, and until it catches up what it knows from its
// applied state is old: leases and tokens, and the members' API
// addresses, which the log records. A restarted member without a
// snapshot knows none of them: it has applied nothing until the leader
// tells it what is committed, which after an outage can take seconds
// (raft backs off its retries to an unreachable follower for up to ten).
//
// So a node says when it is behind (Status.Behind, "catching up: applied
// N of M"): it follows a leader and
//
//   - since it started, it has not yet applied the commit index a leader
//     first sent it (M is then its own log's last index until one does),
//     or
//   - it trails the highest commit index a leader has sent it by more
//     than catchUpSlack entries.
//
// The leader's commit index comes with raft's AppendEntries requests;
// the vote gate (catchup.go) reads it on their way in (commitTap). A
// leader sends one every few tens of milliseconds, and with every batch
// of entries.
//
// While it is behind, a node is not ready (/readyz, gRPC health), its
// Status names the leader's commit index, the server answers for the
// members with the leader's view, and a leader does not hand leadership
// to it (TransferLeadership waits for it, for a while, then refuses and
// says why). It finds the leader's API address in the members its last
// run had applied (memberHints), so that it can forward requests and
// questions before its own log has told it.

// catchUpSlack is how many entries a follower may trail the leader's
// commit index by and still count as caught up: the entries in flight
// between the leader's commit and the follower's apply. The leader keeps
// a few batches in flight (Config.MaxInflight); a slow disk or a busy
// machine adds some.
const catchUpSlack = 64

// progress is what a node has learnt of its leader's commit index.
type progress struct {
	mu sync.Mutex
	// commit is the highest commit index a leader sent (or the last index
	// of a snapshot it sent).
	commit uint64
	// heard is set once a leader sent a commit index since the node
	// started; first is that first index, which the node must apply
	// before it counts as caught up since its start (started).
	heard   bool
	first   uint64
	started bool
}

// saw records a commit index a leader sent. A leader's commit index is
// committed whatever became of that leader, so the highest one seen is
// still committed.
func (p *progress) saw(commit uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.heard {
		p.heard, p.first = true, commit
	}
	p.commit = max(p.commit, commit)
}

// Progress is how far a node has applied the log.
type Progress struct {
	// Applied is the node's applied index.
	Applied uint64
	// LeaderCommit is the leader's commit index as the node knows it
	// (see Status.LeaderCommitIndex).
	LeaderCommit uint64
	// Behind says the node follows a leader and is catching up.
	Behind bool
}

// Progress returns how far this node has applied the log, and whether it
// is behind its leader (see Falling behind).
func (n *Node) Progress() Progress {
	r := n.raft
	applied, commit := r.AppliedIndex(), r.CommitIndex()
	if r.State() == raft.Leader {
		return Progress{Applied: applied, LeaderCommit: commit}
	}
	_, lid := r.LeaderWithID()
	follows := lid != "" && lid != raft.ServerID(n.cfg.ID)
	return n.prog.judge(applied, commit, r.LastIndex(), follows)
}

// judge returns the progress of a node that is not the leader and has
// applied up to applied, with raft's commit and last index; follows says
// it knows another node as the leader.
func (p *progress) judge(applied, commit, last uint64, follows bool) Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := Progress{Applied: applied, LeaderCommit: max(commit, p.commit)}
	if !p.heard {
		out.LeaderCommit = max(out.LeaderCommit, last)
	}
	if !follows {
		return out
	}
	switch {
	case !p.heard:
		out.Behind = true
	case !p.started && applied >= p.first:
		p.started = true
	case !p.started:
		out.Behind = true
	}
	if applied+catchUpSlack < out.LeaderCommit {
		out.Behind = true
	}
	return out
}

// BehindError is TransferLeadership's refusal to hand leadership to a
// member that is catching up.
type BehindError struct {
	ID               string
	Applied, OfIndex uint64
}

func (e *BehindError) Error() string {
	return fmt.Sprintf("%s is catching up: applied %d of %d; hand leadership to it once it has caught up (tenure status on it says so)",
		e.ID, e.Applied, e.OfIndex)
}

// memberAPI returns the API address of member id: as the applied state
// has it, or else as this node's last run had applied it (memberHints).
func (n *Node) memberAPI(id string) (string, bool) {
	if a, ok := n.fsm.member(id); ok {
		return a, true
	}
	a, ok := n.hints[id]
	return a, ok
}

// Member hints: the members' API addresses as the node last applied them,
// kept in raft.db (under a key of its own) whenever they change, and read
// at the next start. The applied state is always preferred; the hints
// only fill in for a node that restarted and has not yet applied the
// entries that name the members.
var keyMemberHints = []byte("TenureMemberAPIAddresses")

// hintStore keeps the member hints.
type hintStore interface {
	Set(key, val []byte) error
	Get(key []byte) ([]byte, error)
}

// readHints returns the hints stored in s (none if there are none or they
// cannot be read: they are only hints).
func readHints(s hintStore) map[string]string {
	data, err := s.Get(keyMemberHints)
	if err != nil || len(data) == 0 {
		return nil
	}
	var m map[string]string
	if json.Unmarshal(data, &m) != nil {
		return nil
	}
	return m
}

// saveHints stores members as the hints for the next start. It runs on
// the FSM goroutine, under the FSM lock, when the members change (rarely).
func (n *Node) saveHints(members map[string]string) {
	if n.hintStore == nil || n.raftRef.Load() == nil {
		// In memory, or restoring the snapshot raft starts from: the
		// hints of the last run may be newer.
		return
	}
	data, err := json.Marshal(members)
	if err == nil {
		err = n.hintStore.Set(keyMemberHints, data)
	}
	if err != nil {
		n.log.Warn("cannot keep the members' API addresses for the next start", "err", err)
	}
}
