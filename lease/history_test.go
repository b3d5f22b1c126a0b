package lease

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// wall0 is the wall clock the tests' leader reads at cluster time 0.
var wall0 = time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC).UnixNano()

// applyWall applies ops at now with the wall clock wall0+now.
func applyWall(t *testing.T, s *State, now time.Duration, ops ...Op) []Result {
	t.Helper()
	res, _ := s.Apply(Batch{Now: now, Wall: wall0 + int64(now), Ops: ops})
	return res
}

func withHistory(t *testing.T, terms int, age time.Duration) *State {
	t.Helper()
	s := New()
	if r := applyWall(t, s, 0, HistoryConfigOp(HistoryRetention{Terms: terms, Age: age})); r[0].Err != nil {
		t.Fatalf("OpHistoryConfig: %v", r[0].Err)
	}
	return s
}

func termsString(ts []Term) string {
	var b bytes.Buffer
	for _, t := range ts {
		fmt.Fprintf(&b, "%s/%d/%s[%s-%s]+%d-%d;", t.Holder, t.Token, t.Ending, t.Start, t.End, t.Accepted, t.Refused)
	}
	return b.String()
}

func TestHistoryRecordsTerms(t *testing.T) {
	s := withHistory(t, 16, time.Hour)
	mustGrant(t, s, 0, "jobs/nightly", "h1", 10*sec) // token 1
	applyWall(t, s, 1*sec, put("k", "v", "jobs/nightly", 1), put("k", "v", "jobs/nightly", 1))
	applyWall(t, s, 2*sec, rel("jobs/nightly", 1))
	applyWall(t, s, 3*sec, put("k", "late", "jobs/nightly", 1)) // refused: released
	applyWall(t, s, 4*sec, acq("jobs/nightly", "h2", 5*sec))    // token 2, expires at 9s
	applyWall(t, s, 20*sec, Op{Type: OpExpire})                 // noticed late
	applyWall(t, s, 21*sec, acq("jobs/nightly", "h3", 10*sec))  // token 3
	applyWall(t, s, 22*sec, Op{Type: OpRevoke, Name: "jobs/nightly", Reason: "stuck"})
	applyWall(t, s, 23*sec, acq("jobs/nightly", "h4", 10*sec), del("k", "jobs/nightly", 4)) // token 4, held

	res := applyWall(t, s, 24*sec, Op{Type: OpHistory, Name: "jobs/nightly"})
	got := res[0].Terms
	want := []Term{
		{Holder: "h1", Token: 1, Start: 0, End: 2 * sec, Ending: EndingReleased, Accepted: 2, Refused: 1},
		{Holder: "h2", Token: 2, Start: 4 * sec, End: 9 * sec, Ending: EndingExpired},
		{Holder: "h3", Token: 3, Start: 21 * sec, End: 22 * sec, Ending: EndingRevoked, Reason: "stuck"},
		{Holder: "h4", Token: 4, Start: 23 * sec, Accepted: 1},
	}
	for i := range want {
		want[i].StartWall = wall0 + int64(want[i].Start)
		if want[i].Ending != EndingNone {
			// An expiry's wall clock is its own time, not that of the
			// batch that noticed it.
			want[i].EndWall = wall0 + int64(want[i].End)
		}
	}
	want[0].StartWall = 0 // granted by mustGrant, a batch without a wall clock
	if !slices.Equal(got, want) {
		t.Fatalf("history:\n got  %+v\n want %+v", got, want)
	}
	if !slices.Equal(s.History("jobs/nightly"), want) {
		t.Fatalf("State.History differs from OpHistory: %+v", s.History("jobs/nightly"))
	}
	if r := applyWall(t, s, 25*sec, Op{Type: OpHistory, Name: "never"}); r[0].Err != nil || len(r[0].Terms) != 0 {
		t.Fatalf("history of a name never granted: %+v", r[0])
	}
}

