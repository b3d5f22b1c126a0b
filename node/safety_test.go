package node

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// A leader that loses leadership right after its takeover barrier must not
// publish the dead term: it would claim to lead as a follower (and stop
// forwarding), and if it led again it would stamp batches with the dead
// term's base plus the whole leaderless gap.
func TestTakeoverLostAfterBarrier(t *testing.T) {
	var hook atomic.Pointer[func(n *Node, lt *leaderTerm)]
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.afterBarrier = func(n *Node, lt *leaderTerm) {
			if h := hook.Load(); h != nil {
				(*h)(n, lt)
			}
		}
	})
	li := c.leaderIndex()
	target := c.others(li)[0]
	victim := c.nodes[target]
	fired := make(chan string, 1)
	h := func(n *Node, lt *leaderTerm) {
		if n != victim {
			return
		}
		select {
		case fired <- n.ID():
		default:
			return // only the first takeover
		}
		// Hand leadership on at once, and wait until the node's
		// leadership watcher has ended this term.
		// (A transfer times out after an election timeout when the
		// target is slow to answer: try again.)
		var err error
		for range 20 {
			if err = n.raft.LeadershipTransfer().Error(); err == nil || n.raft.State() != raft.Leader {
				break
			}
		}
		if n.raft.State() == raft.Leader {
			t.Errorf("transfer away from %s: %v", n.ID(), err)
			return
		}
		select {
		case <-lt.ctx.Done():
		case <-time.After(10 * time.Second):
			t.Errorf("the term of %s was not ended after it lost leadership", n.ID())
		}
	}
	hook.Store(&h)
	// The transfer call waits to see a new leader; leadership may come
	// straight back to it, so bound the wait and look at the hook.
	tctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := c.nodes[li].TransferLeadership(tctx, victim.ID())
	cancel()
	if err != nil {
		t.Fatalf("transfer to %s: %v", victim.ID(), err)
	}
	ctx := ctxT(t, 20*time.Second)
	select {
	case <-fired:
	case <-ctx.Done():
		t.Fatalf("%s never took over", victim.ID())
	}
	hook.Store(nil)
	nl := c.leaderIndex() // exactly one node leads in raft and has taken over
	c.eventually(victim.ID()+" to stop claiming leadership", 5*time.Second, func() error {
		if victim.raft.State() != raft.Leader && victim.IsLeader() {
			return fmt.Errorf("%s is a raft %s but IsLeader() says it leads (leader is %s)",
				victim.ID(), victim.raft.State(), c.ids[nl])
		}
		return nil
	})
	// And the cluster keeps serving through any node's view.
	led := newLedger()
	led.grant(t, ctx, c.do, "after-flap", "h")
	led.verify(t, ctx, c.do)
}

// A batch stamped by a leader in one raft term but appended in another
// must not move cluster time: its clock reading belongs to a dead term.
func TestApplyIgnoresTimeOfBatchFromAnotherTerm(t *testing.T) {
	f := newFSM()
	entry := func(index, term, proposedIn uint64, now time.Duration, ops ...lease.Op) *raft.Log {
		return &raft.Log{Index: index, Term: term, Type: raft.LogCommand,
			Data: appendTermBatch(nil, proposedIn, lease.Batch{Now: now, Ops: ops})}
	}
	acq := lease.Op{Type: lease.OpAcquire, Name: "a", Holder: "h", TTL: 10 * time.Second}
	f.Apply(entry(1, 3, 3, 5*time.Second, acq))
	if got := f.now(); got != 5*time.Second {
		t.Fatalf("cluster time %s after the first batch, want 5s", got)
	}
	// Proposed in term 4 with a clock far ahead; committed in term 5.
	res := f.Apply(entry(2, 5, 4, time.Hour, lease.Op{Type: lease.OpExpire}))
	if ar := res.(*applyResult); ar.err != nil {
		t.Fatal(ar.err)
	}
	if got := f.now(); got != 5*time.Second {
		t.Fatalf("cluster time %s after a batch from another term, want it unchanged at 5s", got)
	}
	if l, ok := f.st.Lease("a"); !ok || l.Token != 1 {
		t.Fatalf("lease a was expired by a batch whose time must be ignored: %+v %v", l, ok)
	}
	f.Apply(entry(3, 5, 5, 7*time.Second))
	if got := f.now(); got != 7*time.Second {
		t.Fatalf("cluster time %s after a batch of the current term, want 7s", got)
	}
	// Entries of the older format carry no proposal term and keep their
	// time.
	f.Apply(&raft.Log{Index: 4, Term: 5, Type: raft.LogCommand,
		Data: lease.AppendBatch([]byte{entryBatch}, lease.Batch{Now: 8 * time.Second})})
	if got := f.now(); got != 8*time.Second {
		t.Fatalf("cluster time %s after an old-format batch, want 8s", got)
	}
}

