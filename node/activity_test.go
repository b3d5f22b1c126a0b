package node

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// wallBase is the wall-clock time of cluster time 0 in these tests.
var wallBase = time.Unix(1700000000, 0)

// applyRecorded applies ops at cluster time now and records the batch, as
// appended at wallBase + now.
func applyRecorded(st *lease.State, a *activityLog, index uint64, now time.Duration, ops ...lease.Op) []lease.Result {
	res, events := st.Apply(lease.Batch{Now: now, Ops: ops})
	a.record(index, wallBase.Add(now), st, ops, res, events)
	return res
}

func TestActivityFencingPicture(t *testing.T) {
	st, a := lease.New(), newActivityLog()
	s := time.Second
	applyRecorded(st, a, 1, 1*s, lease.Op{Type: lease.OpAcquire, Name: "n", Holder: "A", TTL: 2 * s})
	applyRecorded(st, a, 2, 1*s, lease.Op{Type: lease.OpPut, Name: "n", Token: 1, Key: "k", Value: []byte("A-1")})
	applyRecorded(st, a, 3, 2*s, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{{Name: "n", Token: 1}}})
	applyRecorded(st, a, 4, 5*s, lease.Op{Type: lease.OpExpire})
	applyRecorded(st, a, 5, 5*s, lease.Op{Type: lease.OpAcquire, Name: "n", Holder: "B", TTL: 2 * s})
	res := applyRecorded(st, a, 6, 6*s, lease.Op{Type: lease.OpPut, Name: "n", Token: 1, Key: "k", Value: []byte("A-2")})
	if res[0].Err == nil {
		t.Fatal("the stale write was accepted")
	}

	acts, missed := a.since(0, 0)
	if missed != 0 {
		t.Errorf("missed = %d, want 0", missed)
	}
	want := []struct {
		kind  ActivityKind
		token uint64
	}{{ActivityGranted, 1}, {ActivityWriteAccepted, 1}, {ActivityExpired, 1}, {ActivityGranted, 2}, {ActivityWriteRejected, 1}}
	if len(acts) != len(want) {
		t.Fatalf("got %d activities %+v, want %d", len(acts), acts, len(want))
	}
	for i, w := range want {
		if acts[i].Kind != w.kind || acts[i].Token != w.token || acts[i].Seq != uint64(i+1) {
			t.Errorf("activity %d = %v token %d seq %d, want %v token %d", i, acts[i].Kind, acts[i].Token, acts[i].Seq, w.kind, w.token)
		}
	}

	h := a.names["n"]
	if h == nil || len(h.terms) != 2 {
		t.Fatalf("history of n = %+v, want 2 terms", h)
	}
	if t0 := h.terms[0]; t0.Holder != "A" || t0.Token != 1 || t0.Start != 1*s || t0.End != 5*s || t0.Ended != ActivityExpired || t0.Writes != 1 {
		t.Errorf("first term = %+v", t0)
	}
	if t1 := h.terms[1]; t1.Holder != "B" || t1.Token != 2 || t1.Ended != 0 {
		t.Errorf("second term = %+v", t1)
	}
	if len(h.stale) != 1 || h.stale[0].Token != 1 || h.stale[0].Current != 2 || h.stale[0].At != 6*s {
		t.Errorf("stale writes = %+v, want token 1 refused while 2 held at 6s", h.stale)
	}
	if b := a.renewals[2%renewalSeconds]; b.Second != 2*s || b.Count != 1 {
		t.Errorf("renewals at 2s = %+v, want 1", b)
	}

	// Every record carries the wall-clock time of its entry (here the
	// test's base plus the cluster time), for the dashboard to show.
	for _, act := range acts {
		if want := wallBase.Add(act.At); !act.Wall.Equal(want) {
			t.Errorf("activity %d (%v at %v) has wall time %v, want %v", act.Seq, act.Kind, act.At, act.Wall, want)
		}
	}
	if t0 := h.terms[0]; !t0.StartWall.Equal(wallBase.Add(1*s)) || !t0.EndWall.Equal(wallBase.Add(5*s)) {
		t.Errorf("first term's wall times = %v to %v, want %v to %v", t0.StartWall, t0.EndWall, wallBase.Add(1*s), wallBase.Add(5*s))
	}
	if !h.terms[1].EndWall.IsZero() {
		t.Errorf("the held term has an end wall time %v", h.terms[1].EndWall)
	}
	if w := h.stale[0].Wall; !w.Equal(wallBase.Add(6 * s)) {
		t.Errorf("stale write's wall time = %v, want %v", w, wallBase.Add(6*s))
	}
}

