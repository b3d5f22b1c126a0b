package lease

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const sec = time.Second

// apply applies ops as one batch at now and fails the test if the number of
// results is wrong.
func apply(t *testing.T, s *State, now time.Duration, ops ...Op) ([]Result, []Event) {
	t.Helper()
	res, ev := s.Apply(Batch{Now: now, Ops: ops})
	if len(res) != len(ops) {
		t.Fatalf("Apply returned %d results for %d ops", len(res), len(ops))
	}
	return res, ev
}

// apply1 applies one op at now.
func apply1(t *testing.T, s *State, now time.Duration, op Op) (Result, []Event) {
	t.Helper()
	res, ev := apply(t, s, now, op)
	return res[0], ev
}

func acq(name, holder string, ttl time.Duration) Op {
	return Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl}
}

func acqWait(name, holder string, ttl, timeout time.Duration) Op {
	return Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl, Wait: true, WaitTimeout: timeout}
}

func rel(name string, token uint64) Op { return Op{Type: OpRelease, Name: name, Token: token} }

func renew(refs ...Ref) Op { return Op{Type: OpRenew, Refs: refs} }

func put(key, value, lease string, token uint64) Op {
	return Op{Type: OpPut, Key: key, Value: []byte(value), Name: lease, Token: token}
}

func del(key, lease string, token uint64) Op {
	return Op{Type: OpDelete, Key: key, Name: lease, Token: token}
}

// mustGrant acquires name for holder at now and fails unless it is granted.
func mustGrant(t *testing.T, s *State, now time.Duration, name, holder string, ttl time.Duration) Lease {
	t.Helper()
	r, _ := apply1(t, s, now, acq(name, holder, ttl))
	if r.Err != nil {
		t.Fatalf("acquire %s by %s at %s: %v", name, holder, now, r.Err)
	}
	return r.Lease
}

func snapshotBytes(t *testing.T, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.WriteSnapshot(&buf); err != nil {
		t.Fatalf("WriteSnapshot: %v", err)
	}
	return buf.Bytes()
}

func wantEvents(t *testing.T, got []Event, want ...Event) {
	t.Helper()
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("events:\n got  %+v\n want %+v", got, want)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want one wrapping %v", err, target)
	}
}

func TestGrantTokens(t *testing.T) {
	s := New()
	a := mustGrant(t, s, 1*sec, "a", "h1", 10*sec)
	want := Lease{Name: "a", Holder: "h1", Token: 1, TTL: 10 * sec, GrantedAt: 1 * sec, ExpiresAt: 11 * sec}
	if a != want {
		t.Fatalf("first grant = %+v, want %+v", a, want)
	}
	b := mustGrant(t, s, 2*sec, "b", "h1", 5*sec)
	if b.Token != 2 {
		t.Fatalf("second grant token = %d, want 2", b.Token)
	}
	if r, _ := apply1(t, s, 3*sec, rel("a", 1)); r.Err != nil {
		t.Fatal(r.Err)
	}
	r, ev := apply1(t, s, 3*sec, acq("a", "h2", 10*sec))
	if r.Err != nil || r.Lease.Token != 3 {
		t.Fatalf("re-grant after release = %+v, %v; want token 3", r.Lease, r.Err)
	}
	wantEvents(t, ev, Event{Type: EventGranted, Lease: r.Lease, At: 3 * sec})
	if s.LastToken() != 3 {
		t.Fatalf("LastToken = %d, want 3", s.LastToken())
	}
	if got, ok := s.Lease("a"); !ok || got != r.Lease {
		t.Fatalf("Lease(a) = %+v, %v", got, ok)
	}
}

func TestAcquireBySameHolderRenews(t *testing.T) {
	s := New()
	first := mustGrant(t, s, 0, "a", "h1", 10*sec)
	r, ev := apply1(t, s, 4*sec, acq("a", "h1", 20*sec))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	want := Lease{Name: "a", Holder: "h1", Token: first.Token, TTL: 20 * sec, GrantedAt: 0, ExpiresAt: 24 * sec}
	if r.Lease != want {
		t.Fatalf("renewal = %+v, want %+v", r.Lease, want)
	}
	wantEvents(t, ev) // a renewal is not an event
	if s.LastToken() != first.Token {
		t.Fatalf("renewal consumed a token: LastToken = %d", s.LastToken())
	}
	// Still held at 23s (the old expiry of 10s is gone).
	if r, _ := apply1(t, s, 23*sec, acq("a", "h2", 10*sec)); !errors.Is(r.Err, ErrHeld) {
		t.Fatalf("acquire by h2 at 23s: %v, want held", r.Err)
	}
}

func TestAcquireHeldByAnother(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "a", "h1", 10*sec)
	before := snapshotBytes(t, s)
	r, ev := apply1(t, s, 4*sec, acq("a", "h2", 10*sec))
	wantErr(t, r.Err, ErrHeld)
	var held *HeldError
	if !errors.As(r.Err, &held) {
		t.Fatalf("error %T is not a *HeldError", r.Err)
	}
	want := HeldError{Name: "a", Holder: "h1", Token: 1, Remaining: 6 * sec}
	if *held != want {
		t.Fatalf("HeldError = %+v, want %+v", *held, want)
	}
	if r.Queued {
		t.Fatal("queued without Wait")
	}
	if Reason(r.Err) != ReasonLeaseHeld {
		t.Fatalf("Reason = %q", Reason(r.Err))
	}
	if !strings.Contains(r.Err.Error(), `"h1"`) {
		t.Fatalf("message %q does not name the holder", r.Err)
	}
	wantEvents(t, ev)
	// The only change is cluster time.
	after := snapshotBytes(t, s)
	s2, err := ReadSnapshot(bytes.NewReader(before))
	if err != nil {
		t.Fatal(err)
	}
	s2.now = 4 * sec
	if !bytes.Equal(after, snapshotBytes(t, s2)) {
		t.Fatalf("a held acquire changed the state:\n%s\n%s", before, after)
	}
}

func TestExpiredLeaseIsFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   time.Duration
		free bool
	}{
		{"one nanosecond before expiry", 10*sec - 1, false},
		{"at expiry", 10 * sec, true},
		{"after expiry", 30 * sec, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			old := mustGrant(t, s, 0, "a", "h1", 10*sec)
			r, ev := apply1(t, s, tc.at, acq("a", "h2", 5*sec))
			if !tc.free {
				wantErr(t, r.Err, ErrHeld)
				var held *HeldError
				errors.As(r.Err, &held)
				if held.Remaining != 1 {
					t.Fatalf("Remaining = %s, want 1ns", held.Remaining)
				}
				wantEvents(t, ev)
				return
			}
			if r.Err != nil {
				t.Fatalf("acquire at %s: %v", tc.at, r.Err)
			}
			want := Lease{Name: "a", Holder: "h2", Token: 2, TTL: 5 * sec, GrantedAt: tc.at, ExpiresAt: tc.at + 5*sec}
			if r.Lease != want {
				t.Fatalf("grant = %+v, want %+v", r.Lease, want)
			}
			wantEvents(t, ev,
				Event{Type: EventExpired, Lease: old, At: tc.at},
				Event{Type: EventGranted, Lease: want, At: tc.at})
		})
	}
}