func TestHistoryOffByDefault(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "a", "h", 10*sec)
	if h := s.History("a"); len(h) != 0 {
		t.Fatalf("a new state kept history before an OpHistoryConfig: %+v", h)
	}
	if b := snapshotBytes(t, s); !bytes.HasPrefix(b, []byte(`{"version":1,`)) {
		t.Fatalf("a state without history wrote %s, want version 1", b)
	}
}

func TestHistoryRetentionByCount(t *testing.T) {
	s := withHistory(t, 3, time.Hour)
	for i := range 10 {
		l := mustGrant(t, s, time.Duration(i)*sec, "a", "h"+strconv.Itoa(i), 10*sec)
		applyWall(t, s, time.Duration(i)*sec, rel("a", l.Token))
	}
	got := s.History("a")
	if len(got) != 3 || got[0].Token != 8 || got[2].Token != 10 {
		t.Fatalf("kept %s, want the last 3 terms (tokens 8 to 10)", termsString(got))
	}
	if n := s.HistoryTerms(); n != 3 {
		t.Fatalf("%d terms in memory, want 3", n)
	}
	// Held terms are never dropped: a semaphore of limit 5 keeps its 5
	// slots beside the 3 ended terms.
	for i := range 5 {
		r := applyWall(t, s, 20*sec, Op{Type: OpAcquire, Name: "a", Holder: "s" + strconv.Itoa(i), TTL: 10 * sec, Limit: 5})
		if r[0].Err != nil {
			t.Fatal(r[0].Err)
		}
	}
	if got := s.History("a"); len(got) != 8 {
		t.Fatalf("kept %s, want 3 ended and 5 held", termsString(got))
	}
}

func TestHistoryRetentionByAge(t *testing.T) {
	s := withHistory(t, 16, time.Minute)
	l := mustGrant(t, s, 0, "gone", "h", 10*sec)
	applyWall(t, s, sec, rel("gone", l.Token))
	mustGrant(t, s, 0, "held", "h", 10*time.Minute)
	// At 60.999s the term ended 59.999s ago: kept.
	if h := s.History("gone"); len(h) != 1 {
		t.Fatalf("history before the age limit: %s", termsString(h))
	}
	// At 61s it ended a minute ago: gone for every purpose at once,
	// though still in memory until a sweep.
	applyWall(t, s, 61*sec, renew(Ref{Name: "held", Token: 2}))
	if h := s.History("gone"); len(h) != 0 {
		t.Fatalf("history past the age limit: %s", termsString(h))
	}
	if b := snapshotBytes(t, s); bytes.Contains(b, []byte(`"name":"gone"`)) {
		t.Fatalf("a snapshot kept a term past the age limit: %s", b)
	}
	// The next OpExpire sweeps it from memory: a name whose lease is
	// gone keeps nothing.
	if at, ok := s.NextHistorySweep(); !ok || at != 61*sec {
		t.Fatalf("NextHistorySweep = %s, %v; want 61s, when the term is gone", at, ok)
	}
	applyWall(t, s, 61*sec, Op{Type: OpExpire})
	if _, ok := s.history.byName["gone"]; ok {
		t.Fatal("the term of a gone name is still in memory after the sweep")
	}
	if h := s.History("held"); len(h) != 1 {
		t.Fatalf("the held term was dropped: %s", termsString(h))
	}
	if at, ok := s.NextHistorySweep(); ok {
		t.Fatalf("NextHistorySweep = %s with no ended term kept", at)
	}
	// A state with held terms only has no sweep to make.
	s2 := withHistory(t, 16, time.Minute)
	mustGrant(t, s2, 0, "a", "h", 10*sec)
	if at, ok := s2.NextHistorySweep(); ok {
		t.Fatalf("NextHistorySweep = %s with only held terms", at)
	}
}

