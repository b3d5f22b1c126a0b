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

	"pgregory.net/rapid"
)

// in gives op the session id, seq and floor.
func in(id string, seq, floor uint64, op Op) Op {
	op.Session, op.Seq, op.Floor = id, seq, floor
	return op
}

// TestRetryAfterExpiryGetsFirstGrant is bug B1c in the state machine: the
// first attempt of an acquire is granted, its answer is lost, the grant
// expires, and the retry must get the first grant back, not a second one.
func TestRetryAfterExpiryGetsFirstGrant(t *testing.T) {
	s := New()
	op := in("s1", 1, 1, acq("a", "h", 5*sec))
	first, _ := apply1(t, s, 0, op)
	if first.Err != nil {
		t.Fatal(first.Err)
	}
	apply1(t, s, 6*sec, Op{Type: OpExpire})
	if _, ok := s.Lease("a"); ok {
		t.Fatal("the grant did not expire")
	}
	retry, ev := apply1(t, s, 7*sec, op)
	if retry.Err != nil || retry.Lease != first.Lease || !retry.Remembered || retry.Now != first.Now {
		t.Fatalf("retry = %+v, want the first grant %+v remembered", retry, first)
	}
	if len(ev) != 0 || s.LastToken() != first.Lease.Token {
		t.Fatalf("retry had an effect: events %v, last token %d", ev, s.LastToken())
	}
	if _, ok := s.Lease("a"); ok {
		t.Fatal("the retry granted the lease again")
	}
}

// TestRetryAfterOtherHolderGetsFirstGrant is bug B1b: the retry found the
// name held by another holder and answered "held" for a call that had
// been granted.
func TestRetryAfterOtherHolderGetsFirstGrant(t *testing.T) {
	s := New()
	op := in("s1", 1, 1, acq("a", "h", 5*sec))
	first, _ := apply1(t, s, 0, op)
	other := mustGrant(t, s, 6*sec, "a", "other", 5*sec)
	retry, _ := apply1(t, s, 7*sec, op)
	if retry.Err != nil || retry.Lease != first.Lease {
		t.Fatalf("retry = %+v, want the first grant %+v", retry, first.Lease)
	}
	if l, _ := s.Lease("a"); l != other {
		t.Fatalf("lease is %+v, want %+v untouched", l, other)
	}
}

func TestRetryHasNoSecondEffect(t *testing.T) {
	s := New()
	l := mustGrant(t, s, 0, "a", "h", 10*sec)
	p := in("s", 1, 1, put("k", "v1", "a", l.Token))
	r1, _ := apply1(t, s, sec, p)
	apply1(t, s, 2*sec, in("s", 2, 1, put("k", "v2", "a", l.Token)))
	r2, _ := apply1(t, s, 3*sec, p)
	if r2.Err != nil || r2.Revision != r1.Revision || !r2.Remembered {
		t.Fatalf("retried put = %+v, want revision %d remembered", r2, r1.Revision)
	}
	if f := s.kv["k"]; string(f.Entry.Value) != "v2" || s.Revision() != 2 {
		t.Fatalf("retried put wrote again: %q at revision %d", f.Entry.Value, s.Revision())
	}

	rl := in("s", 3, 3, rel("a", l.Token))
	if r, _ := apply1(t, s, 4*sec, rl); r.Err != nil {
		t.Fatal(r.Err)
	}
	mustGrant(t, s, 4*sec, "a", "other", 10*sec)
	if r, ev := apply1(t, s, 5*sec, rl); r.Err != nil || len(ev) != 0 {
		t.Fatalf("retried release = %v, events %v; want its first outcome (nil), no event", r.Err, ev)
	}

	// A failed call fails the same way again, even once it would succeed.
	s2 := New()
	h := mustGrant(t, s2, 0, "b", "x", 5*sec)
	try := in("s", 1, 1, acq("b", "y", 5*sec))
	r1, _ = apply1(t, s2, sec, try)
	wantErr(t, r1.Err, ErrHeld)
	r2, _ = apply1(t, s2, 6*sec, try)
	if !reflect.DeepEqual(r2.Err, r1.Err) || !r2.Remembered || s2.LastToken() != h.Token {
		t.Fatalf("retry = %+v, want the first outcome %v and no grant", r2, r1.Err)
	}
}