func TestRenew(t *testing.T) {
	s := New()
	a := mustGrant(t, s, 0, "a", "h1", 10*sec)
	b := mustGrant(t, s, 0, "b", "h1", 10*sec)
	c := mustGrant(t, s, 0, "c", "h1", 5*sec)
	d := mustGrant(t, s, 0, "d", "h1", 10*sec)
	if r, _ := apply1(t, s, 1*sec, rel("d", d.Token)); r.Err != nil {
		t.Fatal(r.Err)
	}
	refs := []Ref{
		{Name: "a", Token: a.Token},     // ok
		{Name: "b", Token: b.Token + 7}, // wrong token
		{Name: "c", Token: c.Token},     // expired at 5s
		{Name: "d", Token: d.Token},     // released
		{Name: "e", Token: 1},           // never held
		{Name: "a", Token: a.Token},     // the same ref twice is fine
	}
	r, ev := apply1(t, s, 6*sec, renew(refs...))
	if r.Err != nil {
		t.Fatalf("renew: %v", r.Err)
	}
	if len(r.Renewed) != len(refs) {
		t.Fatalf("%d renew results for %d refs", len(r.Renewed), len(refs))
	}
	wantEvents(t, ev, Event{Type: EventExpired, Lease: c, At: 6 * sec})
	renewedA := a
	renewedA.ExpiresAt = 16 * sec
	for i, tc := range []struct {
		name  string
		lease Lease
		err   error
	}{
		{"live", renewedA, nil},
		{"wrong token", Lease{}, ErrStaleToken},
		{"expired", Lease{}, ErrStaleToken},
		{"released", Lease{}, ErrStaleToken},
		{"unknown", Lease{}, ErrStaleToken},
		{"repeated", renewedA, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := r.Renewed[i]
			if got.Ref != refs[i] {
				t.Fatalf("Ref = %+v, want %+v", got.Ref, refs[i])
			}
			if tc.err == nil && got.Err != nil {
				t.Fatalf("error %v", got.Err)
			}
			if tc.err != nil {
				wantErr(t, got.Err, tc.err)
				var stale *StaleError
				if !errors.As(got.Err, &stale) || stale.Name != refs[i].Name || stale.Token != refs[i].Token {
					t.Fatalf("error %#v does not describe the ref", got.Err)
				}
				if Reason(got.Err) != ReasonStaleToken {
					t.Fatalf("Reason = %q", Reason(got.Err))
				}
			}
			if got.Lease != tc.lease {
				t.Fatalf("Lease = %+v, want %+v", got.Lease, tc.lease)
			}
		})
	}
	// The failed refs changed nothing: b keeps its expiry, c and d stay free.
	if l, _ := s.Lease("b"); l != b {
		t.Fatalf("b after a wrong-token renewal = %+v, want %+v", l, b)
	}
	if l, _ := s.Lease("a"); l != renewedA {
		t.Fatalf("a = %+v, want %+v", l, renewedA)
	}
	for _, name := range []string{"c", "d", "e"} {
		if _, ok := s.Lease(name); ok {
			t.Fatalf("%s is held after a failed renewal", name)
		}
	}
}

func TestRelease(t *testing.T) {
	t.Run("frees and emits released", func(t *testing.T) {
		s := New()
		a := mustGrant(t, s, 0, "a", "h1", 10*sec)
		r, ev := apply1(t, s, 3*sec, rel("a", a.Token))
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		wantEvents(t, ev, Event{Type: EventReleased, Lease: a, At: 3 * sec})
		if g, _ := apply1(t, s, 3*sec, Op{Type: OpGet, Name: "a"}); !errors.Is(g.Err, ErrNotFound) {
			t.Fatalf("get after release: %v", g.Err)
		}
		if b := mustGrant(t, s, 3*sec, "a", "h2", 10*sec); b.Token != a.Token+1 {
			t.Fatalf("token after release = %d", b.Token)
		}
	})
	for _, tc := range []struct {
		name  string
		op    Op
		at    time.Duration
		event bool // the lease expired and is freed lazily
	}{
		{"wrong token", rel("a", 2), 3 * sec, false},
		{"unknown name", rel("b", 1), 3 * sec, false},
		{"expired", rel("a", 1), 10 * sec, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			a := mustGrant(t, s, 0, "a", "h1", 10*sec)
			s.Apply(Batch{Now: tc.at}) // move time only
			before := snapshotBytes(t, s)
			r, ev := apply1(t, s, tc.at, tc.op)
			wantErr(t, r.Err, ErrStaleToken)
			if tc.event {
				wantEvents(t, ev, Event{Type: EventExpired, Lease: a, At: tc.at})
				return
			}
			wantEvents(t, ev)
			if after := snapshotBytes(t, s); !bytes.Equal(before, after) {
				t.Fatalf("rejected release changed the state:\n%s\n%s", before, after)
			}
		})
	}
}

func TestOpExpire(t *testing.T) {
	s := New()
	ls := map[string]Lease{}
	for _, g := range []struct {
		name string
		ttl  time.Duration
	}{{"b", 5 * sec}, {"a", 5 * sec}, {"m", 3 * sec}, {"z", 10 * sec}, {"r", 4 * sec}} {
		ls[g.name] = mustGrant(t, s, 0, g.name, "h", g.ttl)
	}
	r, _ := apply1(t, s, 2*sec, renew(Ref{Name: "r", Token: ls["r"].Token}))
	ls["r"] = r.Renewed[0].Lease // expires at 6s now

	_, ev := apply1(t, s, 5*sec, Op{Type: OpExpire})
	wantEvents(t, ev,
		Event{Type: EventExpired, Lease: ls["m"], At: 5 * sec},
		Event{Type: EventExpired, Lease: ls["a"], At: 5 * sec},
		Event{Type: EventExpired, Lease: ls["b"], At: 5 * sec})
	if got := names(s.Leases("")); got != "r z" {
		t.Fatalf("leases left at 5s: %q, want \"r z\"", got)
	}
	// Again at the same time: nothing more to do.
	_, ev = apply1(t, s, 5*sec, Op{Type: OpExpire})
	wantEvents(t, ev)
	// A batch stamped earlier does not go back in time and frees nothing.
	_, ev = apply1(t, s, 1*sec, Op{Type: OpExpire})
	wantEvents(t, ev)
	_, ev = apply1(t, s, 6*sec, Op{Type: OpExpire})
	wantEvents(t, ev, Event{Type: EventExpired, Lease: ls["r"], At: 6 * sec})
	_, ev = apply1(t, s, 100*sec, Op{Type: OpExpire})
	wantEvents(t, ev, Event{Type: EventExpired, Lease: ls["z"], At: 100 * sec})
	if s.Len() != 0 {
		t.Fatalf("Len = %d after expiring everything", s.Len())
	}
	if _, ok := s.NextDeadline(); ok {
		t.Fatal("NextDeadline reports a lease in an empty state")
	}
}

func names(ls []Lease) string {
	var ns []string
	for _, l := range ls {
		ns = append(ns, l.Name)
	}
	return strings.Join(ns, " ")
}

