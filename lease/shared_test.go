package lease

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func shr(name, holder string, ttl time.Duration) Op {
	return Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl, Shared: true}
}

func shrWait(name, holder string, ttl, timeout time.Duration) Op {
	op := shr(name, holder, ttl)
	op.Wait, op.WaitTimeout = true, timeout
	return op
}

func grantedTokens(ev []Event) map[string]uint64 {
	out := map[string]uint64{}
	for _, e := range ev {
		if e.Type == EventGranted {
			out[e.Lease.Holder] = e.Lease.Token
		}
	}
	return out
}

// Two readers hold at once with their own tokens; a writer waits for
// both; a reader that comes after the waiting writer waits behind it;
// when the writer is done, the readers behind it go together.
func TestSharedFIFO(t *testing.T) {
	s := New()
	r1 := mustSlot(t, s, 0, shr("db", "r1", 10*sec))
	r2 := mustSlot(t, s, sec, shr("db", "r2", 10*sec))
	if !r1.Shared || !r2.Shared || r2.Token <= r1.Token || r1.Limit != 0 {
		t.Fatalf("readers = %+v, %+v; want two shared grants, growing tokens", r1, r2)
	}
	// The writer waits for both.
	r, _ := apply1(t, s, 2*sec, acqWait("db", "w", 10*sec, time.Minute))
	var held *HeldError
	if !r.Queued || !errors.As(r.Err, &held) || held.Token != r2.Token {
		t.Fatalf("writer = %+v; want queued, held naming the reader that expires last", r)
	}
	// A plain try of a writer is told it is held.
	if r, _ := apply1(t, s, 2*sec, acq("db", "w2", 10*sec)); !errors.Is(r.Err, ErrHeld) || r.Queued {
		t.Fatalf("writer try = %+v", r)
	}
	// A reader after the queued writer waits too (no writer starvation),
	// and a plain try is told it is held.
	if r, _ := apply1(t, s, 3*sec, shr("db", "r3", 10*sec)); !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("reader try behind a writer = %+v, want held", r)
	}
	r, _ = apply1(t, s, 3*sec, shrWait("db", "r3", 10*sec, time.Minute))
	if !r.Queued {
		t.Fatalf("reader behind a writer = %+v, want queued", r)
	}
	r, _ = apply1(t, s, 3*sec, shrWait("db", "r4", 10*sec, time.Minute))
	if !r.Queued {
		t.Fatalf("reader r4 = %+v, want queued", r)
	}
	// A reader renews by acquiring again; same token.
	if l := mustSlot(t, s, 4*sec, shr("db", "r1", 10*sec)); l.Token != r1.Token {
		t.Fatalf("renewal by acquire = %+v", l)
	}
	// One reader leaving is not enough.
	if r, ev := apply1(t, s, 5*sec, rel("db", r1.Token)); r.Err != nil || len(grantedTokens(ev)) != 0 {
		t.Fatalf("release r1 = %+v, %v", r, ev)
	}
	// The second reader leaving grants the writer, with a new token.
	r, ev := apply1(t, s, 6*sec, rel("db", r2.Token))
	w, ok := grantedTokens(ev)["w"]
	if r.Err != nil || !ok || len(grantedTokens(ev)) != 1 || w <= r2.Token {
		t.Fatalf("release r2 = %+v, %v; want the writer granted alone", r, ev)
	}
	if ls := s.Slots("db"); len(ls) != 1 || ls[0].Shared {
		t.Fatalf("slots = %+v", ls)
	}
	// The writer done, both queued readers go in the same apply.
	_, ev = apply1(t, s, 7*sec, rel("db", w))
	g := grantedTokens(ev)
	if len(g) != 2 || g["r3"] <= w || g["r4"] <= g["r3"] {
		t.Fatalf("release w granted %v; want r3 then r4", g)
	}
	if len(s.Waiters("db")) != 0 || len(s.Slots("db")) != 2 {
		t.Fatalf("waiters %v, slots %+v", s.Waiters("db"), s.Slots("db"))
	}
}

