package client

import (
	"context"
	"time"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
)

// Status is one member's view of the cluster.
type Status struct {
	// Endpoint is the endpoint that answered (host:port).
	Endpoint string
	NodeID   string
	// State is leader, follower, candidate or shutdown.
	State         string
	LeaderID      string
	LeaderAddress string
	Term          uint64
	AppliedIndex  uint64
	CommitIndex   uint64
	LastIndex     uint64
	Members       []Member
	// ClusterTime is the cluster time of the last applied entry.
	ClusterTime time.Duration
	// MinTTL is the shortest TTL the cluster accepts.
	MinTTL time.Duration
	// Leases is the number of live leases.
	Leases uint64
	// LeasesStored also counts expired leases not yet freed.
	LeasesStored uint64
	// LastToken is the highest fencing token granted so far.
	LastToken uint64
	// ClusterID is the ID of the cluster the node belongs to ("" before
	// it joined one).
	ClusterID string
	// CatchingUp says the node neither votes nor stands for election
	// until its raft log reaches CatchUpIndex (0: not known yet): it
	// joined with no raft state it could vouch for.
	CatchingUp   bool
	CatchUpIndex uint64
	// LeaderCommitIndex is the leader's commit index as the node knows
	// it. Behind says the node follows a leader and has not applied what
	// it committed: it is catching up (AppliedIndex of
	// LeaderCommitIndex), and its leases, tokens and cluster time are
	// older than the leader's.
	LeaderCommitIndex uint64
	Behind            bool
	// MembersFrom is the member whose view Members is: "" for the node's
	// own, the leader's ID when the node is behind and asked the leader.
	MembersFrom string
}

// Member is one member of the cluster.
type Member struct {
	ID          string
	RaftAddress string
	APIAddress  string
	// Suffrage is voter or nonvoter.
	Suffrage string
	Leader   bool
	// LastContact is how long before its answer the member that answered
	// Status last heard from this one: the leader knows it for every
	// member (0 for itself), a follower only for the leader. -1 when not
	// known.
	LastContact time.Duration
}

func membersFromProto(ms []*tenurev1.Member) []Member {
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, Member{
			ID:          m.GetId(),
			RaftAddress: m.GetRaftAddress(),
			APIAddress:  m.GetApiAddress(),
			Suffrage:    m.GetSuffrage(),
			Leader:      m.GetLeader(),
			LastContact: lastContact(m),
		})
	}
	return out
}

func lastContact(m *tenurev1.Member) time.Duration {
	if m.GetLastContact() == nil {
		return -1
	}
	return m.GetLastContact().AsDuration()
}

// Status returns the view of the first endpoint that answers (the last
// one that worked, if any). Status is answered by the member itself, not
// forwarded to the leader.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var answered string
	res, _, err := unary(ctx, c, retryAlways, &tenurev1.StatusRequest{},
		func(ep *endpoint) tenurev1connect.ClusterServiceClient {
			answered = ep.addr
			return ep.cluster
		}, tenurev1connect.ClusterServiceClient.Status)
	if err != nil {
		return Status{}, err
	}
	return Status{
		Endpoint:      answered,
		NodeID:        res.GetNodeId(),
		State:         res.GetState(),
		LeaderID:      res.GetLeaderId(),
		LeaderAddress: res.GetLeaderAddress(),
		Term:          res.GetTerm(),
		AppliedIndex:  res.GetAppliedIndex(),
		CommitIndex:   res.GetCommitIndex(),
		LastIndex:     res.GetLastIndex(),
		Members:       membersFromProto(res.GetMembers()),
		ClusterTime:   res.GetClusterTime().AsDuration(),
		MinTTL:        res.GetMinTtl().AsDuration(),
		Leases:        res.GetLeases(),
		LeasesStored:  res.GetLeasesStored(),
		LastToken:     res.GetLastToken(),
		ClusterID:     res.GetClusterId(),
		CatchingUp:    res.GetCatchingUp(),
		CatchUpIndex:  res.GetCatchUpIndex(),

		LeaderCommitIndex: res.GetLeaderCommitIndex(),
		Behind:            res.GetBehind(),
		MembersFrom:       res.GetMembersFrom(),
	}, nil
}

// JoinRequest describes a node that asks to join a cluster.
type JoinRequest struct {
	NodeID   string
	RaftAddr string
	APIAddr  string
	// ClusterID is the cluster the node already belongs to (from its
	// data directory), or "" for a new node. A node of another cluster
	// is refused.
	ClusterID string
	// CatchingUp says the node holds no raft state it can vouch for: its
	// data directory is new, or it has not caught up since it joined
	// with one. A voter with its ID is demoted until it has caught up.
	CatchingUp bool
}

// JoinResult is the cluster a node joined.
type JoinResult struct {
	// ClusterID is the cluster's ID: the new node records it and
	// accepts raft traffic of this cluster only.
	ClusterID string
	// Members are the members after the change.
	Members []Member
	// CatchUpIndex, for a node that is catching up, is the raft index its
	// log must reach before it votes.
	CatchUpIndex uint64
}

// Join adds a node to the cluster (as a non-voter that the leader promotes
// to voter once it has caught up). Like the other membership calls it is
// not retried once possibly delivered.
func (c *Client) Join(ctx context.Context, req JoinRequest) (JoinResult, error) {
	res, _, err := unary(ctx, c, retryUnsent,
		&tenurev1.JoinRequest{NodeId: req.NodeID, RaftAddress: req.RaftAddr, ApiAddress: req.APIAddr, ClusterId: req.ClusterID,
			CatchingUp: req.CatchingUp},
		clusterService, tenurev1connect.ClusterServiceClient.Join)
	if err != nil {
		return JoinResult{}, err
	}
	return JoinResult{ClusterID: res.GetClusterId(), Members: membersFromProto(res.GetMembers()), CatchUpIndex: res.GetCatchUpIndex()}, nil
}

// Leave removes the node nodeID from the cluster.
func (c *Client) Leave(ctx context.Context, nodeID string) error {
	_, _, err := unary(ctx, c, retryUnsent, &tenurev1.LeaveRequest{NodeId: nodeID},
		clusterService, tenurev1connect.ClusterServiceClient.Leave)
	return err
}

// TransferLeadership asks the leader to hand over to nodeID (the empty ID
// lets raft pick the most up-to-date follower) and returns the new
// leader's ID.
func (c *Client) TransferLeadership(ctx context.Context, nodeID string) (string, error) {
	res, _, err := unary(ctx, c, retryUnsent, &tenurev1.TransferLeadershipRequest{NodeId: nodeID},
		clusterService, tenurev1connect.ClusterServiceClient.TransferLeadership)
	if err != nil {
		return "", err
	}
	return res.GetLeaderId(), nil
}
