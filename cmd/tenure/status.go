package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/tenure-io/tenure/client"
)

type memberJSON struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	APIAddress  string `json:"api_address"`
	Suffrage    string `json:"suffrage"`
	Leader      bool   `json:"leader"`
}

// statusJSON is the status in -o json, with the field names of the API's
// StatusResponse.
type statusJSON struct {
	Endpoint      string `json:"endpoint"`
	NodeID        string `json:"node_id"`
	State         string `json:"state"`
	LeaderID      string `json:"leader_id"`
	LeaderAddress string `json:"leader_address"`
	Term          uint64 `json:"term"`
	AppliedIndex  uint64 `json:"applied_index"`
	CommitIndex   uint64 `json:"commit_index"`
	LastIndex     uint64 `json:"last_index"`
	ClusterTime   string `json:"cluster_time"`
	MinTTL        string `json:"min_ttl"`
	Leases        uint64 `json:"leases"`
	LeasesStored  uint64 `json:"leases_stored"`
	LastToken     uint64 `json:"last_token"`
	ClusterID     string `json:"cluster_id"`
	CatchingUp    bool   `json:"catching_up,omitempty"`
	CatchUpIndex  uint64 `json:"catch_up_index,omitempty"`
	// LeaderCommitIndex is the leader's commit index as the node knows
	// it; Behind says the node is catching up to it.
	LeaderCommitIndex uint64       `json:"leader_commit_index"`
	Behind            bool         `json:"behind,omitempty"`
	MembersFrom       string       `json:"members_from,omitempty"`
	Members           []memberJSON `json:"members"`
}

func (a *app) status(ctx context.Context, args []string) error {
	c := a.newCommand("status", "status",
		"Prints the status of the first endpoint that answers: its node, raft state,\n"+
			"leader, term, indexes and the members of the cluster.")
	if _, err := a.parse(c, args, nil, 0); err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		j := statusJSON{
			Endpoint: st.Endpoint, NodeID: st.NodeID, State: st.State,
			LeaderID: st.LeaderID, LeaderAddress: st.LeaderAddress, Term: st.Term,
			AppliedIndex: st.AppliedIndex, CommitIndex: st.CommitIndex, LastIndex: st.LastIndex,
			ClusterTime: fmtDuration(st.ClusterTime), MinTTL: fmtDuration(st.MinTTL),
			Leases: st.Leases, LeasesStored: st.LeasesStored, LastToken: st.LastToken, ClusterID: st.ClusterID,
			CatchingUp: st.CatchingUp, CatchUpIndex: st.CatchUpIndex,
			LeaderCommitIndex: st.LeaderCommitIndex, Behind: st.Behind, MembersFrom: st.MembersFrom,
			Members: []memberJSON{},
		}
		for _, m := range st.Members {
			j.Members = append(j.Members, memberJSON{
				ID: m.ID, RaftAddress: m.RaftAddress, APIAddress: m.APIAddress, Suffrage: m.Suffrage, Leader: m.Leader,
			})
		}
		a.out().print(j, statusText(st))
		return nil
	})
}

// stateText is the node's raft state, and whether it is catching up:
// behind its leader, or not voting since it joined with no raft state.
func stateText(st client.Status) string {
	s := st.State
	if st.Behind {
		s += fmt.Sprintf(", catching up: applied %d of %d", st.AppliedIndex, st.LeaderCommitIndex)
	}
	switch {
	case !st.CatchingUp:
	case st.CatchUpIndex == 0:
		s += ", not voting (its join has not been answered)"
	default:
		s += fmt.Sprintf(", not voting until its log reaches index %d", st.CatchUpIndex)
	}
	return s
}

func statusText(st client.Status) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	leader := st.LeaderID
	if leader == "" {
		leader = "(none)"
	} else if st.LeaderAddress != "" {
		leader += " (" + st.LeaderAddress + ")"
	}
	cluster := st.ClusterID
	if cluster == "" {
		cluster = "(none yet)"
	}
	rows := [][2]string{
		{"endpoint", st.Endpoint},
		{"cluster", cluster},
		{"node", st.NodeID},
		{"state", stateText(st)},
		{"leader", leader},
		{"term", fmt.Sprint(st.Term)},
		{"applied index", fmt.Sprint(st.AppliedIndex)},
		{"commit index", fmt.Sprint(st.CommitIndex)},
		{"leader commit", fmt.Sprint(st.LeaderCommitIndex)},
		{"last index", fmt.Sprint(st.LastIndex)},
		{"cluster time", fmtDuration(st.ClusterTime)},
		{"min ttl", fmtDuration(st.MinTTL)},
		{"leases", fmt.Sprint(st.Leases) + asOf(st)},
		{"last token", fmt.Sprint(st.LastToken) + asOf(st)},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\n", r[0], r[1])
	}
	w.Flush()
	b.WriteString("\n")
	if st.MembersFrom != "" {
		fmt.Fprintf(&b, "members as the leader %s sees them:\n", st.MembersFrom)
	}
	w = tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "MEMBER\tSUFFRAGE\tRAFT ADDRESS\tAPI ADDRESS\tLEADER")
	for _, m := range st.Members {
		mark := ""
		if m.Leader {
			mark = "*"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", m.ID, m.Suffrage, m.RaftAddress, m.APIAddress, mark)
	}
	w.Flush()
	return strings.TrimSuffix(b.String(), "\n")
}

// asOf labels a figure of the node's own state when the node is not the
// leader: it is what the node has applied, which may trail the leader by
// the grants of the last moments.
func asOf(st client.Status) string {
	switch {
	case st.State == "leader":
		return ""
	case st.Behind:
		return fmt.Sprintf(" (as of applied index %d on this %s, which is catching up: the leader is ahead)", st.AppliedIndex, st.State)
	}
	return fmt.Sprintf(" (as of applied index %d on this %s; the leader may be ahead)", st.AppliedIndex, st.State)
}