// An exclusive holder keeps readers out; readers and writers queued
// behind it go in order: reader, reader, then writer, then reader.
func TestSharedQueueOrder(t *testing.T) {
	s := New()
	w := mustGrant(t, s, 0, "db", "w", 10*sec)
	for _, op := range []Op{
		shrWait("db", "r1", 10*sec, time.Minute), shrWait("db", "r2", 10*sec, time.Minute),
		acqWait("db", "w2", 10*sec, time.Minute), shrWait("db", "r3", 10*sec, time.Minute),
	} {
		if r, _ := apply1(t, s, sec, op); !r.Queued {
			t.Fatalf("%s = %+v, want queued", op.Holder, r)
		}
	}
	_, ev := apply1(t, s, 2*sec, rel("db", w.Token))
	if g := grantedTokens(ev); len(g) != 2 || g["r1"] == 0 || g["r2"] == 0 {
		t.Fatalf("granted %v, want r1 and r2", g)
	}
	// The readers expire: the writer, then the last reader.
	_, ev = apply1(t, s, 12*sec, Op{Type: OpExpire})
	g := grantedTokens(ev)
	if len(g) != 1 || g["w2"] == 0 {
		t.Fatalf("after expiry granted %v, want w2", g)
	}
	_, ev = apply1(t, s, 23*sec, Op{Type: OpExpire})
	if g := grantedTokens(ev); len(g) != 1 || g["r3"] == 0 {
		t.Fatalf("after w2 expired granted %v, want r3", g)
	}
}

// A writer that stops waiting lets the readers behind it in.
func TestSharedCancelledWriterUnblocksReaders(t *testing.T) {
	s := New()
	mustSlot(t, s, 0, shr("db", "r1", 10*sec))
	apply1(t, s, sec, acqWait("db", "w", 10*sec, time.Minute))
	apply1(t, s, sec, shrWait("db", "r2", 10*sec, time.Minute))
	_, ev := apply1(t, s, 2*sec, Op{Type: OpCancelWait, Name: "db", Holder: "w"})
	if g := grantedTokens(ev); len(g) != 1 || g["r2"] == 0 {
		t.Fatalf("cancel granted %v, want r2", g)
	}
	// And a writer whose wait timed out does too, the next time the
	// name is settled.
	apply1(t, s, 3*sec, acqWait("db", "w", 10*sec, 2*sec))
	apply1(t, s, 3*sec, shrWait("db", "r3", 10*sec, time.Minute))
	_, ev = apply1(t, s, 6*sec, Op{Type: OpGet, Name: "db"})
	if g := grantedTokens(ev); len(g) != 1 || g["r3"] == 0 {
		t.Fatalf("get after the writer's deadline granted %v, want r3", g)
	}
}

func TestSharedInvalid(t *testing.T) {
	s := New()
	bad := shr("db", "h", 10*sec)
	bad.Limit = 3
	if err := DefaultLimits().Validate(bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate(shared with limit 3) = %v", err)
	}
	if r, _ := apply1(t, s, 0, bad); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("apply shared with limit 3 = %v", r.Err)
	}
	mustSlot(t, s, 0, sem("jobs", "h1", 3, 10*sec))
	if r, ev := apply1(t, s, 0, shr("jobs", "h2", 10*sec)); !errors.Is(r.Err, ErrInvalid) || len(ev) != 0 {
		t.Fatalf("shared acquire of a semaphore = %v", r.Err)
	}
	mustSlot(t, s, 0, shr("db", "r1", 10*sec))
	if r, _ := apply1(t, s, 0, sem("db", "h2", 3, 10*sec)); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("semaphore acquire of a shared name = %v", r.Err)
	}
	// No upgrade: the reader must release first.
	r, _ := apply1(t, s, 0, acq("db", "r1", 10*sec))
	if !errors.Is(r.Err, ErrInvalid) || !strings.Contains(r.Err.Error(), "release it before") {
		t.Fatalf("upgrade = %v", r.Err)
	}
	// No downgrade either.
	mustGrant(t, s, 0, "x", "w", 10*sec)
	if r, _ := apply1(t, s, 0, shr("x", "w", 10*sec)); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("downgrade = %v", r.Err)
	}
}