// A follower that installs a snapshot from the leader skips the events of
// the entries the snapshot covers: its watches must end (the client then
// watches again and reports a reset) instead of going on silently.
func TestSnapshotInstallEndsWatches(t *testing.T) {
	const trailing = 8
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 1 << 20 // snapshots only when the test asks
		cfg.TrailingLogs = trailing
	})
	ctx := ctxT(t, 30*time.Second)
	led := newLedger()
	li := c.leaderIndex()
	fi := c.others(li)[0]
	f := c.nodes[fi]
	w, err := f.Watch("")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	c.partition(fi)
	led.fill(t, ctx, c.do, "lagged/", 20)
	if err := c.nodes[li].raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot on the leader: %v", err)
	}
	c.heal()
	c.waitConverged("the partitioned follower to catch up from the leader's snapshot")
	for {
		select {
		case _, ok := <-w.Events:
			if ok {
				continue // events applied before the install are fine
			}
			if !errors.Is(w.Err(), ErrWatchReset) {
				t.Fatalf("watch ended with %v, want ErrWatchReset", w.Err())
			}
			led.verifyState(t, f)
			return
		case <-ctx.Done():
			t.Fatalf("%s installed a snapshot but its watch is still open: the events it skipped are lost silently", f.ID())
		}
	}
}

// A watch's first picture holds only leases live at the applied cluster
// time, not expired leases the expirer has not freed yet.
func TestWatchCurrentSkipsExpired(t *testing.T) {
	f := newFSM()
	n := &Node{fsm: f, hub: newHub()}
	f.Apply(&raft.Log{Index: 1, Term: 1, Type: raft.LogCommand, Data: appendTermBatch(nil, 1, lease.Batch{Now: time.Second, Ops: []lease.Op{
		{Type: lease.OpAcquire, Name: "short", Holder: "a", TTL: 2 * time.Second},
		{Type: lease.OpAcquire, Name: "long", Holder: "b", TTL: time.Minute},
	}})})
	// Time moves past short's expiry without an OpExpire.
	f.Apply(&raft.Log{Index: 2, Term: 1, Type: raft.LogCommand, Data: appendTermBatch(nil, 1, lease.Batch{Now: 10 * time.Second})})
	w, err := n.Watch("")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	if len(w.Current) != 1 || w.Current[0].Name != "long" {
		t.Fatalf("watch started with %+v, want only the live lease long", w.Current)
	}
	if st := f.st; st.Live() != 1 || st.Len() != 2 {
		t.Fatalf("Live() %d, Len() %d; want 1 live of 2 stored", st.Live(), st.Len())
	}
}

// A request whose caller gave up before it was batched is never proposed.
func TestProposalOfGoneCallerDropped(t *testing.T) {
	cfg := testConfig(t, "solo")
	cfg.InMemory = true
	_, tr := raft.NewInmemTransport("solo")
	cfg.Transport = tr
	cfg.Bootstrap = true
	n := mustNode(t, cfg)
	t.Cleanup(func() { n.Close() })
	waitFor(t, "the node to lead", 5*time.Second, n.IsLeader)
	before := n.raft.LastIndex()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	p := &proposal{ctx: gone, ops: []lease.Op{{Type: lease.OpAcquire, Name: "x", Holder: "h", TTL: time.Second}}, done: make(chan proposalResult, 1)}
	n.proposeCh <- p
	r := <-p.done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("a proposal whose caller had gone got %+v, want context.Canceled", r)
	}
	if got := n.raft.LastIndex(); got != before {
		t.Fatalf("raft log grew from %d to %d for a request nobody waits for", before, got)
	}
	n.fsm.mu.RLock()
	_, ok := n.fsm.st.Lease("x")
	n.fsm.mu.RUnlock()
	if ok {
		t.Fatal("the dropped acquire was applied")
	}
}

// One raft entry carries at most MaxBatchBytes of requests; a larger
// single request goes out alone.
func TestBatchByteLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxBatchBytes = 2<<20 + 1<<19 // 2.5 MiB
	n := &Node{cfg: cfg, proposeCh: make(chan *proposal, 16), metrics: newMetrics(nil)}
	mk := func(size int) *proposal {
		ops := []lease.Op{{Type: lease.OpPut, Key: "k", Name: "l", Token: 1, Value: make([]byte, size)}}
		return &proposal{ctx: context.Background(), ops: ops, size: opsSize(ops), done: make(chan proposalResult, 1)}
	}
	const mib = 1 << 20
	first := mk(mib)
	queued := []*proposal{mk(mib), mk(mib), mk(3 * mib), mk(10)}
	for _, p := range queued {
		n.proposeCh <- p
	}
	var sizes [][]int
	next := first
	for next != nil {
		props, _, nx := n.collect(next)
		var batch []int
		total := 0
		for _, p := range props {
			batch = append(batch, len(p.ops[0].Value))
			total += p.size
		}
		if len(props) > 1 && total > cfg.MaxBatchBytes {
			t.Fatalf("batch of %d bytes exceeds the limit of %d", total, cfg.MaxBatchBytes)
		}
		sizes = append(sizes, batch)
		next = nx
		if next == nil && len(n.proposeCh) > 0 {
			next = <-n.proposeCh
		}
	}
	want := fmt.Sprint([][]int{{mib, mib}, {mib}, {3 * mib}, {10}})
	if got := fmt.Sprint(sizes); got != want {
		t.Fatalf("batches by value size %s, want %s", got, want)
	}
}
