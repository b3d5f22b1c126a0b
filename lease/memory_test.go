package lease

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
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

// grantH applies op, an acquire, at 0 and renews its grant at once in
// the log with headroom h (a new grant has none), and returns the grant.
func grantH(t *testing.T, s *State, h time.Duration, op Op) Lease {
	t.Helper()
	g := applyH(t, s, 0, h, op)[0]
	if g.Err != nil {
		t.Fatal(g.Err)
	}
	r := applyH(t, s, 0, h, Op{Type: OpRenew, Refs: []Ref{{Name: op.Name, Token: g.Lease.Token}}, Principal: op.Principal})[0].Renewed[0]
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.Lease
}

func trimOp(name string, token uint64, at time.Duration) Op {
	return Op{Type: OpTrim, Name: name, Token: token, At: at}
}

func TestHeadroomPromisesTTLAndKeepsLonger(t *testing.T) {
	s := New()
	// A new grant gets no headroom: it ends at its TTL unless renewed.
	if g := applyH(t, s, 0, 30*sec, acq("a", "h", 10*sec))[0]; g.Err != nil || g.Lease.Promised != 0 || g.Lease.ExpiresAt != 10*sec {
		t.Fatalf("grant with headroom: %+v", g)
	}
	// A renewal does: min(TTL, Headroom), 10 s here.
	s = New()
	g := grantH(t, s, 30*sec, acq("a", "h", 10*sec))
	if g.Promised != 10*sec || g.ExpiresAt != 20*sec {
		t.Fatalf("renewal: promised %s, expires %s; want 10s, 20s", g.Promised, g.ExpiresAt)
	}
	if r := g.Remaining(2 * sec); r != 8*sec {
		t.Fatalf("remaining at 2s = %s, want 8s (of the promise, not the expiry)", r)
	}
	// A renewal with a smaller headroom than the TTL gets that.
	r := applyH(t, s, 4*sec, 3*sec, renew(Ref{Name: "a", Token: g.Token}))[0].Renewed[0]
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
		g := grantH(t, s, 10*sec, acq("a", "h", 10*sec))
		applyH(t, s, 0, 10*sec, acqWait("a", "w", 10*sec, time.Hour))
		return s, g
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
	g := grantH(t, s, 10*sec, Op{Type: OpAcquire, Name: "a", Holder: "h", TTL: 10 * sec, Principal: "p"})
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
	grantH(t, s, 5*sec, acq("b", "h", 10*sec))
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

// TestHeadroomNeverBreaksAPromise drives a state the way a leader that
// renews from memory does: grants and renewals in the log with random
// headroom, renewals from memory where MemoryRenewal allows them, trims
// at the last promise the leader knows, releases, expiries and failovers
// (the new leader knows no promise of the old one). However the steps
// fall, no grant ends by expiry before the latest promise made to its
// holder, from the log or from memory, and no renewal from memory is
// allowed for a grant that has ended.
func TestHeadroomNeverBreaksAPromise(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		type key struct {
			name  string
			token uint64
		}
		s := New()
		var now time.Duration
		promise := map[key]time.Duration{} // every promise made, by any leader
		known := map[key]time.Duration{}   // the current leader's
		ended := map[key]bool{}
		// A promise in the log replaces the ones before (an acquire or
		// renewal with a shorter TTL promises less, and the holder goes
		// by the last answer); the leader keeps the latest of all, as
		// the node does.
		note := func(k key, at time.Duration, logged bool) {
			if logged {
				promise[k] = at
			} else {
				promise[k] = max(promise[k], at)
			}
			known[k] = max(known[k], at)
		}
		apply := func(h time.Duration, ops ...Op) []Result {
			res, ev := s.Apply(Batch{Now: now, Headroom: h, Ops: ops})
			for _, e := range ev {
				k := key{e.Lease.Name, e.Lease.Token}
				switch e.Type {
				case EventGranted:
					note(k, e.Lease.Promise(), true)
				case EventExpired:
					if e.Lease.ExpiresAt < promise[k] {
						t.Fatalf("%+v expired at %s, before its promise %s", e.Lease, e.Lease.ExpiresAt, promise[k])
					}
					ended[k] = true
					delete(known, k)
				default:
					ended[k] = true
					delete(known, k)
				}
			}
			for i, r := range res {
				switch ops[i].Type {
				case OpAcquire:
					if r.Err == nil {
						note(key{r.Lease.Name, r.Lease.Token}, r.Lease.Promise(), true)
					}
				case OpRenew:
					for _, rr := range r.Renewed {
						if rr.Err == nil {
							note(key{rr.Lease.Name, rr.Lease.Token}, rr.Lease.Promise(), true)
						}
					}
				}
			}
			return res
		}
		grants := func() []Lease { return s.Leases("") }
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			now += rapid.SampledFrom([]time.Duration{0, 100 * time.Millisecond, 700 * time.Millisecond, sec, 3 * sec}).Draw(t, "tick")
			h := rapid.SampledFrom([]time.Duration{0, sec, 2 * sec, 10 * sec}).Draw(t, "headroom")
			name := rapid.SampledFrom([]string{"a", "b"}).Draw(t, "name")
			holder := rapid.SampledFrom([]string{"h1", "h2", "h3"}).Draw(t, "holder")
			ttl := rapid.SampledFrom([]time.Duration{sec, 2 * sec, 3 * sec}).Draw(t, "ttl")
			held := grants()
			var g Lease
			if len(held) > 0 {
				g = rapid.SampledFrom(held).Draw(t, "grant")
			}
			switch rapid.IntRange(0, 6).Draw(t, "step") {
			case 0:
				apply(h, Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl, Wait: true, WaitTimeout: 20 * sec})
			case 1:
				if g.Token != 0 {
					apply(h, renew(Ref{Name: g.Name, Token: g.Token}))
				}
			case 2:
				if g.Token != 0 {
					if l, ok := s.MemoryRenewal(Ref{Name: g.Name, Token: g.Token}, "", now); ok {
						k := key{l.Name, l.Token}
						if ended[k] {
							t.Fatalf("renewed %+v from memory after it ended", l)
						}
						note(k, now+l.TTL, false)
					}
				}
			case 3:
				// The leader trims what it promised and is past.
				var ops []Op
				for k, at := range known {
					if at <= now {
						ops = append(ops, Op{Type: OpTrim, Name: k.name, Token: k.token, At: at})
					}
				}
				slices.SortFunc(ops, func(x, y Op) int { return cmp.Compare(x.Token, y.Token) })
				if len(ops) > 0 && rapid.Bool().Draw(t, "renewal before the trim") {
					// A renewal in the log that was proposed
					// before the trims and lands first.
					apply(h, renew(Ref{Name: ops[0].Name, Token: ops[0].Token}))
				}
				if len(ops) > 0 {
					apply(h, ops...)
				}
			case 4:
				apply(h, Op{Type: OpExpire})
			case 5:
				if g.Token != 0 {
					apply(h, rel(g.Name, g.Token))
				}
			case 6:
				// A failover: the new leader knows no promise.
				clear(known)
			}
		}
	})
}
