package node

import (
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// TestWaitAfterShutdown stops a node while a committed entry is still
// queued for its FSM. hashicorp/raft's FSM goroutine may exit on shutdown
// without applying it and then never answers its future
// (hashicorp/raft#498); wait must return anyway once raft has shut down,
// or stop hangs on the completer.
func TestWaitAfterShutdown(t *testing.T) {
	for round := range 8 {
		cfg := testConfig(t, "w"+strconv.Itoa(round))
		cfg.InMemory = true
		cfg.Bootstrap = true
		_, cfg.Transport = raft.NewInmemTransport(raft.ServerAddress(cfg.ID))
		n := mustNode(t, cfg)
		waitFor(t, "leadership", 5*time.Second, n.IsLeader)

		// Hold the FSM inside the next batch.
		gate, blocked := make(chan struct{}), make(chan uint64, 1)
		var once sync.Once
		n.fsm.mu.Lock()
		orig := n.fsm.onApply
		n.fsm.onApply = func(index uint64, now time.Duration, events []lease.Event) {
			orig(index, now, events)
			once.Do(func() {
				blocked <- index
				<-gate
			})
		}
		n.fsm.mu.Unlock()
		done := make(chan struct{})
		ctx := ctxT(t, 10*time.Second)
		go func() {
			defer close(done)
			_, _ = n.Do(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "h", TTL: time.Minute})
		}()
		var at uint64
		select {
		case at = <-blocked:
		case <-time.After(5 * time.Second):
			t.Fatal("timed out waiting for the FSM to apply the acquire")
		}

		// Commit another entry behind it, then shut down.
		f := n.raft.Apply(encodeMember(memberInfo{ID: "z", APIAddr: "api-z"}), time.Second)
		waitFor(t, "the entry behind the blocked one to commit", 5*time.Second, func() bool {
			return n.raft.CommitIndex() > at
		})
		stopped := make(chan error, 1)
		go func() { stopped <- n.stop(false) }()
		waitFor(t, "raft to begin shutting down", 5*time.Second, func() bool {
			return n.raft.State() == raft.Shutdown
		})
		close(gate)

		answered := make(chan error, 1)
		go func() { answered <- n.wait(f) }()
		select {
		case err := <-answered:
			t.Logf("round %d: the queued entry's future answered %v", round, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the future of an entry committed before shutdown was never answered", round)
		}
		if err := <-stopped; err != nil {
			t.Fatalf("round %d: stop: %v", round, err)
		}
		<-done
	}
}

// TestWaitSetsShutdownCh guards wait's reach into raft's futures: if a raft
// upgrade renames the field, wait would silently block for ever again.
func TestWaitSetsShutdownCh(t *testing.T) {
	cfg := testConfig(t, "w")
	cfg.InMemory = true
	cfg.Bootstrap = true
	_, cfg.Transport = raft.NewInmemTransport("w")
	n := mustNode(t, cfg)
	defer n.Close()
	waitFor(t, "leadership", 5*time.Second, n.IsLeader)
	for _, c := range []struct {
		name string
		f    func() raft.Future
	}{
		{"Apply", func() raft.Future {
			return n.raft.Apply(encodeMember(memberInfo{ID: "z", APIAddr: "api-z"}), time.Second)
		}},
		{"Barrier", func() raft.Future { return n.raft.Barrier(time.Second) }},
		{"AddNonvoter", func() raft.Future { return n.raft.AddNonvoter("z", "z", 0, time.Second) }},
		{"RemoveServer", func() raft.Future { return n.raft.RemoveServer("z", 0, time.Second) }},
	} {
		name, f := c.name, c.f()
		if err := n.wait(f); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		ch := reflect.ValueOf(f).Elem().FieldByName("ShutdownCh")
		if !ch.IsValid() || ch.Interface() != (chan struct{})(n.raftDown) {
			t.Errorf("%s: wait did not set the future's ShutdownCh", name)
		}
	}
}