// Shared grants do not write the fenced store; exclusive grants fence
// as always, and a writer after readers has the larger token.
func TestSharedFencing(t *testing.T) {
	s := New()
	r1 := mustSlot(t, s, 0, shr("db", "r1", 10*sec))
	r, _ := apply1(t, s, 0, put("k", "v", "db", r1.Token))
	if !errors.Is(r.Err, ErrInvalid) || !strings.Contains(r.Err.Error(), "shared") {
		t.Fatalf("put with a shared token = %v", r.Err)
	}
	if r, _ := apply1(t, s, 0, del("k", "db", r1.Token)); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("delete with a shared token = %v", r.Err)
	}
	apply1(t, s, sec, rel("db", r1.Token))
	w := mustGrant(t, s, sec, "db", "w", 10*sec)
	if w.Token <= r1.Token {
		t.Fatalf("writer token %d not above reader's %d", w.Token, r1.Token)
	}
	if r, _ := apply1(t, s, sec, put("k", "v", "db", w.Token)); r.Err != nil {
		t.Fatalf("put with the exclusive token = %v", r.Err)
	}
}

// Expiry, revocation, lock-delay and history work per shared grant.
func TestSharedExpiryRevokeDelayHistory(t *testing.T) {
	s := New()
	apply1(t, s, 0, Op{Type: OpHistoryConfig, Limit: 16, TTL: time.Hour})
	a := mustSlot(t, s, 0, Op{Type: OpAcquire, Name: "db", Holder: "a", TTL: 5 * sec, Shared: true, LockDelay: 3 * sec})
	b := mustSlot(t, s, 0, shr("db", "b", 20*sec))
	// Revoke one reader: the other stays.
	r, ev := apply1(t, s, sec, Op{Type: OpRevoke, Name: "db", Token: b.Token, Reason: "test"})
	if r.Err != nil || len(r.Leases) != 1 || len(ev) != 1 || ev[0].Type != EventRevoked {
		t.Fatalf("revoke = %+v, %v", r, ev)
	}
	if r, _ := apply1(t, s, sec, renew(Ref{Name: "db", Token: b.Token})); !errors.Is(r.Renewed[0].Err, ErrRevoked) {
		t.Fatalf("renew of the revoked reader = %+v", r.Renewed[0])
	}
	// The other expires with a lock-delay: no grant, shared or not, until 8s.
	_, ev = apply1(t, s, 6*sec, Op{Type: OpExpire})
	if len(ev) != 1 || ev[0].Type != EventExpired || ev[0].Lease.Token != a.Token {
		t.Fatalf("expire = %v", ev)
	}
	r, _ = apply1(t, s, 6*sec, shrWait("db", "c", 10*sec, time.Minute))
	var held *HeldError
	if !errors.As(r.Err, &held) || !held.LockDelay || !r.Queued {
		t.Fatalf("reader in the lock-delay = %+v", r)
	}
	apply1(t, s, 6*sec, shrWait("db", "d", 10*sec, time.Minute))
	if at, ok := s.NextDeadline(); !ok || at != 8*sec {
		t.Fatalf("NextDeadline = %s, %v; want 8s", at, ok)
	}
	_, ev = apply1(t, s, 8*sec, Op{Type: OpExpire})
	if g := grantedTokens(ev); len(g) != 2 {
		t.Fatalf("end of the delay granted %v, want c and d", g)
	}
	r, _ = apply1(t, s, 8*sec, Op{Type: OpHistory, Name: "db"})
	if len(r.Terms) != 4 {
		t.Fatalf("terms = %+v", r.Terms)
	}
	for _, tm := range r.Terms {
		if !tm.Shared {
			t.Fatalf("term %+v not shared", tm)
		}
	}
	if r.Terms[0].Ending != EndingExpired || r.Terms[1].Ending != EndingRevoked || r.Terms[2].Ending != EndingNone {
		t.Fatalf("endings = %+v", r.Terms)
	}
}

