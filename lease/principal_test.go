package lease

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestPrincipalOwnsItsGrant: a grant acquired by a principal is renewed,
// released and written with only by that principal, whatever the token,
// and a refused op changes nothing.
func TestPrincipalOwnsItsGrant(t *testing.T) {
	s := New()
	a := acq("jobs/x", "h", 10*sec)
	a.Principal = "alice"
	r, _ := apply1(t, s, 0, a)
	if r.Err != nil || r.Lease.Principal != "alice" {
		t.Fatalf("acquire = %+v, %v; want a grant to alice", r.Lease, r.Err)
	}
	tok := r.Lease.Token
	before := snapshotBytes(t, s)
	for _, tc := range []struct {
		name string
		op   Op
	}{
		{"release", rel("jobs/x", tok)},
		{"renew", renew(Ref{Name: "jobs/x", Token: tok})},
		{"put", put("k", "v", "jobs/x", tok)},
		{"delete", del("k", "jobs/x", tok)},
		{"re-acquire as the holder", acq("jobs/x", "h", 20*sec)},
	} {
		for _, p := range []string{"bob", ""} {
			op := tc.op
			op.Principal = p
			r, _ := apply1(t, s, sec, op)
			err := r.Err
			if len(r.Renewed) == 1 {
				err = r.Renewed[0].Err
			}
			if !errors.Is(err, ErrForbidden) {
				t.Errorf("%s by %q: err = %v, want ErrForbidden", tc.name, p, err)
			}
			if err != nil && p == "bob" && !strings.Contains(err.Error(), `"bob"`) {
				t.Errorf("%s: error %q does not name the caller", tc.name, err)
			}
			// Only cluster time may have moved: compare at the same time.
			s2, _ := ReadSnapshot(bytes.NewReader(before))
			s2.now = s.now
			if got, want := snapshotBytes(t, s), snapshotBytes(t, s2); !bytes.Equal(got, want) {
				t.Fatalf("%s by %q changed the state:\n%s\nwant\n%s", tc.name, p, got, want)
			}
		}
	}
	// The owner may.
	for _, op := range []Op{put("k", "v", "jobs/x", tok), renew(Ref{Name: "jobs/x", Token: tok}), rel("jobs/x", tok)} {
		op.Principal = "alice"
		r, _ := apply1(t, s, 2*sec, op)
		if r.Err != nil || (len(r.Renewed) == 1 && r.Renewed[0].Err != nil) {
			t.Fatalf("%s by alice: %+v", op.Type, r)
		}
	}
}

// TestPrincipalQueuedPlace: another principal cannot take over a queued
// holder's place, and a waiter's grant records the waiter's principal.
func TestPrincipalQueuedPlace(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "n", "h1", 10*sec)
	w := acqWait("n", "h2", 10*sec, 60*sec)
	w.Principal = "alice"
	if r, _ := apply1(t, s, 0, w); !r.Queued {
		t.Fatalf("wait not queued: %+v", r)
	}
	steal := acq("n", "h2", 10*sec)
	steal.Principal = "bob"
	if r, _ := apply1(t, s, sec, steal); !errors.Is(r.Err, ErrForbidden) {
		t.Fatalf("plain try by another principal as the queued holder: %v, want ErrForbidden", r.Err)
	}
	if got := s.Waiters("n"); len(got) != 1 {
		t.Fatalf("waiters = %v, want h2 still queued", got)
	}
	r, _ := apply1(t, s, 2*sec, rel("n", 1))
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	l, _ := s.Lease("n")
	if l.Holder != "h2" || l.Principal != "alice" {
		t.Fatalf("granted %+v, want h2 as alice", l)
	}
}

// TestPrincipalSnapshotAndCodec: the principal survives the log and a
// snapshot, and a state without one keeps the old formats.
func TestPrincipalSnapshotAndCodec(t *testing.T) {
	op := acq("n", "h", 10*sec)
	op.Principal = "alice"
	b, err := DecodeBatch(EncodeBatch(Batch{Now: 1, Ops: []Op{op}}))
	if err != nil || b.Ops[0].Principal != "alice" {
		t.Fatalf("decoded %+v, %v", b, err)
	}
	if enc := EncodeBatch(Batch{Ops: []Op{acq("n", "h", sec)}}); bytes.Contains(enc, []byte("alice")) {
		t.Fatal("unexpected")
	}
	s := New()
	mustGrant(t, s, 0, "plain", "h", 10*sec)
	if data := snapshotBytes(t, s); !bytes.Contains(data, []byte(`"version":1`)) || bytes.Contains(data, []byte("Principal")) {
		t.Fatalf("a state without principals wrote %s", data)
	}
	apply1(t, s, 0, op)
	data := snapshotBytes(t, s)
	if !bytes.Contains(data, []byte(`"version":3`)) {
		t.Fatalf("snapshot with a principal: %s, want version 3", data)
	}
	s2, err := ReadSnapshot(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if l, _ := s2.Lease("n"); l.Principal != "alice" {
		t.Fatalf("restored %+v", l)
	}
}
