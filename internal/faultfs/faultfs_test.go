package faultfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// mount mounts a faultfs in a temporary directory for the test.
func mount(t *testing.T) *FS {
	t.Helper()
	dir := t.TempDir()
	f, err := Mount(filepath.Join(dir, "mnt"), filepath.Join(dir, "disk"))
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return f
}

func mustCut(t *testing.T, f *FS) {
	t.Helper()
	if err := f.Cut(); err != nil {
		t.Fatalf("cut: %v", err)
	}
}

// writeFile writes data to path through the mount and, if sync, fsyncs
// the file.
func writeFile(t *testing.T, path string, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func syncPath(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", path, err)
	}
}

// wantFile fails unless path holds want; a nil want means path must not
// exist.
func wantFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	switch {
	case want == nil && errors.Is(err, os.ErrNotExist):
	case want == nil && err == nil:
		t.Errorf("%s exists after the cut (%d bytes), want it gone", filepath.Base(path), len(got))
	case err != nil:
		t.Errorf("read %s: %v", filepath.Base(path), err)
	case !bytes.Equal(got, want):
		t.Errorf("%s holds %d bytes %.40q, want %d bytes %.40q", filepath.Base(path), len(got), got, len(want), want)
	}
}

func TestUnsyncedDataLost(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "a")
	synced := bytes.Repeat([]byte("s"), 10000)
	writeFile(t, p, synced, true)
	syncPath(t, f.Dir())

	// Overwrite the middle and append, without a sync.
	file, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt(bytes.Repeat([]byte("u"), 3000), 5000); err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt(bytes.Repeat([]byte("u"), 3000), 9000); err != nil {
		t.Fatal(err)
	}
	// The change is visible at once.
	if got, _ := os.ReadFile(p); len(got) != 12000 || got[5000] != 'u' {
		t.Fatalf("unsynced write not visible: %d bytes", len(got))
	}
	file.Close()
	mustCut(t, f)
	wantFile(t, p, synced)
	if st := f.Stats(); st.Cuts != 1 || st.FilesRolledBack != 1 || st.BytesRolledBack != 4000 {
		t.Errorf("stats %+v, want 1 cut, 1 file and 4000 bytes rolled back", st)
	}
}

func TestSyncedDataKept(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "a")
	writeFile(t, p, []byte("one"), true)
	syncPath(t, f.Dir())
	writeFile(t, p, []byte("two, longer"), true) // O_TRUNC, then fsync
	mustCut(t, f)
	wantFile(t, p, []byte("two, longer"))

	// fdatasync counts as a sync of the data too.
	file, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("three"), 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fdatasync(int(file.Fd())); err != nil {
		t.Fatal(err)
	}
	file.Close()
	mustCut(t, f)
	wantFile(t, p, []byte("threelonger"))
}

