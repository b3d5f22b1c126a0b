package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

type jsonMember struct {
	ID          string `json:"id"`
	APIAddress  string `json:"api_address"`
	Suffrage    string `json:"suffrage"`
	Voter       bool   `json:"voter"`
	Leader      bool   `json:"leader"`
	LastContact string `json:"last_contact"`
	Reachable   bool   `json:"reachable"`
}

func memberList(t *testing.T, endpoints string) []jsonMember {
	t.Helper()
	r := cli(t, endpoints, "member", "list", "-o", "json")
	mustCode(t, 0, r, "member list")
	var out []jsonMember
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var m jsonMember
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("member list line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// calmElection is the raft election timeout of the e2e clusters: long
// enough that a loaded machine (the race detector, other packages testing
// beside) does not elect by accident. A test that kills a leader waits a
// second or two more for the next one.
const calmElection = "1s"

// startThree starts a three-node cluster and waits until all are voters.
func startThree(t *testing.T, extra ...string) []*server {
	t.Helper()
	opts := append([]string{"--election-timeout", calmElection}, extra...)
	n1 := newServer(t, "n1", "", opts...)
	n1.start()
	n1.waitReady(20 * time.Second)
	n2 := newServer(t, "n2", n1.api, opts...)
	n3 := newServer(t, "n3", n1.api, opts...)
	n2.start()
	n3.start()
	for _, n := range []*server{n1, n2, n3} {
		waitVoters(t, n.api, 3)
	}
	return []*server{n1, n2, n3}
}

func TestMemberCommands(t *testing.T) {
	ns := startThree(t)
	all := ns[0].api + "," + ns[1].api + "," + ns[2].api
	byID := map[string]*server{}
	for _, s := range ns {
		byID[s.name] = s
	}

	ms := memberList(t, ns[1].api) // a follower's view is completed by the leader's
	if len(ms) != 3 {
		t.Fatalf("member list: %+v, want 3 members", ms)
	}
	leaders := 0
	for _, m := range ms {
		if m.Leader {
			leaders++
		}
		if !m.Voter || m.Suffrage != "voter" || !m.Reachable || m.LastContact == "" || m.APIAddress != byID[m.ID].api {
			t.Errorf("member %+v: want a reachable voter with a last contact and API %s", m, byID[m.ID].api)
		}
	}
	if leaders != 1 {
		t.Errorf("member list marks %d leaders: %+v", leaders, ms)
	}
	text := cli(t, all, "member", "list")
	mustCode(t, 0, text, "member list (text)")
	if !strings.Contains(text.stdout, "LAST CONTACT") || !strings.Contains(text.stdout, "REACHABLE") {
		t.Errorf("member list text has no header: %s", text.stdout)
	}

	// Unknown IDs: not found, nothing changes.
	r := cli(t, all, "member", "remove", "nope")
	mustCode(t, 6, r, "member remove of an unknown ID")
	if !strings.Contains(r.stderr, `member "nope" not found`) {
		t.Errorf("member remove nope: stderr %q does not name the member", r.stderr)
	}
	mustCode(t, 6, cli(t, all, "leader", "transfer", "nope"), "leader transfer to an unknown ID")
	mustCode(t, 2, cli(t, all, "member", "remove"), "member remove without an ID")

	// A member that is down is listed as unreachable.
	var follower *server
	for _, m := range ms {
		if !m.Leader && follower == nil {
			follower = byID[m.ID]
		}
	}
	follower.kill()
	eventually(t, follower.name+" listed as unreachable", 10*time.Second, func() error {
		for _, m := range memberList(t, all) {
			if m.ID == follower.name && m.Reachable {
				return fmt.Errorf("%+v", m)
			}
		}
		return nil
	})
	r = cli(t, all, "member", "remove", follower.name)
	mustCode(t, 0, r, "member remove of a stopped follower")
	if got := strings.TrimSpace(r.stdout); got != "removed "+follower.name {
		t.Errorf("member remove: stdout %q", got)
	}

	// Hand leadership to the other voter, then remove the new leader
	// through its own API: the answer is success and the process stops.
	st := waitVoters(t, all, 2)
	r = cli(t, all, "leader", "transfer", "-o", "json")
	mustCode(t, 0, r, "leader transfer")
	var tr struct {
		Leader string `json:"leader"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &tr); err != nil || tr.Leader == "" || tr.Leader == st.Leader {
		t.Fatalf("leader transfer from %s: %q (%v)", st.Leader, r.stdout, err)
	}
	leader := byID[tr.Leader]
	r = cli(t, leader.api, "member", "remove", leader.name)
	mustCode(t, 0, r, "member remove of the leader itself")
	select {
	case <-leader.proc.Exited():
		if code := leader.proc.ExitCode(); code != 0 {
			t.Errorf("removed %s exited %d, want 0", leader.name, code)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("removed %s still runs 10s later", leader.name)
	}
	var last *server
	for _, s := range ns {
		if s != follower && s != leader {
			last = s
		}
	}
	waitVoters(t, last.api, 1)
	r = cli(t, last.api, "member", "remove", last.name)
	mustCode(t, 2, r, "member remove of the last voter")
	if !strings.Contains(r.stderr, "last voter") {
		t.Errorf("removing the last voter: stderr %q", r.stderr)
	}
	if len(memberList(t, last.api)) != 1 {
		t.Errorf("the refused removal changed the membership")
	}
}

// Without a quorum there is no leader: member remove and leader transfer
// fail with exit 1 and say why; member list still shows the members.
func TestMemberCommandsWithoutLeader(t *testing.T) {
	ns := startThree(t)
	ns[1].kill()
	ns[2].kill()
	lone := ns[0].api
	eventually(t, "n1 to lose its leadership", 10*time.Second, func() error {
		if st, err := status(t, lone); err != nil || st.Leader != "" {
			return fmt.Errorf("leader %q, %v", st.Leader, err)
		}
		return nil
	})
	for _, args := range [][]string{{"member", "remove", "n2"}, {"leader", "transfer"}} {
		r := cli(t, lone, append(args, "--request-timeout", "1s")...)
		mustCode(t, 1, r, strings.Join(args, " ")+" without a leader")
		if !strings.Contains(r.stderr, "no leader") {
			t.Errorf("%s: stderr %q does not say there is no leader", strings.Join(args, " "), r.stderr)
		}
	}
	r := cli(t, lone, "member", "list")
	mustCode(t, 0, r, "member list without a leader")
	down := 0
	for _, l := range strings.Split(r.stdout, "\n") {
		if strings.HasSuffix(strings.TrimSpace(l), " no") {
			down++
		}
	}
	if !strings.Contains(r.stdout, "no leader") || down != 2 {
		t.Errorf("member list without a leader (want a note and 2 unreachable members):\n%s", r.stdout)
	}
}
