package election_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// TestHandoffRefusedEndsTheTerm: a handoff to a candidate that is not
// waiting is refused by the server, but the term has ended here (its
// context first): the grant is released, the error says why, and a
// second Handoff of the ended term says it ended.
func TestHandoffRefusedEndsTheTerm(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	cl, _ := mustClient(t, c.Endpoints())
	ctx := within(t, 20*time.Second)
	s, err := election.New(cl, election.Config{Holder: "a", TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	l, err := s.Campaign(ctx, "svc/x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Handoff(ctx, "nobody"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("Handoff to nobody: %v, want ErrNotFound", err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the term's context did not end")
	}
	if !errors.Is(context.Cause(l.Ctx()), election.ErrHandedOff) || !errors.Is(l.Err(), election.ErrReleased) || l.State() != election.Released {
		t.Fatalf("cause %v, err %v, state %v", context.Cause(l.Ctx()), l.Err(), l.State())
	}
	// Released: another holder gets the name at once.
	if g, err := cl.Acquire(ctx, "svc/x", "b", 2*time.Second); err != nil || g.Token <= l.Token() {
		t.Fatalf("b after the refused handoff: %+v, %v", g, err)
	}
	if _, err := l.Handoff(ctx, ""); err == nil || !errors.Is(err, election.ErrHandedOff) {
		t.Fatalf("second Handoff: %v", err)
	}
	// A put under the ended term is refused without a request.
	if _, err := l.Put(ctx, "k", []byte("v")); !errors.Is(err, election.ErrReleased) {
		t.Fatalf("put after the handoff: %v", err)
	}
}

// TestHandoffToTheFirstInLine: Handoff("") goes to the first waiting
// candidate, whose Campaign returns the new term after the old one's
// context ended; a slot of a semaphore cannot be handed off.
func TestHandoffToTheFirstInLine(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	ctx := within(t, 20*time.Second)
	sess := func(cfg election.Config) *election.Session {
		cl, _ := mustClient(t, c.Endpoints())
		cfg.TTL = 2 * time.Second
		s, err := election.New(cl, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		return s
	}
	// b's priority makes the holder's renewals name it once it waits; a
	// keeps its lease when asked, so the test hands off itself.
	a := sess(election.Config{Holder: "a", KeepOnHandoffRequest: true})
	b := sess(election.Config{Holder: "b", Priority: 1})
	la, err := a.Campaign(ctx, "svc/y")
	if err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   *election.Lease
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, err := b.Campaign(ctx, "svc/y")
		done <- res{l, err}
	}()
	// Hand off once b waits (until then the server would refuse, and a
	// refused handoff ends a's term): a renewal names b then.
	cl, _ := mustClient(t, c.Endpoints())
	for {
		r, err := cl.Renew(ctx, client.Ref{Name: "svc/y", Token: la.Token()})
		if err != nil || r[0].Err != nil {
			t.Fatal(err, r)
		}
		if r[0].HandoffRequested == "b" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("b never waited")
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case <-la.Done():
		t.Fatal("a handed off although it keeps its leases when asked")
	default:
	}
	next, err := la.Handoff(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got := <-done
	if got.err != nil || next.Holder != "b" || got.l.Token() != next.Token || next.Token <= la.Token() {
		t.Fatalf("b's campaign: %v, %v; handoff gave %+v", got.l, got.err, next)
	}
	slot, err := a.AcquireSlot(ctx, "svc/sem", 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := slot.Handoff(ctx, ""); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("handoff of a slot: %v", err)
	}
}
