package node

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Member is one server of the raft configuration.
type Member struct {
	ID       string
	RaftAddr string
	APIAddr  string
	Voter    bool
	Leader   bool
	// LastContact is how long ago this node last heard from the member:
	// on the leader, the member's last answer to replication or a
	// heartbeat (0 for the leader itself); on a follower, its last
	// contact with the leader. -1 when not known.
	LastContact time.Duration
}

// Errors of the membership calls.
var (
	// ErrNoSuchMember is returned by Leave and TransferLeadership when
	// the ID names no member of the raft configuration.
	ErrNoSuchMember = errors.New("node: no such member")
	// ErrLastVoter is returned by Leave when the member is the only
	// voter: without it the cluster could never elect a leader again.
	ErrLastVoter = errors.New("node: cannot remove the last voter")
	// ErrNotVoter is returned by TransferLeadership when the target is
	// not a voter (only voters can lead), or when no other voter exists.
	ErrNotVoter = errors.New("node: not a voter")
)

// Status is a node's view of the cluster.
type Status struct {
	ID           string
	State        string // leader, follower, candidate, shutdown
	LeaderID     string
	LeaderAPI    string
	Term         uint64
	AppliedIndex uint64
	CommitIndex  uint64
	LastIndex    uint64
	Members      []Member
	ClusterTime  time.Duration
	MinTTL       time.Duration
	// Leases counts the leases live at ClusterTime; Stored also counts
	// the expired ones the expirer has not freed yet.
	Leases    int
	Stored    int
	LastToken uint64
	// ClusterID is the cluster's ID ("" before this node joined one).
	ClusterID string
	// CatchingUp says this node neither votes nor stands for election
	// until its log reaches CatchUpIndex (0: not known yet); see
	// catchup.go.
	CatchingUp   bool
	CatchUpIndex uint64
	// LeaderCommitIndex is the leader's commit index as this node knows
	// it, and Behind says this node follows a leader and has not applied
	// what it committed: it is catching up (see behind.go).
	LeaderCommitIndex uint64
	Behind            bool
}

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	p := n.Progress()
	st := Status{
		ID:                n.cfg.ID,
		ClusterID:         n.ClusterID(),
		State:             stateName(n.raft.State()),
		Term:              n.raft.CurrentTerm(),
		AppliedIndex:      p.Applied,
		CommitIndex:       n.raft.CommitIndex(),
		LastIndex:         n.raft.LastIndex(),
		MinTTL:            n.limits.MinTTL,
		CatchingUp:        n.CatchingUp(),
		CatchUpIndex:      n.CatchUpIndex(),
		LeaderCommitIndex: p.LeaderCommit,
		Behind:            p.Behind,
	}
	if st.State == "leader" && !n.IsLeader() {
		st.State = "leader (taking over)"
	}
	_, lid := n.raft.LeaderWithID()
	st.LeaderID = string(lid)
	n.fsm.mu.RLock()
	st.ClusterTime = n.fsm.st.Now()
	st.Leases = n.fsm.st.Live()
	st.Stored = n.fsm.st.Len()
	st.LastToken = n.fsm.st.LastToken()
	members := make(map[string]string, len(n.fsm.members)+len(n.hints))
	for k, v := range n.hints {
		members[k] = v
	}
	for k, v := range n.fsm.members {
		members[k] = v
	}
	n.fsm.mu.RUnlock()
	st.LeaderAPI = members[st.LeaderID]
	isLeader := n.raft.State() == raft.Leader
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			m := Member{
				ID:          string(s.ID),
				RaftAddr:    string(s.Address),
				APIAddr:     members[string(s.ID)],
				Voter:       s.Suffrage == raft.Voter,
				Leader:      s.ID == lid,
				LastContact: -1,
			}
			switch {
			case isLeader && string(s.ID) == n.cfg.ID:
				m.LastContact = 0
			case isLeader:
				if t, ok := n.contact.last(s.Address); ok {
					m.LastContact = time.Since(t)
				}
			case m.Leader:
				if t := n.raft.LastContact(); !t.IsZero() {
					m.LastContact = time.Since(t)
				}
			}
			st.Members = append(st.Members, m)
		}
	}
	return st
}

// member returns the server with id in the latest raft configuration and
// the number of voters in it.
func (n *Node) member(id string) (s raft.Server, voters int, err error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return s, 0, mapRaftError(err)
	}
	found := false
	var ids []string
	for _, c := range f.Configuration().Servers {
		ids = append(ids, string(c.ID))
		if c.Suffrage == raft.Voter {
			voters++
		}
		if c.ID == raft.ServerID(id) {
			s, found = c, true
		}
	}
	if !found {
		return s, voters, fmt.Errorf("%w %q (members: %s)", ErrNoSuchMember, id, strings.Join(ids, ", "))
	}
	return s, voters, nil
}

func stateName(s raft.RaftState) string {
	switch s {
	case raft.Leader:
		return "leader"
	case raft.Follower:
		return "follower"
	case raft.Candidate:
		return "candidate"
	}
	return "shutdown"
}

