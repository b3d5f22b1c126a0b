package lease

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func sem(name, holder string, limit int, ttl time.Duration) Op {
	return Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl, Limit: limit}
}

func mustSlot(t *testing.T, s *State, now time.Duration, op Op) Lease {
	t.Helper()
	r, _ := apply1(t, s, now, op)
	if r.Err != nil {
		t.Fatalf("%s %s by %s: %v", op.Type, op.Name, op.Holder, r.Err)
	}
	return r.Lease
}

func TestSemaphoreSlots(t *testing.T) {
	s := New()
	other := mustGrant(t, s, 0, "plain", "h0", 10*sec) // token 1
	var slots []Lease
	for i, h := range []string{"h1", "h2", "h3"} {
		l := mustSlot(t, s, time.Duration(i)*sec, sem("jobs", h, 3, 10*sec))
		if l.Limit != 3 || l.Holder != h {
			t.Fatalf("slot %d = %+v", i, l)
		}
		slots = append(slots, l)
	}
	// Each slot has its own token from the one counter.
	for i, l := range slots {
		if want := other.Token + uint64(i) + 1; l.Token != want {
			t.Fatalf("slot %d token %d, want %d", i, l.Token, want)
		}
	}
	// A fourth holder finds every slot held; it is told about the slot
	// that expires first.
	r, _ := apply1(t, s, 3*sec, sem("jobs", "h4", 3, 10*sec))
	var held *HeldError
	if !errors.As(r.Err, &held) || held.Limit != 3 || held.Holder != "h1" || held.Token != slots[0].Token || held.Remaining != 7*sec {
		t.Fatalf("fourth acquire = %+v, %v; want held with limit 3, h1's slot first", r.Lease, r.Err)
	}
	if !strings.Contains(r.Err.Error(), "all 3 slots held") {
		t.Fatalf("held message %q", r.Err)
	}
	// A holder acquiring again renews its own slot: same token.
	if l := mustSlot(t, s, 3*sec, sem("jobs", "h2", 3, 20*sec)); l.Token != slots[1].Token || l.ExpiresAt != 23*sec {
		t.Fatalf("re-acquire by h2 = %+v, want its slot renewed", l)
	}
	// Get and List show every slot, in the order granted.
	r, _ = apply1(t, s, 3*sec, Op{Type: OpGet, Name: "jobs"})
	if len(r.Leases) != 3 || r.Lease.Token != slots[0].Token || r.Leases[2].Token != slots[2].Token {
		t.Fatalf("get = %+v", r)
	}
	r, _ = apply1(t, s, 3*sec, Op{Type: OpList, Prefix: "jobs"})
	if len(r.Leases) != 3 {
		t.Fatalf("list = %+v", r.Leases)
	}
	if s.Len() != 4 || s.Live() != 4 {
		t.Fatalf("Len %d, Live %d; want 4 grants", s.Len(), s.Live())
	}
}

func TestSemaphoreLimitIsFixed(t *testing.T) {
	s := New()
	mustSlot(t, s, 0, sem("jobs", "h1", 3, 10*sec))
	for _, op := range []Op{sem("jobs", "h2", 2, 10*sec), acq("jobs", "h2", 10*sec), sem("jobs", "h1", 4, 10*sec)} {
		r, ev := apply1(t, s, sec, op)
		if !errors.Is(r.Err, ErrInvalid) || !strings.Contains(r.Err.Error(), `"jobs" is held with limit 3`) || len(ev) != 0 {
			t.Fatalf("acquire with limit %d = %v, %v; want invalid", op.Limit, r.Err, ev)
		}
	}
	// A plain lease takes no limit either.
	mustGrant(t, s, 0, "plain", "h1", 10*sec)
	if r, _ := apply1(t, s, sec, sem("plain", "h2", 2, 10*sec)); !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("semaphore acquire of a plain lease = %v, want invalid", r.Err)
	}
	// Once every slot is free, the next acquire sets the limit again.
	apply1(t, s, 11*sec, Op{Type: OpExpire})
	if l := mustSlot(t, s, 11*sec, sem("jobs", "h2", 2, 10*sec)); l.Limit != 2 {
		t.Fatalf("grant after expiry = %+v, want limit 2", l)
	}
	// Limit 1 is a plain lease.
	if l := mustSlot(t, s, 11*sec, sem("one", "h1", 1, 10*sec)); l.Limit != 0 {
		t.Fatalf("limit 1 grant = %+v, want a plain lease", l)
	}
	if r, _ := apply1(t, s, 11*sec, acq("one", "h2", 10*sec)); !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("plain acquire of a limit-1 lease = %v, want held", r.Err)
	}
}

