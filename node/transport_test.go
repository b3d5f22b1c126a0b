package node

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// tcpNode starts a single-node cluster on loopback TCP with the cluster
// handshake, in a new data directory.
func tcpNode(t *testing.T, id string, logs *logRecorder) *Node {
	t.Helper()
	cfg := testConfig(t, id)
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.Bootstrap = true
	cfg.Logger = logs.logger(id)
	n := mustNode(t, cfg)
	t.Cleanup(func() { n.Close() })
	waitFor(t, id+" to lead its own cluster", 5*time.Second, n.IsLeader)
	return n
}

type raftView struct {
	term, last uint64
	state      []byte
	servers    int
}

func viewOf(t *testing.T, n *Node) raftView {
	t.Helper()
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	var state bytes.Buffer
	if err := n.WriteState(&state); err != nil {
		t.Fatal(err)
	}
	return raftView{n.raft.CurrentTerm(), n.raft.LastIndex(), state.Bytes(), len(f.Configuration().Servers)}
}

// logRecorder keeps the log lines of some nodes for a test to look at;
// warnings and errors also go to t.Log.
type logRecorder struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) logger(id string) *slog.Logger {
	return slog.New(slog.NewTextHandler(r, nil)).With("node", id)
}

func (r *logRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := string(p)
	r.lines = append(r.lines, line)
	if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
		r.t.Log(line)
	}
	return len(p), nil
}

// logged reports whether node id logged a line containing msg.
func (r *logRecorder) logged(id, msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if strings.Contains(l, "node="+id) && strings.Contains(l, msg) {
			return true
		}
	}
	return false
}

// Raft traffic from a node of another cluster is refused before raft sees
// it, whatever term it claims, and the refusal is logged on both sides.
// This is what a member's old peers do when its address is reused by a
// node of a new cluster.
func TestRaftTrafficFromAnotherClusterRefused(t *testing.T) {
	logs := &logRecorder{t: t}
	a := tcpNode(t, "a1", logs)
	b := tcpNode(t, "b1", logs)
	if a.ClusterID() == "" || a.ClusterID() == b.ClusterID() {
		t.Fatalf("cluster IDs %q and %q: want two different, non-empty IDs", a.ClusterID(), b.ClusterID())
	}
	ctx := ctxT(t, 20*time.Second)
	for _, n := range []*Node{a, b} {
		if _, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: n.ID(), TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	beforeA, beforeB := viewOf(t, a), viewOf(t, b)

	// A raw transport speaking for cluster A asks B's node to vote in a
	// far later term and to take entries from a new leader.
	hlog := hclog.New(&hclog.LoggerOptions{Output: io.Discard})
	intruder, stream, err := newClusterTransport("127.0.0.1:0", "", "", nil, slog.New(slog.NewTextHandler(io.Discard, nil)), hlog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		intruder.CloseStreams()
		intruder.Close()
	}()
	stream.setClusterID(a.ClusterID())
	var vote raft.RequestVoteResponse
	err = intruder.RequestVote("b1", raft.ServerAddress(b.RaftAddr()), &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a1"), Addr: []byte(a.RaftAddr())},
		Term:      beforeB.term + 100, LastLogIndex: 1 << 40, LastLogTerm: beforeB.term + 99,
	}, &vote)
	if !errors.Is(err, ErrOtherCluster) {
		t.Fatalf("RequestVote from cluster A to B's node: %v, want ErrOtherCluster", err)
	}
	var app raft.AppendEntriesResponse
	err = intruder.AppendEntries("b1", raft.ServerAddress(b.RaftAddr()), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a1"), Addr: []byte(a.RaftAddr())},
		Term:      beforeB.term + 100, PrevLogEntry: 0, LeaderCommitIndex: 1 << 40,
	}, &app)
	if !errors.Is(err, ErrOtherCluster) {
		t.Fatalf("AppendEntries from cluster A to B's node: %v, want ErrOtherCluster", err)
	}

	// A's leader itself, pointed at B's raft address as if it were a
	// member of A there, gets nowhere either.
	if _, err := a.Join(ctx, JoinRequest{ID: "b1-as-seen-by-a", RaftAddr: b.RaftAddr(), APIAddr: "127.0.0.1:1"}); err != nil {
		t.Fatalf("add B's address to A: %v", err)
	}
	waitFor(t, "B's node to refuse A's leader", 5*time.Second, func() bool {
		return logs.logged("b1", "refused a raft connection") && logs.logged("a1", "raft peer refused the connection")
	})

	afterB := viewOf(t, b)
	if afterB.term != beforeB.term || afterB.last != beforeB.last || !bytes.Equal(afterB.state, beforeB.state) || afterB.servers != 1 {
		t.Fatalf("cluster B changed: term %d -> %d, last index %d -> %d, servers %d", beforeB.term, afterB.term, beforeB.last, afterB.last, afterB.servers)
	}
	afterA := viewOf(t, a)
	if afterA.term != beforeA.term || !bytes.Equal(afterA.state, beforeA.state) || !a.IsLeader() || !b.IsLeader() {
		t.Fatalf("cluster A changed beyond the member it was told to add: term %d -> %d, leaders a=%v b=%v",
			beforeA.term, afterA.term, a.IsLeader(), b.IsLeader())
	}

	// Control: the same request with B's cluster ID does reach raft (and
	// moves B's term), so the check above is what kept it out.
	stream.setClusterID(b.ClusterID())
	if err := intruder.AppendEntries("b1", raft.ServerAddress(b.RaftAddr()), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("a1"), Addr: []byte(a.RaftAddr())},
		Term:      beforeB.term + 100,
	}, &app); err != nil {
		t.Fatalf("AppendEntries with B's own cluster ID: %v", err)
	}
	if got := b.raft.CurrentTerm(); got != beforeB.term+100 {
		t.Fatalf("control: B's term is %d, want %d once the request carries B's ID", got, beforeB.term+100)
	}
}

