package election_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// TestSessionsHoldSemaphoreSlots: sessions each hold one slot of a
// semaphore on a real cluster, a third waits in line, and a slot's token
// fences writes only while that slot is held.
func TestSessionsHoldSemaphoreSlots(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{})
	ctx := within(t, 30*time.Second)
	cl, _ := mustClient(t, c.Endpoints())
	session := sessionsOf(t, cl)
	a, b, w := session("a"), session("b"), session("w")
	la, err := a.AcquireSlot(ctx, "jobs/sem", 2)
	if err != nil {
		t.Fatalf("a: %v", err)
	}
	lb, err := b.AcquireSlot(ctx, "jobs/sem", 2)
	if err != nil {
		t.Fatalf("b: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("slot tokens %d then %d, want them to grow", la.Token(), lb.Token())
	}
	// Both slots write.
	if _, err := la.Put(ctx, "sem/a", []byte("a")); err != nil {
		t.Fatalf("put with a's slot: %v", err)
	}
	if _, err := lb.Put(ctx, "sem/b", []byte("b")); err != nil {
		t.Fatalf("put with b's slot: %v", err)
	}
	// A third holder waits for a slot; the limit is fixed.
	if _, err := w.TryAcquire(ctx, "jobs/sem"); !errors.Is(err, client.ErrInvalid) {
		t.Fatalf("plain acquire of the semaphore = %v, want invalid", err)
	}
	got := make(chan *election.Lease, 1)
	go func() {
		l, err := w.AcquireSlot(ctx, "jobs/sem", 2)
		if err != nil {
			t.Errorf("w: %v", err)
		}
		got <- l
	}()
	// a steps down; w gets the free slot with a new, larger token, and a's
	// token fences nothing any more while b's still writes.
	if err := la.Release(ctx); err != nil {
		t.Fatalf("a release: %v", err)
	}
	lw := <-got
	if lw == nil {
		t.FailNow()
	}
	if lw.Token() <= lb.Token() {
		t.Fatalf("w's slot token %d, want above %d", lw.Token(), lb.Token())
	}
	if _, err := cl.Put(ctx, "sem/a", []byte("late"), "jobs/sem", la.Token()); !errors.Is(err, client.ErrStaleToken) {
		t.Fatalf("put with a's released slot = %v, want stale", err)
	}
	if _, err := lb.Put(ctx, "sem/b", []byte("b2")); err != nil {
		t.Fatalf("put with b's slot after a left: %v", err)
	}
	slots, err := cl.Slots(ctx, "jobs/sem")
	if err != nil || len(slots) != 2 || slots[0].Holder != "b" || slots[1].Holder != "w" || slots[1].Limit != 2 {
		t.Fatalf("Slots = %+v, %v; want b's and w's", slots, err)
	}
}
