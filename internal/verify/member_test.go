package verify

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
)

// fakeMembers is a leader that serves Leave over a set of members. The
// first lostAnswers Leave calls take effect but never answer (the caller's
// deadline passes first), as when the leader is slow to commit or the
// connection breaks after the removal.
type fakeMembers struct {
	mu          sync.Mutex
	members     map[string]bool
	lostAnswers int
	calls       int
	refuse      error // if set, every Leave is answered with it
}

func (f *fakeMembers) leave(ctx context.Context, req *tenurev1.LeaveRequest) (*tenurev1.LeaveResponse, error) {
	f.mu.Lock()
	f.calls++
	if f.refuse != nil {
		f.mu.Unlock()
		return nil, f.refuse
	}
	if !f.members[req.GetNodeId()] {
		f.mu.Unlock()
		return nil, connect.NewError(connect.CodeNotFound, errors.New(`node: no such member "`+req.GetNodeId()+`"`))
	}
	delete(f.members, req.GetNodeId())
	lost := f.calls <= f.lostAnswers
	f.mu.Unlock()
	if lost {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return &tenurev1.LeaveResponse{}, nil
}

func fakeLeaderClient(t *testing.T, f *fakeMembers) *client.Client {
	t.Helper()
	addr := fakeserver.Start(t, &fakeserver.Server{Leave: f.leave})
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{addr}
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// A Leave whose answer was lost took effect; the retry is told "no such
// member", and that is the success it stands for (seed 777: the member
// fault took it for a failure and left n1 out of the cluster for good).
func TestLeaveNoSuchMemberOnRetryTookEffect(t *testing.T) {
	f := &fakeMembers{members: map[string]bool{"n1": true, "n2": true, "n3": true}, lostAnswers: 1}
	cl := fakeLeaderClient(t, f)
	note, err := leave(t.Context(), cl, "n1", leaveAttempt, 10*leaveAttempt)
	if err != nil {
		t.Fatalf("leave returned %v after %d calls; the first call removed n1", err, f.calls)
	}
	if f.calls != 2 || f.members["n1"] {
		t.Fatalf("%d Leave calls, n1 still a member: %v; want 2 calls and n1 gone", f.calls, f.members["n1"])
	}
	if !strings.Contains(note, "earlier attempt took effect") {
		t.Errorf("the note does not say an earlier attempt took effect: %q", note)
	}
}

func TestLeave(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       *fakeMembers
		calls   int
		wantErr bool
		note    string // in the note; "" for no note
	}{
		{"answered", &fakeMembers{members: map[string]bool{"n1": true, "n2": true}}, 1, false, ""},
		{"not a member to begin with", &fakeMembers{members: map[string]bool{"n2": true}}, 1, false, "n1 is not a member"},
		{"answer lost", &fakeMembers{members: map[string]bool{"n1": true, "n2": true}, lostAnswers: 1}, 2, false, "attempt 2"},
		{"refused", &fakeMembers{members: map[string]bool{"n1": true}, refuse: connect.NewError(connect.CodeInvalidArgument, errors.New("node: cannot remove the last voter"))}, -1, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := fakeLeaderClient(t, tc.f)
			note, err := leave(t.Context(), cl, "n1", leaveAttempt, 5*leaveAttempt)
			if (err != nil) != tc.wantErr {
				t.Fatalf("leave: %v, want an error: %v", err, tc.wantErr)
			}
			if tc.calls >= 0 && tc.f.calls != tc.calls {
				t.Errorf("%d Leave calls, want %d", tc.f.calls, tc.calls)
			}
			if tc.calls < 0 && tc.f.calls < 2 {
				t.Errorf("a refused Leave was tried %d times, want retries", tc.f.calls)
			}
			if tc.note == "" && note != "" || !strings.Contains(note, tc.note) {
				t.Errorf("note %q, want one with %q", note, tc.note)
			}
		})
	}
}

// The cluster-size check fails a run that ends with fewer voters than it
// began with, and says which are missing and what was awaited.
func TestMembershipCheck(t *testing.T) {
	all := []string{"n1", "n2", "n3"}
	for _, tc := range []struct {
		name string
		m    Membership
		want []string // in the one violation's detail; nil: no violation
	}{
		{"as large", Membership{Start: all, End: all, EndLeader: "n2"}, nil},
		{"larger", Membership{Start: []string{"n1", "n2"}, End: all, EndLeader: "n2"}, nil},
		{"no start recorded", Membership{End: []string{"n2"}}, nil},
		{"seed 777: one left", Membership{Start: all, End: []string{"n2"}, EndLeader: "n2", Awaited: "a leader to list 3 voters", Waited: time.Minute,
			Unrestored: []string{"n3 left, wiped and re-joined through 127.0.0.1:1: waited 30s"}},
			[]string{"began with 3 voters", "ended with 1", "leader n2 lists voters n2", "not voters: n1, n3", "waiting 1m0s for a leader to list 3 voters", "1 member faults could not restore it"}},
		{"no leader at the end", Membership{Start: all, Awaited: "a leader"}, []string{"ended with 0", "no leader answered", "not voters: n1, n2, n3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := tc.m.Check()
			if tc.want == nil {
				if len(vs) != 0 {
					t.Fatalf("violations %v, want none", vs)
				}
				return
			}
			if len(vs) != 1 || vs[0].Invariant != InvClusterSize {
				t.Fatalf("violations %v, want one %s", vs, InvClusterSize)
			}
			for _, w := range tc.want {
				if !strings.Contains(vs[0].Detail, w) {
					t.Errorf("detail %q lacks %q", vs[0].Detail, w)
				}
			}
		})
	}
}

