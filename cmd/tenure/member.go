package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/tenure-io/tenure/client"
)

const memberUsage = `Usage: tenure member COMMAND ...

Commands of cluster membership:
  member list          every member: ID, addresses, voter or not, the leader,
                       the leader's last contact with it, whether its API answers
  member remove ID     remove the member ID from the cluster (it stops)

Errors: an unknown ID exits 6; removing the last voter exits 2; no leader
(no quorum) exits 1.
`

const leaderUsage = `Usage: tenure leader transfer [ID]

Hands leadership to the voter ID, or with no ID to any other voter, and
prints the new leader.

Errors: an unknown ID exits 6; a non-voter, or no other voter, exits 2; no
leader exits 1.
`

// probeTimeout bounds the question member list asks each member's API.
const probeTimeout = time.Second

func (a *app) member(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "member: no command given", usage: memberUsage}
	}
	switch args[0] {
	case "list":
		return a.memberList(ctx, args[1:])
	case "remove":
		return a.memberRemove(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		return &helpRequest{usage: memberUsage}
	}
	return &usageError{msg: fmt.Sprintf("member: unknown command %q", args[0]), usage: memberUsage}
}

func (a *app) leader(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return &usageError{msg: "leader: no command given", usage: leaderUsage}
	}
	switch args[0] {
	case "transfer":
		return a.leaderTransfer(ctx, args[1:])
	case "-h", "-help", "--help", "help":
		return &helpRequest{usage: leaderUsage}
	}
	return &usageError{msg: fmt.Sprintf("leader: unknown command %q", args[0]), usage: leaderUsage}
}

// memberListJSON is one member in -o json: the API's Member fields, the
// last contact as a Go duration string (absent when not known) and
// whether its API answered.
type memberListJSON struct {
	ID          string `json:"id"`
	RaftAddress string `json:"raft_address"`
	APIAddress  string `json:"api_address"`
	Suffrage    string `json:"suffrage"`
	Voter       bool   `json:"voter"`
	Leader      bool   `json:"leader"`
	LastContact string `json:"last_contact,omitempty"`
	Reachable   bool   `json:"reachable"`
}

func (a *app) memberList(ctx context.Context, args []string) error {
	c := a.newCommand("member list", "member list",
		"Prints every member of the cluster: its ID, raft and API addresses, voter or\n"+
			"non-voter, the leader (marked *), how long ago the leader last heard from it\n"+
			"(its heartbeats), and whether its API answers within "+probeTimeout.String()+".")
	if _, err := a.parse(c, args, nil, 0); err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		st, err := cl.Status(ctx)
		if err != nil {
			return err
		}
		// The leader knows every member's last contact; a follower only
		// its leader's, and one that is catching up may not know the
		// members' API addresses yet. Ask the leader, found through the
		// follower or else among the other endpoints.
		if st.State != "leader" {
			st = a.leaderStatus(ctx, st)
		}
		reachable := a.probe(ctx, st.Members)
		out := a.out()
		var rows []memberListJSON
		for i, m := range st.Members {
			j := memberListJSON{
				ID: m.ID, RaftAddress: m.RaftAddress, APIAddress: m.APIAddress, Suffrage: m.Suffrage,
				Voter: m.Suffrage == "voter", Leader: m.Leader, Reachable: reachable[i],
			}
			if m.LastContact >= 0 {
				j.LastContact = fmtDuration(m.LastContact)
			}
			rows = append(rows, j)
		}
		if out.json {
			for _, r := range rows {
				out.print(r, "")
			}
			return nil
		}
		out.print(nil, memberTable(rows, st.LeaderID == ""))
		return nil
	})
}

func memberTable(rows []memberListJSON, noLeader bool) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tRAFT ADDRESS\tAPI ADDRESS\tSUFFRAGE\tLEADER\tLAST CONTACT\tREACHABLE")
	for _, r := range rows {
		mark, contact, reach := "", r.LastContact, "yes"
		if r.Leader {
			mark = "*"
		}
		if contact == "" {
			contact = "-"
		}
		if !r.Reachable {
			reach = "no"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.RaftAddress, r.APIAddress, r.Suffrage, mark, contact, reach)
	}
	w.Flush()
	if noLeader {
		b.WriteString("(no leader: the cluster has no quorum or is electing one)\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// statusOf asks the member at addr for its own status, once, within
// probeTimeout, with the CLI's TLS settings and token.
func (a *app) statusOf(ctx context.Context, addr string) (client.Status, error) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{addr}
	cfg.RequestTimeout = probeTimeout
	if err := a.g.tls.apply(&cfg); err != nil {
		return client.Status{}, err
	}
	cl, err := client.New(cfg)
	if err != nil {
		return client.Status{}, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return cl.Status(ctx)
}

// leaderStatus returns the leader's own status if the leader answers:
// at the address st names, or else at one of the other endpoints. It
// returns st if none does.
func (a *app) leaderStatus(ctx context.Context, st client.Status) client.Status {
	addrs := []string{st.LeaderAddress}
	if st.LeaderAddress == "" {
		addrs = a.g.endpointList()
	}
	for _, addr := range addrs {
		if addr == "" || addr == st.Endpoint {
			continue
		}
		if lst, err := a.statusOf(ctx, addr); err == nil && lst.State == "leader" && lst.ClusterID == st.ClusterID {
			return lst
		}
	}
	return st
}

// probe reports, for each member, whether its API answers a status
// request within probeTimeout. All are asked at once.
func (a *app) probe(ctx context.Context, ms []client.Member) []bool {
	ok := make([]bool, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		if m.APIAddress == "" {
			continue
		}
		wg.Go(func() {
			st, err := a.statusOf(ctx, m.APIAddress)
			ok[i] = err == nil && st.NodeID == m.ID
		})
	}
	wg.Wait()
	return ok
}

func (a *app) memberRemove(ctx context.Context, args []string) error {
	c := a.newCommand("member remove", "member remove ID",
		"Removes the member ID from the cluster. The member stops once it sees that it\n"+
			"was removed; to bring it back, give it an empty --data-dir and --join again.\n"+
			"The last voter cannot be removed.")
	pos, err := a.parse(c, args, []string{"ID"}, 1)
	if err != nil {
		return err
	}
	id := pos[0]
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		if err := cl.Leave(ctx, id); err != nil {
			return memberError(id, err)
		}
		a.out().print(struct {
			Removed string `json:"removed"`
		}{id}, "removed "+id)
		return nil
	})
}

func (a *app) leaderTransfer(ctx context.Context, args []string) error {
	c := a.newCommand("leader transfer", "leader transfer [ID]",
		"Hands leadership to the voter ID, or with no ID to another voter raft picks\n"+
			"(the most up to date), and prints the new leader.")
	c.optional = "ID"
	pos, err := a.parse(c, args, nil, 1)
	if err != nil {
		return err
	}
	id := ""
	if len(pos) == 1 {
		id = pos[0]
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		leader, err := cl.TransferLeadership(ctx, id)
		if err != nil {
			return memberError(id, err)
		}
		text := "leadership transferred to " + leader
		if leader == "" {
			text = "leadership handed over; the new leader is not known yet (see tenure member list)"
		}
		a.out().print(struct {
			Leader string `json:"leader"`
		}{leader}, text)
		return nil
	})
}

// memberError says what a membership error means for ID.
func memberError(id string, err error) error {
	if errors.Is(err, client.ErrNotFound) {
		return &notFoundError{what: fmt.Sprintf("member %q", id), err: err}
	}
	return err
}