func TestWaitQueue(t *testing.T) {
	// held returns a state where h1 holds "n" (token 1, 0s..10s) and the
	// given holders queued at 1s with a 60s timeout and TTL 7s.
	held := func(t *testing.T, waiters ...string) (*State, Lease) {
		t.Helper()
		s := New()
		l := mustGrant(t, s, 0, "n", "h1", 10*sec)
		for _, w := range waiters {
			r, ev := apply1(t, s, 1*sec, acqWait("n", w, 7*sec, 60*sec))
			wantErr(t, r.Err, ErrHeld)
			var he *HeldError
			if !errors.As(r.Err, &he) || he.Holder != "h1" || he.Token != 1 {
				t.Fatalf("queued acquire error %v", r.Err)
			}
			if !r.Queued {
				t.Fatalf("%s not queued", w)
			}
			wantEvents(t, ev)
		}
		if got := strings.Join(s.Waiters("n"), " "); got != strings.Join(waiters, " ") {
			t.Fatalf("Waiters = %q, want %q", got, waiters)
		}
		return s, l
	}
	grantOf := func(holder string, token uint64, at time.Duration) Lease {
		return Lease{Name: "n", Holder: holder, Token: token, TTL: 7 * sec, GrantedAt: at, ExpiresAt: at + 7*sec}
	}

	t.Run("release grants the first waiter", func(t *testing.T) {
		s, l := held(t, "h2", "h3")
		_, ev := apply1(t, s, 3*sec, rel("n", l.Token))
		wantEvents(t, ev,
			Event{Type: EventReleased, Lease: l, At: 3 * sec},
			Event{Type: EventGranted, Lease: grantOf("h2", 2, 3*sec), At: 3 * sec})
		if got := s.Waiters("n"); !reflect.DeepEqual(got, []string{"h3"}) {
			t.Fatalf("Waiters = %q", got)
		}
		// Next in line on the next release.
		_, ev = apply1(t, s, 4*sec, rel("n", 2))
		wantEvents(t, ev,
			Event{Type: EventReleased, Lease: grantOf("h2", 2, 3*sec), At: 4 * sec},
			Event{Type: EventGranted, Lease: grantOf("h3", 3, 4*sec), At: 4 * sec})
		if got := s.Waiters("n"); len(got) != 0 {
			t.Fatalf("Waiters = %q, want none", got)
		}
	})
	t.Run("OpExpire grants the first waiter", func(t *testing.T) {
		s, l := held(t, "h2", "h3")
		if d, ok := s.NextDeadline(); !ok || d != 10*sec {
			t.Fatalf("NextDeadline = %s, %v", d, ok)
		}
		_, ev := apply1(t, s, 12*sec, Op{Type: OpExpire})
		wantEvents(t, ev,
			Event{Type: EventExpired, Lease: l, At: 12 * sec},
			Event{Type: EventGranted, Lease: grantOf("h2", 2, 12*sec), At: 12 * sec})
		if d, ok := s.NextDeadline(); !ok || d != 19*sec {
			t.Fatalf("NextDeadline after the grant = %s, %v; want 19s", d, ok)
		}
	})
	t.Run("a command finding the lease expired grants the first waiter", func(t *testing.T) {
		s, l := held(t, "h2", "h3")
		r, ev := apply1(t, s, 10*sec, acq("n", "h4", 5*sec))
		var he *HeldError
		if !errors.As(r.Err, &he) || he.Holder != "h2" || he.Token != 2 {
			t.Fatalf("acquire by a newcomer after expiry: %v; want held by h2", r.Err)
		}
		wantEvents(t, ev,
			Event{Type: EventExpired, Lease: l, At: 10 * sec},
			Event{Type: EventGranted, Lease: grantOf("h2", 2, 10*sec), At: 10 * sec})
	})
	t.Run("a waiter whose deadline passed is skipped", func(t *testing.T) {
		s := New()
		l := mustGrant(t, s, 0, "n", "h1", 100*sec)
		apply(t, s, 1*sec,
			acqWait("n", "h2", 7*sec, 5*sec), // gives up at 6s
			acqWait("n", "h3", 7*sec, 60*sec))
		_, ev := apply1(t, s, 6*sec, rel("n", l.Token))
		wantEvents(t, ev,
			Event{Type: EventReleased, Lease: l, At: 6 * sec},
			Event{Type: EventGranted, Lease: grantOf("h3", 2, 6*sec), At: 6 * sec})
		if got := s.Waiters("n"); len(got) != 0 {
			t.Fatalf("Waiters = %q, want none", got)
		}
	})
	t.Run("a queue of ghosts leaves the lease free", func(t *testing.T) {
		s := New()
		l := mustGrant(t, s, 0, "n", "h1", 10*sec)
		apply1(t, s, 1*sec, acqWait("n", "h2", 7*sec, 2*sec))
		_, ev := apply1(t, s, 10*sec, Op{Type: OpExpire})
		wantEvents(t, ev, Event{Type: EventExpired, Lease: l, At: 10 * sec})
		if s.Len() != 0 || len(s.Waiters("n")) != 0 || len(s.queues) != 0 {
			t.Fatalf("state after expiry with only ghosts: %d leases, queues %v", s.Len(), s.queues)
		}
	})
	t.Run("a retried wait keeps its place and its new deadline", func(t *testing.T) {
		s := New()
		l := mustGrant(t, s, 0, "n", "h1", 100*sec)
		apply(t, s, 1*sec,
			acqWait("n", "h2", 7*sec, 5*sec), // deadline 6s
			acqWait("n", "h3", 7*sec, 60*sec))
		r, _ := apply1(t, s, 4*sec, acqWait("n", "h2", 7*sec, 5*sec)) // deadline 9s
		if !r.Queued {
			t.Fatal("retried wait not queued")
		}
		if got := s.Waiters("n"); !reflect.DeepEqual(got, []string{"h2", "h3"}) {
			t.Fatalf("Waiters after retry = %q, want [h2 h3]", got)
		}
		_, ev := apply1(t, s, 8*sec, rel("n", l.Token))
		wantEvents(t, ev,
			Event{Type: EventReleased, Lease: l, At: 8 * sec},
			Event{Type: EventGranted, Lease: grantOf("h2", 2, 8*sec), At: 8 * sec})
	})
	t.Run("OpCancelWait removes the waiter", func(t *testing.T) {
		s, l := held(t, "h2", "h3")
		r, ev := apply1(t, s, 2*sec, Op{Type: OpCancelWait, Name: "n", Holder: "h2"})
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		wantEvents(t, ev)
		if got := s.Waiters("n"); !reflect.DeepEqual(got, []string{"h3"}) {
			t.Fatalf("Waiters = %q, want [h3]", got)
		}
		// Cancelling someone who is not queued is a no-op.
		before := snapshotBytes(t, s)
		apply1(t, s, 2*sec, Op{Type: OpCancelWait, Name: "n", Holder: "nobody"})
		apply1(t, s, 2*sec, Op{Type: OpCancelWait, Name: "other", Holder: "h3"})
		if !bytes.Equal(before, snapshotBytes(t, s)) {
			t.Fatal("cancelling an absent waiter changed the state")
		}
		_, ev = apply1(t, s, 3*sec, rel("n", l.Token))
		wantEvents(t, ev,
			Event{Type: EventReleased, Lease: l, At: 3 * sec},
			Event{Type: EventGranted, Lease: grantOf("h3", 2, 3*sec), At: 3 * sec})
	})
	t.Run("the holder's acquire with wait is a renewal and does not queue", func(t *testing.T) {
		s, l := held(t, "h2")
		r, _ := apply1(t, s, 5*sec, acqWait("n", "h1", 10*sec, 60*sec))
		if r.Err != nil || r.Queued || r.Lease.Token != l.Token || r.Lease.ExpiresAt != 15*sec {
			t.Fatalf("holder's wait = %+v", r)
		}
		if got := s.Waiters("n"); !reflect.DeepEqual(got, []string{"h2"}) {
			t.Fatalf("Waiters = %q, want [h2]", got)
		}
	})
	t.Run("re-acquire by the holder removes its waiter entry", func(t *testing.T) {
		// Operations never leave a holder in its own queue, but a state
		// restored from a snapshot may; the renewal must clean it up.
		s, l := held(t, "h2", "h3")
		s.queues["n"] = append([]waiter{{Holder: "h1", TTL: 7 * sec, Deadline: 60 * sec}}, s.queues["n"]...)
		r, _ := apply1(t, s, 5*sec, acq("n", "h1", 10*sec))
		if r.Err != nil || r.Lease.Token != l.Token {
			t.Fatalf("renewal = %+v", r)
		}
		if got := s.Waiters("n"); !reflect.DeepEqual(got, []string{"h2", "h3"}) {
			t.Fatalf("Waiters = %q, want [h2 h3]", got)
		}
	})
	t.Run("waiters are in the snapshot", func(t *testing.T) {
		s, l := held(t, "h2", "h3")
		s2, err := ReadSnapshot(bytes.NewReader(snapshotBytes(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		_, ev := apply1(t, s2, 3*sec, rel("n", l.Token))
		wantEvents(t, ev,
			Event{Type: EventReleased, Lease: l, At: 3 * sec},
			Event{Type: EventGranted, Lease: grantOf("h2", 2, 3*sec), At: 3 * sec})
	})
}

func TestGetList(t *testing.T) {
	s := New()
	ls := map[string]Lease{}
	for _, n := range []string{"b", "app/b", "apple", "app/a"} {
		ls[n] = mustGrant(t, s, 0, n, "h", 10*sec)
	}
	ls["app/c"] = mustGrant(t, s, 0, "app/c", "h", 3*sec)

	r, _ := apply1(t, s, 1*sec, Op{Type: OpGet, Name: "app/a"})
	if r.Err != nil || r.Lease != ls["app/a"] {
		t.Fatalf("get = %+v, %v", r.Lease, r.Err)
	}
	r, _ = apply1(t, s, 1*sec, Op{Type: OpGet, Name: "nope"})
	wantErr(t, r.Err, ErrNotFound)
	if Reason(r.Err) != ReasonNotFound {
		t.Fatalf("Reason = %q", Reason(r.Err))
	}

	for _, tc := range []struct{ prefix, want string }{
		{"app/", "app/a app/b app/c"},
		{"app", "app/a app/b app/c apple"},
		{"", "app/a app/b app/c apple b"},
		{"x", ""},
	} {
		t.Run("list "+tc.prefix+" at 1s", func(t *testing.T) {
			r, _ := apply1(t, s, 1*sec, Op{Type: OpList, Prefix: tc.prefix})
			if got := names(r.Leases); r.Err != nil || got != tc.want {
				t.Fatalf("list %q = %q, %v; want %q", tc.prefix, got, r.Err, tc.want)
			}
		})
	}
	// app/c expired at 3s: excluded and freed.
	r, ev := apply1(t, s, 3*sec, Op{Type: OpList, Prefix: "app/"})
	if got := names(r.Leases); got != "app/a app/b" {
		t.Fatalf("list at 3s = %q", got)
	}
	if r.Leases[0] != ls["app/a"] {
		t.Fatalf("listed %+v, want %+v", r.Leases[0], ls["app/a"])
	}
	wantEvents(t, ev, Event{Type: EventExpired, Lease: ls["app/c"], At: 3 * sec})
	r, _ = apply1(t, s, 10*sec, Op{Type: OpGet, Name: "b"})
	wantErr(t, r.Err, ErrNotFound)
}

func TestFencedKV(t *testing.T) {
	// setup: a (h1, token 1, 0s..100s) and b (h2, token 2, 0s..10s).
	setup := func(t *testing.T) *State {
		t.Helper()
		s := New()
		mustGrant(t, s, 0, "a", "h1", 100*sec)
		mustGrant(t, s, 0, "b", "h2", 10*sec)
		return s
	}
	kvGet := func(t *testing.T, s *State, key string) Result {
		t.Helper()
		r, _ := apply1(t, s, s.Now(), Op{Type: OpKVGet, Key: key})
		return r
	}

	t.Run("put with the current grant and get", func(t *testing.T) {
		s := setup(t)
		r, _ := apply1(t, s, 1*sec, put("k", "v1", "b", 2))
		if r.Err != nil || r.Revision != 1 {
			t.Fatalf("put = %+v", r)
		}
		g := kvGet(t, s, "k")
		want := Entry{Key: "k", Value: []byte("v1"), Lease: "b", Token: 2, Revision: 1}
		if g.Err != nil || !reflect.DeepEqual(g.Entry, want) {
			t.Fatalf("get = %+v, %v; want %+v", g.Entry, g.Err, want)
		}
		// The returned value is a copy.
		g.Entry.Value[0] = 'X'
		if g2 := kvGet(t, s, "k"); string(g2.Entry.Value) != "v1" {
			t.Fatalf("stored value changed through a result: %q", g2.Entry.Value)
		}
		if g := kvGet(t, s, "missing"); !errors.Is(g.Err, ErrNotFound) {
			t.Fatalf("get of a missing key: %v", g.Err)
		}
	})
	t.Run("the put value is copied", func(t *testing.T) {
		s := setup(t)
		v := []byte("abc")
		apply1(t, s, 1*sec, Op{Type: OpPut, Key: "k", Value: v, Name: "a", Token: 1})
		v[0] = 'X'
		if g := kvGet(t, s, "k"); string(g.Entry.Value) != "abc" {
			t.Fatalf("stored value aliases the op: %q", g.Entry.Value)
		}
	})

	rejected := []struct {
		name  string
		prep  []Op // applied at 1s, must succeed
		at    time.Duration
		write Op
	}{
		{"stale token after re-grant", []Op{rel("b", 2), acq("b", "h3", 10*sec)}, 2 * sec, put("k", "v", "b", 2)},
		{"expired lease", nil, 10 * sec, put("k", "v", "b", 2)},
		{"expired lease, delete", []Op{put("k", "v", "b", 2)}, 10 * sec, del("k", "b", 2)},
		{"foreign lease token", nil, 2 * sec, put("k", "v", "b", 1)},
		{"foreign lease name", nil, 2 * sec, put("k", "v", "nope", 1)},
		{"released lease", []Op{rel("b", 2)}, 2 * sec, put("k", "v", "b", 2)},
		{"lower than the key's token, though a current grant", []Op{put("k", "v", "b", 2)}, 2 * sec, put("k", "w", "a", 1)},
		{"lower than the key's token, delete", []Op{put("k", "v", "b", 2)}, 2 * sec, del("k", "a", 1)},
		{"deleted key keeps its fence", []Op{put("k", "v", "b", 2), del("k", "b", 2)}, 2 * sec, put("k", "w", "a", 1)},
		{"delete of a missing key", nil, 2 * sec, del("k", "b", 2)},
	}
	for _, tc := range rejected {
		t.Run("rejected: "+tc.name, func(t *testing.T) {
			s := setup(t)
			res, _ := apply(t, s, 1*sec, tc.prep...)
			for i, r := range res {
				if r.Err != nil {
					t.Fatalf("prep op %d: %v", i, r.Err)
				}
			}
			s.Apply(Batch{Now: tc.at})
			// Free what expired first, so that the comparison below sees
			// only what the write does.
			s.Apply(Batch{Now: tc.at, Ops: []Op{{Type: OpExpire}}})
			before := snapshotBytes(t, s)
			rev := s.Revision()
			r, ev := apply1(t, s, tc.at, tc.write)
			if r.Err == nil {
				t.Fatalf("write accepted: %+v", r)
			}
			if tc.name == "delete of a missing key" {
				wantErr(t, r.Err, ErrNotFound)
			} else {
				wantErr(t, r.Err, ErrStaleToken)
			}
			if r.Revision != 0 || s.Revision() != rev {
				t.Fatalf("revision moved: result %d, state %d -> %d", r.Revision, rev, s.Revision())
			}
			wantEvents(t, ev)
			if after := snapshotBytes(t, s); !bytes.Equal(before, after) {
				t.Fatalf("rejected write changed the state:\n%s\n%s", before, after)
			}
		})
	}

	t.Run("delete keeps the fence", func(t *testing.T) {
		s := setup(t)
		res, _ := apply(t, s, 1*sec, put("k", "v", "a", 1), del("k", "b", 2))
		if res[0].Err != nil || res[1].Err != nil {
			t.Fatalf("put, delete: %v, %v", res[0].Err, res[1].Err)
		}
		if g := kvGet(t, s, "k"); !errors.Is(g.Err, ErrNotFound) {
			t.Fatalf("get after delete: %+v", g)
		}
		if r, _ := apply1(t, s, 1*sec, put("k", "zombie", "a", 1)); !errors.Is(r.Err, ErrStaleToken) {
			t.Fatalf("put with a lower token after delete: %v", r.Err)
		}
		if g := kvGet(t, s, "k"); !errors.Is(g.Err, ErrNotFound) {
			t.Fatalf("deleted key came back: %+v", g.Entry)
		}
		// The fence survives a snapshot.
		s2, err := ReadSnapshot(bytes.NewReader(snapshotBytes(t, s)))
		if err != nil {
			t.Fatal(err)
		}
		if r, _ := apply1(t, s2, 1*sec, put("k", "zombie", "a", 1)); !errors.Is(r.Err, ErrStaleToken) {
			t.Fatalf("put with a lower token after delete and restore: %v", r.Err)
		}
		// The same token (or higher) may write again.
		if r, _ := apply1(t, s, 1*sec, put("k", "v2", "b", 2)); r.Err != nil {
			t.Fatalf("put with the fence's own token: %v", r.Err)
		}
	})
	t.Run("revision grows by one per accepted write", func(t *testing.T) {
		s := setup(t)
		ops := []Op{
			put("k1", "1", "a", 1), // 1
			put("k1", "x", "b", 1), // rejected
			put("k2", "2", "b", 2), // 2
			put("k1", "3", "b", 2), // 3
			del("k2", "b", 2),      // 4
			del("k2", "b", 2),      // not found
			put("k1", "x", "a", 1), // rejected: lower than 2
			put("k2", "5", "b", 2), // 5
		}
		want := []uint64{1, 0, 2, 3, 4, 0, 0, 5}
		res, _ := apply(t, s, 1*sec, ops...)
		for i, r := range res {
			if r.Revision != want[i] || (want[i] == 0) == (r.Err == nil) {
				t.Fatalf("op %d: revision %d, err %v; want revision %d", i, r.Revision, r.Err, want[i])
			}
		}
		if s.Revision() != 5 {
			t.Fatalf("Revision = %d", s.Revision())
		}
		for _, tc := range []struct {
			key   string
			want  Entry
			token uint64
		}{
			{"k1", Entry{Key: "k1", Value: []byte("3"), Lease: "b", Token: 2, Revision: 3}, 2},
			{"k2", Entry{Key: "k2", Value: []byte("5"), Lease: "b", Token: 2, Revision: 5}, 2},
		} {
			if g := kvGet(t, s, tc.key); g.Err != nil || !reflect.DeepEqual(g.Entry, tc.want) {
				t.Fatalf("get %s = %+v, %v; want %+v", tc.key, g.Entry, g.Err, tc.want)
			}
		}
	})
	t.Run("a higher token of another lease may overwrite", func(t *testing.T) {
		s := setup(t)
		apply1(t, s, 1*sec, put("k", "v", "a", 1))
		if r, _ := apply1(t, s, 1*sec, put("k", "w", "b", 2)); r.Err != nil {
			t.Fatalf("put with a higher token: %v", r.Err)
		}
	})
}

func TestClusterTimeNeverGoesBack(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "short", "h", 8*sec)
	apply(t, s, 10*sec)
	res, ev := apply(t, s, 5*sec, acq("a", "h1", 10*sec), Op{Type: OpGet, Name: "short"})
	if s.Now() != 10*sec {
		t.Fatalf("Now = %s after a batch stamped 5s, want 10s", s.Now())
	}
	if res[0].Now != 10*sec || res[0].Lease.GrantedAt != 10*sec || res[0].Lease.ExpiresAt != 20*sec {
		t.Fatalf("grant in a late batch = %+v", res[0])
	}
	// The lease that expired at 8s stays expired.
	wantErr(t, res[1].Err, ErrNotFound)
	for _, e := range ev {
		if e.At != 10*sec {
			t.Fatalf("event %+v stamped with a time before the cluster time", e)
		}
	}
	apply(t, s, 12*sec)
	if s.Now() != 12*sec {
		t.Fatalf("Now = %s, want 12s", s.Now())
	}
}

func TestUnknownOp(t *testing.T) {
	s := New()
	r, ev := apply1(t, s, 0, Op{Type: 99})
	wantErr(t, r.Err, ErrInvalid)
	wantEvents(t, ev)
	if OpType(99).String() != "unknown" || OpAcquire.String() != "acquire" {
		t.Fatal("OpType.String")
	}
	if EventType(9).String() != "unknown" || EventExpired.String() != "expired" {
		t.Fatal("EventType.String")
	}
}

func TestValidate(t *testing.T) {
	lim := DefaultLimits()
	long := func(n int) string { return strings.Repeat("x", n) }
	acquire := acq("name", "holder", 10*sec)
	with := func(f func(*Op)) Op {
		op := acquire
		f(&op)
		return op
	}
	for _, tc := range []struct {
		name  string
		op    Op
		field string // a word the error must contain; "" means valid
	}{
		{"acquire", acquire, ""},
		{"acquire with wait", with(func(o *Op) { o.Wait, o.WaitTimeout = true, lim.MaxWait }), ""},
		{"acquire with wait, no timeout", with(func(o *Op) { o.Wait = true }), ""},
		{"acquire with the longest name and holder", acq(long(256), long(128), lim.MaxTTL), ""},
		{"acquire with the shortest ttl", acq("n", "h", lim.MinTTL), ""},
		{"unicode name", acq("résumé/日本", "h ü", 10*sec), ""},
		{"empty name", with(func(o *Op) { o.Name = "" }), "name"},
		{"oversized name", with(func(o *Op) { o.Name = long(257) }), "name"},
		{"non-UTF-8 name", with(func(o *Op) { o.Name = "a\xffb" }), "name"},
		{"unprintable name", with(func(o *Op) { o.Name = "a\nb" }), "name"},
		{"NUL in name", with(func(o *Op) { o.Name = "a\x00" }), "name"},
		{"empty holder", with(func(o *Op) { o.Holder = "" }), "holder"},
		{"oversized holder", with(func(o *Op) { o.Holder = long(129) }), "holder"},
		{"non-UTF-8 holder", with(func(o *Op) { o.Holder = "\xc3" }), "holder"},
		{"unprintable holder", with(func(o *Op) { o.Holder = "h\u200b" }), "holder"},
		{"ttl 0", with(func(o *Op) { o.TTL = 0 }), "ttl"},
		{"negative ttl", with(func(o *Op) { o.TTL = -sec }), "ttl"},
		{"ttl below MinTTL", with(func(o *Op) { o.TTL = lim.MinTTL - 1 }), "ttl"},
		{"ttl above MaxTTL", with(func(o *Op) { o.TTL = lim.MaxTTL + 1 }), "ttl"},
		{"wait_timeout above MaxWait", with(func(o *Op) { o.Wait, o.WaitTimeout = true, lim.MaxWait+1 }), "wait_timeout"},
		{"negative wait_timeout", with(func(o *Op) { o.Wait, o.WaitTimeout = true, -1 }), "wait_timeout"},
		{"wait_timeout without wait", with(func(o *Op) { o.WaitTimeout = sec }), "wait_timeout"},

		{"renew", renew(Ref{Name: "a", Token: 1}, Ref{Name: "b", Token: 2}), ""},
		{"empty renew", renew(), "renew"},
		{"renew with token 0", renew(Ref{Name: "a", Token: 1}, Ref{Name: "b", Token: 0}), "token"},
		{"renew with an empty name", renew(Ref{Name: "", Token: 1}), "name"},
		{"renew with too many refs", renew(make([]Ref, lim.MaxRenew+1)...), "renewal"},

		{"release", rel("a", 1), ""},
		{"release with token 0", rel("a", 0), "token"},
		{"release with an empty name", rel("", 1), "name"},

		{"get", Op{Type: OpGet, Name: "a"}, ""},
		{"get with an unprintable name", Op{Type: OpGet, Name: "\x7f"}, "name"},
		{"list", Op{Type: OpList, Prefix: "a/"}, ""},
		{"list everything", Op{Type: OpList}, ""},
		{"list with an oversized prefix", Op{Type: OpList, Prefix: long(257)}, "prefix"},

		{"put", put("k", "v", "a", 1), ""},
		{"put of the largest value", Op{Type: OpPut, Key: "k", Value: make([]byte, lim.MaxValueLen), Name: "a", Token: 1}, ""},
		{"put of an empty value", Op{Type: OpPut, Key: "k", Name: "a", Token: 1}, ""},
		{"put of a value over MaxValueLen", Op{Type: OpPut, Key: "k", Value: make([]byte, lim.MaxValueLen+1), Name: "a", Token: 1}, "value"},
		{"put with token 0", put("k", "v", "a", 0), "token"},
		{"put with an empty key", put("", "v", "a", 1), "key"},
		{"put with an oversized key", put(long(257), "v", "a", 1), "key"},
		{"put with an empty lease", put("k", "v", "", 1), "lease"},
		{"delete", del("k", "a", 1), ""},
		{"delete with token 0", del("k", "a", 0), "token"},
		{"delete with a non-UTF-8 key", del("\xff", "a", 1), "key"},
		{"kv get", Op{Type: OpKVGet, Key: "k"}, ""},
		{"kv get with an empty key", Op{Type: OpKVGet}, "key"},
		{"cancel wait", Op{Type: OpCancelWait, Name: "a", Holder: "h"}, ""},
		{"cancel wait without a holder", Op{Type: OpCancelWait, Name: "a"}, "holder"},
		{"cancel wait without a name", Op{Type: OpCancelWait, Holder: "h"}, "name"},
		{"expire", Op{Type: OpExpire}, ""},
		{"unknown type", Op{Type: 0}, "unknown"},
		{"unknown type 16", Op{Type: 16, Name: "a"}, "unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lim.Validate(tc.op)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("valid op rejected: %v", err)
				}
				return
			}
			wantErr(t, err, ErrInvalid)
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not mention %q", err, tc.field)
			}
			if Reason(err) != "" {
				t.Fatalf("Reason(%v) = %q, want none", err, Reason(err))
			}
		})
	}
}