// TestBelowFloorNotApplied is hole 6: a delayed copy of a call its client
// gave up on lands after a later call of the same client.
func TestBelowFloorNotApplied(t *testing.T) {
	s := New()
	l := mustGrant(t, s, 0, "a", "h", 60*sec)
	old := in("s", 1, 1, put("k", "old", "a", l.Token))
	apply1(t, s, sec, in("s", 2, 2, put("k", "new", "a", l.Token)))
	r, _ := apply1(t, s, 2*sec, old)
	wantErr(t, r.Err, ErrNotApplied)
	if v := s.kv["k"].Entry.Value; string(v) != "new" {
		t.Fatalf("value %q, want the newer write kept", v)
	}
	if Reason(r.Err) != ReasonNotApplied {
		t.Fatalf("reason %q", Reason(r.Err))
	}

	// A short renewal that lands after a longer one.
	apply1(t, s, 3*sec, in("s", 4, 4, renew(Ref{Name: "a", Token: l.Token, TTL: 60 * sec})))
	r, _ = apply1(t, s, 4*sec, in("s", 3, 3, renew(Ref{Name: "a", Token: l.Token, TTL: 5 * sec})))
	wantErr(t, r.Err, ErrNotApplied)
	if g, _ := s.Lease("a"); g.ExpiresAt != 63*sec {
		t.Fatalf("expires at %s, want 63s", g.ExpiresAt)
	}
}

func TestWaitingAcquireRetryGetsGrant(t *testing.T) {
	s := New()
	h := mustGrant(t, s, 0, "a", "h", 5*sec)
	w := in("s", 1, 1, acqWait("a", "w", 5*sec, 60*sec))
	r, _ := apply1(t, s, sec, w)
	if !r.Queued {
		t.Fatalf("not queued: %+v", r)
	}
	// A retry while still queued keeps the place and is queued again.
	if r, _ = apply1(t, s, 2*sec, w); !r.Queued {
		t.Fatalf("retry while queued: %+v", r)
	}
	apply1(t, s, 3*sec, rel("a", h.Token))
	g, ok := s.Lease("a")
	if !ok || g.Holder != "w" {
		t.Fatalf("waiter not granted: %+v", g)
	}
	// The grant expires; a retry on a new leader gets the grant.
	apply1(t, s, 10*sec, Op{Type: OpExpire})
	r, _ = apply1(t, s, 11*sec, w)
	if r.Err != nil || r.Lease != g || r.Queued {
		t.Fatalf("retry = %+v, want the waiter's grant %+v", r, g)
	}
	if s.LastToken() != g.Token {
		t.Fatal("the retry was granted again")
	}
}

