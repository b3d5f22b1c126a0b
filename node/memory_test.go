package node

import (
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// headroomNode starts a single in-memory node that answers renewals from
// memory with headroom h.
func headroomNode(t *testing.T, h time.Duration) *Node {
	t.Helper()
	cfg := testConfig(t, "n1")
	cfg.InMemory = true
	cfg.Bootstrap = true
	cfg.RenewHeadroom = h
	_, cfg.Transport = raft.NewInmemTransport("n1")
	n := mustNode(t, cfg)
	t.Cleanup(func() { n.Close() })
	waitFor(t, "leadership", 5*time.Second, n.IsLeader)
	return n
}

func renewOp(refs ...lease.Ref) lease.Op { return lease.Op{Type: lease.OpRenew, Refs: refs} }

func TestRenewFromMemory(t *testing.T) {
	n := headroomNode(t, time.Minute)
	ctx := ctxT(t, 10*time.Second)
	ttl := 20 * time.Second
	a, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "a", TTL: ttl, Principal: "p"})
	if err != nil {
		t.Fatal(err)
	}
	ref := lease.Ref{Name: "x", Token: a.Lease.Token}
	// A new grant has no headroom; its first renewal goes to the log
	// and gets some.
	if a.Lease.Promised != 0 || a.Lease.ExpiresAt != a.Now+ttl {
		t.Fatalf("grant %+v at %s: want no headroom", a.Lease, a.Now)
	}
	first, err := n.Do1(ctx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{ref}, Principal: "p"})
	if err != nil {
		t.Fatal(err)
	}
	g := lease.Result{Lease: first.Renewed[0].Lease, Now: first.Now}
	if g.Lease.Promised != g.Now+ttl || g.Lease.ExpiresAt != g.Lease.Promised+ttl {
		t.Fatalf("first renewal %+v at %s: want promised now+TTL and expiry a TTL later", g.Lease, g.Now)
	}

	// Renewals within the headroom are answered without a log entry.
	applied := n.FSMApplied()
	for range 3 {
		r, err := n.Do1(ctx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{ref}, Principal: "p"})
		if err != nil || r.Renewed[0].Err != nil {
			t.Fatalf("renewal: %v %+v", err, r)
		}
		l := r.Renewed[0].Lease
		if l.Promised != r.Now+ttl || l.Remaining(r.Now) != ttl || l.ExpiresAt != g.Lease.ExpiresAt {
			t.Fatalf("renewal from memory at %s: %+v; want promised now+TTL within the logged expiry %s", r.Now, l, g.Lease.ExpiresAt)
		}
	}
	if got := n.FSMApplied(); got != applied {
		t.Fatalf("renewals within the headroom applied entries %d to %d", applied, got)
	}
	// Reads report the promise made from memory, which the state does
	// not know.
	last, err := n.Do1(ctx, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{ref}, Principal: "p"})
	if err != nil {
		t.Fatal(err)
	}
	promised := last.Renewed[0].Lease.Promised
	if promised <= g.Lease.Promised {
		t.Fatalf("renewal promised %s, not later than the grant's %s", promised, g.Lease.Promised)
	}
	res, err := n.Do(ctx, lease.Op{Type: lease.OpGet, Name: "x"}, lease.Op{Type: lease.OpList, Prefix: "x"},
		lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "b", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	var held *lease.HeldError
	if res[0].Lease.Promise() != promised || res[1].Leases[0].Promise() != promised ||
		!errors.As(res[2].Err, &held) || held.Remaining != promised-res[2].Now {
		t.Fatalf("reads after renewals from memory: get %+v, list %+v, acquire %v; want the promise %s", res[0].Lease, res[1].Leases, res[2].Err, promised)
	}
	n.fsm.mu.RLock()
	st, _ := n.fsm.st.Lease("x")
	n.fsm.mu.RUnlock()
	if st.Promised != g.Lease.Promised {
		t.Fatalf("the state's grant was changed to %+v", st)
	}

	// What memory cannot answer goes to the log: a new TTL, a stale
	// token (with its error), a grant of another principal.
	for _, op := range []lease.Op{
		{Type: lease.OpRenew, Refs: []lease.Ref{{Name: "x", Token: g.Lease.Token, TTL: 30 * time.Second}}, Principal: "p"},
		{Type: lease.OpRenew, Refs: []lease.Ref{{Name: "x", Token: g.Lease.Token + 1}}, Principal: "p"},
		{Type: lease.OpRenew, Refs: []lease.Ref{ref}, Principal: "mallory"},
	} {
		before := n.FSMApplied()
		r, err := n.Do1(ctx, op)
		if err != nil {
			t.Fatal(err)
		}
		if n.FSMApplied() == before {
			t.Fatalf("renewal %+v was not logged", op)
		}
		if op.Refs[0].TTL != 0 && (r.Renewed[0].Err != nil || r.Renewed[0].Lease.TTL != 30*time.Second) {
			t.Fatalf("renewal with a new TTL: %+v", r.Renewed[0])
		}
		if e := r.Renewed[0].Err; op.Refs[0].TTL == 0 && !errors.Is(e, lease.ErrStaleToken) && !errors.Is(e, lease.ErrForbidden) {
			t.Fatalf("renewal %+v: %v, want a stale token or forbidden", op, e)
		}
	}
}

