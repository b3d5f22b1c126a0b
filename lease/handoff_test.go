package lease

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func handoffOp(name string, token uint64, to string) Op {
	return Op{Type: OpRelease, Name: name, Token: token, Handoff: true, HandoffTo: to}
}

func acqPrio(name, holder string, prio int) Op {
	return Op{Type: OpAcquire, Name: name, Holder: holder, TTL: 10 * sec, Wait: true, WaitTimeout: time.Minute, Priority: prio}
}

// threeCandidates returns a state where h1 holds "e" (token 1) and h2
// and h3 wait, in that order.
func threeCandidates(t *testing.T) *State {
	t.Helper()
	s := withHistory(t, 16, time.Hour)
	mustGrant(t, s, 0, "e", "h1", 10*sec)
	applyWall(t, s, sec, acqWait("e", "h2", 10*sec, time.Minute), acqWait("e", "h3", 10*sec, time.Minute))
	return s
}

func TestHandoffToNamedCandidate(t *testing.T) {
	s := threeCandidates(t)
	res, ev := s.Apply(Batch{Now: 2 * sec, Wall: wall0 + int64(2*sec), Ops: []Op{handoffOp("e", 1, "h3")}})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	got := res[0].Lease
	if got.Holder != "h3" || got.Token != 2 || got.GrantedAt != 2*sec || got.ExpiresAt != 12*sec {
		t.Fatalf("handoff granted %+v", got)
	}
	if len(ev) != 2 || ev[0].Type != EventReleased || ev[0].Lease.Token != 1 || ev[1].Type != EventGranted || ev[1].Lease.Token != 2 {
		t.Fatalf("events %+v", ev)
	}
	if w := s.Waiters("e"); !slices.Equal(w, []string{"h2"}) {
		t.Fatalf("waiters after handoff: %v", w)
	}
	h := s.History("e")
	if len(h) != 2 || h[0].Ending != EndingHandedOff || h[0].End != 2*sec || h[1].Start != 2*sec || h[1].Holder != "h3" ||
		h[0].EndWall != h[1].StartWall || h[1].Ending != EndingNone {
		t.Fatalf("history %s", termsString(h))
	}
	// The old token is dead; the new one works.
	r, _ := apply1(t, s, 3*sec, renew(Ref{Name: "e", Token: 1}))
	wantErr(t, r.Renewed[0].Err, ErrStaleToken)
	if r, _ := apply1(t, s, 3*sec, put("k", "v", "e", 2)); r.Err != nil {
		t.Fatal(r.Err)
	}
}

func TestHandoffToFirstWaiter(t *testing.T) {
	s := threeCandidates(t)
	r, _ := apply1(t, s, 2*sec, handoffOp("e", 1, ""))
	if r.Err != nil || r.Lease.Holder != "h2" || r.Lease.Token != 2 {
		t.Fatalf("handoff to the first: %+v %v", r.Lease, r.Err)
	}
	// A waiter whose wait has timed out is passed over.
	s = New()
	mustGrant(t, s, 0, "e", "h1", 100*sec)
	apply(t, s, 0, acqWait("e", "late", 10*sec, sec), acqWait("e", "h2", 10*sec, time.Minute))
	r, _ = apply1(t, s, 2*sec, handoffOp("e", 1, ""))
	if r.Err != nil || r.Lease.Holder != "h2" {
		t.Fatalf("handoff past a timed-out waiter: %+v %v", r.Lease, r.Err)
	}
	r, _ = apply1(t, s, 2*sec, handoffOp("e", 2, "late"))
	wantErr(t, r.Err, ErrNotFound)
}