func TestActivityBounded(t *testing.T) {
	st, a := lease.New(), newActivityLog()
	const n = activityRingSize + 500
	for i := range n {
		name := "l" + string(rune('a'+i%26)) + time.Duration(i).String()
		applyRecorded(st, a, uint64(i+1), time.Duration(i)*time.Millisecond,
			lease.Op{Type: lease.OpAcquire, Name: name, Holder: "h", TTL: time.Hour})
	}
	acts, missed := a.since(0, 0)
	if len(acts) != activityRingSize || missed != 500 {
		t.Fatalf("kept %d, missed %d; want %d and 500", len(acts), missed, activityRingSize)
	}
	if acts[0].Seq != 501 || acts[len(acts)-1].Seq != n {
		t.Errorf("kept seq %d..%d, want 501..%d", acts[0].Seq, acts[len(acts)-1].Seq, n)
	}
	if len(a.names) > historyNames {
		t.Errorf("%d names have a history, want at most %d", len(a.names), historyNames)
	}
	acts, missed = a.since(n-10, 3)
	if len(acts) != 3 || acts[2].Seq != n || missed != 7 {
		t.Errorf("since(n-10, 3) = %d activities ending at %d, missed %d; want 3 ending at %d, missed 7", len(acts), acts[len(acts)-1].Seq, missed, n)
	}
}

// The renewals are kept one by one too (the last renewalRingSize), with
// each grant's new expiry, for the dashboard's countdowns.
func TestActivityRenewedSince(t *testing.T) {
	st, a := lease.New(), newActivityLog()
	s := time.Second
	applyRecorded(st, a, 1, 1*s, lease.Op{Type: lease.OpAcquire, Name: "jobs/a", Holder: "A", TTL: 10 * s})
	applyRecorded(st, a, 2, 1*s, lease.Op{Type: lease.OpAcquire, Name: "web/b", Holder: "B", TTL: 10 * s})
	_, seq, _ := a.renewedSince(math.MaxUint64, "")
	if seq != 0 {
		t.Fatalf("after grants alone, seq = %d, want 0", seq)
	}
	applyRecorded(st, a, 3, 2*s, lease.Op{Type: lease.OpRenew, Refs: []lease.Ref{{Name: "jobs/a", Token: 1}, {Name: "web/b", Token: 2}}})
	applyRecorded(st, a, 4, 3*s, lease.Op{Type: lease.OpAcquire, Name: "jobs/a", Holder: "A", TTL: 20 * s}) // the holder again: a renewal
	rs, next, complete := a.renewedSince(seq, "jobs/")
	// Without headroom the promise is the expiry.
	want := []Renewal{{Name: "jobs/a", Token: 1, ExpiresAt: 12 * s, Promised: 12 * s}, {Name: "jobs/a", Token: 1, ExpiresAt: 23 * s, Promised: 23 * s}}
	if !complete || next != 3 || len(rs) != len(want) || rs[0] != want[0] || rs[1] != want[1] {
		t.Fatalf("renewedSince(%d, jobs/) = %+v, %d, %v; want %+v, 3, true", seq, rs, next, complete, want)
	}
	if rs, next, _ := a.renewedSince(next, ""); len(rs) != 0 || next != 3 {
		t.Errorf("nothing new: got %+v, next %d", rs, next)
	}
	refs := []lease.Ref{{Name: "web/b", Token: 2}}
	for i := range renewalRingSize + 10 {
		applyRecorded(st, a, uint64(5+i), 4*s, lease.Op{Type: lease.OpRenew, Refs: refs})
	}
	rs, next, complete = a.renewedSince(3, "")
	if complete || len(rs) != renewalRingSize || next != 3+renewalRingSize+10 {
		t.Errorf("after the ring wrapped: %d renewals, next %d, complete %v; want %d, %d, false", len(rs), next, complete, renewalRingSize, 3+renewalRingSize+10)
	}
}

// Recording renewals and accepted writes must not allocate: the apply
// path is hot and nobody may be watching.
func TestActivityRecordDoesNotAllocate(t *testing.T) {
	st, a := lease.New(), newActivityLog()
	applyRecorded(st, a, 1, time.Second, lease.Op{Type: lease.OpAcquire, Name: "n", Holder: "A", TTL: time.Hour})
	ops := []lease.Op{
		{Type: lease.OpPut, Name: "n", Token: 1, Key: "k", Value: []byte("v")},
		{Type: lease.OpRenew, Refs: []lease.Ref{{Name: "n", Token: 1}}},
	}
	res, events := st.Apply(lease.Batch{Now: 2 * time.Second, Ops: ops})
	allocs := testing.AllocsPerRun(100, func() { a.record(2, time.Time{}, st, ops, res, events) })
	if allocs != 0 {
		t.Errorf("record allocated %.1f times per batch, want 0", allocs)
	}
}

