package node_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
)

// TestLeaderActsOnlyOnSyncedEntries: while the leader's log has not
// synced an entry, raft may count it as committed (the followers synced
// it), but nobody acts on it: the leader does not apply it nor answer its
// caller, and no follower learns that it is committed. Once the leader's
// sync is let go, all of that happens. See node/synced.go.
func TestLeaderActsOnlyOnSyncedEntries(t *testing.T) {
	var (
		holding atomic.Bool
		gate    = make(chan struct{})
	)
	c := newCluster(t, func(cfg *node.Config) {
		// Slow raft timing: a leadership change would end the held
		// leader's term and let another leader commit past the entry.
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
		node.SetBeforeLogSync(cfg, func() {
			if holding.Load() {
				<-gate
			}
		})
	})
	release := sync.OnceFunc(func() {
		holding.Store(false)
		close(gate)
	})
	t.Cleanup(release) // a failed test must not leave the leader's log stuck
	leader := c.Leader()
	before := leader.Node.Status()
	holding.Store(true)
	type outcome struct {
		res []lease.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := leader.Node.Do(within(t, 30*time.Second), acquireOp("jobs/synced", "a"))
		done <- outcome{res, err}
	}()

	// raft commits the entry with the followers' copies...
	var entry uint64
	testcluster.Eventually(t, "the leader's raft to commit the new entry", 10*time.Second, func() error {
		st := leader.Node.Status()
		if st.CommitIndex <= before.CommitIndex {
			return fmt.Errorf("commit index %d, was %d", st.CommitIndex, before.CommitIndex)
		}
		entry = st.CommitIndex
		return nil
	})
	// ...but for a while (the leader tells its followers the commit index
	// at least every 50ms) nothing acts on it.
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		select {
		case o := <-done:
			t.Fatalf("Do returned %v, %v before the leader synced the entry", o.res, o.err)
		default:
		}
		if a := leader.Node.FSMApplied(); a >= entry {
			t.Fatalf("the leader applied entry %d before it synced it", entry)
		}
		if st := leader.Node.RaftState(); st != raft.Leader {
			t.Fatalf("%s stopped leading (%v) while its sync was held: the machine stalled for over a second; the test needs a stable leader", leader.Node.ID(), st)
		}
		for _, f := range c.others(leader) {
			if st := f.Node.Status(); st.CommitIndex >= entry || st.AppliedIndex >= entry {
				t.Fatalf("follower %s learnt entry %d is committed (commit %d, applied %d) before the leader synced it",
					f.Node.ID(), entry, st.CommitIndex, st.AppliedIndex)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}

	release()
	o := <-done
	if o.err != nil || o.res[0].Err != nil {
		t.Fatalf("Do after the sync: %v, %v", o.res, o.err)
	}
	c.waitConverged("every node to apply the entry once it is synced")
}
