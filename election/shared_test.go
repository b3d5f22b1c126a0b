package election_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// TestSessionsHoldSharedGrants: two sessions hold a name shared at once,
// an exclusive Acquire waits for both, a shared try behind it is held,
// and shared leases do not write.
func TestSessionsHoldSharedGrants(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	ctx := within(t, 30*time.Second)
	cl, _ := mustClient(t, c.Endpoints())
	session := sessionsOf(t, cl)
	a, b, w, r := session("a"), session("b"), session("w"), session("r")
	la, err := a.AcquireShared(ctx, "db/main")
	if err != nil {
		t.Fatalf("a: %v", err)
	}
	lb, err := b.TryAcquireShared(ctx, "db/main")
	if err != nil {
		t.Fatalf("b: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("tokens %d then %d, want them to grow", la.Token(), lb.Token())
	}
	if _, err := la.Put(ctx, "db/k", []byte("a")); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("put with a shared lease = %v, want invalid", err)
	}
	if _, err := w.TryAcquire(ctx, "db/main"); !errors.Is(err, client.ErrLeaseHeld) {
		t.Fatalf("exclusive try while readers hold = %v, want held", err)
	}
	got := make(chan *election.Lease, 1)
	go func() {
		l, err := w.Acquire(ctx, "db/main")
		if err != nil {
			t.Errorf("w: %v", err)
		}
		got <- l
	}()
	// Wait until w is queued: a shared try is then held (FIFO).
	for {
		lr, err := r.TryAcquireShared(ctx, "db/main")
		if errors.Is(err, client.ErrLeaseHeld) {
			break
		}
		if err != nil {
			t.Fatalf("r: %v", err)
		}
		// Granted: w is not queued yet. Give it back and try again.
		if err := lr.Release(ctx); err != nil {
			t.Fatalf("r resign: %v", err)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := la.Release(ctx); err != nil {
		t.Fatalf("a release: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Fatalf("b release: %v", err)
	}
	lw := <-got
	if lw == nil {
		t.FailNow()
	}
	if lw.Token() <= lb.Token() {
		t.Fatalf("w's token %d, want above %d", lw.Token(), lb.Token())
	}
	if _, err := lw.Put(ctx, "db/k", []byte("w")); err != nil {
		t.Fatalf("put with the exclusive lease: %v", err)
	}
}