func TestCreateNeedsDirSync(t *testing.T) {
	f := mount(t)
	sub := filepath.Join(f.Dir(), "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	syncPath(t, f.Dir())
	// Created and fsynced, but the directory was not: gone.
	writeFile(t, filepath.Join(f.Dir(), "lost"), []byte("x"), true)
	// Created, fsynced, and the directory fsynced: kept.
	writeFile(t, filepath.Join(sub, "kept"), []byte("y"), true)
	syncPath(t, sub)
	writeFile(t, filepath.Join(sub, "late"), []byte("z"), true)
	// A directory made after the last sync of its parent is gone with
	// everything in it.
	newDir := filepath.Join(f.Dir(), "new")
	if err := os.Mkdir(newDir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(newDir, "f"), []byte("f"), true)
	syncPath(t, newDir)
	mustCut(t, f)
	wantFile(t, filepath.Join(sub, "kept"), []byte("y"))
	wantFile(t, filepath.Join(f.Dir(), "lost"), nil)
	wantFile(t, filepath.Join(sub, "late"), nil)
	if _, err := os.Stat(newDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a directory whose parent was never synced after mkdir survived the cut: %v", err)
	}
}

func TestRenameNeedsDirSync(t *testing.T) {
	f := mount(t)
	target := filepath.Join(f.Dir(), "state")
	writeFile(t, target, []byte("old"), true)
	syncPath(t, f.Dir())

	// tmp + fsync + rename, without the directory fsync: undone.
	tmp := target + ".tmp"
	writeFile(t, tmp, []byte("new"), true)
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	wantFile(t, target, []byte("new"))
	mustCut(t, f)
	wantFile(t, target, []byte("old"))
	wantFile(t, tmp, nil)

	// With the directory fsync: kept.
	writeFile(t, tmp, []byte("new"), true)
	if err := os.Rename(tmp, target); err != nil {
		t.Fatal(err)
	}
	syncPath(t, f.Dir())
	mustCut(t, f)
	wantFile(t, target, []byte("new"))
	wantFile(t, tmp, nil)
}

func TestRenameAcrossDirectories(t *testing.T) {
	f := mount(t)
	a, b := filepath.Join(f.Dir(), "a"), filepath.Join(f.Dir(), "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(a, "x"), []byte("x"), true)
	syncPath(t, a)
	syncPath(t, b)
	syncPath(t, f.Dir())
	if err := os.Rename(filepath.Join(a, "x"), filepath.Join(b, "y")); err != nil {
		t.Fatal(err)
	}
	// Only the new directory is synced: the file is in both after the
	// cut (the old entry was never removed durably).
	syncPath(t, b)
	mustCut(t, f)
	wantFile(t, filepath.Join(a, "x"), []byte("x"))
	wantFile(t, filepath.Join(b, "y"), []byte("x"))
}

func TestTruncateUndone(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "a")
	data := bytes.Repeat([]byte("0123456789"), 1000)
	writeFile(t, p, data, true)
	syncPath(t, f.Dir())
	if err := os.Truncate(p, 100); err != nil {
		t.Fatal(err)
	}
	file, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := file.Truncate(5000); err != nil { // grows back with zeros
		t.Fatal(err)
	}
	if _, err := file.WriteAt([]byte("zz"), 4000); err != nil {
		t.Fatal(err)
	}
	file.Close()
	mustCut(t, f)
	wantFile(t, p, data)

	// fallocate past the end grows the file; the cut shrinks it back.
	file, err = os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Fallocate(int(file.Fd()), 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	file.Close()
	mustCut(t, f)
	wantFile(t, p, data)
}

func TestUnlinkUndone(t *testing.T) {
	f := mount(t)
	sub := filepath.Join(f.Dir(), "snapshots", "1-2")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(sub, "state.bin"), []byte("state"), true)
	syncPath(t, sub)
	syncPath(t, filepath.Dir(sub))
	syncPath(t, f.Dir())
	keep := filepath.Join(f.Dir(), "keep")
	writeFile(t, keep, []byte("keep"), true)
	syncPath(t, f.Dir())

	// Removed without a sync of the parent: back after the cut.
	if err := os.RemoveAll(filepath.Dir(sub)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(keep); err != nil {
		t.Fatal(err)
	}
	mustCut(t, f)
	wantFile(t, filepath.Join(sub, "state.bin"), []byte("state"))
	wantFile(t, keep, []byte("keep"))

	// Removed and the parent synced: gone.
	if err := os.Remove(keep); err != nil {
		t.Fatal(err)
	}
	syncPath(t, f.Dir())
	mustCut(t, f)
	wantFile(t, keep, nil)
}

func TestCapacity(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "a")
	writeFile(t, p, bytes.Repeat([]byte("a"), 8192), true)
	f.SetCapacity(f.Usage() + 64<<10)
	file, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	// Overwriting in place takes no space.
	if _, err := file.WriteAt(bytes.Repeat([]byte("b"), 8192), 0); err != nil {
		t.Errorf("overwrite within the file: %v", err)
	}
	if _, err := file.WriteAt(bytes.Repeat([]byte("c"), 32<<10), 8192); err != nil {
		t.Errorf("write within the capacity: %v", err)
	}
	if _, err := file.WriteAt(bytes.Repeat([]byte("d"), 128<<10), 40<<10); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write past the capacity: %v, want ENOSPC", err)
	}
	if err := unix.Fallocate(int(file.Fd()), 0, 0, 1<<20); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("fallocate past the capacity: %v, want ENOSPC", err)
	}
	f.SetCapacity(f.Usage())
	if _, err := os.Create(filepath.Join(f.Dir(), "b")); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("create on a full file system: %v, want ENOSPC", err)
	}
	if err := os.Mkdir(filepath.Join(f.Dir(), "d"), 0o755); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("mkdir on a full file system: %v, want ENOSPC", err)
	}
	if st := f.Stats(); st.ENOSPC != 4 {
		t.Errorf("stats count %d ENOSPC, want 4", st.ENOSPC)
	}
	f.SetCapacity(0)
	if _, err := file.WriteAt(bytes.Repeat([]byte("d"), 128<<10), 40<<10); err != nil {
		t.Errorf("write once the limit is gone: %v", err)
	}
}

func TestReadOnly(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "a")
	writeFile(t, p, []byte("data"), true)
	file, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	f.MakeReadOnly()
	checks := []struct {
		what string
		err  error
	}{
		{"write", func() error { _, err := file.WriteAt([]byte("x"), 0); return err }()},
		{"truncate", file.Truncate(0)},
		{"open for writing", func() error { _, err := os.OpenFile(p, os.O_WRONLY, 0); return err }()},
		{"create", func() error { _, err := os.Create(filepath.Join(f.Dir(), "b")); return err }()},
		{"mkdir", os.Mkdir(filepath.Join(f.Dir(), "d"), 0o755)},
		{"rename", os.Rename(p, p+".2")},
		{"unlink", os.Remove(p)},
	}
	for _, c := range checks {
		if !errors.Is(c.err, syscall.EROFS) {
			t.Errorf("%s on a read-only file system: %v, want EROFS", c.what, c.err)
		}
	}
	wantFile(t, p, []byte("data"))
	f.MakeWritable()
	if _, err := file.WriteAt([]byte("D"), 0); err != nil {
		t.Errorf("write once writable again: %v", err)
	}
	wantFile(t, p, []byte("Data"))
}

// TestPreallocatedUndone: writes over a preallocated, synced range (how
// the raft log fills its segments) are undone to zeros.
func TestPreallocatedUndone(t *testing.T) {
	f := mount(t)
	p := filepath.Join(f.Dir(), "segment")
	file, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if err := unix.Fallocate(int(file.Fd()), 0, 0, 64<<10); err != nil {
		t.Fatal(err)
	}
	if err := file.Sync(); err != nil {
		t.Fatal(err)
	}
	syncPath(t, f.Dir())
	if _, err := file.WriteAt(bytes.Repeat([]byte("r"), 3000), 1000); err != nil {
		t.Fatal(err)
	}
	file.Close()
	mustCut(t, f)
	wantFile(t, p, make([]byte, 64<<10))
	if st := f.Stats(); st.BytesRolledBack != 3000 {
		t.Errorf("stats %+v, want 3000 bytes rolled back", st)
	}
}
