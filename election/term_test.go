package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/election"
)

// A lease lost locally (renewals failed until the local deadline) is still
// granted on the server for the margin before its expiry. A new campaign
// of the same holder in that window is a new term, and every term has its
// own token (guarantee 6): the server's renewal of the old grant must not
// be handed out as the new term.
func TestNewTermAfterLossGetsANewToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		a := f.client()
		s := mustSession(t, a, "a")
		old := mustTry(t, s, "jobs/x")
		a.setCut(true)
		<-old.Done()
		if !errors.Is(old.Err(), election.ErrLost) {
			t.Fatalf("old term ended with %v, want lost", old.Err())
		}
		if _, err := f.m.Get("jobs/x"); err != nil {
			t.Fatal("the server no longer holds the lease: the test needs it still granted")
		}
		a.setCut(false)
		nl, err := s.Campaign(t.Context(), "jobs/x")
		if err != nil {
			t.Fatalf("Campaign after the loss: %v", err)
		}
		if nl.Token() <= old.Token() {
			t.Fatalf("the new term has token %d, not larger than the lost term's %d", nl.Token(), old.Token())
		}
		// The old term's write is refused by the server, not only locally.
		if _, err := old.Put(t.Context(), "k", []byte("late")); !errors.Is(err, election.ErrLost) {
			t.Errorf("Put of the lost term: %v, want ErrLost without a request", err)
		}
		if _, err := a.Put(t.Context(), "k", []byte("late"), "jobs/x", old.Token()); err == nil {
			t.Errorf("the server accepted a write with the lost term's token %d", old.Token())
		}
		if _, err := nl.Put(t.Context(), "k", []byte("new")); err != nil {
			t.Errorf("Put of the new term: %v", err)
		}
	})
}

// Run's terms: after a loss, the next term of fn runs with a larger token.
func TestRunTermsHaveGrowingTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		a := f.client()
		ctx, cancel := context.WithCancel(t.Context())
		var (
			mu     sync.Mutex
			tokens []uint64
		)
		done := make(chan error, 1)
		go func() {
			done <- election.Run(ctx, election.RunConfig{Client: a, Name: "svc/leader", Session: election.Config{Holder: "a", TTL: ttl}},
				func(ctx context.Context, l *election.Lease) error {
					mu.Lock()
					tokens = append(tokens, l.Token())
					n := len(tokens)
					mu.Unlock()
					if n < 3 {
						// Lose this term: the network fails until the
						// lease's context ends, then heals.
						a.setCut(true)
						<-ctx.Done()
						a.setCut(false)
						return nil
					}
					<-ctx.Done()
					return nil
				})
		}()
		for {
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			n := len(tokens)
			mu.Unlock()
			if n >= 3 {
				break
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		for i := 1; i < len(tokens); i++ {
			if tokens[i] <= tokens[i-1] {
				t.Fatalf("terms ran with tokens %v: term %d did not get a larger token", tokens, i+1)
			}
		}
	})
}

// A lease whose deadline has passed refuses writes at once, even before
// its timer has ended its context.
func TestPutRefusedAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFakeCluster()
		a := f.client()
		s := mustSession(t, a, "a")
		l := mustTry(t, s, "jobs/y")
		a.setCut(true)
		deadline := l.Deadline()
		time.Sleep(time.Until(deadline))
		// No synctest.Wait: the lease's own timer may not have run yet.
		if _, err := l.Put(context.Background(), "k", []byte("v")); !errors.Is(err, election.ErrLost) {
			t.Fatalf("Put at the deadline: %v, want ErrLost without a request", err)
		}
		if l.Ctx().Err() == nil {
			t.Fatal("the lease's context is still live after Put found its deadline passed")
		}
	})
}
