package lease

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func acqDelay(name, holder string, ttl, lockDelay time.Duration) Op {
	return Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl, LockDelay: lockDelay}
}

func revoke(name string, token uint64, reason string) Op {
	return Op{Type: OpRevoke, Name: name, Token: token, Reason: reason}
}

// wantDelayHeld checks that r is the held error of a lock-delay caused by
// grant g, ending at until.
func wantDelayHeld(t *testing.T, r Result, now time.Duration, g Lease, until time.Duration) {
	t.Helper()
	he, ok := errors.AsType[*HeldError](r.Err)
	if !ok || !he.LockDelay || he.Holder != g.Holder || he.Token != g.Token || he.Remaining != until-now ||
		he.Ended+he.Remaining != g.LockDelay {
		t.Fatalf("at %s: %+v (%v), want the lock-delay of %s#%d with %s left", now, r, r.Err, g.Holder, g.Token, until-now)
	}
}

func TestLockDelayAfterExpiry(t *testing.T) {
	s := New()
	a, _ := apply1(t, s, 0, acqDelay("a", "h1", 10*sec, 5*sec))
	if a.Err != nil || a.Lease.LockDelay != 5*sec {
		t.Fatalf("grant: %+v", a)
	}
	// The grant expires at 10s; nothing notices until 12s. The delay
	// counts from the expiry: it ends at 15s.
	r, ev := apply1(t, s, 12*sec, acq("a", "h2", 10*sec))
	wantDelayHeld(t, r, 12*sec, a.Lease, 15*sec)
	wantEvents(t, ev, Event{Type: EventExpired, Lease: a.Lease, At: 12 * sec})
	if until, ok := s.Delayed("a"); !ok || until != 15*sec {
		t.Fatalf("Delayed = %s, %v", until, ok)
	}
	if !strings.Contains(r.Err.Error(), "lock-delay") {
		t.Fatalf("message %q does not say lock-delay", r.Err)
	}
	// A waiter queues; the expirer is due at the delay's end.
	r, _ = apply1(t, s, 13*sec, acqWait("a", "h3", 10*sec, 20*sec))
	if !r.Queued {
		t.Fatalf("wait: %+v", r)
	}
	wantDelayHeld(t, r, 13*sec, a.Lease, 15*sec)
	if d, ok := s.NextDeadline(); !ok || d != 15*sec {
		t.Fatalf("NextDeadline = %s, %v; want the delay's end 15s", d, ok)
	}
	// An expiry before the end grants nothing.
	if _, ev := apply1(t, s, 14*sec, Op{Type: OpExpire}); len(ev) != 0 {
		t.Fatalf("events before the delay's end: %+v", ev)
	}
	// At the end the waiter is granted, before any newcomer.
	_, ev = apply(t, s, 15*sec, Op{Type: OpExpire}, acq("a", "h2", 10*sec))
	if len(ev) != 1 || ev[0].Type != EventGranted || ev[0].Lease.Holder != "h3" || ev[0].Lease.Token != 2 {
		t.Fatalf("events at the delay's end: %+v", ev)
	}
	if _, ok := s.Delayed("a"); ok {
		t.Fatal("still delayed after its end")
	}
	if _, ok := s.NextDeadline(); !ok {
		t.Fatal("no deadline for h3's grant")
	}
}

func TestLockDelayReleaseSkipsIt(t *testing.T) {
	s := New()
	a, _ := apply1(t, s, 0, acqDelay("a", "h1", 10*sec, time.Minute))
	apply1(t, s, sec, acqWait("a", "h2", 10*sec, 20*sec))
	r, ev := apply1(t, s, 2*sec, rel("a", a.Lease.Token))
	if r.Err != nil || len(ev) != 2 || ev[1].Type != EventGranted || ev[1].Lease.Holder != "h2" {
		t.Fatalf("release: %+v %+v", r, ev)
	}
	if _, ok := s.Delayed("a"); ok {
		t.Fatal("a release started the lock-delay")
	}
}