func TestHandoffRefusedChangesNothing(t *testing.T) {
	s := threeCandidates(t)
	sem := New()
	apply(t, sem, 0, Op{Type: OpAcquire, Name: "s", Holder: "a", TTL: 10 * sec, Limit: 2},
		Op{Type: OpAcquire, Name: "s", Holder: "b", TTL: 10 * sec, Limit: 2},
		Op{Type: OpAcquire, Name: "s", Holder: "c", TTL: 10 * sec, Limit: 2, Wait: true})
	for _, tc := range []struct {
		name string
		s    *State
		op   Op
		want error
	}{
		{"not waiting", s, handoffOp("e", 1, "nobody"), ErrNotFound},
		{"the holder itself", s, handoffOp("e", 1, "h1"), ErrNotFound},
		{"stale token", s, handoffOp("e", 7, "h2"), ErrStaleToken},
		{"not held", s, handoffOp("x", 1, ""), ErrStaleToken},
		{"semaphore", sem, handoffOp("s", 1, "c"), ErrInvalid},
		{"other principal", s, Op{Type: OpRelease, Name: "e", Token: 1, Handoff: true, Principal: "p"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			apply(t, tc.s, 2*sec)
			before := snapshotBytes(t, tc.s)
			r, ev := apply1(t, tc.s, 2*sec, tc.op)
			if tc.want == nil {
				// A grant without a principal is anyone's.
				return
			}
			wantErr(t, r.Err, tc.want)
			if len(ev) != 0 {
				t.Fatalf("events %+v", ev)
			}
			if after := snapshotBytes(t, tc.s); !bytes.Equal(before, after) {
				t.Fatalf("refused handoff changed the state:\n%s\n%s", before, after)
			}
		})
	}
	// No waiter at all.
	s = New()
	mustGrant(t, s, 0, "e", "h1", 10*sec)
	r, _ := apply1(t, s, sec, handoffOp("e", 1, ""))
	wantErr(t, r.Err, ErrNotFound)
	if !strings.Contains(r.Err.Error(), "no candidate") {
		t.Fatalf("error %q", r.Err)
	}
}

func TestHandoffForbidden(t *testing.T) {
	s := New()
	apply(t, s, 0, Op{Type: OpAcquire, Name: "e", Holder: "h1", TTL: 10 * sec, Principal: "alice"},
		Op{Type: OpAcquire, Name: "e", Holder: "h2", TTL: 10 * sec, Wait: true, WaitTimeout: time.Minute, Principal: "bob"})
	r, _ := apply1(t, s, sec, Op{Type: OpRelease, Name: "e", Token: 1, Handoff: true, Principal: "bob"})
	wantErr(t, r.Err, ErrForbidden)
	r, _ = apply1(t, s, sec, Op{Type: OpRelease, Name: "e", Token: 1, Handoff: true, Principal: "alice"})
	if r.Err != nil || r.Lease.Principal != "bob" {
		t.Fatalf("handoff: %+v %v", r.Lease, r.Err)
	}
}

func TestHandoffSkipsLockDelay(t *testing.T) {
	s := New()
	apply(t, s, 0, Op{Type: OpAcquire, Name: "e", Holder: "h1", TTL: 10 * sec, LockDelay: 30 * sec},
		acqWait("e", "h2", 10*sec, time.Minute))
	r, _ := apply1(t, s, sec, handoffOp("e", 1, "h2"))
	if r.Err != nil || r.Lease.Holder != "h2" || r.Lease.GrantedAt != sec {
		t.Fatalf("handoff of a grant with a lock-delay: %+v %v", r.Lease, r.Err)
	}
	if _, ok := s.delays["e"]; ok {
		t.Fatal("a handoff started a lock-delay")
	}
}

func TestHandoffSession(t *testing.T) {
	s := threeCandidates(t)
	op := handoffOp("e", 1, "h3")
	op.Session, op.Seq = "s1", 1
	r1, _ := apply1(t, s, 2*sec, op)
	r2, ev := apply1(t, s, 3*sec, op)
	if r1.Err != nil || !r2.Remembered || r2.Lease != r1.Lease || len(ev) != 0 {
		t.Fatalf("retried handoff: %+v, %+v, %+v", r1, r2, ev)
	}
	// The waiter's own session gets its grant as the result of its
	// waiting call.
	s = New()
	mustGrant(t, s, 0, "e", "h1", 10*sec)
	w := acqPrio("e", "h2", 0)
	w.Session, w.Seq = "s2", 1
	if r, _ := apply1(t, s, 0, w); !r.Queued {
		t.Fatalf("wait: %+v", r)
	}
	apply1(t, s, sec, handoffOp("e", 1, "h2"))
	r, _ := apply1(t, s, sec, w)
	if !r.Remembered || r.Err != nil || r.Lease.Holder != "h2" || r.Lease.Token != 2 {
		t.Fatalf("the waiter's retry after the handoff: %+v", r)
	}
}