func TestHistoryConfigValidation(t *testing.T) {
	lim := DefaultLimits()
	for _, r := range []HistoryRetention{{-1, time.Hour}, {MaxHistoryTerms + 1, time.Hour}, {1, 0}, {1, MaxHistoryAge + 1}} {
		if err := lim.Validate(HistoryConfigOp(r)); !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalid", r, err)
		}
	}
	if err := lim.Validate(HistoryConfigOp(DefaultHistoryRetention())); err != nil {
		t.Errorf("Validate(default) = %v", err)
	}
	if err := lim.Validate(Op{Type: OpHistory}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Validate(history without a name) = %v", err)
	}
	// Lowering the count drops terms at once; Terms 0 drops them all.
	s := withHistory(t, 16, time.Hour)
	for i := range 5 {
		l := mustGrant(t, s, time.Duration(i)*sec, "a", "h", 10*sec)
		applyWall(t, s, time.Duration(i)*sec, rel("a", l.Token))
	}
	applyWall(t, s, 10*sec, HistoryConfigOp(HistoryRetention{Terms: 2, Age: time.Hour}))
	if h := s.History("a"); len(h) != 2 {
		t.Fatalf("after lowering to 2: %s", termsString(h))
	}
	applyWall(t, s, 10*sec, HistoryConfigOp(HistoryRetention{Terms: 0, Age: time.Hour}))
	if n := s.HistoryTerms(); n != 0 {
		t.Fatalf("after turning history off, %d terms in memory", n)
	}
}

func TestHistorySnapshotRoundTrip(t *testing.T) {
	s := withHistory(t, 4, time.Hour)
	mustGrant(t, s, 0, "a", "h1", 10*sec)
	applyWall(t, s, sec, put("k", "v", "a", 1), rel("a", 1), acq("a", "h2", 10*sec))
	applyWall(t, s, 2*sec, Op{Type: OpRevoke, Name: "a", Reason: "why"})
	b := snapshotBytes(t, s)
	if !bytes.HasPrefix(b, []byte(`{"version":6,`)) {
		t.Fatalf("snapshot with history: %s, want version 6", b)
	}
	r, err := ReadSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if b2 := snapshotBytes(t, r); !bytes.Equal(b, b2) {
		t.Fatalf("read back, the snapshot writes\n%s\nnot\n%s", b2, b)
	}
	if r.HistoryRetention() != (HistoryRetention{Terms: 4, Age: time.Hour}) {
		t.Fatalf("retention after restore: %+v", r.HistoryRetention())
	}
	if !slices.Equal(r.History("a"), s.History("a")) {
		t.Fatalf("history after restore: %s, want %s", termsString(r.History("a")), termsString(s.History("a")))
	}
}

func TestCodecWall(t *testing.T) {
	b := Batch{Now: 5 * sec, Wall: wall0, Ops: []Op{acq("a", "h", sec)}}
	enc := EncodeBatch(b)
	if enc[0] != batchVersionWall {
		t.Fatalf("a batch with a wall clock is version %d", enc[0])
	}
	got, err := DecodeBatch(enc)
	if err != nil || got.Wall != wall0 || got.Now != b.Now || len(got.Ops) != 1 {
		t.Fatalf("DecodeBatch = %+v, %v", got, err)
	}
	// Without a wall clock a batch is version 1, as before the field
	// existed, so old entries and new ones without it are the same bytes.
	b.Wall = 0
	if enc := EncodeBatch(b); enc[0] != batchVersion {
		t.Fatalf("a batch without a wall clock is version %d", enc[0])
	}
	for i := range enc {
		if _, err := DecodeBatch(enc[:i]); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeBatch of %d of %d bytes: %v", i, len(enc), err)
		}
	}
}