func TestNextDeadline(t *testing.T) {
	s := New()
	if _, ok := s.NextDeadline(); ok {
		t.Fatal("NextDeadline on an empty state")
	}
	want := func(d time.Duration) {
		t.Helper()
		got, ok := s.NextDeadline()
		if !ok || got != d {
			t.Fatalf("NextDeadline = %s, %v; want %s", got, ok, d)
		}
	}
	a := mustGrant(t, s, 0, "a", "h", 10*sec)
	b := mustGrant(t, s, 0, "b", "h", 20*sec)
	want(10 * sec)
	apply1(t, s, 5*sec, renew(Ref{Name: "a", Token: a.Token})) // a: 15s
	want(15 * sec)
	apply1(t, s, 12*sec, renew(Ref{Name: "a", Token: a.Token})) // a: 22s, b: 20s
	want(20 * sec)
	apply1(t, s, 13*sec, acq("b", "h", 30*sec)) // b: 43s
	want(22 * sec)
	apply1(t, s, 14*sec, acq("a", "h", 2*sec)) // a shortened to 16s
	want(16 * sec)
	apply1(t, s, 14*sec, rel("a", a.Token))
	want(43 * sec)
	apply1(t, s, 14*sec, renew(Ref{Name: "b", Token: b.Token + 1})) // rejected: no change
	want(43 * sec)
	// Stale entries were dropped along the way.
	if len(s.expiries) > 2 {
		t.Fatalf("%d heap entries left for one lease", len(s.expiries))
	}
	apply1(t, s, 14*sec, rel("b", b.Token))
	if _, ok := s.NextDeadline(); ok {
		t.Fatal("NextDeadline after releasing everything")
	}
	// A lease that expired but was not freed yet is still reported: the
	// expirer must propose OpExpire for it.
	mustGrant(t, s, 20*sec, "c", "h", 5*sec)
	apply(t, s, 40*sec)
	want(25 * sec)
}