func TestLockDelayPassedBeforeNoticed(t *testing.T) {
	s := New()
	apply1(t, s, 0, acqDelay("a", "h1", 10*sec, 2*sec))
	// Expired at 10s, delay until 12s; the next op comes at 20s.
	r, _ := apply1(t, s, 20*sec, acq("a", "h2", 10*sec))
	if r.Err != nil {
		t.Fatalf("acquire after expiry and delay: %v", r.Err)
	}
}

func TestLockDelayOfASemaphoreHoldsBackEveryNewSlot(t *testing.T) {
	s := New()
	a := mustSlot(t, s, 0, Op{Type: OpAcquire, Name: "s", Holder: "h1", TTL: 5 * sec, Limit: 3, LockDelay: 4 * sec})
	b := mustSlot(t, s, 0, Op{Type: OpAcquire, Name: "s", Holder: "h2", TTL: 20 * sec, Limit: 3})
	r, _ := apply1(t, s, 6*sec, sem("s", "h3", 3, 10*sec))
	wantDelayHeld(t, r, 6*sec, a, 9*sec)
	if he, _ := errors.AsType[*HeldError](r.Err); he.Limit != 3 {
		t.Fatalf("held: %+v, want the live limit 3", he)
	}
	// The live slot renews.
	if r, _ := apply1(t, s, 7*sec, renew(Ref{Name: "s", Token: b.Token})); r.Renewed[0].Err != nil {
		t.Fatal(r.Renewed[0].Err)
	}
	// Another limit is still refused.
	if r, _ := apply1(t, s, 7*sec, sem("s", "h3", 2, 10*sec)); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("other limit: %v", r.Err)
	}
	mustSlot(t, s, 9*sec, sem("s", "h3", 3, 10*sec))
}

func TestLockDelayWaitersAgreeOnTheLimit(t *testing.T) {
	s := New()
	apply1(t, s, 0, acqDelay("a", "h1", 2*sec, 10*sec))
	if r, _ := apply1(t, s, 3*sec, Op{Type: OpAcquire, Name: "a", Holder: "h2", TTL: sec, Limit: 2, Wait: true, WaitTimeout: time.Minute}); !r.Queued {
		t.Fatalf("first waiter: %+v", r)
	}
	if r, _ := apply1(t, s, 3*sec, acqWait("a", "h3", sec, time.Minute)); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("a waiter with another limit: %+v", r)
	}
	// A plain try is told about the delay, whatever its limit.
	if r, _ := apply1(t, s, 3*sec, acq("a", "h3", sec)); !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("plain try: %+v", r)
	}
	_, ev := apply1(t, s, 12*sec, Op{Type: OpExpire})
	if len(ev) != 1 || ev[0].Lease.Holder != "h2" || ev[0].Lease.Limit != 2 {
		t.Fatalf("events: %+v", ev)
	}
}

