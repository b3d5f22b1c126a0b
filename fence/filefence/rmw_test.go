package filefence_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/internal/fencetest"
)

// TestFencedRead plays the lost update of docs/fencing.md (see
// fencetest.ReadModifyWrite) on a file: ReadFile is the fenced read,
// os.ReadFile the bug.
func TestFencedRead(t *testing.T) {
	t.Parallel()
	fencetest.ReadModifyWrite(t, func(t *testing.T) fencetest.RMW {
		d := open(t)
		return fencetest.RMW{
			Write: func(ctx context.Context, l fence.Lease, list string) error {
				return d.WriteFile(ctx, l, "writers", []byte(list), 0o644)
			},
			Read: func(context.Context) (string, error) {
				b, err := os.ReadFile(filepath.Join(d.Path(), "writers"))
				return string(b), err
			},
			FencedRead: func(ctx context.Context, l fence.Lease) (string, error) {
				b, err := d.ReadFile(ctx, l, "writers")
				return string(b), err
			},
		}
	})
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