// A lease whose holder stops renewing ends when the holder was last told,
// not at the later expiry the log gave it: the leader trims it.
func TestTrimEndsAtThePromise(t *testing.T) {
	n := headroomNode(t, time.Minute)
	ctx := ctxT(t, 20*time.Second)
	ttl := time.Second
	w, err := n.Watch("x")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	a, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "a", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// The first renewal is logged (with headroom), the second comes
	// from memory.
	var g, r lease.RenewResult
	for i := range 2 {
		res, err := n.Do1(ctx, renewOp(lease.Ref{Name: "x", Token: a.Lease.Token}))
		if err != nil || res.Renewed[0].Err != nil {
			t.Fatalf("renewal %d: %v %+v", i, err, res)
		}
		g, r = r, res.Renewed[0]
	}
	promised := r.Lease.Promise()
	got, err := n.Acquire(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "b", TTL: ttl, Wait: true, WaitTimeout: 10 * time.Second})
	if err != nil || got.Lease.Holder != "b" {
		t.Fatalf("waiting acquire: %+v %v", got.Lease, err)
	}
	for ev := range w.Events {
		if ev.Type == lease.EventGranted {
			continue
		}
		if ev.Type != lease.EventExpired || ev.Lease.Token != a.Lease.Token {
			t.Fatalf("event %+v, want the expiry of token %d", ev, a.Lease.Token)
		}
		if ev.Lease.ExpiresAt != promised || promised >= g.Lease.ExpiresAt {
			t.Fatalf("grant ended at %s; want at the last promise %s, before the logged expiry %s", ev.Lease.ExpiresAt, promised, g.Lease.ExpiresAt)
		}
		if got.Lease.GrantedAt < promised {
			t.Fatalf("waiter granted at %s, before the promise %s", got.Lease.GrantedAt, promised)
		}
		return
	}
	t.Fatalf("watch ended: %v", w.Err())
}

// A released grant leaves nothing to trim: no entry follows the release.
func TestReleaseLeavesNoTrim(t *testing.T) {
	n := headroomNode(t, time.Minute)
	ctx := ctxT(t, 10*time.Second)
	g, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "a", TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Do1(ctx, lease.Op{Type: lease.OpRelease, Name: "x", Token: g.Lease.Token}); err != nil {
		t.Fatal(err)
	}
	applied := n.FSMApplied()
	if r, err := n.Do1(ctx, lease.Op{Type: lease.OpGet, Name: "y"}); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("get: %+v %v", r, err)
	}
	if at, ok := n.lead().mem.next(); ok {
		t.Fatalf("a trim is due at %s for a released grant", at)
	}
	if got := n.FSMApplied(); got != applied+1 {
		t.Fatalf("applied %d entries after the release, want 1 (the get)", got-applied)
	}
}