// The damaged-dir fault only empties the raft.db of an initialised data
// directory: in one without a cluster-id (a node wiped by the member fault
// that has not joined again) tenured rightly starts a new node, which the
// fault took for a violation in seed 777.
func TestDamagedTargetInitialised(t *testing.T) {
	status := func(ctx context.Context, _ *tenurev1.StatusRequest) (*tenurev1.StatusResponse, error) {
		return &tenurev1.StatusResponse{NodeId: "n1", State: "leader", LeaderId: "n1"}, nil
	}
	dir := t.TempDir()
	c := &Cluster{}
	for i := range 3 {
		addr := fakeserver.Start(t, &fakeserver.Server{Status: status})
		c.Nodes = append(c.Nodes, &Node{Index: i, ID: "n" + string(rune('1'+i)), API: addr, DataDir: filepath.Join(dir, "n"+string(rune('1'+i)))})
	}
	initialise := func(i int) {
		t.Helper()
		if err := os.MkdirAll(c.Nodes[i].DataDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(c.Nodes[i].DataDir, fileClusterID), []byte("c1\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := &Nemesis{C: c, Log: t.Logf}
	ctx := t.Context()
	initialise(0) // the leader
	if i, ok := n.damagedTarget(ctx, 1); ok {
		t.Fatalf("picked n%d, but no follower's directory is initialised", i+1)
	}
	initialise(2)
	if i, ok := n.damagedTarget(ctx, 1); !ok || i != 2 {
		t.Fatalf("picked n%d (%v), want n3: n2 has no %s and n1 leads", i+1, ok, fileClusterID)
	}
	initialise(1)
	if i, ok := n.damagedTarget(ctx, 1); !ok || i != 1 {
		t.Fatalf("picked n%d (%v), want n2", i+1, ok)
	}
	if err := os.RemoveAll(c.Nodes[1].DataDir); err != nil {
		t.Fatal(err)
	}
	if c.Initialised(1) || !c.Initialised(2) {
		t.Fatalf("Initialised: wiped n2 %v, n3 %v; want false, true", c.Initialised(1), c.Initialised(2))
	}
}

// testMemberFault runs the member fault against a real cluster on node 0,
// which bootstrapped it and restarts without --join unless its directory
// was wiped: the cluster must end with three voters and pass
// cluster-size. Then it removes a follower for good, and cluster-size must
// fail, naming it.
func testMemberFault(t *testing.T, tenured string) {
	ctx := t.Context()
	c, err := NewCluster(tenured, evidenceDir(t), 3, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	start := Membership{Start: []string{"n1", "n2", "n3"}}
	cl, err := c.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	err = waitFor(ctx, 15*time.Second, "n2 to lead", func() bool {
		if l, _, ok := c.LeaderStatus(ctx); ok && l == 1 {
			return true
		}
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		cl.TransferLeadership(tctx, "n2")
		return false
	})
	if err != nil {
		t.Fatal(err)
	}

	n := &Nemesis{C: c, Log: t.Logf}
	if !n.member(ctx, 0, 200*time.Millisecond) {
		t.Fatal("the member fault on n1 was not injected")
	}
	if len(n.Unrestored) != 0 {
		t.Fatalf("the member fault did not restore the cluster: %v", n.Unrestored)
	}
	if !c.Initialised(0) {
		t.Error("n1's wiped directory was not initialised again: it did not join")
	}
	if vs := endMembership(ctx, c, start, 5*time.Second).Check(); len(vs) != 0 {
		t.Fatalf("cluster-size after the member fault: %v", vs)
	}

	// n3 removed for good: the run must fail.
	out := 2
	if l, _, ok := c.LeaderStatus(ctx); ok && l == out {
		out = 0
	}
	id := c.Nodes[out].ID
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cl.Leave(lctx, id)
	cancel()
	if err != nil {
		t.Fatalf("leave %s: %v", id, err)
	}
	c.Kill(out)
	m := endMembership(ctx, c, start, 2*time.Second)
	vs := m.Check()
	if len(vs) != 1 || vs[0].Invariant != InvClusterSize || !strings.Contains(vs[0].Detail, "not voters: "+id) || !strings.Contains(vs[0].Detail, "waiting 2s") {
		t.Fatalf("with %s removed for good, cluster-size reported %v; want one violation naming %s and the wait", id, vs, id)
	}
	t.Logf("as it must: %s", vs[0])
}
