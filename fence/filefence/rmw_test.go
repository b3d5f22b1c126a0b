package filefence_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
)

// TestFencedRead plays the lost update of docs/fencing.md. A (token 1)
// has written the file; its lease expired and B (token 2) does a
// read-modify-write of the list of writers in it: read, append itself,
// write back. Between B's read and B's write, A wakes up and writes its
// own list (token 1).
//
// With ReadFile (a fenced read, which records token 2), A's write is
// refused. With os.ReadFile (the bug, run here to show that the test
// catches it), A's write passes the fence, which B had not raised yet,
// and B's write then replaces the file with content computed from
// before A's write: A was told ok and its write is gone.
func TestFencedRead(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		fenced   bool
		wantLost bool
	}{
		{"ReadFile", true, false},
		{"os.ReadFile (the bug)", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := open(t)
			ctx := context.Background()
			a, b := fence.Grant("reports", 1), fence.Grant("reports", 2)
			if err := d.WriteFile(ctx, a, "writers", []byte("A1;"), 0o644); err != nil {
				t.Fatal(err)
			}
			var old []byte
			var err error
			if tc.fenced {
				old, err = d.ReadFile(ctx, b, "writers")
			} else {
				old, err = os.ReadFile(filepath.Join(d.Path(), "writers"))
			}
			if err != nil {
				t.Fatal(err)
			}
			aErr := d.WriteFile(ctx, a, "writers", []byte("A1;A2;"), 0o644) // A wakes up
			if err := d.WriteFile(ctx, b, "writers", append(old, "B;"...), 0o644); err != nil {
				t.Fatalf("B: %v", err)
			}
			list := read(t, d, "writers")
			t.Logf("A's late write: %v; file %q", aErr, list)
			lost := aErr == nil && !strings.Contains(list, "A2;")
			if lost != tc.wantLost {
				t.Fatalf("A's late write: %v; file %q; lost update %t, want %t", aErr, list, lost, tc.wantLost)
			}
			if tc.fenced {
				fencetest.WantStale(t, aErr, 1, 2)
				if list != "A1;B;" {
					t.Fatalf("file = %q, want A's first write and B's", list)
				}
			}
		})
	}
}

// TestUpdate reads and writes under one hold of the lock: a late
// holder's write started during fn waits for it, and is then refused.
func TestUpdate(t *testing.T) {
	t.Parallel()
	d := open(t)
	ctx := context.Background()
	a, b := fence.Grant("reports", 1), fence.Grant("reports", 2)
	if err := d.Update(ctx, a, "writers", 0o600, func(old []byte, exists bool) ([]byte, error) {
		if exists || len(old) != 0 {
			t.Errorf("a missing file read as %q, exists %t", old, exists)
		}
		return []byte("A1;"), nil
	}); err != nil {
		t.Fatal(err)
	}
	aErr := make(chan error, 1)
	if err := d.Update(ctx, b, "writers", 0o600, func(old []byte, exists bool) ([]byte, error) {
		go func() { aErr <- d.WriteFile(ctx, a, "writers", []byte("A1;A2;"), 0o600) }() // A wakes up
		return append(old, "B;"...), nil
	}); err != nil {
		t.Fatal(err)
	}
	fencetest.WantStale(t, <-aErr, 1, 2)
	if got := read(t, d, "writers"); got != "A1;B;" {
		t.Fatalf("file = %q, want A1;B;", got)
	}
	if fi, err := os.Stat(filepath.Join(d.Path(), "writers")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode = %v, %v; want 0600", fi.Mode(), err)
	}
	// fn's error changes nothing; a stale token does not run fn.
	before := listing(t, d.Path())
	boom := errors.New("boom")
	if err := d.Update(ctx, b, "writers", 0o600, func([]byte, bool) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Update = %v, want fn's error", err)
	}
	err := d.Update(ctx, a, "writers", 0o600, func([]byte, bool) ([]byte, error) {
		t.Error("fn ran for a stale token")
		return nil, nil
	})
	fencetest.WantStale(t, err, 1, 2)
	if after := listing(t, d.Path()); after != before {
		t.Fatalf("refused updates changed the directory:\n%s\n->\n%s", before, after)
	}
	// ReadFile of a missing file: fs.ErrNotExist, with the token recorded.
	if _, err := d.ReadFile(ctx, fence.Grant("reports", 3), "none"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ReadFile of a missing file = %v", err)
	}
	if h, _ := d.Highest("reports"); h != 3 {
		t.Fatalf("highest = %d after a fenced read with token 3", h)
	}
}
