package lease

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// encodeWholeSnapshot is how snapshots were written before Capture: the
// whole snapshot built in memory and encoded at once. WriteSnapshot must
// give the same bytes.
func encodeWholeSnapshot(s *State) []byte {
	snap := snapshot{Version: snapshotV1, Now: s.now, LastToken: s.lastToken, Revision: s.revision}
	for _, name := range s.leases.sortedNames() {
		for _, l := range s.leases.get(name) {
			snap.Leases = append(snap.Leases, *l)
			if l.Limit != 0 {
				snap.Version = max(snap.Version, snapshotV2)
			}
			if l.Principal != "" {
				snap.Version = max(snap.Version, snapshotV3)
			}
			if l.LockDelay != 0 {
				snap.Version = snapshotV5
			}
		}
	}
	for _, name := range sortedKeys(s.queues) {
		snap.Queues = append(snap.Queues, snapshotQueue{Name: name, Waiters: s.queues[name]})
		for _, w := range s.queues[name] {
			if w.Limit != 0 {
				snap.Version = max(snap.Version, snapshotV2)
			}
			if w.Principal != "" {
				snap.Version = max(snap.Version, snapshotV3)
			}
			if w.Session != "" {
				snap.Version = max(snap.Version, snapshotV4)
			}
			if w.LockDelay != 0 {
				snap.Version = snapshotV5
			}
		}
	}
	for _, key := range sortedKeys(s.kv) {
		f := s.kv[key]
		snap.KV = append(snap.KV, snapshotKey{Key: key, Fence: f.Token, Entry: f.Entry})
	}
	snap.Sessions = s.captureSessions(s.now)
	if len(snap.Sessions) > 0 {
		snap.Version = max(snap.Version, snapshotV4)
	}
	for _, ss := range snap.Sessions {
		if ss.v5() {
			snap.Version = snapshotV5
		}
	}
	for _, name := range sortedKeys(s.delays) {
		d := s.delays[name]
		snap.Delays = append(snap.Delays, snapshotDelay{Name: name, Until: d.Until, Ended: d.Ended, Holder: d.Holder, Token: d.Token})
		snap.Version = snapshotV5
	}
	for _, name := range sortedKeys(s.revoked.byName) {
		ts := slices.Clone(s.revoked.byName[name])
		slices.SortFunc(ts, func(x, y tombstone) int { return cmp.Compare(x.Token, y.Token) })
		for _, tb := range ts {
			if tb.Until > s.now {
				snap.Revoked = append(snap.Revoked, snapshotTombstone{Name: name, Token: tb.Token, Reason: tb.Reason, Until: tb.Until})
				snap.Version = snapshotV5
			}
		}
	}
	// Shared grants, waiters or remembered shared grants: version 7;
	// priorities or handoff requests: version 8 (which has both).
	shared, v8 := false, false
	for _, l := range snap.Leases {
		shared = shared || l.Shared
		v8 = v8 || l.Priority != 0
	}
	for _, q := range snap.Queues {
		for _, w := range q.Waiters {
			shared = shared || w.Shared
			v8 = v8 || w.Priority != 0
		}
	}
	for _, ss := range snap.Sessions {
		for _, r := range ss.Results {
			shared = shared || (r.Lease != nil && r.Lease.Shared)
			for _, l := range r.Leases {
				shared = shared || l.Shared
			}
			for _, rr := range r.Renewed {
				shared = shared || (rr.Lease != nil && rr.Lease.Shared)
			}
			v8 = v8 || r.v8()
		}
	}
	if shared {
		snap.Version = snapshotV7
	}
	if v8 {
		snap.Version = snapshotV8
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(&snap); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// TestCaptureIsPointInTime captures a state, changes every part of it
// (renewals, re-acquires, grants, releases, waiters, writes, deletes), and
// checks that the capture still writes the state as it was.
func TestCaptureIsPointInTime(t *testing.T) {
	s := New()
	at := time.Duration(0)
	apply := func(ops ...Op) []Result {
		t.Helper()
		at += time.Millisecond
		res, _ := s.Apply(Batch{Now: at, Ops: ops})
		for i, r := range res {
			if r.Err != nil && !r.Queued {
				t.Fatalf("op %d %+v: %v", i, ops[i], r.Err)
			}
		}
		return res
	}
	var tokens []uint64
	for i := range 20 {
		r := apply(Op{Type: OpAcquire, Name: fmt.Sprintf("l%02d", i), Holder: "h", TTL: time.Minute})
		tokens = append(tokens, r[0].Lease.Token)
	}
	apply(Op{Type: OpAcquire, Name: "sem", Holder: "a", TTL: time.Minute, Limit: 2},
		Op{Type: OpAcquire, Name: "sem", Holder: "b", TTL: time.Minute, Limit: 2})
	apply(Op{Type: OpPut, Key: "k0", Value: []byte("v0"), Name: "l00", Token: tokens[0]},
		Op{Type: OpPut, Key: "k1", Value: []byte("v1"), Name: "l01", Token: tokens[1]})
	apply(Op{Type: OpAcquire, Name: "l02", Holder: "waiter", TTL: time.Minute, Wait: true, WaitTimeout: time.Minute})

	want := encodeWholeSnapshot(s)
	c := s.Capture()

	apply(Op{Type: OpRenew, Refs: []Ref{{Name: "l00", Token: tokens[0], TTL: 2 * time.Minute}, {Name: "l03", Token: tokens[3]}}})
	apply(Op{Type: OpAcquire, Name: "l04", Holder: "h", TTL: 3 * time.Minute})
	apply(Op{Type: OpRelease, Name: "l05", Token: tokens[5]}, Op{Type: OpRelease, Name: "l02", Token: tokens[2]})
	apply(Op{Type: OpAcquire, Name: "new", Holder: "h", TTL: time.Minute},
		Op{Type: OpAcquire, Name: "l06", Holder: "w2", TTL: time.Minute, Wait: true, WaitTimeout: time.Minute})
	apply(Op{Type: OpPut, Key: "k0", Value: []byte("changed"), Name: "l00", Token: tokens[0]},
		Op{Type: OpDelete, Key: "k1", Name: "l01", Token: tokens[1]},
		Op{Type: OpPut, Key: "k2", Value: []byte("v2"), Name: "l01", Token: tokens[1]})
	if now := encodeWholeSnapshot(s); bytes.Equal(now, want) {
		t.Fatal("the changes did not change the state")
	}

	var got bytes.Buffer
	if err := c.Write(&got); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("the capture wrote the state as it is now, not as captured:\n got  %s\n want %s", got.Bytes(), want)
	}
}

// TestRenewalsPushNoExpiryEntry: renewing a lease to a later expiry
// leaves the expiry heap alone (its entry is moved when it comes up), and
// one to an earlier expiry adds an entry at the new time.
func TestRenewalsPushNoExpiryEntry(t *testing.T) {
	s := New()
	res, _ := s.Apply(Batch{Now: time.Millisecond, Ops: []Op{{Type: OpAcquire, Name: "a", Holder: "h", TTL: time.Minute}}})
	tok := res[0].Lease.Token
	for i := range 50 {
		s.Apply(Batch{Now: time.Duration(2+i) * time.Millisecond, Ops: []Op{{Type: OpRenew, Refs: []Ref{{Name: "a", Token: tok}}}}})
	}
	if n := len(s.expiries); n != 1 {
		t.Fatalf("%d expiry entries after 50 renewals of one lease, want 1", n)
	}
	if at, ok := s.NextDeadline(); !ok || at != 51*time.Millisecond+time.Minute {
		t.Fatalf("NextDeadline = %v, %v; want the last renewal's expiry %v", at, ok, 51*time.Millisecond+time.Minute)
	}
	// b expires between a's old expiry and the earlier one a is renewed
	// to: a's old entry would come up after b's.
	s.Apply(Batch{Now: 55 * time.Millisecond, Ops: []Op{{Type: OpAcquire, Name: "b", Holder: "h", TTL: 30 * time.Second}}})
	s.Apply(Batch{Now: 60 * time.Millisecond, Ops: []Op{{Type: OpRenew, Refs: []Ref{{Name: "a", Token: tok, TTL: 2 * time.Second}}}}})
	if at, ok := s.NextDeadline(); !ok || at != 60*time.Millisecond+2*time.Second {
		t.Fatalf("NextDeadline after a renewal to a shorter TTL = %v, %v; want %v", at, ok, 60*time.Millisecond+2*time.Second)
	}
}