func TestSemaphoreFIFOWaiters(t *testing.T) {
	s := New()
	a := mustSlot(t, s, 0, sem("jobs", "a", 2, 10*sec))
	b := mustSlot(t, s, 0, sem("jobs", "b", 2, 5*sec))
	for _, h := range []string{"c", "d", "e"} {
		op := sem("jobs", h, 2, 10*sec)
		op.Wait, op.WaitTimeout = true, 30*sec
		if r, _ := apply1(t, s, sec, op); !r.Queued {
			t.Fatalf("%s not queued: %+v", h, r)
		}
	}
	// a releases: c, first in the queue, gets the slot with a new token.
	r, ev := apply1(t, s, 2*sec, rel("jobs", a.Token))
	if r.Err != nil || len(ev) != 2 || ev[0].Type != EventReleased || ev[1].Type != EventGranted ||
		ev[1].Lease.Holder != "c" || ev[1].Lease.Token <= b.Token || ev[1].Lease.Limit != 2 {
		t.Fatalf("release = %v, events %+v; want released then c granted", r.Err, ev)
	}
	c := ev[1].Lease
	// b's slot expires at 5s: d gets it, e still waits.
	_, ev = apply1(t, s, 5*sec, Op{Type: OpExpire})
	if len(ev) != 2 || ev[0].Type != EventExpired || ev[0].Lease.Token != b.Token || ev[1].Lease.Holder != "d" || ev[1].Lease.Token <= c.Token {
		t.Fatalf("expiry events %+v; want b expired then d granted", ev)
	}
	if w := s.Waiters("jobs"); len(w) != 1 || w[0] != "e" {
		t.Fatalf("waiters %q, want [e]", w)
	}
	if n := len(s.Slots("jobs")); n != 2 {
		t.Fatalf("%d slots held, want 2", n)
	}
	// Both slots expire in one batch: e gets one, the other stays free.
	_, ev = apply1(t, s, 20*sec, Op{Type: OpExpire})
	if len(ev) != 3 || ev[2].Type != EventGranted || ev[2].Lease.Holder != "e" {
		t.Fatalf("events %+v; want two expiries and e granted", ev)
	}
}

func TestSemaphoreFencing(t *testing.T) {
	s := New()
	a := mustSlot(t, s, 0, sem("jobs", "a", 2, 10*sec))
	b := mustSlot(t, s, 0, sem("jobs", "b", 2, 10*sec))
	// Each held slot's token writes.
	for _, l := range []Lease{a, b} {
		if r, _ := apply1(t, s, sec, put("k-"+l.Holder, "v", "jobs", l.Token)); r.Err != nil {
			t.Fatalf("put with %s's slot token: %v", l.Holder, r.Err)
		}
	}
	// Keys are ordered across slots too: b's higher token wrote k, so a's
	// lower one may no longer write it.
	apply1(t, s, sec, put("k", "from-b", "jobs", b.Token))
	if r, _ := apply1(t, s, sec, put("k", "from-a", "jobs", a.Token)); !errors.Is(r.Err, ErrStaleToken) {
		t.Fatalf("put below the key's fence = %v, want stale", r.Err)
	}
	// Once a's slot is released its token fences nothing; b still writes.
	apply1(t, s, 2*sec, rel("jobs", a.Token))
	r, _ := apply1(t, s, 2*sec, put("k-a", "late", "jobs", a.Token))
	var stale *StaleError
	if !errors.As(r.Err, &stale) || !strings.Contains(stale.Detail, "no slot held now has this token") {
		t.Fatalf("put with a released slot's token = %v, want stale", r.Err)
	}
	if r, _ := apply1(t, s, 2*sec, put("k-b", "v2", "jobs", b.Token)); r.Err != nil {
		t.Fatalf("put with b's held slot: %v", r.Err)
	}
	// Renew, and a second release of a's slot, see the same rule.
	r, _ = apply1(t, s, 3*sec, renew(Ref{Name: "jobs", Token: b.Token}, Ref{Name: "jobs", Token: a.Token}))
	if r.Renewed[0].Err != nil || r.Renewed[0].Lease.ExpiresAt != 13*sec || !errors.Is(r.Renewed[1].Err, ErrStaleToken) {
		t.Fatalf("renew = %+v", r.Renewed)
	}
	if r, _ := apply1(t, s, 3*sec, rel("jobs", a.Token)); !errors.Is(r.Err, ErrStaleToken) {
		t.Fatalf("second release = %v, want stale", r.Err)
	}
}

func TestSemaphoreSnapshot(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "plain", "h0", 10*sec)
	if data := snapshotBytes(t, s); !bytes.Contains(data, []byte(`"version":1,`)) {
		t.Fatalf("a state without semaphores is written as %s, want version 1", data)
	}
	mustSlot(t, s, 0, sem("jobs", "a", 2, 10*sec))
	mustSlot(t, s, sec, sem("jobs", "b", 2, 10*sec))
	op := sem("jobs", "c", 2, 10*sec)
	op.Wait, op.WaitTimeout = true, 30*sec
	apply1(t, s, sec, op)
	data := snapshotBytes(t, s)
	if !bytes.Contains(data, []byte(`"version":2,`)) || !bytes.Contains(data, []byte(`"Limit":2`)) {
		t.Fatalf("snapshot with a semaphore: %s", data)
	}
	r, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, r); !bytes.Equal(again, data) {
		t.Fatalf("restored snapshot differs:\n%s\n%s", again, data)
	}
	if n := len(r.Slots("jobs")); n != 2 {
		t.Fatalf("restored %d slots, want 2", n)
	}
	// Too many slots for the limit is corrupt.
	bad := strings.Replace(string(data), `"Limit":2},{`, `"Limit":2},{"Name":"jobs","Holder":"x","Token":3,"TTL":1,"GrantedAt":0,"ExpiresAt":99,"Limit":2},{`, 1)
	bad = strings.Replace(bad, `"last_token":3`, `"last_token":4`, 1)
	if _, err := ReadSnapshot(strings.NewReader(bad)); err == nil {
		t.Fatalf("ReadSnapshot accepted three slots of a limit-2 semaphore: %s", bad)
	}
}

func TestValidateLimit(t *testing.T) {
	lim := DefaultLimits()
	for _, tc := range []struct {
		limit int
		ok    bool
	}{{0, true}, {1, true}, {1000, true}, {1001, false}, {-1, false}} {
		err := lim.Validate(sem("jobs", "h", tc.limit, 10*sec))
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "limit") {
			t.Errorf("Validate(limit %d) = %v", tc.limit, err)
		}
	}
}
