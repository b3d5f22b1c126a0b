package server_test

import (
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/lease"
)

// TestHandoffThroughAFollower: a waiter with a higher priority is named
// in the holder's renewals; a handoff (Release with handoff set), unary
// or batched, through a follower, grants it at once with a larger token;
// refusals change nothing.
func TestHandoffThroughAFollower(t *testing.T) {
	_, leader, follower := cluster(t)
	ctx := ctxT(t)
	a, err := leader.lease.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Name: "svc/e", Holder: "a",
		Ttl: durationpb.New(10 * time.Second), Priority: 1}))
	if err != nil {
		t.Fatal(err)
	}
	tok := a.Msg.GetLease().GetToken()
	if p := a.Msg.GetLease().GetPriority(); p != 1 {
		t.Fatalf("grant's priority %d", p)
	}
	type res struct {
		l   *tenurev1.Lease
		err error
	}
	waited := make(chan res, 1)
	go func() {
		r, err := follower.lease.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Name: "svc/e", Holder: "b",
			Ttl: durationpb.New(10 * time.Second), Wait: true, WaitTimeout: durationpb.New(15 * time.Second), Priority: 5}))
		waited <- res{r.Msg.GetLease(), err}
	}()
	// a's renewals name b once b waits.
	for {
		r, err := follower.lease.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{Leases: []*tenurev1.LeaseRef{{Name: "svc/e", Token: tok}}}))
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Msg.GetResults()[0].GetHandoffRequested(); got == "b" {
			break
		} else if got != "" {
			t.Fatalf("handoff requested for %q", got)
		}
		select {
		case <-ctx.Done():
			t.Fatal("b never asked for a handoff")
		case <-time.After(20 * time.Millisecond):
		}
	}

	// Refusals: nobody named so waits (batched), a stale token, a
	// candidate without handoff.
	br, err := follower.lease.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
		{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: "svc/e", Token: tok, Handoff: true, HandoffTo: "nobody"}}},
		{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: "svc/e", Token: tok + 100, Handoff: true}}},
		{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: "svc/e", Token: tok, HandoffTo: "b"}}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []error{lease.ErrNotFound, lease.ErrStaleToken, lease.ErrInvalid} {
		if err := batchErr(br.Msg.GetResults()[i]); !errors.Is(err, want) {
			t.Errorf("op %d: %v, want %v", i, err, want)
		}
	}
	if g, err := leader.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "svc/e"})); err != nil || g.Msg.GetLease().GetToken() != tok {
		t.Fatalf("after the refusals: %v %v", g, err)
	}

	r, err := follower.lease.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{Name: "svc/e", Token: tok, Handoff: true, HandoffTo: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	to := r.Msg.GetHandedTo()
	if to.GetHolder() != "b" || to.GetToken() <= tok || to.GetPriority() != 5 {
		t.Fatalf("handed to %v", to)
	}
	w := <-waited
	if w.err != nil || w.l.GetToken() != to.GetToken() {
		t.Fatalf("b's waiting acquire: %v, %v; want token %d", w.l, w.err, to.GetToken())
	}
	// Batched, to the first in line: nobody waits now.
	br, err = follower.lease.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
		{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: "svc/e", Token: to.GetToken(), Handoff: true}}},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	if err := batchErr(br.Msg.GetResults()[0]); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("handoff with nobody waiting: %v", err)
	}
}