// TestHistoryMemoryPerTerm measures the bytes a kept term costs and
// fails above the bound docs/history.md states (200 bytes per term).
func TestHistoryMemoryPerTerm(t *testing.T) {
	const names, perName = 2000, 16
	measure := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	s := withHistory(t, perName, 24*time.Hour)
	// Grant and release every name once before measuring, so the
	// leases' own maps are at their size.
	batch := func(now time.Duration) {
		ops := make([]Op, 0, 2*names)
		for i := range names {
			ops = append(ops, acq("jobs/"+strconv.Itoa(i), "worker-"+strconv.Itoa(i%10), 10*sec))
		}
		res, _ := s.Apply(Batch{Now: now, Wall: wall0 + int64(now), Ops: ops})
		ops = ops[:0]
		for i, r := range res {
			ops = append(ops, rel("jobs/"+strconv.Itoa(i), r.Lease.Token))
		}
		s.Apply(Batch{Now: now, Wall: wall0 + int64(now), Ops: ops})
	}
	batch(0)
	before := measure()
	beforeTerms := s.HistoryTerms()
	for i := 1; i < perName+4; i++ { // past the count: the bound holds
		batch(time.Duration(i) * sec)
	}
	after := measure()
	terms := s.HistoryTerms() - beforeTerms
	if s.HistoryTerms() != names*perName {
		t.Fatalf("%d terms kept, want %d", s.HistoryTerms(), names*perName)
	}
	per := float64(after-before) / float64(terms)
	t.Logf("%.0f bytes per kept term (%d terms)", per, terms)
	if per > 200 {
		t.Fatalf("%.0f bytes per kept term, more than the 200 docs/history.md states", per)
	}
	runtime.KeepAlive(s)
}

// TestHistoryOfHeldLeasesCostsNoMemory checks that a name whose only
// term is the grant it holds costs the history no memory: a million
// leases pay for their grants, not for a copy of each as a term.
func TestHistoryOfHeldLeasesCostsNoMemory(t *testing.T) {
	const names = 20000
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	perLease := func(s *State) float64 {
		ops := make([]Op, names)
		for i := range ops {
			ops[i] = acq("jobs/"+strconv.Itoa(i), "worker-"+strconv.Itoa(i%10), time.Hour)
		}
		before := heap()
		for i, r := range applyWall(t, s, sec, ops...) {
			if r.Err != nil {
				t.Fatalf("acquire %d: %v", i, r.Err)
			}
		}
		after := heap()
		runtime.KeepAlive(ops)
		runtime.KeepAlive(s)
		return float64(after-before) / names
	}
	off := perLease(New())
	on := perLease(withHistory(t, 16, 24*time.Hour))
	t.Logf("bytes per held lease: %.0f without history, %.0f with", off, on)
	if on > off+8 {
		t.Fatalf("with the history a held lease costs %.0f bytes, %.0f more than without", on, on-off)
	}
}

// ---- properties ----