func TestSessionValidate(t *testing.T) {
	l := DefaultLimits()
	good := acq("a", "h", 5*sec)
	for _, tc := range []struct {
		name string
		op   Op
		ok   bool
	}{
		{"none", good, true},
		{"session", in("s", 2, 1, good), true},
		{"seq 0", in("s", 0, 0, good), false},
		{"floor above seq", in("s", 1, 2, good), false},
		{"seq without session", in("", 1, 0, good), false},
		{"long session", in(strings.Repeat("s", MaxSessionLen+1), 1, 1, good), false},
		{"longest session", in(strings.Repeat("s", MaxSessionLen), 1, 1, good), true},
		{"session not UTF-8", in("s\xff", 1, 1, good), false},
		{"session unprintable", in("s\n", 1, 1, good), false},
	} {
		if err := l.Validate(tc.op); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

func TestSessionMemoryBounded(t *testing.T) {
	s := New()
	l := mustGrant(t, s, 0, "a", "h", 24*time.Hour)
	// A client that never raises its floor.
	for seq := uint64(1); seq <= 5*MaxSessionResults; seq++ {
		apply1(t, s, sec, in("s", seq, 1, renew(Ref{Name: "a", Token: l.Token})))
	}
	ss := s.sessions[sessionKey{"", "s"}]
	if n := ss.results.len(); n > MaxSessionResults {
		t.Fatalf("%d results kept, cap %d", n, MaxSessionResults)
	}
	// Past the cap the oldest are forgotten: a retry of one is refused.
	r, _ := apply1(t, s, sec, in("s", 1, 1, renew(Ref{Name: "a", Token: l.Token})))
	wantErr(t, r.Err, ErrNotApplied)
	// The newest is still remembered.
	r, _ = apply1(t, s, sec, in("s", 5*MaxSessionResults, 1, renew(Ref{Name: "a", Token: l.Token})))
	if !r.Remembered {
		t.Fatalf("newest result forgotten: %+v", r)
	}

	// A raised floor drops what is below it.
	apply1(t, s, sec, in("s", 5*MaxSessionResults+1, 5*MaxSessionResults+1, renew(Ref{Name: "a", Token: l.Token})))
	if n := ss.results.len(); n != 1 {
		t.Fatalf("%d results kept above the floor, want 1", n)
	}

	// Idle sessions are forgotten after SessionTTL and dropped.
	for i := range 100 {
		apply1(t, s, 2*sec, in(fmt.Sprint("c", i), 1, 1, acq("x", fmt.Sprint("c", i), 5*sec)))
	}
	if s.Sessions() != 101 {
		t.Fatalf("%d sessions, want 101", s.Sessions())
	}
	apply1(t, s, 2*sec+SessionTTL, Op{Type: OpExpire})
	if s.Sessions() != 0 {
		t.Fatalf("%d sessions after SessionTTL idle, want 0", s.Sessions())
	}
}

// TestSessionForgottenAfterTTL: before it is dropped from memory, a
// session idle for SessionTTL is already gone, so when the sweep happens
// never changes an outcome.
func TestSessionForgottenAfterTTL(t *testing.T) {
	for _, sweep := range []bool{false, true} {
		s := New()
		op := in("s", 1, 1, acq("a", "h", 5*sec))
		first, _ := apply1(t, s, 0, op)
		if sweep {
			apply1(t, s, SessionTTL, Op{Type: OpExpire})
		}
		r, _ := apply1(t, s, SessionTTL, op)
		if r.Remembered || r.Lease.Token == first.Lease.Token {
			t.Fatalf("sweep %v: a session idle for SessionTTL answered %+v", sweep, r)
		}
	}
}

func TestSessionSnapshotRoundTrip(t *testing.T) {
	s := New()
	l := mustGrant(t, s, 0, "a", "h", 60*sec)
	ops := []Op{
		in("s", 1, 1, acq("b", "h", 5*sec)),
		in("s", 2, 1, acq("a", "x", 5*sec)),                  // held
		in("s", 3, 1, acqWait("a", "w", 5*sec, 60*sec)),      // queued
		in("s", 4, 1, renew(Ref{Name: "a", Token: l.Token})), // renewed
		in("s", 5, 1, renew(Ref{Name: "a", Token: 99})),      // stale
		in("s", 6, 1, put("k", "v", "a", l.Token)),
		in("s", 7, 1, del("nokey", "a", l.Token)),                                          // not found
		in("s", 8, 1, Op{Type: OpAcquire, Name: "a", Holder: "y", TTL: 5 * sec, Limit: 3}), // invalid
		in("t", 1, 1, Op{Type: OpAcquire, Name: "c", Holder: "p", TTL: 5 * sec, Principal: "alice"}),
		in("t", 1, 1, Op{Type: OpRelease, Name: "c", Token: 3, Principal: "bob"}), // another principal's session
	}
	var first []Result
	for i, op := range ops {
		r, _ := apply1(t, s, time.Duration(i)*sec, op)
		first = append(first, r)
	}
	b := snapshotBytes(t, s)
	if !bytes.Contains(b, []byte(`"version":4`)) || !bytes.Contains(b, []byte(`"sessions":[`)) {
		t.Fatalf("snapshot without sessions: %s", b)
	}
	r, err := ReadSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if b2 := snapshotBytes(t, r); !bytes.Equal(b, b2) {
		t.Fatalf("snapshot changed on a round trip:\n%s\n%s", b, b2)
	}
	for i, op := range ops {
		if op.Wait {
			continue // queued: applied again
		}
		got, _ := apply1(t, r, 20*sec, op)
		want := first[i]
		want.Remembered = true
		if !reflect.DeepEqual(got, want) || got.Err != nil && got.Err.Error() != want.Err.Error() {
			t.Errorf("op %d after restore: got %+v, want %+v", i, got, want)
		}
		if want.Err != nil && Reason(got.Err) != Reason(want.Err) {
			t.Errorf("op %d: reason %q, want %q", i, Reason(got.Err), Reason(want.Err))
		}
	}
	// No sessions: the old format, byte for byte.
	plain := New()
	mustGrant(t, plain, 0, "a", "h", 5*sec)
	apply1(t, plain, 0, in("s", 1, 1, acq("b", "h", 5*sec)))
	apply1(t, plain, SessionTTL+sec, Op{Type: OpGet, Name: "a"})
	if b := snapshotBytes(t, plain); !bytes.Contains(b, []byte(`"version":1`)) || bytes.Contains(b, []byte("sessions")) {
		t.Fatalf("snapshot of a state without live sessions: %s", b)
	}
}

func TestCodecSession(t *testing.T) {
	b := Batch{Now: sec, Ops: []Op{in("sess", 7, 3, acq("a", "h", 5*sec)), acq("b", "h", 5*sec)}}
	got, err := DecodeBatch(EncodeBatch(b))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Fatalf("decoded %+v, want %+v", got, b)
	}
	// An op without a session encodes as before sessions existed.
	if !bytes.Equal(EncodeBatch(Batch{Ops: b.Ops[1:]}), EncodeBatch(Batch{Ops: []Op{acq("b", "h", 5*sec)}})) {
		t.Fatal("encoding changed")
	}
	if _, err := DecodeBatch(append(EncodeBatch(Batch{Ops: b.Ops[:1]}), 0)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("trailing byte: %v", err)
	}
}

// TestPropertySessions drives a State with random ops of one client
// session, retrying earlier calls at random, and a twin State with the
// same ops without a session and without the retries. The two must
// agree on every first result and every event: a retry gets its call's
// first result (or ErrNotApplied below the floor) and changes nothing.
// The State is now and then replaced by its snapshot read back.
func TestPropertySessions(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, twin := New(), New()
		var (
			now   time.Duration
			calls []Op
			first []Result
			floor = uint64(1)
		)
		for range rapid.IntRange(1, 80).Draw(t, "steps") {
			now += time.Duration(rapid.IntRange(0, 3).Draw(t, "advance")) * sec
			if rapid.IntRange(0, 9).Draw(t, "restore") == 0 {
				var buf bytes.Buffer
				if err := s.WriteSnapshot(&buf); err != nil {
					t.Fatal(err)
				}
				r, err := ReadSnapshot(&buf)
				if err != nil {
					t.Fatal(err)
				}
				s = r
			}
			if len(calls) > 0 && rapid.IntRange(0, 2).Draw(t, "retry") == 0 {
				j := rapid.IntRange(0, len(calls)-1).Draw(t, "call")
				op := calls[j]
				if first[j].Queued {
					continue // applied again: not a pure retry
				}
				before := snapshotState(s)
				res, ev := s.Apply(Batch{Now: now, Ops: []Op{op}})
				r := res[0]
				if op.Seq < floor {
					if !errors.Is(r.Err, ErrNotApplied) {
						t.Fatalf("retry of seq %d below floor %d: %+v", op.Seq, floor, r)
					}
				} else {
					want := first[j]
					want.Remembered = true
					if !reflect.DeepEqual(r, want) {
						t.Fatalf("retry of seq %d = %+v, want %+v", op.Seq, r, want)
					}
				}
				if len(ev) != 0 || snapshotState(s) != before {
					t.Fatalf("retry of seq %d had an effect: events %v", op.Seq, ev)
				}
				continue
			}
			op := withWaitDefault([]Op{drawOp(t, s)}, propLimits)[0]
			plain := op
			if sessioned(op.Type) {
				seq := uint64(len(calls) + 1)
				floor = rapid.Uint64Range(floor, seq).Draw(t, "floor")
				op = in("s", seq, floor, op)
			}
			res, ev := s.Apply(Batch{Now: now, Ops: []Op{op}})
			tres, tev := twin.Apply(Batch{Now: now, Ops: []Op{plain}})
			if !reflect.DeepEqual(res, tres) || !reflect.DeepEqual(ev, tev) {
				t.Fatalf("%+v: got %+v %v, the twin %+v %v", op, res, ev, tres, tev)
			}
			if sessioned(op.Type) {
				calls, first = append(calls, op), append(first, res[0])
			}
		}
	})
}

