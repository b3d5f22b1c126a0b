package lease

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// applyH applies ops as one batch at now with headroom h.
func applyH(t *testing.T, s *State, now, h time.Duration, ops ...Op) []Result {
	t.Helper()
	res, _ := s.Apply(Batch{Now: now, Headroom: h, Ops: ops})
	if len(res) != len(ops) {
		t.Fatalf("Apply returned %d results for %d ops", len(res), len(ops))
	}
	return res
}

func trimOp(name string, token uint64, at time.Duration) Op {
	return Op{Type: OpTrim, Name: name, Token: token, At: at}
}

func TestHeadroomPromisesTTLAndKeepsLonger(t *testing.T) {
	s := New()
	g := applyH(t, s, 0, 30*sec, acq("a", "h", 10*sec))[0]
	if g.Err != nil {
		t.Fatal(g.Err)
	}
	// The headroom is min(TTL, Headroom): 10 s here.
	if g.Lease.Promised != 10*sec || g.Lease.ExpiresAt != 20*sec {
		t.Fatalf("grant: promised %s, expires %s; want 10s, 20s", g.Lease.Promised, g.Lease.ExpiresAt)
	}
	if r := g.Lease.Remaining(2 * sec); r != 8*sec {
		t.Fatalf("remaining at 2s = %s, want 8s (of the promise, not the expiry)", r)
	}
	// A renewal with a smaller headroom than the TTL gets that.
	r := applyH(t, s, 4*sec, 3*sec, renew(Ref{Name: "a", Token: g.Lease.Token}))[0].Renewed[0]
	if r.Err != nil || r.Lease.Promised != 14*sec || r.Lease.ExpiresAt != 17*sec {
		t.Fatalf("renewal: %+v; want promised 14s, expires 17s", r)
	}
	// Past the promise but before the expiry the grant is still held:
	// a new leader that does not know the memory renewals keeps it.
	if res, _ := apply1(t, s, 16*sec, acq("a", "other", sec)); res.Err == nil {
		t.Fatalf("acquire by another at 16s granted, want held until 17s")
	}
	if res, _ := apply1(t, s, 17*sec, acq("a", "other", sec)); res.Err != nil {
		t.Fatalf("acquire by another at 17s: %v", res.Err)
	}
	// A batch without headroom promises the expiry itself.
	s2 := New()
	g2 := applyH(t, s2, 0, 0, acq("a", "h", 10*sec))[0]
	if g2.Lease.Promised != 0 || g2.Lease.ExpiresAt != 10*sec || g2.Lease.Promise() != 10*sec {
		t.Fatalf("grant without headroom: %+v", g2.Lease)
	}
}

func TestTrim(t *testing.T) {
	setup := func() (*State, Lease) {
		s := New()
		g := applyH(t, s, 0, 10*sec, acq("a", "h", 10*sec), acqWait("a", "w", 10*sec, time.Hour))[0]
		return s, g.Lease
	}
	t.Run("ends the grant at the promise and grants the waiter", func(t *testing.T) {
		s, g := setup()
		// The leader renewed from memory at 5 s: promise 15 s.
		_, ev := s.Apply(Batch{Now: 15 * sec, Ops: []Op{trimOp("a", g.Token, 15*sec)}})
		if len(ev) != 2 || ev[0].Type != EventExpired || ev[1].Type != EventGranted || ev[1].Lease.Holder != "w" {
			t.Fatalf("events = %+v, want expired then granted to w", ev)
		}
		if l, _ := s.Lease("a"); l.GrantedAt != 15*sec {
			t.Fatalf("waiter granted at %s, want 15s", l.GrantedAt)
		}
	})
	t.Run("never cuts what the log promised", func(t *testing.T) {
		s, g := setup()
		// A renewal in the log at 6 s promised 16 s.
		applyH(t, s, 6*sec, 10*sec, renew(Ref{Name: "a", Token: g.Token}))
		apply(t, s, 15*sec)
		before := snapshotBytes(t, s)
		res, ev := apply1(t, s, 15*sec, trimOp("a", g.Token, 15*sec))
		if res.Err != nil || len(ev) != 0 || !bytes.Equal(before, snapshotBytes(t, s)) {
			t.Fatalf("trim below the log's promise changed the state: %v %+v", res.Err, ev)
		}
	})
	t.Run("of a gone or other grant changes nothing", func(t *testing.T) {
		s, g := setup()
		apply1(t, s, sec, rel("a", g.Token)) // w is granted
		apply(t, s, 15*sec)
		before := snapshotBytes(t, s)
		apply1(t, s, 15*sec, trimOp("a", g.Token, 15*sec))
		apply1(t, s, 15*sec, trimOp("nope", 1, 15*sec))
		if !bytes.Equal(before, snapshotBytes(t, s)) {
			t.Fatal("trim of a gone grant changed the state")
		}
	})
	t.Run("later than the expiry changes nothing", func(t *testing.T) {
		s, g := setup()
		apply(t, s, 5*sec)
		before := snapshotBytes(t, s)
		apply1(t, s, 5*sec, trimOp("a", g.Token, 25*sec))
		if !bytes.Equal(before, snapshotBytes(t, s)) {
			t.Fatal("trim past the expiry changed the state")
		}
	})
	t.Run("ahead of time holds until then", func(t *testing.T) {
		s, g := setup()
		apply1(t, s, 12*sec, trimOp("a", g.Token, 14*sec))
		if l, ok := s.Lease("a"); !ok || l.Holder != "h" || l.ExpiresAt != 14*sec {
			t.Fatalf("after a trim to 14s at 12s: %+v %v", l, ok)
		}
		if at, ok := s.NextDeadline(); !ok || at != 14*sec {
			t.Fatalf("next deadline = %s %v, want 14s", at, ok)
		}
	})
}