// TestHistoryProperties checks, over random batches, that the history
// keeps exactly what its retention promises: every term still held and,
// of the ended terms, the Terms that ended last (by end, then token), as
// long as they ended less than Age ago; with the right holder, token,
// times, ending and counts of fenced writes; that a snapshot carries it;
// and that memory is bounded: after an OpExpire no term in memory ended
// more than Age plus the sweep interval ago.
func TestHistoryProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		ret := HistoryRetention{
			Terms: rapid.IntRange(0, 4).Draw(t, "terms"),
			Age:   time.Duration(rapid.IntRange(1, 30).Draw(t, "age")) * sec,
		}
		s := New()
		s.Apply(Batch{Ops: []Op{HistoryConfigOp(ret)}})
		all := map[string][]Term{} // every term ever, by name, in grant order
		find := func(name string, token uint64) *Term {
			for i := range all[name] {
				if all[name][i].Token == token {
					return &all[name][i]
				}
			}
			return nil
		}
		now := time.Duration(0)
		steps := rapid.IntRange(1, 80).Draw(t, "batches")
		for range steps {
			now += time.Duration(rapid.IntRange(-2, 8).Draw(t, "dt")) * sec
			var ops []Op
			for range rapid.IntRange(0, 4).Draw(t, "ops") {
				ops = append(ops, drawOp(t, s))
			}
			ops = withWaitDefault(ops, propLimits)
			applied := max(now, s.Now())
			wall := wall0 + int64(applied)
			// One batch per op, all at the same time (the same as one
			// batch of them all), so that a write is counted against
			// the terms opened before it.
			for _, op := range ops {
				res, evs := s.Apply(Batch{Now: now, Wall: wall, Ops: []Op{op}})
				for _, ev := range evs {
					l := ev.Lease
					switch ev.Type {
					case EventGranted:
						all[l.Name] = append(all[l.Name], Term{Holder: l.Holder, Token: l.Token, Principal: l.Principal, Shared: l.Shared,
							Limit: l.Limit, Start: l.GrantedAt, StartWall: wall0 + int64(l.GrantedAt)})
					default:
						tm := find(l.Name, l.Token)
						if tm == nil {
							t.Fatalf("%s of a term never granted: %+v", ev.Type, l)
						}
						tm.End = ev.At
						switch ev.Type {
						case EventReleased:
							tm.Ending = EndingReleased
							if ev.Reason == HandedOff {
								tm.Ending = EndingHandedOff
							}
						case EventExpired:
							tm.Ending, tm.End = EndingExpired, l.ExpiresAt
						case EventRevoked:
							tm.Ending, tm.Reason = EndingRevoked, ev.Reason
						}
						tm.EndWall = wall0 + int64(tm.End)
					}
				}
				if op.Type != OpPut && op.Type != OpDelete {
					continue
				}
				tm := find(op.Name, op.Token)
				if tm == nil {
					continue
				}
				switch err := res[0].Err; {
				case err == nil:
					tm.Accepted++
				case !errors.Is(err, ErrNotFound):
					tm.Refused++
				}
			}
			for _, name := range propNames {
				want := expectedHistory(all[name], ret, s.Now())
				if got := s.History(name); !equalTerms(got, want) {
					t.Fatalf("history of %q at %s:\n got  %s\n want %s", name, s.Now(), termsString(got), termsString(want))
				}
			}
			// Memory: after an OpExpire nothing ended long ago stays.
			if slices.ContainsFunc(ops, func(op Op) bool { return op.Type == OpExpire }) {
				for name, ts := range s.history.byName {
					for _, tm := range ts {
						if tm.Ending != EndingNone && s.Now()-tm.End >= ret.Age+s.history.sweepEvery() {
							t.Fatalf("term %d of %q ended at %s is still in memory at %s, after an OpExpire", tm.Token, name, tm.End, s.Now())
						}
					}
					held := len(s.Slots(name))
					if ended := len(ts) - countHeld(ts); ended > ret.Terms || countHeld(ts) > held {
						t.Fatalf("%q keeps %d ended terms (bound %d) and %d held (grants %d)", name, ended, ret.Terms, countHeld(ts), held)
					}
				}
			}
		}
		// A snapshot carries the history.
		var buf bytes.Buffer
		if err := s.WriteSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		r, err := ReadSnapshot(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("ReadSnapshot: %v\n%s", err, buf.Bytes())
		}
		for _, name := range propNames {
			if !equalTerms(r.History(name), s.History(name)) {
				t.Fatalf("history of %q after a snapshot: %s, want %s", name, termsString(r.History(name)), termsString(s.History(name)))
			}
		}
	})
}

func countHeld(ts []Term) int {
	n := 0
	for _, t := range ts {
		if t.Ending == EndingNone {
			n++
		}
	}
	return n
}

func equalTerms(a, b []Term) bool {
	return len(a) == len(b) && (len(a) == 0 || slices.Equal(a, b))
}

// expectedHistory is what the retention promises of terms, every term of
// a name: the held ones and, of the ended ones not gone at now, the
// ret.Terms that ended last (by end, then token); in grant order.
func expectedHistory(terms []Term, ret HistoryRetention, now time.Duration) []Term {
	if ret.Terms == 0 {
		return nil
	}
	var ended []Term
	for _, tm := range terms {
		if tm.Ending != EndingNone && now-tm.End < ret.Age {
			ended = append(ended, tm)
		}
	}
	slices.SortFunc(ended, func(a, b Term) int { return cmp.Or(cmp.Compare(b.End, a.End), cmp.Compare(b.Token, a.Token)) })
	ended = ended[:min(len(ended), ret.Terms)]
	var out []Term
	for _, tm := range terms {
		if tm.Ending == EndingNone || slices.ContainsFunc(ended, func(e Term) bool { return e.Token == tm.Token }) {
			out = append(out, tm)
		}
	}
	return out
}