func TestSharedBound(t *testing.T) {
	s := New()
	var ops []Op
	for i := range MaxShared {
		ops = append(ops, shr("db", "r"+strconv.Itoa(i), 10*sec))
	}
	res, _ := apply(t, s, 0, ops...)
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	r, _ := apply1(t, s, 0, shrWait("db", "one-more", 10*sec, time.Minute))
	if !r.Queued {
		t.Fatalf("reader %d = %+v, want queued", MaxShared+1, r)
	}
	_, ev := apply1(t, s, sec, rel("db", res[0].Lease.Token))
	if g := grantedTokens(ev); g["one-more"] == 0 {
		t.Fatalf("release granted %v", g)
	}
}

// A state without shared grants writes the snapshot of before; one with
// them writes version 7 and reads back the same; versions before 7 with
// shared grants are refused.
func TestSharedSnapshot(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "plain", "h", 10*sec)
	if b := snapshotBytes(t, s); !bytes.Contains(b, []byte(`"version":1`)) {
		t.Fatalf("snapshot without shared grants: %s", b)
	}
	apply1(t, s, 0, Op{Type: OpHistoryConfig, Limit: 16, TTL: time.Hour})
	mustSlot(t, s, 0, shr("db", "r1", 10*sec))
	mustSlot(t, s, 0, shr("db", "r2", 10*sec))
	apply1(t, s, 0, acqWait("db", "w", 10*sec, time.Minute))
	apply1(t, s, 0, shrWait("db", "r3", 10*sec, time.Minute))
	b := snapshotBytes(t, s)
	if !bytes.Contains(b, []byte(`"version":7`)) {
		t.Fatalf("snapshot with shared grants: %s", b)
	}
	s2, err := ReadSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if b2 := snapshotBytes(t, s2); !bytes.Equal(b, b2) {
		t.Fatalf("snapshot changed on restore:\n%s\n%s", b, b2)
	}
	// Both go on the same way.
	r1, ev1 := s.Apply(Batch{Now: 11 * sec, Ops: []Op{{Type: OpExpire}}})
	r2, ev2 := s2.Apply(Batch{Now: 11 * sec, Ops: []Op{{Type: OpExpire}}})
	if len(ev1) != len(ev2) || len(r1) != len(r2) || !bytes.Equal(snapshotBytes(t, s), snapshotBytes(t, s2)) {
		t.Fatalf("restored state diverged: %v vs %v", ev1, ev2)
	}
	for _, bad := range []string{
		strings.Replace(string(b), `"version":7`, `"version":6`, 1),
		strings.Replace(string(b), `"Holder":"r2"`, `"Holder":"r2","Limit":3`, 1),
	} {
		if _, err := ReadSnapshot(strings.NewReader(bad)); err == nil {
			t.Fatalf("ReadSnapshot accepted %s", bad)
		}
	}
	// Mixed shared and exclusive grants of one name are refused.
	mixed := strings.Replace(string(b), `"Holder":"r2","Token":3,"TTL":10000000000,"GrantedAt":0,"ExpiresAt":10000000000,"Shared":true`,
		`"Holder":"r2","Token":3,"TTL":10000000000,"GrantedAt":0,"ExpiresAt":10000000000`, 1)
	if mixed == string(b) {
		t.Fatalf("test did not change the snapshot: %s", b)
	}
	if _, err := ReadSnapshot(strings.NewReader(mixed)); err == nil {
		t.Fatalf("ReadSnapshot accepted mixed grants")
	}
}

func TestSharedCodec(t *testing.T) {
	b := Batch{Now: sec, Ops: []Op{shrWait("db", "r", 10*sec, time.Minute), acq("x", "h", 10*sec)}}
	enc := EncodeBatch(b)
	// The shared flag is bit 16 of the flags, with no payload.
	const golden = "0180a8d6b9070201b7800402646201728090dfc04a80e0ba84bf030107017801688090dfc04a"
	if got := hex.EncodeToString(enc); got != golden {
		t.Fatalf("encoding %s, want %s", got, golden)
	}
	got, err := DecodeBatch(enc)
	if err != nil || !got.Ops[0].Shared || got.Ops[1].Shared {
		t.Fatalf("decode = %+v, %v", got, err)
	}
	if !bytes.Equal(EncodeBatch(got), enc) {
		t.Fatalf("re-encoding differs")
	}
	// An unknown flag above it is still corrupt.
	bad := append([]byte{}, enc...)
	if bad[10] != 0x04 {
		t.Fatalf("third flags byte %x, want 04 (bit 16)", bad[10])
	}
	bad[10] |= 0x08 // bit 17
	if _, err := DecodeBatch(bad); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decode with bit 17 = %v", err)
	}
}