func TestMemoryRenewal(t *testing.T) {
	s := New()
	g := applyH(t, s, 0, 10*sec, Op{Type: OpAcquire, Name: "a", Holder: "h", TTL: 10 * sec, Principal: "p"})[0].Lease
	ref := Ref{Name: "a", Token: g.Token}
	for _, c := range []struct {
		name      string
		ref       Ref
		principal string
		now       time.Duration
		ok        bool
	}{
		{"within the headroom", ref, "p", 4 * sec, true},
		{"at the edge of the headroom", ref, "p", 10 * sec, true},
		{"past the headroom", ref, "p", 10*sec + 1, false},
		{"before the applied time", ref, "p", -1, false},
		{"another principal", ref, "q", 4 * sec, false},
		{"another token", Ref{Name: "a", Token: g.Token + 1}, "p", 4 * sec, false},
		{"unknown name", Ref{Name: "b", Token: g.Token}, "p", 4 * sec, false},
		{"a new TTL", Ref{Name: "a", Token: g.Token, TTL: 5 * sec}, "p", 4 * sec, false},
		{"the same TTL", Ref{Name: "a", Token: g.Token, TTL: 10 * sec}, "p", 4 * sec, true},
	} {
		l, ok := s.MemoryRenewal(c.ref, c.principal, c.now)
		if ok != c.ok || (ok && l.Token != g.Token) {
			t.Errorf("%s: MemoryRenewal = %+v, %v; want ok %v", c.name, l, ok, c.ok)
		}
	}
	// A grant without headroom is renewed in the log.
	s2 := New()
	g2 := applyH(t, s2, 0, 0, acq("a", "h", 10*sec))[0].Lease
	if _, ok := s2.MemoryRenewal(Ref{Name: "a", Token: g2.Token}, "", sec); ok {
		t.Error("a grant without headroom was renewable from memory")
	}
	// A waiter that asks for a handoff must be told by a renewal in the log.
	apply1(t, s, sec, Op{Type: OpAcquire, Name: "a", Holder: "w", TTL: sec, Wait: true, WaitTimeout: time.Hour, Priority: 5})
	if _, ok := s.MemoryRenewal(ref, "p", 2*sec); ok {
		t.Error("renewable from memory while a waiter asks for a handoff")
	}
}

func TestHeadroomSnapshotVersion(t *testing.T) {
	s := New()
	applyH(t, s, 0, 0, acq("a", "h", 10*sec))
	if v := snapshotVersion(t, s); v >= snapshotV9 {
		t.Fatalf("version %d without headroom, want below 9", v)
	}
	applyH(t, s, 0, 5*sec, acq("b", "h", 10*sec))
	if v := snapshotVersion(t, s); v != snapshotV9 {
		t.Fatalf("version %d with headroom, want 9", v)
	}
	s2, err := ReadSnapshot(bytes.NewReader(snapshotBytes(t, s)))
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := s2.Lease("b"); l.Promised != 10*sec || l.ExpiresAt != 15*sec {
		t.Fatalf("restored %+v, want promised 10s, expires 15s", l)
	}
	old := bytes.Replace(snapshotBytes(t, s), []byte(`"version":9`), []byte(`"version":8`), 1)
	if _, err := ReadSnapshot(bytes.NewReader(old)); err == nil {
		t.Fatal("a version 8 snapshot with headroom was read")
	}
}

// snapshotVersion returns the version of s's snapshot.
func snapshotVersion(t *testing.T, s *State) int {
	t.Helper()
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(snapshotBytes(t, s), &head); err != nil {
		t.Fatal(err)
	}
	return head.Version
}
