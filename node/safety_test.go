package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

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