func TestPriorityRequestsHandoff(t *testing.T) {
	s := New()
	apply(t, s, 0, acqPrio("e", "h1", 5), acqPrio("e", "low", 5))
	req := func(now time.Duration) string {
		t.Helper()
		r, _ := apply1(t, s, now, renew(Ref{Name: "e", Token: 1}))
		if r.Renewed[0].Err != nil {
			t.Fatal(r.Renewed[0].Err)
		}
		return r.Renewed[0].HandoffRequested
	}
	if got := req(sec); got != "" {
		t.Fatalf("an equal priority asks for a handoff: %q", got)
	}
	apply(t, s, sec, acqPrio("e", "hi", 9), acqPrio("e", "hi2", 9), acqPrio("e", "mid", 7))
	if got := req(2 * sec); got != "hi" {
		t.Fatalf("handoff requested for %q, want hi", got)
	}
	// The queue stays first come, first served.
	if w := s.Waiters("e"); !slices.Equal(w, []string{"low", "hi", "hi2", "mid"}) {
		t.Fatalf("waiters %v", w)
	}
	r, _ := apply1(t, s, 2*sec, handoffOp("e", 1, "hi"))
	if r.Err != nil || r.Lease.Priority != 9 {
		t.Fatalf("handoff to hi: %+v %v", r.Lease, r.Err)
	}
	// hi holds with 9: hi2's 9 does not ask.
	if r, _ := apply1(t, s, 3*sec, renew(Ref{Name: "e", Token: 2})); r.Renewed[0].HandoffRequested != "" {
		t.Fatalf("request %q", r.Renewed[0].HandoffRequested)
	}
	// A holder restating a lower priority (acquire as renewal) is asked.
	apply1(t, s, 3*sec, acqPrio("e", "hi", 1))
	if r, _ := apply1(t, s, 3*sec, renew(Ref{Name: "e", Token: 2})); r.Renewed[0].HandoffRequested != "hi2" {
		t.Fatalf("request %q, want hi2", r.Renewed[0].HandoffRequested)
	}
	// A release grants the first waiter, not the highest.
	apply1(t, s, 4*sec, rel("e", 2))
	if l, _ := s.Lease("e"); l.Holder != "low" {
		t.Fatalf("after a release %q holds", l.Holder)
	}
}

func TestHandoffValidate(t *testing.T) {
	l := DefaultLimits()
	for _, tc := range []struct {
		op Op
		ok bool
	}{
		{handoffOp("e", 1, ""), true},
		{handoffOp("e", 1, "c"), true},
		{handoffOp("e", 0, "c"), false},
		{handoffOp("e", 1, "bad\x00"), false},
		{Op{Type: OpRelease, Name: "e", Token: 1, HandoffTo: "c"}, false},
		{acqPrio("e", "h", 0), true},
		{acqPrio("e", "h", MaxPriority), true},
		{acqPrio("e", "h", MaxPriority+1), false},
		{acqPrio("e", "h", -1), false},
	} {
		if err := l.Validate(tc.op); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v", tc.op, err)
		}
	}
}

func TestPrioritySnapshot(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "plain", "h", 10*sec)
	apply(t, s, 0, acqWait("plain", "w", 10*sec, time.Minute))
	if b := snapshotBytes(t, s); !bytes.HasPrefix(b, []byte(`{"version":1,`)) {
		t.Fatalf("a state without priorities wrote %s", b)
	}
	apply(t, s, 0, acqPrio("e", "h1", 3), acqPrio("e", "h2", 4))
	rn := renew(Ref{Name: "e", Token: 2})
	rn.Session, rn.Seq = "s", 1
	if r, _ := apply1(t, s, sec, rn); r.Renewed[0].HandoffRequested != "h2" {
		t.Fatalf("request %+v", r.Renewed[0])
	}
	b := snapshotBytes(t, s)
	if !bytes.HasPrefix(b, []byte(`{"version":8,`)) {
		t.Fatalf("a state with priorities wrote %s", b)
	}
	r, err := ReadSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if b2 := snapshotBytes(t, r); !bytes.Equal(b, b2) {
		t.Fatalf("read back:\n%s\n%s", b2, b)
	}
	// Both go on the same: the remembered renewal keeps its request.
	ops := []Op{rn, handoffOp("e", 2, ""), {Type: OpList}}
	r1, e1 := apply(t, s, 2*sec, ops...)
	r2, e2 := apply(t, r, 2*sec, ops...)
	if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(e1, e2) {
		t.Fatalf("restored state diverged:\n%+v\n%+v", r1, r2)
	}
	if r1[0].Renewed[0].HandoffRequested != "h2" || r1[1].Lease.Holder != "h2" {
		t.Fatalf("results %+v", r1)
	}
	// Older versions refuse what only version 8 has.
	for _, v := range []string{`"version":6`, `"version":7`} {
		if _, err := ReadSnapshot(bytes.NewReader(bytes.Replace(b, []byte(`"version":8`), []byte(v), 1))); err == nil {
			t.Fatalf("%s snapshot with priorities read", v)
		}
	}
}