// snapshotState is what a retry must not change: tokens, revision,
// grants and queues.
func snapshotState(s *State) string {
	return fmt.Sprint(s.LastToken(), s.Revision(), s.Leases(""), s.Queues(""))
}

// TestCodecSessionGolden pins the encoding of the session field: flag
// 8192, after every older field, then session, seq and floor.
func TestCodecSessionGolden(t *testing.T) {
	b := Batch{Now: sec, Ops: []Op{in("s", 7, 3, put("k", "v", "a", 2))}}
	const golden = "0180a8d6b90701078946016102016b017601730703"
	got := hex.EncodeToString(EncodeBatch(b))
	if got != golden {
		t.Fatalf("encoding %s, want %s", got, golden)
	}
	raw, _ := hex.DecodeString(golden)
	d, err := DecodeBatch(raw)
	if err != nil || !reflect.DeepEqual(d, b) {
		t.Fatalf("decoded %+v, %v; want %+v", d, err, b)
	}
}

// BenchmarkRenewSession is the cost of a renewal with and without a
// client session: one client, 16 calls in flight.
func BenchmarkRenewSession(b *testing.B) {
	for _, withSession := range []bool{false, true} {
		b.Run(fmt.Sprint("session=", withSession), func(b *testing.B) {
			s := New()
			l := mustGrantB(b, s)
			b.ReportAllocs()
			for i := range b.N {
				op := renew(Ref{Name: "a", Token: l.Token})
				if withSession {
					seq := uint64(i + 1)
					op = in("bench", seq, max(seq, 16)-15, op)
				}
				s.Apply(Batch{Now: sec, Ops: []Op{op}})
			}
		})
	}
}

