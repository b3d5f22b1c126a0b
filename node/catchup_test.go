package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// askVote sends a vote request to the node at addr from a transport of
// its own, as a candidate of term with a log as long as anyone's would,
// and reports whether the vote was granted.
func askVote(t *testing.T, from *raft.InmemTransport, addr raft.ServerAddress, term uint64) bool {
	t.Helper()
	hdr := raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("candidate"), Addr: []byte(from.LocalAddr())}
	var vr raft.RequestVoteResponse
	if err := from.RequestVote("x", addr, &raft.RequestVoteRequest{RPCHeader: hdr, Term: term, LastLogIndex: 1 << 20, LastLogTerm: term}, &vr); err != nil {
		t.Fatalf("RequestVote: %v", err)
	}
	return vr.Granted
}

// A node that joins with no raft state refuses vote requests, and asks
// for none, until its log reaches the catch-up index; a node that
// bootstraps votes at once.
func TestCatchingUpNodeDoesNotVote(t *testing.T) {
	lcfg := testConfig(t, "n1")
	lcfg.InMemory, lcfg.Bootstrap = true, true
	laddr, ltr := raft.NewInmemTransport("n1")
	lcfg.Transport = ltr
	l := mustNode(t, lcfg)
	defer l.Abort()
	waitFor(t, "n1 to lead", 5*time.Second, l.IsLeader)
	if l.CatchingUp() {
		t.Fatal("the node that bootstrapped the cluster is catching up")
	}

	fcfg := testConfig(t, "n2")
	fcfg.DataDir = t.TempDir()
	faddr, ftr := raft.NewInmemTransport("n2")
	fcfg.Transport = ftr
	f := mustNode(t, fcfg)
	defer f.Close()
	_, ctr := raft.NewInmemTransport("candidate")
	ctr.Connect(faddr, ftr)
	ftr.Connect("candidate", ctr)

	if !f.CatchingUp() {
		t.Fatal("a node with a new data directory that joins is not catching up")
	}
	// raft grants a vote from an empty log to anyone: this is the vote
	// that elected a leader without the grants a wiped voter had
	// acknowledged.
	if askVote(t, ctr, faddr, l.raft.CurrentTerm()+1) {
		t.Fatal("a catching-up node granted its vote")
	}
	var resp raft.RequestVoteResponse
	if err := f.trans.RequestVote("n1", laddr, &raft.RequestVoteRequest{}, &resp); !errors.Is(err, errNotVoting) {
		t.Fatalf("a catching-up node sent a vote request: %v", err)
	}

	// Join: the leader hands out a catch-up index past everything.
	ltr.Connect(faddr, ftr)
	ftr.Connect(laddr, ltr)
	if err := f.SetClusterID(l.ClusterID()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second)
	for i := range 3 {
		if _, err := l.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: string(rune('a' + i)), Holder: "h", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	// The vote request above gave n2 a higher term: n1 steps down when n2
	// first answers it, and leads again a moment later (it is the only
	// voter). Ask again until the join is answered.
	var index uint64
	var err error
	for {
		index, err = l.Join(ctx, JoinRequest{ID: "n2", RaftAddr: string(faddr), APIAddr: "api-n2", CatchingUp: f.CatchingUp()})
		if err == nil || !(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrIndeterminate)) || ctx.Err() != nil {
			break
		}
		waitFor(t, "n1 to lead again", 5*time.Second, l.IsLeader)
	}
	if err != nil || index == 0 {
		t.Fatalf("Join: index %d, %v", index, err)
	}
	if err := f.Joined(l.ClusterID(), index); err != nil {
		t.Fatal(err)
	}
	if got, err := readCatchUpFile(t, fcfg.DataDir); err != nil || got != index {
		t.Fatalf("catching-up holds %d (%v), want %d", got, err, index)
	}
	waitFor(t, "n2 to catch up", 10*time.Second, func() bool { return !f.CatchingUp() })
	if f.raft.LastIndex() < index {
		t.Fatalf("n2 votes with its log at %d, before the catch-up index %d", f.raft.LastIndex(), index)
	}
	if _, err := os.Stat(filepath.Join(fcfg.DataDir, fileCatchingUp)); !os.IsNotExist(err) {
		t.Fatalf("the catching-up mark is still there after catching up: %v", err)
	}
	if !f.mayVote() {
		t.Fatal("a node that caught up still may not vote")
	}
	var resp2 raft.RequestVoteResponse
	if err := f.trans.RequestVote("n9", "nowhere", &raft.RequestVoteRequest{}, &resp2); errors.Is(err, errNotVoting) {
		t.Fatal("a node that caught up may still not ask for votes")
	}
	waitFor(t, "n2 to be promoted to voter", 10*time.Second, func() bool {
		for _, m := range l.Status().Members {
			if m.ID == "n2" {
				return m.Voter
			}
		}
		return false
	})
}

func readCatchUpFile(t *testing.T, dir string) (uint64, error) {
	t.Helper()
	_, index, err := readCatchUp(dir)
	return index, err
}
