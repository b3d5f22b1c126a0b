package raftlog

import (
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/hashicorp/raft"
)

// Deferred syncs: the tests run in a synctest bubble, so that
// synctest.Wait can tell when every goroutine (the syncer, the callers
// under test) is blocked, and the syncer waits for the test's go-ahead
// before each sync.

// heldSyncs is a store whose deferred appends are synced only when the
// test releases the syncer.
type heldSyncs struct {
	st       *Store
	deferred atomic.Bool // what DeferSync answers
	gate     chan struct{}
}

func openHeld(t *testing.T, dir string) *heldSyncs {
	t.Helper()
	h := &heldSyncs{gate: make(chan struct{})}
	h.deferred.Store(true)
	st, err := Open(dir, Options{
		SegmentSize:          4096, // entries 51-60 get segments of their own
		DeferSync:            func([]*raft.Log) bool { return h.deferred.Load() },
		BeforeBackgroundSync: func() { <-h.gate },
	})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	h.st = st
	t.Cleanup(func() {
		h.release()
		st.Close()
	})
	return h
}

// release lets every sync go, now and later.
func (h *heldSyncs) release() {
	select {
	case <-h.gate:
	default:
		close(h.gate)
	}
}

// blocked runs f on its own goroutine, checks that it is still blocked
// once every goroutine of the bubble is, and returns a channel with its
// error once it returns. The syncer must hold a sync already: what
// waits for it then cannot sync the pending entries itself.
func blocked(t *testing.T, what string, f func() error) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	synctest.Wait()
	select {
	case err := <-done:
		t.Fatalf("%s returned (%v) before the deferred appends were synced", what, err)
	default:
	}
	return done
}

func TestDeferredAppendsAreSyncedInTheBackground(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		h := openHeld(t, dir)
		// 48-55 cross into segments of their own: a deferred append may
		// leave more than one file to sync.
		appendRange(t, h.st, 1, 55)
		synctest.Wait() // the syncer holds the append and waits
		checkRange(t, h.st, 1, 55)
		if got := h.st.Synced(); got != 0 {
			t.Fatalf("Synced = %d while the first deferred append waits to sync, want 0", got)
		}
		appendRange(t, h.st, 56, 60) // written while the syncer waits

		first := blocked(t, "WaitSynced(1)", func() error { return h.st.WaitSynced(1) })
		last := blocked(t, "WaitSynced(60)", func() error { return h.st.WaitSynced(60) })
		all := blocked(t, "Sync", h.st.Sync)
		h.deferred.Store(false)
		// An append that is not deferred is synced with everything
		// before it, so it waits for the syncer too.
		stored := blocked(t, "an append that is not deferred", func() error { return h.st.StoreLogs([]*raft.Log{entry(61)}) })

		h.release()
		for _, ch := range []<-chan error{first, last, all, stored} {
			if err := <-ch; err != nil {
				t.Fatal(err)
			}
		}
		if got := h.st.Synced(); got != noneUnsynced {
			t.Fatalf("Synced = %d after everything was synced, want none pending (%d)", got, uint64(noneUnsynced))
		}
		if err := h.st.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		checkRange(t, mustOpen(t, dir, 4096), 1, 61)
	})
}

func TestDeletionWaitsForDeferredSyncs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := openHeld(t, t.TempDir())
		appendRange(t, h.st, 1, 20)
		synctest.Wait() // the syncer holds the append
		cut := blocked(t, "DeleteRange(15, 20)", func() error { return h.st.DeleteRange(15, 20) })
		h.release()
		if err := <-cut; err != nil {
			t.Fatal(err)
		}
		checkRange(t, h.st, 1, 14)
		if got := h.st.Synced(); got != noneUnsynced {
			t.Fatalf("Synced = %d after a deletion, want none pending", got)
		}
	})
}

func TestCloseSyncsDeferredAppends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		h := openHeld(t, dir)
		appendRange(t, h.st, 1, 30)
		synctest.Wait() // the syncer holds the append
		appendRange(t, h.st, 31, 40)
		closed := blocked(t, "Close", h.st.Close)
		h.release()
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if got := h.st.Synced(); got != noneUnsynced {
			t.Fatalf("Synced = %d after Close, want none pending", got)
		}
		if err := h.st.StoreLogs([]*raft.Log{entry(41)}); err == nil {
			t.Fatal("StoreLogs after Close succeeded")
		}
		checkRange(t, mustOpen(t, dir, 4096), 1, 40)
	})
}

// TestFailedSyncStopsTheStore: after a sync failed, nothing can tell
// what is on disk: waiters and every later change get the error.
func TestFailedSyncStopsTheStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := openHeld(t, t.TempDir())
		appendRange(t, h.st, 1, 5)
		synctest.Wait()
		// Make the held sync fail: its file is closed under it.
		h.st.mu.Lock()
		h.st.segs[0].f.Close()
		h.st.mu.Unlock()
		waited := blocked(t, "WaitSynced(5)", func() error { return h.st.WaitSynced(5) })
		h.release()
		if err := <-waited; err == nil {
			t.Fatal("WaitSynced returned nil after the sync failed")
		}
		if err := h.st.StoreLogs([]*raft.Log{entry(6)}); err == nil {
			t.Fatal("StoreLogs after a failed sync succeeded")
		}
		if err := h.st.DeleteRange(1, 2); err == nil {
			t.Fatal("DeleteRange after a failed sync succeeded")
		}
	})
}