// TestExpiryHeapStaysBounded renews one lease many times without ever
// calling NextDeadline or OpExpire, as a Manager does.
func TestExpiryHeapStaysBounded(t *testing.T) {
	s := New()
	l := mustGrant(t, s, 0, "a", "h", 10*sec)
	mustGrant(t, s, 0, "b", "h", 24*time.Hour)
	for i := 1; i <= 10000; i++ {
		now := time.Duration(i) * time.Millisecond
		if i%2 == 0 {
			now -= time.Millisecond // same cluster time twice in a row
		}
		r, _ := apply1(t, s, now, renew(Ref{Name: "a", Token: l.Token}))
		if r.Renewed[0].Err != nil {
			t.Fatal(r.Renewed[0].Err)
		}
	}
	if n := len(s.expiries); n > 100 {
		t.Fatalf("expiry heap holds %d entries for 2 leases", n)
	}
	if d, ok := s.NextDeadline(); !ok || d != 10*sec+9999*time.Millisecond {
		t.Fatalf("NextDeadline = %s, %v", d, ok)
	}
}

func TestReadSnapshotRejects(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "a", "h", 10*sec)
	good := string(snapshotBytes(t, s))
	for _, tc := range []struct{ name, data string }{
		{"empty", ""},
		{"not JSON", "nope"},
		{"truncated", good[:len(good)/2]},
		{"future version", strings.Replace(good, `"version":1`, `"version":99`, 1)},
		{"history in version 5", strings.Replace(strings.Replace(good, `"version":1`, `"version":5`, 1), `"kv":null}`, `"kv":null,"history":[{"name":"a","terms":[{"holder":"h","token":1,"start":0}]}]}`, 1)},
		{"history token above last token", strings.Replace(strings.Replace(good, `"version":1`, `"version":6`, 1), `"kv":null}`, `"kv":null,"history":[{"name":"a","terms":[{"holder":"h","token":2,"start":0}]}]}`, 1)},
		{"history out of order", strings.Replace(strings.Replace(strings.Replace(good, `"version":1`, `"version":6`, 1), `"last_token":1`, `"last_token":3`, 1), `"kv":null}`, `"kv":null,"history":[{"name":"a","terms":[{"holder":"h","token":3,"start":0},{"holder":"h","token":2,"start":0}]}]}`, 1)},
		{"history unknown ending", strings.Replace(strings.Replace(good, `"version":1`, `"version":6`, 1), `"kv":null}`, `"kv":null,"history":[{"name":"a","terms":[{"holder":"h","token":1,"start":0,"ending":9}]}]}`, 1)},
		{"history bad retention", strings.Replace(strings.Replace(good, `"version":1`, `"version":6`, 1), `"kv":null}`, `"kv":null,"history_retention":{"terms":-1,"age":1000000000}}`, 1)},
		{"lock-delay in version 4", strings.Replace(strings.Replace(good, `"version":1`, `"version":4`, 1), `"ExpiresAt":10000000000}`, `"ExpiresAt":10000000000,"LockDelay":5}`, 1)},
		{"delays in version 4", strings.Replace(strings.Replace(good, `"version":1`, `"version":4`, 1), `"kv":null}`, `"kv":null,"delays":[{"name":"a","until":5,"ended":1,"holder":"h","token":1}]}`, 1)},
		{"tombstones in version 4", strings.Replace(strings.Replace(good, `"version":1`, `"version":4`, 1), `"kv":null}`, `"kv":null,"revoked":[{"name":"a","token":1,"reason":"r","until":5}]}`, 1)},
		{"tombstone above last token", strings.Replace(strings.Replace(good, `"version":1`, `"version":5`, 1), `"kv":null}`, `"kv":null,"revoked":[{"name":"b","token":2,"reason":"r","until":5}]}`, 1)},
		{"two delays of a name", strings.Replace(strings.Replace(good, `"version":1`, `"version":5`, 1), `"kv":null}`, `"kv":null,"delays":[{"name":"a","until":5,"ended":1,"holder":"h","token":1},{"name":"a","until":6,"ended":1,"holder":"h","token":1}]}`, 1)},
		{"sessions in version 3", strings.Replace(strings.Replace(good, `"version":1`, `"version":3`, 1), `"kv":null}`, `"kv":null,"sessions":[{"id":"s","floor":0,"last_used":0,"results":null}]}`, 1)},
		{"principal in version 2", strings.Replace(strings.Replace(good, `"version":1`, `"version":2`, 1), `"ExpiresAt":10000000000}`, `"ExpiresAt":10000000000,"Principal":"p"}`, 1)},
		{"limit in version 1", strings.Replace(good, `"ExpiresAt":10000000000}`, `"ExpiresAt":10000000000,"Limit":2}`, 1)},
		{"limit 1 in version 2", strings.Replace(strings.Replace(good, `"version":1`, `"version":2`, 1), `"ExpiresAt":10000000000}`, `"ExpiresAt":10000000000,"Limit":1}`, 1)},
		{"two plain grants of a name", strings.Replace(good, `}],"queues"`, `},{"Name":"a","Holder":"g","Token":1,"TTL":1,"GrantedAt":0,"ExpiresAt":1}],"queues"`, 1)},
		{"no version", strings.Replace(good, `"version":1,`, ``, 1)},
		{"token above last token", strings.Replace(good, `"last_token":1`, `"last_token":0`, 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.data == good {
				t.Fatal("the corruption did not change the snapshot")
			}
			if _, err := ReadSnapshot(strings.NewReader(tc.data)); err == nil {
				t.Fatalf("ReadSnapshot accepted %q", tc.data)
			}
		})
	}
	if _, err := ReadSnapshot(strings.NewReader(good)); err != nil {
		t.Fatalf("ReadSnapshot of a good snapshot: %v", err)
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "a", "h1", 10*sec)
	mustGrant(t, s, 0, "b", "h2", 30*sec)
	apply(t, s, 1*sec,
		acqWait("a", "h3", 5*sec, 60*sec),
		acqWait("a", "h4", 6*sec, 60*sec),
		put("k1", "v1", "a", 1),
		put("k2", "", "b", 2),
		put("k3", "v3", "b", 2),
		del("k3", "b", 2))
	data := snapshotBytes(t, s)
	s2, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, s2); !bytes.Equal(data, again) {
		t.Fatalf("snapshot of a restored state differs:\n%s\n%s", data, again)
	}
	if s2.Now() != s.Now() || s2.LastToken() != s.LastToken() || s2.Revision() != s.Revision() || s2.Len() != s.Len() {
		t.Fatal("counters differ after restore")
	}
	// Both go on identically, including the fence of the deleted k3.
	ops := []Op{
		put("k3", "x", "a", 1),
		Op{Type: OpExpire},
		Op{Type: OpKVGet, Key: "k1"},
		Op{Type: OpKVGet, Key: "k2"},
		Op{Type: OpList},
	}
	r1, e1 := apply(t, s, 11*sec, ops...)
	r2, e2 := apply(t, s2, 11*sec, ops...)
	if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(e1, e2) {
		t.Fatalf("restored state diverged:\n%+v %+v\n%+v %+v", r1, e1, r2, e2)
	}
	if len(e1) != 2 || e1[1].Lease.Holder != "h3" {
		t.Fatalf("events after restore: %+v", e1)
	}
	if !errors.Is(r1[0].Err, ErrStaleToken) {
		t.Fatalf("put to a deleted key with a lower token after restore: %v", r1[0].Err)
	}
}