func TestRevoke(t *testing.T) {
	s := New()
	a := mustGrant(t, s, 0, "a", "h1", 10*sec)
	apply1(t, s, sec, put("k", "v", "a", a.Token))
	apply1(t, s, sec, acqWait("a", "h2", 10*sec, time.Minute))
	r, ev := apply1(t, s, 2*sec, revoke("a", 0, "stuck on a bad disk"))
	if r.Err != nil || len(r.Leases) != 1 || r.Leases[0] != a {
		t.Fatalf("revoke: %+v", r)
	}
	if len(ev) != 2 || ev[0] != (Event{Type: EventRevoked, Lease: a, At: 2 * sec, Reason: "stuck on a bad disk"}) ||
		ev[1].Type != EventGranted || ev[1].Lease.Holder != "h2" || ev[1].Lease.Token <= a.Token {
		t.Fatalf("events: %+v", ev)
	}
	// The holder learns it at its next renewal, with the reason.
	r, _ = apply1(t, s, 3*sec, renew(Ref{Name: "a", Token: a.Token}))
	err := r.Renewed[0].Err
	re, ok := errors.AsType[*RevokedError](err)
	if !ok || re.Reason != "stuck on a bad disk" || re.Token != a.Token || !errors.Is(err, ErrRevoked) || !errors.Is(err, ErrStaleToken) {
		t.Fatalf("renewal after revoke: %v", err)
	}
	if !strings.Contains(err.Error(), "revoked") || !strings.Contains(err.Error(), "stuck on a bad disk") {
		t.Fatalf("message %q", err)
	}
	if Reason(err) != ReasonStaleToken {
		t.Fatalf("wire reason %q", Reason(err))
	}
	// Its writes and its release are refused the same way.
	for _, op := range []Op{put("k", "late", "a", a.Token), del("k", "a", a.Token), rel("a", a.Token)} {
		if r, _ := apply1(t, s, 4*sec, op); !errors.Is(r.Err, ErrRevoked) {
			t.Fatalf("%s with the revoked token: %v", op.Type, r.Err)
		}
	}
	if reason, ok := s.Revoked("a", a.Token); !ok || reason != "stuck on a bad disk" {
		t.Fatalf("Revoked = %q, %v", reason, ok)
	}
	// After the revoked grant's old expiry the tombstone is gone: stale.
	r, _ = apply1(t, s, 10*sec, renew(Ref{Name: "a", Token: a.Token}))
	if err := r.Renewed[0].Err; errors.Is(err, ErrRevoked) || !errors.Is(err, ErrStaleToken) {
		t.Fatalf("after the old expiry: %v", err)
	}
	if _, ok := s.Revoked("a", a.Token); ok {
		t.Fatal("tombstone kept past the old expiry")
	}
}

func TestRevokeNotHeldChangesNothing(t *testing.T) {
	s := New()
	a := mustGrant(t, s, 0, "a", "h1", 10*sec)
	before := snapshotBytes(t, s)
	for _, op := range []Op{revoke("b", 0, "r"), revoke("a", a.Token+1, "r")} {
		r, ev := apply1(t, s, 0, op)
		if !errors.Is(r.Err, ErrNotFound) || len(ev) != 0 {
			t.Fatalf("revoke %s#%d: %+v %+v", op.Name, op.Token, r, ev)
		}
	}
	if after := snapshotBytes(t, s); !bytes.Equal(before, after) {
		t.Fatalf("a refused revoke changed the state:\n%s\n%s", before, after)
	}
	apply1(t, s, 0, revoke("a", a.Token, "first"))
	r, _ := apply1(t, s, 0, revoke("a", a.Token, "again"))
	if !errors.Is(r.Err, ErrNotFound) || !strings.Contains(r.Err.Error(), "revoked already (first)") {
		t.Fatalf("second revoke: %v", r.Err)
	}
}

func TestRevokeSemaphore(t *testing.T) {
	s := New()
	var slots []Lease
	for _, h := range []string{"h1", "h2", "h3"} {
		slots = append(slots, mustSlot(t, s, 0, sem("s", h, 3, 10*sec)))
	}
	r, ev := apply1(t, s, sec, revoke("s", slots[1].Token, "one slot"))
	if r.Err != nil || len(r.Leases) != 1 || r.Leases[0].Token != slots[1].Token || len(ev) != 1 {
		t.Fatalf("revoke one slot: %+v %+v", r, ev)
	}
	if got := s.Slots("s"); len(got) != 2 {
		t.Fatalf("slots left: %+v", got)
	}
	r, ev = apply1(t, s, sec, revoke("s", 0, "all"))
	if r.Err != nil || len(r.Leases) != 2 || r.Leases[0].Token != slots[0].Token || r.Leases[1].Token != slots[2].Token || len(ev) != 2 {
		t.Fatalf("revoke all: %+v %+v", r, ev)
	}
	if got := s.Slots("s"); len(got) != 0 {
		t.Fatalf("slots left: %+v", got)
	}
}