// JoinRequest is a node asking to be added to the cluster.
type JoinRequest struct {
	ID, RaftAddr, APIAddr string
	// CatchingUp says the node holds no raft state it can vouch for (see
	// catchup.go): a member with its ID lost the log it acknowledged
	// entries with.
	CatchingUp bool
}

// Join adds a server to the cluster as a non-voter; the leader's promoter
// makes it a voter once it has caught up. Only the leader serves it.
//
// Joining again with the same ID and addresses changes nothing for a node
// that kept its state, so a restarted node may always call it. A node that
// is catching up gets its catch-up index back: the index of an entry
// appended after the join was handled, which its log must reach before it
// votes. A voter with its ID is demoted to a non-voter first: it lost the
// log it voted and acknowledged entries with, and catches up as a
// non-voter.
func (n *Node) Join(ctx context.Context, req JoinRequest) (catchUpIndex uint64, err error) {
	if !n.IsLeader() {
		return 0, ErrNotLeader
	}
	id, raftAddr, apiAddr := req.ID, req.RaftAddr, req.APIAddr
	if id == "" || raftAddr == "" || apiAddr == "" {
		return 0, fmt.Errorf("node: join needs an ID, a raft address and an API address")
	}
	if id == n.cfg.ID {
		// The leader asking to join itself (it led before it asked).
		return 0, nil
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return 0, mapRaftError(err)
	}
	var member *raft.Server
	for _, s := range f.Configuration().Servers {
		switch {
		case s.ID == raft.ServerID(id) && s.Address == raft.ServerAddress(raftAddr):
			member = &s
		case s.ID == raft.ServerID(id) || s.Address == raft.ServerAddress(raftAddr):
			// Same ID at a new address, or a new ID at a used address:
			// the old entry is stale. Remove it first.
			if err := n.wait(n.raft.RemoveServer(s.ID, 0, n.timeout(ctx))); err != nil {
				return 0, mapRaftError(err)
			}
		}
	}
	if member != nil && !req.CatchingUp {
		if a, _ := n.fsm.member(id); a != apiAddr {
			_, err := n.applyMember(ctx, memberInfo{ID: id, APIAddr: apiAddr})
			return 0, err
		}
		return 0, nil
	}
	if member != nil && member.Suffrage == raft.Voter {
		if err := n.wait(n.raft.DemoteVoter(member.ID, 0, n.timeout(ctx))); err != nil {
			return 0, mapRaftError(err)
		}
		n.log.Warn("a voter joined again without the raft log it had: demoted it to a non-voter until it has caught up",
			"id", id, "raft", raftAddr)
	}
	index, err := n.applyMember(ctx, memberInfo{ID: id, APIAddr: apiAddr})
	if err != nil {
		return 0, err
	}
	if member == nil {
		if err := n.wait(n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.timeout(ctx))); err != nil {
			return 0, mapRaftError(err)
		}
		n.log.Info("added non-voter", "id", id, "raft", raftAddr, "api", apiAddr)
	}
	if !req.CatchingUp {
		return 0, nil
	}
	return index, nil
}

// Leave removes a server from the cluster. Only the leader serves it. It
// refuses an unknown ID (ErrNoSuchMember) and the last voter
// (ErrLastVoter).
//
// A leader that removes itself stops leading, and its raft shuts down, as
// soon as the removal commits: it forgets the member's API address first,
// while it can still commit, and reports success once the removal
// committed.
func (n *Node) Leave(ctx context.Context, id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	s, voters, err := n.member(id)
	if err != nil {
		return err
	}
	if s.Suffrage == raft.Voter && voters == 1 {
		return fmt.Errorf("%w: %s is the only voter; a cluster without one can never elect a leader", ErrLastVoter, id)
	}
	if id == n.cfg.ID {
		api, _ := n.fsm.member(id)
		if _, err := n.applyMember(ctx, memberInfo{ID: id}); err != nil {
			return err
		}
		if err := n.wait(n.raft.RemoveServer(raft.ServerID(id), 0, n.timeout(ctx))); err != nil {
			// Still a member: publish its API address again (best
			// effort; a restart publishes it too).
			if n.IsLeader() {
				_, _ = n.applyMember(ctx, memberInfo{ID: id, APIAddr: api})
			}
			return mapRaftError(err)
		}
		n.log.Info("removed this node from the cluster", "id", id)
		return nil
	}
	if err := n.wait(n.raft.RemoveServer(raft.ServerID(id), 0, n.timeout(ctx))); err != nil {
		return mapRaftError(err)
	}
	n.log.Info("removed server", "id", id)
	_, err = n.applyMember(ctx, memberInfo{ID: id})
	return err
}