// TestPrioritySnapshotGolden holds a version 8 snapshot: it must stay
// readable, byte for byte.
func TestPrioritySnapshotGolden(t *testing.T) {
	const snap = `{"version":8,"now":1000000000,"last_token":1,"revision":0,"leases":[{"Name":"e","Holder":"h1","Token":1,"TTL":10000000000,"GrantedAt":0,"ExpiresAt":10000000000,"Priority":3}],"queues":[{"name":"e","waiters":[{"Holder":"h2","TTL":10000000000,"Deadline":60000000000,"Priority":4}]}],"kv":null}` + "\n"
	s, err := ReadSnapshot(strings.NewReader(snap))
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshotBytes(t, s); string(got) != snap {
		t.Fatalf("the golden version 8 snapshot writes\n%s\nnot\n%s", got, snap)
	}
	r, _ := apply1(t, s, 2*sec, renew(Ref{Name: "e", Token: 1}))
	if r.Renewed[0].HandoffRequested != "h2" {
		t.Fatalf("request %+v", r.Renewed[0])
	}
	if _, err := ReadSnapshot(strings.NewReader(strings.Replace(snap, `"version":8`, `"version":6`, 1))); err == nil {
		t.Fatal("a version 6 snapshot with priorities read")
	}
}

// A shared grant cannot be handed off (the other readers' grants would
// go with it), and changes nothing; an exclusive holder may hand off to
// a reader, and the readers first in line behind it join it, while a
// writer behind them keeps waiting.
func TestHandoffAndSharedGrants(t *testing.T) {
	s := New()
	r1 := mustSlot(t, s, 0, shr("db", "r1", 10*sec))
	mustSlot(t, s, 0, shr("db", "r2", 10*sec))
	apply(t, s, 0, acqWait("db", "w", 10*sec, time.Minute))
	apply(t, s, sec)
	before := snapshotBytes(t, s)
	r, ev := apply1(t, s, sec, handoffOp("db", r1.Token, "w"))
	wantErr(t, r.Err, ErrInvalid)
	if len(ev) != 0 {
		t.Fatalf("events %+v", ev)
	}
	if after := snapshotBytes(t, s); !bytes.Equal(before, after) {
		t.Fatalf("refused handoff changed the state:\n%s\n%s", before, after)
	}

	s = New()
	w := mustGrant(t, s, 0, "db", "w1", 10*sec)
	apply(t, s, 0, shrWait("db", "r1", 10*sec, time.Minute), shrWait("db", "r2", 10*sec, time.Minute),
		acqWait("db", "w2", 10*sec, time.Minute), shrWait("db", "r3", 10*sec, time.Minute))
	r, ev = apply1(t, s, sec, handoffOp("db", w.Token, "r1"))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	got := grantedTokens(ev)
	if len(got) != 2 || got["r1"] == 0 || got["r2"] == 0 || got["r1"] == got["r2"] {
		t.Fatalf("granted %v, want r1 and r2 with their own tokens", got)
	}
	if ls := s.Slots("db"); len(ls) != 2 || !ls[0].Shared || !ls[1].Shared {
		t.Fatalf("grants %+v, want r1 and r2 shared", ls)
	}
	if q := s.Waiters("db"); !slices.Equal(q, []string{"w2", "r3"}) {
		t.Fatalf("waiters %v, want w2 then r3", q)
	}
}

// A renewal asks for a handoff only of what can be handed off: not of a
// semaphore slot, not of a shared grant (a holder that tried would be
// refused, and its term would already have ended).
func TestNoHandoffRequestOfSlotsOrSharedGrants(t *testing.T) {
	for _, first := range []Op{
		{Type: OpAcquire, Name: "n", Holder: "h", TTL: 10 * sec, Limit: 2},
		shr("n", "h", 10*sec),
	} {
		s := New()
		l := mustSlot(t, s, 0, first)
		// A higher priority waits: the other slot or reader taken first,
		// then an exclusive or same-limit waiter of priority 5.
		fill := first
		fill.Holder = "other"
		mustSlot(t, s, 0, fill)
		w := acqPrio("n", "high", 5)
		if first.Limit > 1 {
			w.Limit = 2
		}
		apply(t, s, 0, w)
		if q := s.Waiters("n"); !slices.Equal(q, []string{"high"}) {
			t.Fatalf("waiters %v, want high", q)
		}
		r, _ := apply1(t, s, sec, Op{Type: OpRenew, Refs: []Ref{{Name: "n", Token: l.Token}}})
		if len(r.Renewed) != 1 || r.Renewed[0].Err != nil || r.Renewed[0].HandoffRequested != "" {
			t.Fatalf("renewal of %+v = %+v, want renewed with no handoff request", first, r.Renewed)
		}
	}
}
