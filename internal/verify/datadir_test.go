package verify

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tenure-io/tenure/internal/faultfs"
)

// tree returns the regular files and directories under dir, relative to
// it, with each file's contents ("dir/" for a directory).
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == ".":
		case d.IsDir():
			out[rel] = "dir/"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// fill writes files into dir, creating the directories they need, and
// syncs every file and directory, as tenured leaves its data directory.
func fill(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for _, name := range keys(files) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(files[name]), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syncPath(p); err != nil {
			t.Fatal(err)
		}
	}
	var dirs []string
	for name := range tree(t, dir) {
		if p := filepath.Join(dir, name); isDir(p) {
			dirs = append(dirs, p)
		}
	}
	// The deepest first, then dir.
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range append(dirs, dir) {
		if err := syncPath(d); err != nil {
			t.Fatal(err)
		}
	}
}

func isDir(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.IsDir()
}

var (
	oldData = map[string]string{"cluster-id": "old\n", "raft.db": "old db", "snapshots/1-2-3/state.bin": "old state"}
	newData = map[string]string{"cluster-id": "new\n", "raft.db": "new db, longer", "raft-log/00001.log": "entries", "snapshots/1-2-3/meta.json": "{}"}
)

// mountDataDir mounts a faultfs as a node's data directory would be.
func mountDataDir(t *testing.T) *faultfs.FS {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "n1")
	d, err := faultfs.Mount(dir, dir+".disk")
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})
	return d
}

func cut(t *testing.T, d *faultfs.FS) {
	t.Helper()
	if err := d.Cut(); err != nil {
		t.Fatalf("cut: %v", err)
	}
}

// The member fault's wipe of a data directory that is a faultfs mount
// empties it and survives a power cut: the old files must not come back.
func TestMemberWipeMountDurable(t *testing.T) {
	d := mountDataDir(t)
	fill(t, d.Dir(), oldData)
	cut(t, d)
	if got := tree(t, d.Dir()); len(got) != 5 {
		t.Fatalf("the synced data did not survive a cut: %v", keys(got))
	}
	if err := wipeDir(d.Dir()); err != nil {
		t.Fatalf("wipe: %v", err)
	}
	if got := tree(t, d.Dir()); len(got) != 0 {
		t.Fatalf("after the wipe the directory holds %v", keys(got))
	}
	cut(t, d)
	if got := tree(t, d.Dir()); len(got) != 0 {
		t.Fatalf("a power cut after the wipe brought back %v", keys(got))
	}
}

// The damaged-dir fault's restore into a data directory that is a
// faultfs mount replaces its contents with the backup's, and that
// survives a power cut.
func TestDamagedRestoreMountDurable(t *testing.T) {
	d := mountDataDir(t)
	fill(t, d.Dir(), oldData)
	backup := d.Dir() + ".backup"
	if err := os.Mkdir(backup, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(t, backup, newData)
	if err := restoreDir(backup, d.Dir()); err != nil {
		t.Fatalf("restore: %v", err)
	}
	want := tree(t, backup)
	check := func(when string) {
		t.Helper()
		got := tree(t, d.Dir())
		if !slices.Equal(keys(got), keys(want)) {
			t.Fatalf("%s the directory holds %v, want %v", when, keys(got), keys(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s %s holds %q, want %q", when, k, got[k], v)
			}
		}
	}
	check("after the restore")
	cut(t, d)
	check("after a power cut after the restore")
	info, err := os.Stat(filepath.Join(d.Dir(), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Errorf("restored raft.db has mode %v, want the backup's 0600", info.Mode().Perm())
	}
}

// On a plain directory the wipe and the restore do the same, and a data
// directory that does not exist is created by the restore.
func TestWipeRestorePlainDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	if err := wipeDir(dir); err != nil {
		t.Fatalf("wipe of a missing directory: %v", err)
	}
	backup := dir + ".backup"
	if err := os.Mkdir(backup, 0o755); err != nil {
		t.Fatal(err)
	}
	fill(t, backup, newData)
	if err := restoreDir(backup, dir); err != nil {
		t.Fatalf("restore into a missing directory: %v", err)
	}
	if got, want := tree(t, dir), tree(t, backup); !slices.Equal(keys(got), keys(want)) {
		t.Fatalf("restored %v, want %v", keys(got), keys(want))
	}
	if err := os.WriteFile(filepath.Join(dir, "raft.db"), []byte("damaged"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := restoreDir(backup, dir); err != nil {
		t.Fatalf("restore over a damaged directory: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "raft.db")); string(b) != newData["raft.db"] {
		t.Errorf("raft.db holds %q after the restore, want %q", b, newData["raft.db"])
	}
	if err := wipeDir(dir); err != nil {
		t.Fatalf("wipe: %v", err)
	}
	if got := tree(t, dir); len(got) != 0 {
		t.Fatalf("after the wipe the directory holds %v", keys(got))
	}
}
