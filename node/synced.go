package node

import (
	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/raftlog"
)

// Deferred log syncs on the leader.
//
// hashicorp/raft stores a leader's new entries in its log before it sends
// them to the followers, so every commit waits for two fdatasyncs in a
// row: the leader's, then a follower's. The raft log (internal/raftlog)
// can instead return from the leader's append once the entries are
// written and sync them in the background, so that the leader's disk and
// the followers' work in parallel (section 10.2.1 of the raft thesis).
//
// raft then counts the leader's copy of an entry towards the quorum before
// it is on disk, so "committed" in raft's sense no longer means "on the
// disks of a quorum". Nothing may act on an entry until it is, and three
// rules make sure nothing does:
//
//   - The leader applies an entry only once its own log has synced it
//     (fsm.Apply waits). Every answer to a client, every watch event and
//     every snapshot comes from the applied state, and the entry is then
//     on the leader's disk and on those of the followers that raft counted
//     (a follower syncs before it acknowledges).
//   - The leader tells its followers an entry is committed only once its
//     own log has synced it (syncedTransport holds the commit index back),
//     so no follower applies an entry that a quorum could still lose.
//   - Configuration entries are never deferred: raft acts on their commit
//     itself (the next membership change may start), so they are synced
//     before raft counts them, with everything before them.
//
//   - A node syncs its log before it records a new term or a vote
//     (syncingStable). It can only acknowledge another leader's entries,
//     or vote, in a term it recorded, so by then nothing it appended as
//     leader is still pending (see deferSync for the one change of state
//     that races with an append): raft counts a follower's copy only
//     when it is on disk.
//
// An entry a crashed leader had not synced was never applied anywhere nor
// answered; a new leader may or may not have it, as with any entry that
// was not committed.

// deferSync reports whether an append of logs by a node in state may
// leave the sync to the background: only a leader's appends, and only of
// entries that raft itself does not act on.
//
// The state can change between this answer and the append. raft's leader
// loop appends on raft's main goroutine, and most changes of state happen
// there too, but one does not: raft handles heartbeats on the transport's
// goroutine, and a heartbeat of a higher term makes the node a follower
// (setState) and then records that term (setCurrentTerm, which syncingStable
// makes sync the log first). The raft log asks DeferSync under its lock, in
// one step with the append (raftlog.Options.DeferSync), and Sync takes that
// lock. So either the answer came after the node became a follower, and
// the append is synced at once, or the append was done before Sync began,
// and Sync syncs it before the new term is recorded. In both cases the
// entries this node appended as leader are on disk before it acts in a
// later term: it acknowledges entries, grants votes and stands for election
// only in a term it recorded.
func deferSync(state raft.RaftState, logs []*raft.Log) bool {
	if state != raft.Leader {
		return false
	}
	for _, l := range logs {
		switch l.Type {
		case raft.LogCommand, raft.LogNoop, raft.LogBarrier:
		default:
			return false
		}
	}
	return true
}

// syncedTransport holds back the commit index a leader sends with its
// entries to what its own log has synced.
type syncedTransport struct {
	raft.Transport
	synced func() uint64
}

// canHoldBackCommits reports whether t can be wrapped in a
// syncedTransport: a wrapper would hide what raft needs from a transport
// beyond the interface (pre-votes, Close) if t lacked it.
func canHoldBackCommits(t raft.Transport) bool {
	_, preVote := t.(raft.WithPreVote)
	_, closer := t.(raft.WithClose)
	return preVote && closer
}

// logOptions returns the options of n's raft log: with deferred, the
// leader's appends are synced in the background.
func (n *Node) logOptions(deferred bool, marks raftlog.Marks) raftlog.Options {
	if !deferred {
		return raftlog.Options{Marks: marks}
	}
	return raftlog.Options{
		Marks: marks,
		DeferSync: func(logs []*raft.Log) bool {
			r := n.raftRef.Load()
			return r != nil && deferSync(r.State(), logs)
		},
		BeforeBackgroundSync: n.cfg.beforeLogSync,
	}
}

// actOnlyOnSynced puts the rules above in place for rl, a log that defers
// the leader's syncs: it gates applying on rl's syncs, holds back the
// commit index n's transport sends, and returns stable wrapped to sync rl
// first.
func (n *Node) actOnlyOnSynced(rl *raftlog.Store, stable raft.StableStore) raft.StableStore {
	n.fsm.waitSynced = rl.WaitSynced
	n.trans = &syncedTransport{Transport: n.trans, synced: rl.Synced}
	return syncingStable{StableStore: stable, sync: rl.Sync}
}

func (t *syncedTransport) holdBack(args *raft.AppendEntriesRequest) {
	if s := t.synced(); args.LeaderCommitIndex > s {
		args.LeaderCommitIndex = s
	}
}

func (t *syncedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	t.holdBack(args)
	return t.Transport.AppendEntries(id, target, args, resp)
}

func (t *syncedTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.Transport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return &syncedPipeline{AppendPipeline: p, t: t}, nil
}

func (t *syncedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.Transport.(raft.WithPreVote).RequestPreVote(id, target, args, resp)
}

func (t *syncedTransport) Close() error { return t.Transport.(raft.WithClose).Close() }

type syncedPipeline struct {
	raft.AppendPipeline
	t *syncedTransport
}

func (p *syncedPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	p.t.holdBack(args)
	return p.AppendPipeline.AppendEntries(args, resp)
}

// syncingStable syncs the raft log before it records anything: raft
// writes its stable store when it learns a new term and when it votes.
type syncingStable struct {
	raft.StableStore
	sync func() error
}

func (s syncingStable) Set(key, val []byte) error {
	if err := s.sync(); err != nil {
		return err
	}
	return s.StableStore.Set(key, val)
}

func (s syncingStable) SetUint64(key []byte, val uint64) error {
	if err := s.sync(); err != nil {
		return err
	}
	return s.StableStore.SetUint64(key, val)
}
