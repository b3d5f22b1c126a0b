package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/node"
)

type clusterService struct{ s *Server }

// Status is answered by the node that receives it, so every member can be
// asked for its own view. Only the members are the leader's when this
// node is behind (catching up): what it has applied may not name them
// yet, or not all, and only the leader knows when it last heard from each.
func (c *clusterService) Status(ctx context.Context, req *connect.Request[tenurev1.StatusRequest]) (*connect.Response[tenurev1.StatusResponse], error) {
	st := c.s.node.Status()
	out := statusToProto(st)
	if st.Behind && st.LeaderAPI != "" && st.LeaderID != st.ID && req.Header().Get(forwardedHeader) == "" {
		ctx, cancel := context.WithTimeout(ctx, leaderMembersTimeout)
		defer cancel()
		res, err := c.s.fwd.clients(st.LeaderAPI).cluster.Status(ctx, outgoing(ctx, c.s, req))
		if err == nil && res.Msg.GetNodeId() == st.LeaderID {
			out.Members, out.MembersFrom = res.Msg.GetMembers(), st.LeaderID
		}
	}
	return connect.NewResponse(out), nil
}

// leaderMembersTimeout bounds the question a node that is behind asks
// the leader for the members; without an answer it shows its own view.
const leaderMembersTimeout = time.Second

func statusToProto(st node.Status) *tenurev1.StatusResponse {
	out := &tenurev1.StatusResponse{
		NodeId:        st.ID,
		State:         st.State,
		LeaderId:      st.LeaderID,
		LeaderAddress: st.LeaderAPI,
		Term:          st.Term,
		AppliedIndex:  st.AppliedIndex,
		CommitIndex:   st.CommitIndex,
		LastIndex:     st.LastIndex,
		ClusterTime:   durationpb.New(st.ClusterTime),
		MinTtl:        durationpb.New(st.MinTTL),
		Leases:        uint64(st.Leases),
		LeasesStored:  uint64(st.Stored),
		LastToken:     st.LastToken,
		ClusterId:     st.ClusterID,
		CatchingUp:    st.CatchingUp,
		CatchUpIndex:  st.CatchUpIndex,

		LeaderCommitIndex: st.LeaderCommitIndex,
		Behind:            st.Behind,
	}
	for _, m := range st.Members {
		suffrage := "nonvoter"
		if m.Voter {
			suffrage = "voter"
		}
		pm := &tenurev1.Member{
			Id: m.ID, RaftAddress: m.RaftAddr, ApiAddress: m.APIAddr, Suffrage: suffrage, Leader: m.Leader,
		}
		if m.LastContact >= 0 {
			pm.LastContact = durationpb.New(m.LastContact)
		}
		out.Members = append(out.Members, pm)
	}
	return out
}

func checkAddr(field, addr string) error {
	if addr == "" {
		return invalid(errors.New("server: " + field + " is required"))
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return invalid(errors.New("server: " + field + " is not host:port: " + err.Error()))
	}
	return nil
}

func (c *clusterService) Join(ctx context.Context, req *connect.Request[tenurev1.JoinRequest]) (*connect.Response[tenurev1.JoinResponse], error) {
	m := req.Msg
	if m.GetNodeId() == "" {
		return nil, invalid(errors.New("server: node_id is required"))
	}
	if err := checkAddr("raft_address", m.GetRaftAddress()); err != nil {
		return nil, err
	}
	if err := checkAddr("api_address", m.GetApiAddress()); err != nil {
		return nil, err
	}
	return route(ctx, c.s, req,
		func(p *peerClients) func(context.Context, *connect.Request[tenurev1.JoinRequest]) (*connect.Response[tenurev1.JoinResponse], error) {
			return p.cluster.Join
		},
		func(ctx context.Context) (*tenurev1.JoinResponse, error) {
			ours := c.s.node.ClusterID()
			if theirs := m.GetClusterId(); theirs != "" && theirs != ours {
				c.s.log.Warn("refused a join from another cluster", "node_id", m.GetNodeId(), "raft", m.GetRaftAddress(),
					"their_cluster", theirs, "cluster", ours)
				return nil, connect.NewError(connect.CodeFailedPrecondition,
					fmt.Errorf("server: node %s belongs to cluster %s, this is cluster %s: it cannot join", m.GetNodeId(), theirs, ours))
			}
			index, err := c.s.node.Join(ctx, node.JoinRequest{ID: m.GetNodeId(), RaftAddr: m.GetRaftAddress(), APIAddr: m.GetApiAddress(),
				CatchingUp: m.GetCatchingUp()})
			if err != nil {
				return nil, toConnect(err)
			}
			return &tenurev1.JoinResponse{ClusterId: ours, Members: statusToProto(c.s.node.Status()).Members, CatchUpIndex: index}, nil
		})
}

func (c *clusterService) Leave(ctx context.Context, req *connect.Request[tenurev1.LeaveRequest]) (*connect.Response[tenurev1.LeaveResponse], error) {
	if req.Msg.GetNodeId() == "" {
		return nil, invalid(errors.New("server: node_id is required"))
	}
	return route(ctx, c.s, req,
		func(p *peerClients) func(context.Context, *connect.Request[tenurev1.LeaveRequest]) (*connect.Response[tenurev1.LeaveResponse], error) {
			return p.cluster.Leave
		},
		func(ctx context.Context) (*tenurev1.LeaveResponse, error) {
			if err := c.s.node.Leave(ctx, req.Msg.GetNodeId()); err != nil {
				return nil, toConnect(err)
			}
			return &tenurev1.LeaveResponse{}, nil
		})
}

func (c *clusterService) TransferLeadership(ctx context.Context, req *connect.Request[tenurev1.TransferLeadershipRequest]) (*connect.Response[tenurev1.TransferLeadershipResponse], error) {
	return route(ctx, c.s, req,
		func(p *peerClients) func(context.Context, *connect.Request[tenurev1.TransferLeadershipRequest]) (*connect.Response[tenurev1.TransferLeadershipResponse], error) {
			return p.cluster.TransferLeadership
		},
		func(ctx context.Context) (*tenurev1.TransferLeadershipResponse, error) {
			id, err := c.s.node.TransferLeadership(ctx, req.Msg.GetNodeId())
			if err != nil {
				return nil, toConnect(err)
			}
			return &tenurev1.TransferLeadershipResponse{LeaderId: id}, nil
		})
}