func TestRevokeStartsTheLockDelay(t *testing.T) {
	s := New()
	a, _ := apply1(t, s, 0, acqDelay("a", "h1", 30*sec, 5*sec))
	apply1(t, s, sec, acqWait("a", "h2", 10*sec, time.Minute))
	_, ev := apply1(t, s, 2*sec, revoke("a", 0, "r"))
	if len(ev) != 1 {
		t.Fatalf("revoke granted during the delay: %+v", ev)
	}
	// From the revocation, not from the old expiry (31s).
	r, _ := apply1(t, s, 3*sec, acq("a", "h3", 10*sec))
	wantDelayHeld(t, r, 3*sec, a.Lease, 7*sec)
	if d, _ := s.NextDeadline(); d != 7*sec {
		t.Fatalf("NextDeadline = %s", d)
	}
	_, ev = apply1(t, s, 7*sec, Op{Type: OpExpire})
	if len(ev) != 1 || ev[0].Lease.Holder != "h2" {
		t.Fatalf("at the delay's end: %+v", ev)
	}
}

func TestRevokeRetryGetsFirstResult(t *testing.T) {
	s := New()
	a := mustGrant(t, s, 0, "a", "h1", 10*sec)
	op := in("ops", 1, 1, revoke("a", 0, "r"))
	first, _ := apply1(t, s, sec, op)
	again, ev := apply1(t, s, 2*sec, op)
	if first.Err != nil || !again.Remembered || !reflect.DeepEqual(again.Leases, []Lease{a}) || len(ev) != 0 {
		t.Fatalf("first %+v, retry %+v %+v", first, again, ev)
	}
}

func TestTombstonesBounded(t *testing.T) {
	s := New()
	// MaxTombstones+1 revoked grants, all with their old expiries ahead;
	// the first expires first, so it is the one dropped.
	for i := range MaxTombstones + 1 {
		name := fmt.Sprintf("n%d", i)
		now := time.Duration(i) * time.Millisecond
		mustGrant(t, s, now, name, "h", time.Hour)
		if r, _ := apply1(t, s, now, revoke(name, 0, "r")); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if s.revoked.n != MaxTombstones {
		t.Fatalf("%d tombstones kept", s.revoked.n)
	}
	if _, ok := s.Revoked("n0", 1); ok {
		t.Fatal("the oldest tombstone was kept")
	}
	if _, ok := s.Revoked("n1", 2); !ok {
		t.Fatal("the second tombstone was dropped")
	}
	r, _ := apply1(t, s, time.Minute, renew(Ref{Name: "n0", Token: 1}))
	if err := r.Renewed[0].Err; errors.Is(err, ErrRevoked) || !errors.Is(err, ErrStaleToken) {
		t.Fatalf("renewal of the dropped one: %v", err)
	}
}

func TestLockDelaySnapshot(t *testing.T) {
	s := New()
	a, _ := apply1(t, s, 0, acqDelay("a", "h1", 2*sec, 30*sec))
	apply1(t, s, 3*sec, Op{Type: OpExpire}) // a in its delay until 32s
	apply1(t, s, 3*sec, Op{Type: OpAcquire, Name: "a", Holder: "h2", TTL: sec, Wait: true, WaitTimeout: time.Minute, LockDelay: sec})
	mustGrant(t, s, 3*sec, "b", "h1", 10*sec)
	b := s.Slots("b")[0]
	apply1(t, s, 4*sec, in("ops", 1, 1, revoke("b", 0, "why")))
	apply1(t, s, 4*sec, in("h1", 1, 1, renew(Ref{Name: "b", Token: b.Token})))
	data := snapshotBytes(t, s)
	if !bytes.HasPrefix(data, []byte(`{"version":5,`)) {
		t.Fatalf("snapshot %s is not version 5", data)
	}
	for _, want := range []string{`"delays":[{"name":"a","until":32000000000,"ended":2000000000,"holder":"h1","token":1}]`,
		`"revoked":[{"name":"b","token":2,"reason":"why","until":13000000000}]`, `"LockDelay":1000000000`, `"kind":"revoked"`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Fatalf("snapshot %s lacks %s", data, want)
		}
	}
	r, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, r); !bytes.Equal(again, data) {
		t.Fatalf("read back:\n%s\nwant\n%s", again, data)
	}
	if want := encodeWholeSnapshot(s); !bytes.Equal(data, want) {
		t.Fatalf("WriteSnapshot:\n%s\nencoding at once:\n%s", data, want)
	}
	// The restored state behaves the same: its expirer wakes at the
	// delay's end, the waiter is granted then, the tombstone answers.
	for _, st := range []*State{s, r} {
		if d, ok := st.NextDeadline(); !ok || d != 32*sec {
			t.Fatalf("NextDeadline = %s, %v", d, ok)
		}
		res, _ := apply1(t, st, 5*sec, renew(Ref{Name: "b", Token: b.Token}))
		if !errors.Is(res.Renewed[0].Err, ErrRevoked) {
			t.Fatalf("renewal of the revoked grant: %v", res.Renewed[0].Err)
		}
		res, _ = apply1(t, st, 5*sec, in("h1", 1, 1, renew(Ref{Name: "b", Token: b.Token})))
		if !res.Remembered || !errors.Is(res.Renewed[0].Err, ErrRevoked) {
			t.Fatalf("remembered renewal: %+v", res)
		}
		_, ev := apply1(t, st, 32*sec, Op{Type: OpExpire})
		if len(ev) != 1 || ev[0].Lease.Holder != "h2" || ev[0].Lease.LockDelay != sec {
			t.Fatalf("at the delay's end: %+v", ev)
		}
	}
	_ = a
	// Without lock-delays or revocations, version 4 or lower as before.
	plainState := New()
	mustGrant(t, plainState, 0, "a", "h", 10*sec)
	if data := snapshotBytes(t, plainState); !bytes.HasPrefix(data, []byte(`{"version":1,`)) {
		t.Fatalf("plain snapshot: %s", data)
	}
}

