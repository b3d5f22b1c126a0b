package node

import (
	"context"
	"fmt"
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
}

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
}

// Status returns this node's view of the cluster.
func (n *Node) Status() Status {
	st := Status{
		ID:           n.cfg.ID,
		ClusterID:    n.ClusterID(),
		State:        stateName(n.raft.State()),
		Term:         n.raft.CurrentTerm(),
		AppliedIndex: n.raft.AppliedIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		LastIndex:    n.raft.LastIndex(),
		MinTTL:       n.limits.MinTTL,
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
	st.LeaderAPI = n.fsm.members[st.LeaderID]
	members := make(map[string]string, len(n.fsm.members))
	for k, v := range n.fsm.members {
		members[k] = v
	}
	n.fsm.mu.RUnlock()
	if f := n.raft.GetConfiguration(); f.Error() == nil {
		for _, s := range f.Configuration().Servers {
			st.Members = append(st.Members, Member{
				ID:       string(s.ID),
				RaftAddr: string(s.Address),
				APIAddr:  members[string(s.ID)],
				Voter:    s.Suffrage == raft.Voter,
				Leader:   s.ID == lid,
			})
		}
	}
	return st
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

// Join adds a server to the cluster as a non-voter; the leader's promoter
// makes it a voter once it has caught up. Joining again with the same ID
// and addresses is a no-op, so a restarted node may always call it. Only
// the leader serves it.
func (n *Node) Join(ctx context.Context, id, raftAddr, apiAddr string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if id == "" || raftAddr == "" || apiAddr == "" {
		return fmt.Errorf("node: join needs an ID, a raft address and an API address")
	}
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return mapRaftError(err)
	}
	for _, s := range f.Configuration().Servers {
		switch {
		case s.ID == raft.ServerID(id) && s.Address == raft.ServerAddress(raftAddr):
			if a, _ := n.fsm.member(id); a != apiAddr {
				return n.applyMember(ctx, memberInfo{ID: id, APIAddr: apiAddr})
			}
			return nil
		case s.ID == raft.ServerID(id) || s.Address == raft.ServerAddress(raftAddr):
			// Same ID at a new address, or a new ID at a used address:
			// the old entry is stale. Remove it first.
			if err := n.wait(n.raft.RemoveServer(s.ID, 0, n.timeout(ctx))); err != nil {
				return mapRaftError(err)
			}
		}
	}
	if err := n.applyMember(ctx, memberInfo{ID: id, APIAddr: apiAddr}); err != nil {
		return err
	}
	if err := n.wait(n.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.timeout(ctx))); err != nil {
		return mapRaftError(err)
	}
	n.log.Info("added non-voter", "id", id, "raft", raftAddr, "api", apiAddr)
	return nil
}

// Leave removes a server from the cluster. Only the leader serves it.
func (n *Node) Leave(ctx context.Context, id string) error {
	if !n.IsLeader() {
		return ErrNotLeader
	}
	if err := n.wait(n.raft.RemoveServer(raft.ServerID(id), 0, n.timeout(ctx))); err != nil {
		return mapRaftError(err)
	}
	n.log.Info("removed server", "id", id)
	return n.applyMember(ctx, memberInfo{ID: id})
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
		f = n.raft.LeadershipTransfer()
	} else {
		var addr raft.ServerAddress
		if cf := n.raft.GetConfiguration(); cf.Error() == nil {
			for _, s := range cf.Configuration().Servers {
				if s.ID == raft.ServerID(id) {
					addr = s.Address
				}
			}
		}
		if addr == "" {
			return "", fmt.Errorf("node: no member with ID %q", id)
		}
		f = n.raft.LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	if err := f.Error(); err != nil {
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

func (n *Node) applyMember(ctx context.Context, m memberInfo) error {
	if err := n.wait(n.raft.Apply(encodeMember(m), n.timeout(ctx))); err != nil {
		return mapRaftError(err)
	}
	return nil
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