func mustGrantB(b *testing.B, s *State) Lease {
	res, _ := s.Apply(Batch{Ops: []Op{acq("a", "h", time.Hour)}})
	if res[0].Err != nil {
		b.Fatal(res[0].Err)
	}
	return res[0].Lease
}

// seqResults keeps what a map of results by seq would, through any
// sequence of sets and drops, reusing its slots.
func TestSeqResultsAsAMapDoes(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rs := newSeqResults(rapid.IntRange(0, 4).Draw(t, "hint"))
		want := map[uint64]Result{}
		seq := rapid.Uint64Range(0, 40)
		for range rapid.IntRange(0, 200).Draw(t, "steps") {
			switch s := seq.Draw(t, "seq"); rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				r := Result{Revision: rapid.Uint64().Draw(t, "revision"), Lease: Lease{Name: "n"}}
				rs.set(s, r)
				want[s] = r
			case 1:
				rs.drop(s)
				delete(want, s)
			case 2:
				got, ok := rs.get(s)
				w, wok := want[s]
				if ok != wok || !reflect.DeepEqual(got, w) {
					t.Fatalf("get(%d) = %v, %v; want %v, %v", s, got, ok, w, wok)
				}
			}
			if rs.len() != len(want) || len(rs.slab) != len(want)+len(rs.free) {
				t.Fatalf("%d results in a slab of %d with %d free; want %d", rs.len(), len(rs.slab), len(rs.free), len(want))
			}
		}
		got := map[uint64]Result{}
		for s, r := range rs.all {
			got[s] = r
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("all yields %v, want %v", got, want)
		}
		for _, i := range rs.free {
			if !reflect.DeepEqual(rs.slab[i], Result{}) {
				t.Fatalf("free slot %d still holds %v", i, rs.slab[i])
			}
		}
	})
}
