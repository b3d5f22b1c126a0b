package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/node"
)

// A leader that loses leadership right after its takeover barrier must not
// publish the dead term: it would claim to lead as a follower (and stop
// forwarding), and if it led again it would stamp batches with the dead
// term's base plus the whole leaderless gap.
func TestTakeoverLostAfterBarrier(t *testing.T) {
	var hook atomic.Pointer[func(n *node.Node, termEnded <-chan struct{})]
	c := newCluster(t, func(cfg *node.Config) {
		node.SetAfterBarrier(cfg, func(n *node.Node, termEnded <-chan struct{}) {
			if h := hook.Load(); h != nil {
				(*h)(n, termEnded)
			}
		})
	})
	lm := c.Leader()
	victim := c.others(lm)[0].Node
	fired := make(chan string, 1)
	h := func(n *node.Node, termEnded <-chan struct{}) {
		if n != victim {
			return
		}
		select {
		case fired <- n.ID():
		default:
			return // only the first takeover
		}
		// Hand leadership on at once (a transfer times out after an
		// election timeout when the target is slow to answer: try
		// again), and wait until the node's leadership watcher has
		// ended this term.
		var err error
		for range 20 {
			if err = n.TransferAway(); err == nil || n.RaftState() != raft.Leader {
				break
			}
		}
		if n.RaftState() == raft.Leader {
			t.Errorf("transfer away from %s: %v", n.ID(), err)
			return
		}
		select {
		case <-termEnded:
		case <-time.After(10 * time.Second):
			t.Errorf("the term of %s was not ended after it lost leadership", n.ID())
		}
	}
	hook.Store(&h)
	// Move leadership to the victim. A transfer times out after an
	// election timeout when the target is slow to answer (a loaded
	// machine), and the transfer call waits to see a new leader, which
	// the hook sends straight on: try again until the hook has fired.
	ctx := within(t, 30*time.Second)
	for done := false; !done; {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.Leader().Node.TransferLeadership(tctx, victim.ID())
		cancel()
		select {
		case <-fired:
			done = true
		case <-ctx.Done():
			t.Fatalf("%s never took over (last transfer: %v)", victim.ID(), err)
		default:
			if err != nil {
				t.Logf("transfer to %s: %v; trying again", victim.ID(), err)
			}
		}
	}
	hook.Store(nil)
	nl := c.Leader() // exactly one node leads in raft and has taken over
	testcluster.Eventually(t, victim.ID()+" to stop claiming leadership", 5*time.Second, func() error {
		if victim.RaftState() != raft.Leader && victim.IsLeader() {
			return fmt.Errorf("%s is a raft %s but IsLeader() says it leads (leader is %s)",
				victim.ID(), victim.RaftState(), nl.ID)
		}
		return nil
	})
	// And the cluster keeps serving.
	led := newLedger()
	led.grant(t, ctx, c.do, "after-flap", "h")
	led.verify(t, ctx, c.do)
}

// A follower that installs a snapshot from the leader skips the events of
// the entries the snapshot covers: its watches must end (the client then
// watches again and reports a reset) instead of going on silently.
func TestSnapshotInstallEndsWatches(t *testing.T) {
	const trailing = 8
	c := newCluster(t, func(cfg *node.Config) {
		cfg.SnapshotThreshold = 1 << 20 // snapshots only when the test asks
		cfg.TrailingLogs = trailing
	})
	ctx := within(t, 30*time.Second)
	led := newLedger()
	lm := c.Leader()
	fm := c.others(lm)[0]
	f := fm.Node
	w, err := f.Watch("")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	c.Partition(fm)
	led.fill(t, ctx, c.do, "lagged/", 20)
	if err := c.Leader().Node.Snapshot(); err != nil {
		t.Fatalf("snapshot on the leader: %v", err)
	}
	c.Heal()
	c.waitConverged("the partitioned follower to catch up from the leader's snapshot")
	for {
		select {
		case _, ok := <-w.Events:
			if ok {
				continue // events applied before the install are fine
			}
			if !errors.Is(w.Err(), node.ErrWatchReset) {
				t.Fatalf("watch ended with %v, want ErrWatchReset", w.Err())
			}
			led.verifyState(t, f)
			return
		case <-ctx.Done():
			t.Fatalf("%s installed a snapshot but its watch is still open: the events it skipped are lost silently", f.ID())
		}
	}
}