// BenchmarkActivityRecord measures what recording adds to applying one
// batch of 64 renewals and one accepted write, with nobody watching.
func BenchmarkActivityRecord(b *testing.B) {
	st, a := lease.New(), newActivityLog()
	var refs []lease.Ref
	for i := range 64 {
		name := "l" + time.Duration(i).String()
		res := applyRecorded(st, a, 1, time.Second, lease.Op{Type: lease.OpAcquire, Name: name, Holder: "h", TTL: time.Hour})
		refs = append(refs, lease.Ref{Name: name, Token: res[0].Lease.Token})
	}
	ops := []lease.Op{{Type: lease.OpRenew, Refs: refs}, {Type: lease.OpPut, Name: refs[0].Name, Token: refs[0].Token, Key: "k"}}
	res, events := st.Apply(lease.Batch{Now: 2 * time.Second, Ops: ops})
	b.ReportAllocs()
	for b.Loop() {
		a.record(2, time.Time{}, st, ops, res, events)
	}
}

// TestActivityRevocationReason: an operator's revocation is an activity
// with its reason, and the term it ended says so, both where the cluster
// keeps no lease history (this node's own record) and from the
// replicated history.
func TestActivityRevocationReason(t *testing.T) {
	s := time.Second
	for _, keep := range []bool{false, true} {
		st, a := lease.New(), newActivityLog()
		if keep {
			applyRecorded(st, a, 1, 0, lease.Op{Type: lease.OpHistoryConfig, Limit: 4, TTL: time.Hour})
		}
		applyRecorded(st, a, 2, 1*s, lease.Op{Type: lease.OpAcquire, Name: "n", Holder: "A", TTL: 10 * s})
		applyRecorded(st, a, 3, 2*s, lease.Op{Type: lease.OpRevoke, Name: "n", Reason: "stuck on a bad disk"})

		acts, _ := a.since(0, 0)
		last := acts[len(acts)-1]
		if last.Kind != ActivityRevoked || last.Token != 1 || last.Holder != "A" || last.Reason != "stuck on a bad disk" {
			t.Errorf("history kept %v: last activity = %+v, want A's token 1 revoked with its reason", keep, last)
		}
		var terms []Term
		if keep {
			for _, tm := range st.History("n") {
				terms = append(terms, termOf(tm))
			}
		} else {
			terms = a.names["n"].terms
		}
		if len(terms) != 1 || terms[0].Ended != ActivityRevoked || terms[0].Reason != "stuck on a bad disk" || terms[0].End != 2*s {
			t.Errorf("history kept %v: terms = %+v, want one revoked at 2s with its reason", keep, terms)
		}
	}
}

// TestActivityHandoff: a handoff is an activity of its own, not a
// release, and ends the term it closes as handed off.
func TestActivityHandoff(t *testing.T) {
	s := time.Second
	st, a := lease.New(), newActivityLog()
	applyRecorded(st, a, 1, 1*s, lease.Op{Type: lease.OpAcquire, Name: "n", Holder: "A", TTL: 10 * s})
	applyRecorded(st, a, 2, 1*s, lease.Op{Type: lease.OpAcquire, Name: "n", Holder: "B", TTL: 10 * s, Wait: true, WaitTimeout: time.Minute})
	res := applyRecorded(st, a, 3, 2*s, lease.Op{Type: lease.OpRelease, Name: "n", Token: 1, Handoff: true, HandoffTo: "B"})
	if res[0].Err != nil {
		t.Fatal(res[0].Err)
	}
	acts, _ := a.since(0, 0)
	var kinds []ActivityKind
	for _, act := range acts {
		kinds = append(kinds, act.Kind)
	}
	if want := []ActivityKind{ActivityGranted, ActivityHandedOff, ActivityGranted}; !slices.Equal(kinds, want) {
		t.Errorf("activities = %v, want %v", kinds, want)
	}
	if terms := a.names["n"].terms; len(terms) != 2 || terms[0].Ended != ActivityHandedOff || terms[0].End != 2*s || terms[1].Holder != "B" || terms[1].Start != 2*s {
		t.Errorf("terms = %+v, want A's handed off at 2s and B's from 2s", terms)
	}
}
