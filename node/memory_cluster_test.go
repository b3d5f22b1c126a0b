package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
)

func withHeadroom(cfg *node.Config) { cfg.RenewHeadroom = time.Minute }

// A leader cut off from the others renews nothing from memory once the
// others have moved on: a new leader ended the grant and granted the
// name to another holder.
func TestMemoryRenewalNeedsTheQuorum(t *testing.T) {
	c := newCluster(t, withHeadroom)
	ctx := within(t, 30*time.Second)
	g, err := do1(ctx, c.do, acquireOp("x", "a"))
	if err != nil {
		t.Fatal(err)
	}
	lm := c.Leader()
	ref := lease.Ref{Name: "x", Token: g.Lease.Token}
	// The first renewal of a grant goes to the log; the next come from
	// memory.
	if r, err := lm.Node.Do1(ctx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{ref}}); err != nil || r.Renewed[0].Err != nil {
		t.Fatalf("first renewal on the leader: %v %+v", err, r)
	}
	applied := lm.Node.FSMApplied()
	if r, err := lm.Node.Do1(ctx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{ref}}); err != nil || r.Renewed[0].Err != nil {
		t.Fatalf("renewal on the leader: %v %+v", err, r)
	}
	if got := lm.Node.FSMApplied(); got != applied {
		t.Fatalf("the renewal was logged (applied %d to %d), want it from memory", applied, got)
	}

	c.Partition(lm)
	var b lease.Result
	testcluster.Eventually(t, "the majority to grant x to b", 10*time.Second, func() error {
		var err error
		for _, m := range c.others(lm) {
			if !m.Node.IsLeader() {
				continue
			}
			if _, err = m.Node.Do(ctx, lease.Op{Type: lease.OpRevoke, Name: "x"}); err == nil {
				if b, err = m.Node.Do1(ctx, acquireOp("x", "b")); err == nil {
					return nil
				}
			}
		}
		return fmt.Errorf("no leader of the majority granted x: %v", err)
	})
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	r, err := lm.Node.Do1(octx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{ref}})
	if err == nil {
		t.Fatalf("partitioned old leader %s renewed x/%d after the majority granted x/%d: %+v", lm.Node.ID(), ref.Token, b.Lease.Token, r)
	}
	t.Logf("renewal on the partitioned leader failed as expected: %v", err)
	c.Heal()
}

// After a failover the new leader keeps a grant until the expiry in the
// log: it does not know what its predecessor promised from memory, and
// never ends the grant before that.
func TestFailoverKeepsMemoryPromises(t *testing.T) {
	c := newCluster(t, withHeadroom)
	ctx := within(t, 30*time.Second)
	ttl := time.Second
	a, err := do1(ctx, c.do, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	lm := c.Leader()
	// The first renewal goes to the log and gives the grant its
	// headroom (g, the logged expiry); the second comes from memory.
	var g lease.Result
	var r lease.Result
	for i := range 2 {
		res, err := lm.Node.Do1(ctx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{{Name: "x", Token: a.Lease.Token}}})
		if err != nil || res.Renewed[0].Err != nil {
			t.Fatalf("renewal %d: %v %+v", i, err, res)
		}
		g, r = r, res
	}
	g.Lease = g.Renewed[0].Lease
	promised := r.Renewed[0].Lease.Promise()
	c.Crash(lm)
	nl := c.Leader().Node
	w, err := nl.Watch("x")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	if len(w.Current) == 0 {
		t.Fatalf("the new leader %s no longer holds x at %s; promised until %s", nl.ID(), w.Now, promised)
	}
	for ev := range w.Events {
		if ev.Type != lease.EventExpired {
			continue
		}
		if ev.Lease.ExpiresAt != g.Lease.ExpiresAt || ev.At < promised {
			t.Fatalf("new leader ended x at %s (expiry %s); want at the logged expiry %s, after the promise %s",
				ev.At, ev.Lease.ExpiresAt, g.Lease.ExpiresAt, promised)
		}
		return
	}
	t.Fatalf("watch ended: %v", w.Err())
}