// A node that belongs to one cluster never takes the ID of another, and
// a new node's data directory records the ID it learns.
func TestSetClusterID(t *testing.T) {
	logs := &logRecorder{t: t}
	a := tcpNode(t, "a1", logs)
	if err := a.SetClusterID(a.ClusterID()); err != nil {
		t.Fatalf("the same ID again: %v", err)
	}
	if err := a.SetClusterID(NewClusterID()); !errors.Is(err, ErrOtherCluster) {
		t.Fatalf("another ID: %v, want ErrOtherCluster", err)
	}
	cfg := testConfig(t, "j1")
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.Logger = logs.logger("j1")
	j := mustNode(t, cfg)
	defer j.Close()
	if j.ClusterID() != "" {
		t.Fatalf("a new node that has not joined has cluster ID %q", j.ClusterID())
	}
	if err := j.SetClusterID(a.ClusterID()); err != nil {
		t.Fatal(err)
	}
	got, err := readID(cfg.DataDir + "/cluster-id")
	if err != nil || got != a.ClusterID() {
		t.Fatalf("cluster-id file holds %q (%v), want %q", got, err, a.ClusterID())
	}
	if id, _ := readID(cfg.DataDir + "/node-id"); id != "j1" {
		t.Fatalf("node-id file holds %q, want j1", id)
	}
	if !strings.Contains(a.Status().ClusterID, a.ClusterID()) {
		t.Fatalf("Status().ClusterID = %q", a.Status().ClusterID)
	}
}

// When the leader dies its raft connections break; a follower that sees
// that waits only a short heartbeat timeout for it, for a while, and then
// goes back to the configured one.
func TestFollowerSuspectsALeaderWhoseConnectionBroke(t *testing.T) {
	logs := &logRecorder{t: t}
	l := tcpNode(t, "n1", logs)
	var followers []*Node
	for _, id := range []string{"n2", "n3"} {
		cfg := testConfig(t, id)
		cfg.DataDir = t.TempDir()
		cfg.RaftAddr = "127.0.0.1:0"
		cfg.HeartbeatTimeout = 400 * time.Millisecond
		cfg.ElectionTimeout = 400 * time.Millisecond
		cfg.Logger = logs.logger(id)
		f := mustNode(t, cfg)
		t.Cleanup(func() { f.Close() })
		if err := f.SetClusterID(l.ClusterID()); err != nil {
			t.Fatal(err)
		}
		index, err := l.Join(ctxT(t, 10*time.Second), JoinRequest{ID: id, RaftAddr: f.RaftAddr(), APIAddr: "api-" + id, CatchingUp: f.CatchingUp()})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Joined(l.ClusterID(), index); err != nil {
			t.Fatal(err)
		}
		followers = append(followers, f)
	}
	waitFor(t, "both followers to be voters following n1", 10*time.Second, func() bool {
		voters := 0
		for _, m := range l.Status().Members {
			if m.Voter {
				voters++
			}
		}
		if voters != 3 {
			return false
		}
		for _, f := range followers {
			if addr, _ := f.raft.LeaderWithID(); string(addr) != l.RaftAddr() {
				return false
			}
		}
		return true
	})
	if err := l.Abort(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a follower to notice the leader's connections broke", 5*time.Second, func() bool {
		return logs.logged("n2", "the leader's raft connection broke") || logs.logged("n3", "the leader's raft connection broke")
	})
	waitFor(t, "a new leader among the followers", 10*time.Second, func() bool {
		return followers[0].IsLeader() || followers[1].IsLeader()
	})
	waitFor(t, "the followers' heartbeat timeout to be restored", 10*time.Second, func() bool {
		for _, f := range followers {
			if f.raft.ReloadableConfig().HeartbeatTimeout != 400*time.Millisecond {
				return false
			}
		}
		return true
	})
}

// A node restarted on its data knows its cluster before its raft port
// accepts anything: the first connection of a member is served, not
// refused with "this node has not joined a cluster yet" (seen once when a
// peer reconnected the moment a node came back).
func TestRestartedNodeAcceptsItsClusterAtOnce(t *testing.T) {
	hlog := hclog.New(&hclog.LoggerOptions{Output: io.Discard})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	back, _, err := newClusterTransport("127.0.0.1:0", "", "c1", nil, quiet, hlog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { back.CloseStreams(); back.Close() }()
	stop, served := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(served)
		for {
			select {
			case rpc := <-back.Consumer():
				rpc.Respond(&raft.RequestVoteResponse{Term: 7}, nil)
			case <-stop:
				return
			}
		}
	}()
	defer func() { close(stop); <-served }()
	peer, stream, err := newClusterTransport("127.0.0.1:0", "", "c1", nil, quiet, hlog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { peer.CloseStreams(); peer.Close() }()
	if stream.cluster() != "c1" {
		t.Fatalf("a transport made for cluster c1 knows cluster %q", stream.cluster())
	}
	var vote raft.RequestVoteResponse
	err = peer.RequestVote("n1", back.LocalAddr(), &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("n2"), Addr: []byte(peer.LocalAddr())},
		Term:      7,
	}, &vote)
	if err != nil || vote.Term != 7 {
		t.Fatalf("the first RequestVote of a member: %v (term %d), want it served", err, vote.Term)
	}
}