// TransferLeadership hands leadership to id, or to the most up-to-date
// voter if id is empty, and returns the new leader's ID.
func (n *Node) TransferLeadership(ctx context.Context, id string) (string, error) {
	if !n.IsLeader() {
		return "", ErrNotLeader
	}
	if id == n.cfg.ID {
		return id, nil // already there
	}
	var f raft.Future
	if id == "" {
		if _, voters, err := n.member(n.cfg.ID); err != nil {
			return "", err
		} else if voters < 2 {
			return "", fmt.Errorf("%w: there is no other voter to hand leadership to", ErrNotVoter)
		}
		n.noteTransfer()
		f = n.raft.LeadershipTransfer()
	} else {
		s, _, err := n.member(id)
		if err != nil {
			return "", err
		}
		if s.Suffrage != raft.Voter {
			return "", fmt.Errorf("%w: %s is a non-voter and cannot lead (it becomes a voter once it has caught up)", ErrNotVoter, id)
		}
		if err := n.awaitCaughtUp(ctx, id); err != nil {
			return "", err
		}
		n.noteTransfer()
		f = n.raft.LeadershipTransferToServer(s.ID, s.Address)
	}
	err := f.Error()
	n.noteTransfer()
	if err != nil {
		if id != "" && n.IsLeader() {
			// raft gives the target one election timeout to take over,
			// and a target that fell behind meanwhile needs longer.
			if berr := n.peerBehind(ctx, id); berr != nil {
				return "", berr
			}
		}
		return "", mapRaftError(err)
	}
	// The transfer is done once raft here has stepped down, which is
	// usually before this node has stopped its leader loop and heard from
	// the new leader: wait for both (bounded by ctx and ApplyTimeout). ""
	// means the new leader is not known yet.
	timeout := time.NewTimer(n.timeout(ctx))
	defer timeout.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, lid := n.raft.LeaderWithID(); lid != "" && lid != raft.ServerID(n.cfg.ID) && !n.IsLeader() {
			return string(lid), nil
		}
		select {
		case <-tick.C:
		case <-timeout.C:
			return "", nil
		case <-ctx.Done():
			return "", nil
		case <-n.closing:
			return "", nil
		}
	}
}

// awaitCaughtUp waits, for at most half of what is left of ctx's time (at
// most ApplyTimeout), until the member id has applied (nearly) all that
// this leader committed (see behind.go): a member that is catching up
// would take over only once it has, if raft gave it that long, which it
// does not. It returns a *BehindError if id is still behind. Without
// Config.PeerProgress it does not wait.
func (n *Node) awaitCaughtUp(ctx context.Context, id string) error {
	if n.cfg.PeerProgress == nil {
		return nil
	}
	deadline := time.Now().Add(n.timeout(ctx) / 2)
	tick := time.NewTicker(max(n.cfg.HeartbeatTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		err := n.peerBehind(ctx, id)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return err
		case <-n.closing:
			return err
		}
	}
}

// peerBehind returns a *BehindError if the member id has not applied
// (nearly) all that this leader committed, as its own status says, or if
// it says it is behind. A member that does not answer is not reported:
// raft's transfer finds out.
func (n *Node) peerBehind(ctx context.Context, id string) error {
	addr, ok := n.fsm.member(id)
	if n.cfg.PeerProgress == nil || !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(n.cfg.HeartbeatTimeout, 100*time.Millisecond))
	defer cancel()
	p, err := n.cfg.PeerProgress(ctx, addr)
	if err != nil {
		return nil
	}
	commit := n.raft.CommitIndex()
	if p.Behind || p.Applied+catchUpSlack < commit {
		return &BehindError{ID: id, Applied: p.Applied, OfIndex: commit}
	}
	return nil
}

// applyMember records m in the log and returns the index of its entry.
func (n *Node) applyMember(ctx context.Context, m memberInfo) (uint64, error) {
	f := n.raft.Apply(encodeMember(m), n.timeout(ctx))
	if err := n.wait(f); err != nil {
		return 0, mapRaftError(err)
	}
	return f.Index(), nil
}

func (n *Node) timeout(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		if t := time.Until(d); t > 0 {
			return t
		}
		return time.Millisecond
	}
	return n.cfg.ApplyTimeout
}

// Removed is closed once this node has seen itself removed from the
// cluster: its ID and raft address were in the configuration and are no
// longer (or raft shut itself down after this leader removed itself). A
// removed node takes no further part in the cluster; tenured stops.
func (n *Node) Removed() <-chan struct{} { return n.removed }

// watchRemoval closes n.removed when this node is removed.
func (n *Node) watchRemoval() {
	defer n.wg.Done()
	t := time.NewTicker(max(n.cfg.HeartbeatTimeout/4, 10*time.Millisecond))
	defer t.Stop()
	self := raft.Server{ID: raft.ServerID(n.cfg.ID), Address: n.trans.LocalAddr()}
	wasMember := false
	for {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		if n.raft.State() == raft.Shutdown {
			// Only a leader that removed itself shuts raft down
			// before Close.
			break
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		servers := f.Configuration().Servers
		n.servers.Store(&servers)
		in := false
		for _, s := range servers {
			if s.ID == self.ID && s.Address == self.Address {
				in = true
			}
		}
		if in {
			wasMember = true
			continue
		}
		if wasMember {
			break
		}
	}
	select {
	case <-n.closing:
		return // raft shut down because the node is closing
	default:
	}
	n.log.Info("this node was removed from the cluster", "id", n.cfg.ID)
	close(n.removed)
}