// fakeClock is a Clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time          { return c.t }
func (c *fakeClock) Advance(d time.Duration) { c.t = c.t.Add(d) }

func TestManager(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1700000000, 0)}
	m := NewManager(clock, DefaultLimits())

	a, err := m.Acquire("a", "h1", 10*sec)
	if err != nil || a.Token != 1 || a.GrantedAt != 0 {
		t.Fatalf("Acquire = %+v, %v", a, err)
	}
	clock.Advance(4 * sec)
	if _, err := m.Acquire("a", "h2", 10*sec); !errors.Is(err, ErrHeld) {
		t.Fatalf("second holder: %v", err)
	}
	if l, err := m.Renew("a", a.Token); err != nil || l.ExpiresAt != 14*sec {
		t.Fatalf("Renew = %+v, %v", l, err)
	}
	if _, err := m.Renew("a", 99); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("Renew with a wrong token: %v", err)
	}
	if l, err := m.Get("a"); err != nil || l.Holder != "h1" {
		t.Fatalf("Get = %+v, %v", l, err)
	}
	if ls, err := m.List(""); err != nil || len(ls) != 1 {
		t.Fatalf("List = %+v, %v", ls, err)
	}
	rev, err := m.Put("k", []byte("v"), "a", a.Token)
	if err != nil || rev != 1 {
		t.Fatalf("Put = %d, %v", rev, err)
	}
	if e, err := m.KVGet("k"); err != nil || string(e.Value) != "v" || e.Token != a.Token {
		t.Fatalf("KVGet = %+v, %v", e, err)
	}
	if rev, err := m.Delete("k", "a", a.Token); err != nil || rev != 2 {
		t.Fatalf("Delete = %d, %v", rev, err)
	}
	// Invalid input is rejected before anything is applied.
	if _, err := m.Acquire("", "h1", 10*sec); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Acquire with an empty name: %v", err)
	}
	if _, _, err := m.Do(acq("b", "h1", 10*sec), acq("c", "h1", 0)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Do with an invalid op: %v", err)
	}
	if _, err := m.Get("b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the valid op of a rejected Do was applied: %v", err)
	}

	clock.Advance(10 * sec) // 14s: a expires
	b, err := m.Acquire("a", "h2", 10*sec)
	if err != nil || b.Token <= a.Token || b.GrantedAt != 14*sec {
		t.Fatalf("Acquire after expiry = %+v, %v", b, err)
	}
	if err := m.Release("a", a.Token); !errors.Is(err, ErrStaleToken) {
		t.Fatalf("Release by the old holder: %v", err)
	}
	if err := m.Release("a", b.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	// A clock that steps back does not move cluster time back.
	clock.Advance(-5 * sec)
	c, err := m.Acquire("a", "h3", 10*sec)
	if err != nil || c.GrantedAt != 14*sec {
		t.Fatalf("Acquire with the clock stepped back = %+v, %v", c, err)
	}
}