// sharedGoldenState is the state of testdata/snapshot-v7.json: two
// readers, a writer and a reader queued, a session's remembered shared
// grant and the history of the readers.
func sharedGoldenState(t *testing.T) *State {
	s := New()
	apply1(t, s, 0, Op{Type: OpHistoryConfig, Limit: 4, TTL: time.Hour})
	mustSlot(t, s, sec, shr("db", "r1", 10*sec))
	op := shr("db", "r2", 10*sec)
	op.Session, op.Seq, op.Floor = "s1", 1, 1
	mustSlot(t, s, sec, op)
	apply1(t, s, 2*sec, acqWait("db", "w", 10*sec, time.Minute))
	apply1(t, s, 2*sec, shrWait("db", "r3", 10*sec, time.Minute))
	return s
}

// TestSnapshotV7Golden: the version 7 format stays as it is
// (testdata/snapshot-v7.json, written by this test with
// TENURE_UPDATE_GOLDEN=1), and restores a state that goes on as before.
func TestSnapshotV7Golden(t *testing.T) {
	got := snapshotBytes(t, sharedGoldenState(t))
	if os.Getenv("TENURE_UPDATE_GOLDEN") != "" {
		if err := os.WriteFile("testdata/snapshot-v7.json", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/snapshot-v7.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("snapshot changed:\n got  %s\n want %s", got, want)
	}
	s, err := ReadSnapshot(bytes.NewReader(want))
	if err != nil {
		t.Fatal(err)
	}
	if ls := s.Slots("db"); len(ls) != 2 || !ls[0].Shared || !ls[1].Shared {
		t.Fatalf("slots %+v", ls)
	}
	// The retry of the session's call gets its shared grant back.
	op := shr("db", "r2", 10*sec)
	op.Session, op.Seq, op.Floor = "s1", 1, 1
	if r, _ := apply1(t, s, 3*sec, op); !r.Remembered || !r.Lease.Shared || r.Lease.Token != 2 {
		t.Fatalf("retry = %+v", r)
	}
	// The readers expire: the writer, then the reader.
	_, ev := apply1(t, s, 11*sec, Op{Type: OpExpire})
	if g := grantedTokens(ev); len(g) != 1 || g["w"] != 3 {
		t.Fatalf("granted %v, want w with token 3", g)
	}
	_, ev = apply1(t, s, 21*sec, Op{Type: OpExpire})
	if g := grantedTokens(ev); len(g) != 1 || g["r3"] != 4 {
		t.Fatalf("granted %v, want r3 with token 4", g)
	}
	r, _ := apply1(t, s, 21*sec, Op{Type: OpHistory, Name: "db"})
	if len(r.Terms) != 4 || !r.Terms[0].Shared || r.Terms[2].Shared {
		t.Fatalf("terms %+v", r.Terms)
	}
}

// A shared holder's acquire again renews its grant like any holder's:
// same token, and the acquire's TTL, lock-delay and priority.
func TestSharedReacquireRenews(t *testing.T) {
	s := New()
	r := mustSlot(t, s, 0, shr("db", "r", 5*sec))
	op := shr("db", "r", 8*sec)
	op.LockDelay, op.Priority = sec, 3
	again := mustSlot(t, s, sec, op)
	if again.Token != r.Token || again.TTL != 8*sec || again.ExpiresAt != 9*sec || again.LockDelay != sec || again.Priority != 3 {
		t.Fatalf("re-acquire = %+v, want token %d renewed with TTL 8s, lock-delay 1s, priority 3", again, r.Token)
	}
}
