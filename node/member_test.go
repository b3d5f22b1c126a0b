package node_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/node"
)

// A leader asked to remove itself answers success once the removal
// committed, although its raft shuts down right after; the node reports
// that it was removed, and the others go on without it.
func TestLeaveRemovesTheLeaderItself(t *testing.T) {
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	lm := c.Leader()
	l := lm.Node
	if err := l.Leave(ctx, l.ID()); err != nil {
		t.Fatalf("leader %s removing itself: %v (want success: the removal committed)", l.ID(), err)
	}
	select {
	case <-l.Removed():
	case <-ctx.Done():
		t.Fatalf("%s was removed, but Removed() was not closed", l.ID())
	}
	testcluster.Eventually(t, "a new leader with two members", 10*time.Second, func() error {
		for _, m := range c.others(lm) {
			st := m.Node.Status()
			if st.State != "leader" {
				continue
			}
			if len(st.Members) != 2 {
				return fmt.Errorf("leader %s has members %+v", st.ID, st.Members)
			}
			for _, mem := range st.Members {
				if mem.ID == l.ID() {
					return fmt.Errorf("leader %s still lists %s", st.ID, l.ID())
				}
			}
			return nil
		}
		return errors.New("no leader among the others yet")
	})
}

// A follower removed by the leader sees it and reports it.
func TestLeaveRemovesAFollower(t *testing.T) {
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	lm := c.Leader()
	f := c.others(lm)[0].Node
	if err := lm.Node.Leave(ctx, f.ID()); err != nil {
		t.Fatalf("remove %s: %v", f.ID(), err)
	}
	select {
	case <-f.Removed():
	case <-ctx.Done():
		t.Fatalf("%s was removed, but Removed() was not closed", f.ID())
	}
	select {
	case <-lm.Node.Removed():
		t.Errorf("the leader %s reports itself removed", lm.Node.ID())
	default:
	}
}

func TestMembershipErrors(t *testing.T) {
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	l := c.Leader().Node
	if err := l.Leave(ctx, "nope"); !errors.Is(err, node.ErrNoSuchMember) {
		t.Errorf("Leave(unknown) = %v, want ErrNoSuchMember", err)
	}
	if _, err := l.TransferLeadership(ctx, "nope"); !errors.Is(err, node.ErrNoSuchMember) {
		t.Errorf("TransferLeadership(unknown) = %v, want ErrNoSuchMember", err)
	}
	// Remove both followers; the leader is then the last voter.
	for _, m := range c.others(c.Leader()) {
		if err := l.Leave(ctx, m.Node.ID()); err != nil {
			t.Fatalf("remove %s: %v", m.Node.ID(), err)
		}
	}
	if err := l.Leave(ctx, l.ID()); !errors.Is(err, node.ErrLastVoter) {
		t.Errorf("Leave(last voter) = %v, want ErrLastVoter", err)
	}
	if _, err := l.TransferLeadership(ctx, ""); !errors.Is(err, node.ErrNotVoter) {
		t.Errorf("TransferLeadership with no other voter = %v, want ErrNotVoter", err)
	}
	// A member that cannot be reached never catches up, so it stays a
	// non-voter, and cannot lead.
	if _, err := l.Join(ctx, node.JoinRequest{ID: "ghost", RaftAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"}); err != nil {
		t.Fatalf("add an unreachable non-voter: %v", err)
	}
	if _, err := l.TransferLeadership(ctx, "ghost"); !errors.Is(err, node.ErrNotVoter) {
		t.Errorf("TransferLeadership(non-voter) = %v, want ErrNotVoter", err)
	}
	if err := l.Leave(ctx, "ghost"); err != nil {
		t.Errorf("remove the non-voter: %v", err)
	}
	if st := l.Status(); len(st.Members) != 1 || st.State != "leader" {
		t.Errorf("after the refused calls: state %s, members %+v; want the leader alone", st.State, st.Members)
	}
}