// TestHistoryGolden holds the encodings the history added: a batch of
// version 2 (with a wall clock) carrying OpHistoryConfig and OpHistory,
// and a version 6 snapshot. Both must stay readable, byte for byte, by
// every later release.
func TestHistoryGolden(t *testing.T) {
	const batch = "0280a8d6b90780809792f9edf6ed31020e84108080f89492a527100d010161"
	raw, _ := hex.DecodeString(batch)
	b, err := DecodeBatch(raw)
	want := Batch{Now: sec, Wall: wall0, Ops: []Op{HistoryConfigOp(HistoryRetention{Terms: 16, Age: 24 * time.Hour}), {Type: OpHistory, Name: "a"}}}
	if err != nil || b.Now != want.Now || b.Wall != want.Wall || len(b.Ops) != 2 ||
		b.Ops[0].Type != OpHistoryConfig || b.Ops[0].Limit != 16 || b.Ops[0].TTL != 24*time.Hour || b.Ops[1].Type != OpHistory || b.Ops[1].Name != "a" {
		t.Fatalf("DecodeBatch(golden) = %+v, %v", b, err)
	}
	if got := hex.EncodeToString(EncodeBatch(want)); got != batch {
		t.Fatalf("encoding %s, want %s", got, batch)
	}

	const snap = `{"version":6,"now":2000000000,"last_token":2,"revision":1,"leases":null,"queues":null,"kv":[{"key":"k","fence":1,"entry":{"Key":"k","Value":"dg==","Lease":"a","Token":1,"Revision":1}}],"revoked":[{"name":"a","token":2,"reason":"why","until":11000000000}],"history_retention":{"terms":2,"age":3600000000000},"history":[{"name":"a","terms":[{"holder":"h1","token":1,"start":0,"end":1000000000,"start_wall":1796353200000000000,"end_wall":1796353201000000000,"ending":1,"accepted":1},{"holder":"h2","token":2,"start":1000000000,"end":2000000000,"start_wall":1796353201000000000,"end_wall":1796353202000000000,"ending":3,"reason":"why"}]}]}` + "\n"
	s, err := ReadSnapshot(bytes.NewReader([]byte(snap)))
	if err != nil {
		t.Fatal(err)
	}
	if got := snapshotBytes(t, s); string(got) != snap {
		t.Fatalf("the golden version 6 snapshot writes\n%s\nnot\n%s", got, snap)
	}
	h := s.History("a")
	if len(h) != 2 || h[0].Ending != EndingReleased || h[0].Accepted != 1 || h[1].Ending != EndingRevoked || h[1].Reason != "why" {
		t.Fatalf("history of the golden snapshot: %s", termsString(h))
	}
}

// A retention with a shorter age drops, at once, the terms it makes
// gone: the sweep it runs looks at every term, not only at those the
// old age said were due.
func TestHistoryShorterAgeDropsTermsAtOnce(t *testing.T) {
	s := withHistory(t, 16, 24*time.Hour)
	res := applyWall(t, s, sec, acq("jobs/a", "w1", 10*sec))
	applyWall(t, s, sec, rel("jobs/a", res[0].Lease.Token))
	if n := s.HistoryTerms(); n != 1 {
		t.Fatalf("%d terms kept after the release, want 1", n)
	}
	if r := applyWall(t, s, 100*sec, HistoryConfigOp(HistoryRetention{Terms: 16, Age: 10 * sec})); r[0].Err != nil {
		t.Fatal(r[0].Err)
	}
	if n := s.HistoryTerms(); n != 0 {
		t.Fatalf("%d terms in memory after the age went to 10s, 99s after the term ended; want 0", n)
	}
}
