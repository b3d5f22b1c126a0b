package fencetest

import (
	"context"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/fence"
)

// RMW is a guard under the lost update of docs/fencing.md: a store that
// keeps one list of writers, such as "A1;B;", and the guard's calls on
// it. Write is required, and Update or FencedRead.
type RMW struct {
	// Write replaces the list, fenced with l's token.
	Write func(ctx context.Context, l fence.Lease, list string) error
	// Read reads the list without a fence: the bug the scenario shows.
	Read func(ctx context.Context) (string, error)
	// FencedRead reads the list, fenced with l's token.
	FencedRead func(ctx context.Context, l fence.Lease) (string, error)
	// Update, if set, is the guard's read-modify-write: it reads the
	// list, fenced with l's token, calls modify with it right after the
	// read, and writes back what modify returned, fenced. Without it, a
	// read-modify-write is FencedRead, then Write.
	Update func(ctx context.Context, l fence.Lease, modify func(old string) string) error
	// Blocked, if set, reports whether a write waits for a lock the
	// store holds for another writer: A's late write is then started in
	// a goroutine of its own (see StartLate). Without it, writes never
	// wait and A's late write runs where it comes.
	Blocked func() bool
}

// ReadModifyWrite plays the lost update of docs/fencing.md on the guard
// that setup makes, once per subtest, each on a store of its own. A
// (token 1) has written "A1;"; its lease expired and B (token 2) does a
// read-modify-write of the list: read, append itself, write back.
// Between B's read and B's write, A wakes up and writes "A1;A2;", the
// list it computed before its pause.
//
// With the fenced read (subtest "fenced read"), which records token 2,
// A's write is refused and the list holds A's first write and B's. With
// the read outside the fence (subtest "unfenced read (the bug)", run to
// show that the check catches it), A's write passes the fence, which B
// had not raised yet, and B's write then replaces the list with one
// computed from before A's write: A was told ok and its write is gone.
func ReadModifyWrite(t *testing.T, setup func(t *testing.T) RMW) {
	t.Helper()
	for _, tc := range []struct {
		name   string
		fenced bool
	}{
		{"fenced read", true},
		{"unfenced read (the bug)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			setup(t).play(t, tc.fenced)
		})
	}
}

// play runs the scenario once, B's read fenced or not.
func (g RMW) play(t testing.TB, fenced bool) {
	t.Helper()
	ctx := context.Background()
	a, b := fence.Grant("reports", 1), fence.Grant("reports", 2)
	if err := g.Write(ctx, a, "A1;"); err != nil {
		t.Fatalf("A's first write: %v", err)
	}
	var lateErr func() error
	late := func() { // A wakes up between B's read and B's write
		if lateErr != nil {
			return // B's read ran again: A woke up once
		}
		write := func() error { return g.Write(ctx, a, "A1;A2;") }
		if g.Blocked == nil {
			err := write()
			lateErr = func() error { return err }
			return
		}
		lateErr = StartLate(t, write, g.Blocked)
	}
	appendB := func(old string) string { late(); return old + "B;" }
	var err error
	switch {
	case !fenced:
		var old string
		if old, err = g.Read(ctx); err == nil {
			err = g.Write(ctx, b, appendB(old))
		}
	case g.Update != nil:
		err = g.Update(ctx, b, appendB)
	default:
		var old string
		if old, err = g.FencedRead(ctx, b); err == nil {
			err = g.Write(ctx, b, appendB(old))
		}
	}
	if err != nil {
		t.Fatalf("B: %v", err)
	}
	if lateErr == nil {
		t.Fatalf("B wrote without reading first: A never woke up")
	}
	aErr := lateErr()
	list, err := g.Read(ctx)
	if err != nil {
		t.Fatalf("reading the final list: %v", err)
	}
	t.Logf("A's late write: %v; list %q", aErr, list)
	if lost := aErr == nil && !strings.Contains(list, "A2;"); lost != !fenced {
		t.Fatalf("A's late write: %v; list %q; lost update %t, want %t", aErr, list, lost, !fenced)
	}
	if fenced {
		WantStale(t, aErr, 1, 2)
		if list != "A1;B;" {
			t.Fatalf("list = %q, want A's first write and B's", list)
		}
	}
}