// TestManagerWaitWithoutTimeout: Limits documents that a wait with no
// timeout waits MaxWait, so the waiter must still be granted later.
func TestManagerWaitWithoutTimeout(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1700000000, 0)}
	m := NewManager(clock, DefaultLimits())
	a, err := m.Acquire("a", "h1", 10*sec)
	if err != nil {
		t.Fatal(err)
	}
	wait := acqWait("a", "h2", 10*sec, 0)
	res, _, err := m.Do(wait)
	if err != nil || !res[0].Queued {
		t.Fatalf("wait = %+v, %v", res, err)
	}
	clock.Advance(sec)
	res, ev, err := m.Do(rel("a", a.Token))
	if err != nil || res[0].Err != nil {
		t.Fatalf("release: %v, %v", err, res[0].Err)
	}
	if len(ev) != 2 || ev[1].Type != EventGranted || ev[1].Lease.Holder != "h2" {
		t.Fatalf("events on release = %+v, want a grant to the waiter", ev)
	}
	// A waiter that asked for no timeout is dropped after MaxWait.
	m.Do(acqWait("a", "h3", 10*sec, 0))
	clock.Advance(DefaultLimits().MaxWait + sec)
	if _, ev, _ := m.Do(Op{Type: OpExpire}); len(ev) != 1 || ev[0].Type != EventExpired {
		t.Fatalf("events after MaxWait = %+v, want only the expiry", ev)
	}
	if wait.WaitTimeout != 0 {
		t.Fatal("Do changed the caller's op")
	}
}

func TestNewManagerNilClock(t *testing.T) {
	m := NewManager(nil, DefaultLimits())
	if _, ok := m.clock.(SystemClock); !ok {
		t.Fatalf("clock = %T, want SystemClock", m.clock)
	}
	if l, err := m.Acquire("a", "h", time.Hour); err != nil || l.Token != 1 {
		t.Fatalf("Acquire = %+v, %v", l, err)
	}
}

func TestErrorMessages(t *testing.T) {
	held := &HeldError{Name: "a", Holder: "h1", Token: 3, Remaining: 2 * sec}
	if got := held.Error(); got != `lease: "a" held by "h1" (token 3, 2s remaining)` {
		t.Fatalf("HeldError = %q", got)
	}
	stale := &StaleError{Name: "a", Token: 3, Detail: "why"}
	if got := stale.Error(); got != `lease: stale token 3 for "a": why` {
		t.Fatalf("StaleError = %q", got)
	}
	if Reason(errors.New("other")) != "" || Reason(nil) != "" {
		t.Fatal("Reason of an unrelated error")
	}
}