func TestValidateLockDelayAndRevoke(t *testing.T) {
	l := DefaultLimits()
	for _, tc := range []struct {
		op   Op
		want string
	}{
		{acqDelay("a", "h", 10*sec, time.Minute+1), "lock_delay 1m0.000000001s is above the maximum of 1m0s"},
		{acqDelay("a", "h", 10*sec, -1), "lock_delay must not be negative"},
		{revoke("a", 0, ""), "reason is empty"},
		{revoke("a", 0, strings.Repeat("x", 257)), "reason is 257 bytes"},
		{revoke("a", 0, "bad\x00reason"), "unprintable"},
		{revoke("", 0, "r"), "name is empty"},
	} {
		err := l.Validate(tc.op)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.op, err, tc.want)
		}
	}
	for _, op := range []Op{acqDelay("a", "h", 10*sec, time.Minute), revoke("a", 3, strings.Repeat("x", 256))} {
		if err := l.Validate(op); err != nil {
			t.Errorf("Validate(%+v) = %v", op, err)
		}
	}
}

// TestCodecLockDelayGolden pins the encoding of the reason (flag 16384)
// and the lock-delay (flag 32768), after every older field.
func TestCodecLockDelayGolden(t *testing.T) {
	b := Batch{Now: sec, Ops: []Op{revoke("a", 2, "r"), acqDelay("a", "h", sec, sec)}}
	const golden = "0180a8d6b90702" + "0c898001" + "0161" + "02" + "0172" + "01878002" + "0161" + "0168" + "80a8d6b907" + "80a8d6b907"
	if got := hex.EncodeToString(EncodeBatch(b)); got != golden {
		t.Fatalf("encoding %s, want %s", got, golden)
	}
	raw, _ := hex.DecodeString(golden)
	if d, err := DecodeBatch(raw); err != nil || !reflect.DeepEqual(d, b) {
		t.Fatalf("decoded %+v, %v; want %+v", d, err, b)
	}
}