// A waiter whose retry comes as a plain try (its wait ran out) leaves the
// queue: a later release must not grant it a lease it was told is held.
func TestPlainTryLeavesQueue(t *testing.T) {
	s := New()
	ttl := 10 * time.Second
	apply := func(now time.Duration, op Op) Result {
		t.Helper()
		res, _ := s.Apply(Batch{Now: now, Ops: []Op{op}})
		return res[0]
	}
	a := apply(0, Op{Type: OpAcquire, Name: "x", Holder: "a", TTL: ttl})
	if r := apply(1, Op{Type: OpAcquire, Name: "x", Holder: "b", TTL: ttl, Wait: true, WaitTimeout: time.Minute}); !r.Queued {
		t.Fatalf("waiting acquire by b: %+v, want queued", r)
	}
	if r := apply(2, Op{Type: OpAcquire, Name: "x", Holder: "b", TTL: ttl}); !errors.Is(r.Err, ErrHeld) || r.Queued {
		t.Fatalf("plain try by b: %+v, want held and not queued", r)
	}
	if w := s.Waiters("x"); len(w) != 0 {
		t.Fatalf("waiters after b's plain try: %v, want none", w)
	}
	if r := apply(3, Op{Type: OpRelease, Name: "x", Token: a.Lease.Token}); r.Err != nil {
		t.Fatal(r.Err)
	}
	if l, ok := s.Lease("x"); ok {
		t.Fatalf("release granted x to %q, which had stopped waiting", l.Holder)
	}
}

// TestSnapshotV1Golden reads a snapshot written by the first format
// (testdata/snapshot-v1.json): nodes keep such snapshots on disk, so it
// must restore the same state forever.
func TestSnapshotV1Golden(t *testing.T) {
	data, err := os.ReadFile("testdata/snapshot-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if s.Now() != 2*sec || s.LastToken() != 2 || s.Revision() != 3 {
		t.Fatalf("now %s, last token %d, revision %d; want 2s, 2, 3", s.Now(), s.LastToken(), s.Revision())
	}
	want := Lease{Name: "a", Holder: "h1", Token: 1, TTL: 10 * sec, GrantedAt: sec, ExpiresAt: 11 * sec}
	if l, ok := s.Lease("a"); !ok || l != want {
		t.Fatalf("Lease(a) = %+v, %v; want %+v", l, ok, want)
	}
	if w := s.Waiters("a"); !slices.Equal(w, []string{"h2"}) {
		t.Fatalf("Waiters(a) = %q, want [h2]", w)
	}
	// The fence of the deleted key k2 is kept: token 1 may not write it.
	r, _ := apply1(t, s, 2*sec, put("k2", "x", "a", 1))
	wantErr(t, r.Err, ErrStaleToken)
	r, _ = apply1(t, s, 2*sec, Op{Type: OpKVGet, Key: "k1"})
	if r.Err != nil || string(r.Entry.Value) != "v1" || r.Entry.Token != 1 {
		t.Fatalf("k1 = %+v, %v", r.Entry, r.Err)
	}
	// The queued h2 gets a once a is released, with the next token.
	r, _ = apply1(t, s, 3*sec, rel("a", 1))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	if l, ok := s.Lease("a"); !ok || l.Holder != "h2" || l.Token != 3 {
		t.Fatalf("Lease(a) after release = %+v, %v; want h2 with token 3", l, ok)
	}
}

func TestRenewWithTTL(t *testing.T) {
	s := New()
	a := mustGrant(t, s, 0, "a", "h1", 10*sec)
	r, _ := apply1(t, s, 2*sec, renew(Ref{Name: "a", Token: a.Token, TTL: 30 * sec}))
	want := a
	want.TTL, want.ExpiresAt = 30*sec, 32*sec
	if got := r.Renewed[0]; got.Err != nil || got.Lease != want {
		t.Fatalf("renew with ttl 30s = %+v, %v; want %+v", got.Lease, got.Err, want)
	}
	// Later renewals keep the new TTL.
	r, _ = apply1(t, s, 5*sec, renew(Ref{Name: "a", Token: a.Token}))
	want.ExpiresAt = 35 * sec
	if got := r.Renewed[0]; got.Err != nil || got.Lease != want {
		t.Fatalf("plain renew = %+v, %v; want %+v", got.Lease, got.Err, want)
	}
	// A stale ref changes nothing, TTL included.
	r, _ = apply1(t, s, 6*sec, renew(Ref{Name: "a", Token: a.Token + 1, TTL: 3 * sec}))
	wantErr(t, r.Renewed[0].Err, ErrStaleToken)
	if l, _ := s.Lease("a"); l != want {
		t.Fatalf("a after a stale renewal = %+v, want %+v", l, want)
	}
	// The TTL is bounded like an acquire's.
	lim := DefaultLimits()
	for _, ttl := range []time.Duration{-sec, sec, 25 * time.Hour} {
		if err := lim.Validate(renew(Ref{Name: "a", Token: 1, TTL: ttl})); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "ttl") {
			t.Errorf("Validate(renew with ttl %s) = %v, want an invalid ttl", ttl, err)
		}
	}
	if err := lim.Validate(renew(Ref{Name: "a", Token: 1, TTL: 2 * sec})); err != nil {
		t.Errorf("Validate(renew with ttl 2s) = %v", err)
	}
}

func TestKVList(t *testing.T) {
	s := New()
	a := mustGrant(t, s, 0, "a", "h1", 10*sec)
	apply(t, s, sec,
		put("reports/b", "2", "a", a.Token), put("reports/a", "1", "a", a.Token),
		put("other", "x", "a", a.Token), put("reports/c", "3", "a", a.Token),
		del("reports/c", "a", a.Token))
	r, _ := apply1(t, s, sec, Op{Type: OpKVList, Prefix: "reports/"})
	if r.Err != nil || len(r.Entries) != 2 || r.Entries[0].Key != "reports/a" || string(r.Entries[1].Value) != "2" || r.Entries[1].Revision != 1 {
		t.Fatalf("kv list reports/ = %+v, %v; want reports/a and reports/b", r.Entries, r.Err)
	}
	r, _ = apply1(t, s, sec, Op{Type: OpKVList})
	if len(r.Entries) != 3 {
		t.Fatalf("kv list = %+v, want 3 keys", r.Entries)
	}
	r.Entries[0].Value[0] = 'X' // results are copies
	if r, _ := apply1(t, s, sec, Op{Type: OpKVGet, Key: "other"}); string(r.Entry.Value) != "x" {
		t.Fatalf("the list shares memory with the store: %q", r.Entry.Value)
	}
	if err := DefaultLimits().Validate(Op{Type: OpKVList, Prefix: strings.Repeat("p", 257)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Validate(long prefix) = %v", err)
	}
}

func TestQueues(t *testing.T) {
	s := New()
	s.Apply(Batch{Now: time.Second, Ops: []Op{
		{Type: OpAcquire, Name: "a/x", Holder: "h1", TTL: time.Minute},
		{Type: OpAcquire, Name: "a/x", Holder: "h2", TTL: time.Minute, Wait: true, WaitTimeout: time.Minute},
		{Type: OpAcquire, Name: "a/x", Holder: "h3", TTL: time.Minute, Wait: true, WaitTimeout: time.Minute},
		{Type: OpAcquire, Name: "b", Holder: "h1", TTL: time.Minute},
		{Type: OpAcquire, Name: "b", Holder: "h4", TTL: time.Minute, Wait: true, WaitTimeout: time.Minute},
	}})
	if got := s.Queues("a/"); len(got) != 1 || strings.Join(got["a/x"], ",") != "h2,h3" {
		t.Errorf(`Queues("a/") = %v, want a/x: h2, h3`, got)
	}
	if got := s.Queues(""); len(got) != 2 || strings.Join(got["b"], ",") != "h4" {
		t.Errorf(`Queues("") = %v, want a/x and b`, got)
	}
}
