package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/tenure-io/tenure/internal/dirdigest"
	"github.com/tenure-io/tenure/internal/raftlog"
	"github.com/tenure-io/tenure/lease"
)

// dirListing describes every file under dir with its size and hash, so a
// test can show that a refused start changed nothing.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	d, err := dirdigest.Of(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// initialisedDir starts a single node in a new data directory, grants
// five leases, takes a snapshot if snapshot is set, grants after more
// leases, and stops the node.
func initialisedDir(t *testing.T, snapshot bool, after int) string {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(t, "n1")
	cfg.DataDir = dir
	_, tr := raft.NewInmemTransport("n1")
	cfg.Transport = tr
	cfg.Bootstrap = true
	cfg.TrailingLogs = 0
	n := mustNode(t, cfg)
	waitFor(t, "n1 to lead", 5*time.Second, n.IsLeader)
	ctx := ctxT(t, 10*time.Second)
	for i := range 5 {
		if _, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: fmt.Sprint("x", i), Holder: "h", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if snapshot {
		if err := n.raft.Snapshot().Error(); err != nil {
			t.Fatalf("snapshot: %v", err)
		}
	}
	for i := range after {
		if _, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: fmt.Sprint("y", i), Holder: "h", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDamagedDataDirRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		snapshot bool
		damage   func(dir string) error
		file     string
	}{
		{"raft-log emptied after a snapshot", true, func(d string) error {
			// The log's last entries are after the snapshot: starting
			// from the snapshot alone would grant their tokens again.
			files, err := filepath.Glob(filepath.Join(d, "raft-log", "*"))
			if err != nil || len(files) == 0 {
				return fmt.Errorf("no log files: %v", err)
			}
			for _, f := range files {
				if err := os.Remove(f); err != nil {
					return err
				}
			}
			return nil
		}, "raft-log"},
		{"raft.db emptied", false, func(d string) error { return os.Truncate(filepath.Join(d, "raft.db"), 0) }, "raft.db"},
		{"raft.db deleted", false, func(d string) error { return os.Remove(filepath.Join(d, "raft.db")) }, "raft.db"},
		{"node-id deleted", false, func(d string) error { return os.Remove(filepath.Join(d, "node-id")) }, "node-id"},
		{"node-id emptied", false, func(d string) error { return os.WriteFile(filepath.Join(d, "node-id"), nil, 0o600) }, "node-id"},
		{"cluster-id deleted", false, func(d string) error { return os.Remove(filepath.Join(d, "cluster-id")) }, "cluster-id"},
		{"cluster-id emptied", false, func(d string) error { return os.WriteFile(filepath.Join(d, "cluster-id"), []byte("\n"), 0o600) }, "cluster-id"},
		{"node-id and cluster-id deleted", false, func(d string) error {
			return errors.Join(os.Remove(filepath.Join(d, "node-id")), os.Remove(filepath.Join(d, "cluster-id")))
		}, "cluster-id"},
		{"snapshot directory deleted", false, func(d string) error { return os.RemoveAll(filepath.Join(d, "snapshots")) }, "snapshots"},
		{"raft-log deleted", false, func(d string) error { return os.RemoveAll(filepath.Join(d, "raft-log")) }, "raft-log"},
		{"log segment emptied", false, func(d string) error {
			segs, _ := filepath.Glob(filepath.Join(d, "raft-log", "*.log"))
			if len(segs) == 0 {
				return errors.New("no segment")
			}
			return os.Truncate(segs[0], 0)
		}, "raft-log"},
		{"snapshots deleted after compaction", true, func(d string) error {
			entries, err := os.ReadDir(filepath.Join(d, "snapshots"))
			if err != nil || len(entries) == 0 {
				return fmt.Errorf("no snapshot to delete: %v", err)
			}
			for _, e := range entries {
				if err := os.RemoveAll(filepath.Join(d, "snapshots", e.Name())); err != nil {
					return err
				}
			}
			return nil
		}, "snapshots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := initialisedDir(t, tc.snapshot, 3)
			if err := tc.damage(dir); err != nil {
				t.Fatalf("damage: %v", err)
			}
			before := dirListing(t, dir)
			for _, bootstrap := range []bool{true, false} {
				cfg := testConfig(t, "")
				cfg.DataDir = dir
				_, tr := raft.NewInmemTransport("n1")
				cfg.Transport = tr
				cfg.Bootstrap = bootstrap
				n, err := New(cfg)
				if err == nil {
					n.Close()
					t.Fatalf("bootstrap=%v: the node started on a data directory with %s", bootstrap, tc.name)
				}
				var de *DataDirError
				if !errors.As(err, &de) || de.File != tc.file {
					t.Fatalf("bootstrap=%v: error %v, want a *DataDirError about %s", bootstrap, err, tc.file)
				}
				t.Logf("refused: %v", err)
				if msg := err.Error(); !strings.Contains(msg, filepath.Join(dir, tc.file)) || !strings.Contains(msg, "--reset-data-dir") {
					t.Errorf("the message does not name the file or the way out: %s", msg)
				}
				if after := dirListing(t, dir); after != before {
					t.Fatalf("the refused start changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
				}
			}
		})
	}
}

// An intact directory restarts with its state and identity.
func TestDataDirRestart(t *testing.T) {
	dir := initialisedDir(t, true, 0)
	cid, err := readID(filepath.Join(dir, "cluster-id"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t, "")
	cfg.DataDir = dir
	_, tr := raft.NewInmemTransport("n1")
	cfg.Transport = tr
	cfg.Bootstrap = true
	n := mustNode(t, cfg)
	defer n.Close()
	if n.ID() != "n1" || n.ClusterID() != cid {
		t.Fatalf("restarted as %s of cluster %s, want n1 of %s", n.ID(), n.ClusterID(), cid)
	}
	waitFor(t, "n1 to lead again", 5*time.Second, n.IsLeader)
	res, err := n.Do1(ctxT(t, 5*time.Second), lease.Op{Type: lease.OpAcquire, Name: "next", Holder: "h", TTL: time.Minute})
	if err != nil || res.Lease.Token != 6 {
		t.Fatalf("first grant after the restart: token %d, %v; want 6", res.Lease.Token, err)
	}
	if got := n.fsm.cluster(); got != cid {
		t.Fatalf("the log records cluster %q, want %q", got, cid)
	}
}

// A data directory made before the segment log keeps its log in raft.db:
// the node moves it to the segment log and goes on from where it was.
func TestLogMovedFromRaftDB(t *testing.T) {
	dir := t.TempDir()
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := raft.NewFileSnapshotStore(dir, 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, tr := raft.NewInmemTransport("n1")
	conf := raft.Configuration{Servers: []raft.Server{{ID: "n1", Address: tr.LocalAddr(), Suffrage: raft.Voter}}}
	rc := raft.DefaultConfig()
	rc.LocalID = "n1"
	if err := raft.BootstrapCluster(rc, bolt, bolt, snaps, tr, conf); err != nil {
		t.Fatal(err)
	}
	cid := NewClusterID()
	logs := []*raft.Log{{Index: 2, Term: 1, Type: raft.LogCommand, Data: append([]byte{entryCluster}, cid...)}}
	for i := range 5 {
		logs = append(logs, &raft.Log{Index: uint64(3 + i), Term: 1, Type: raft.LogCommand,
			Data: appendTermBatch(nil, 1, lease.Batch{Now: time.Duration(i+1) * time.Second, Ops: []lease.Op{
				{Type: lease.OpAcquire, Name: fmt.Sprint("old", i), Holder: "h", TTL: time.Hour}}})})
	}
	if err := bolt.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	bolt.Close()
	tr.Close()
	for _, f := range []struct{ name, id string }{{"node-id", "n1"}, {"cluster-id", cid}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.id+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := testConfig(t, "n1")
	cfg.DataDir = dir
	_, cfg.Transport = raft.NewInmemTransport("n1")
	cfg.Bootstrap = true
	n := mustNode(t, cfg)
	waitFor(t, "n1 to lead on its moved log", 5*time.Second, n.IsLeader)
	res, err := n.Do1(ctxT(t, 5*time.Second), lease.Op{Type: lease.OpAcquire, Name: "new", Holder: "h", TTL: time.Hour})
	if err != nil || res.Lease.Token != 6 {
		t.Fatalf("first grant after the move: token %d, %v; want 6 (five grants before)", res.Lease.Token, err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	first, last, err := raftlog.Inspect(filepath.Join(dir, "raft-log"))
	if err != nil || first != 1 || last < 7 {
		t.Fatalf("segment log holds %d-%d (%v), want 1 to at least 7", first, last, err)
	}
	bolt, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	if l, _ := bolt.LastIndex(); l != 0 {
		t.Fatalf("raft.db still holds log entries up to %d after the move", l)
	}
}

// readOnly makes dir read-only for this process: as root (who ignores
// permissions; CI runs as root) by moving it onto a file system mounted
// read-only, otherwise by taking away the write permission.
func readOnly(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Chmod(p, 0o500)
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error { return os.Chmod(p, 0o700) })
		})
		return
	}
	copyTo := t.TempDir()
	if out, err := exec.Command("cp", "-a", dir+"/.", copyTo).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	run("mount", "-t", "tmpfs", "-o", "size=1g", "tmpfs", dir)
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	run("cp", "-a", copyTo+"/.", dir)
	run("mount", "-o", "remount,ro", dir)
}

// A data directory tenured cannot write is reported as such, never as
// damage with advice to reset it (which would start tokens at 1 again).
func TestReadOnlyDataDirIsNotDamage(t *testing.T) {
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"initialised", func(t *testing.T) string { return initialisedDir(t, true, 3) }},
		{"new", func(t *testing.T) string { return t.TempDir() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			readOnly(t, dir)
			before := dirListing(t, dir)
			cfg := testConfig(t, "n1")
			cfg.DataDir = dir
			_, cfg.Transport = raft.NewInmemTransport("n1")
			cfg.Bootstrap = true
			n, err := New(cfg)
			if err == nil {
				n.Close()
				t.Fatal("the node started on a data directory it cannot write")
			}
			t.Logf("refused: %v", err)
			var ae *DataDirAccessError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v (%T), want a *DataDirAccessError", err, err)
			}
			var de *DataDirError
			if errors.As(err, &de) || strings.Contains(err.Error(), "--reset-data-dir") || !strings.Contains(err.Error(), "not damaged") {
				t.Fatalf("a directory that cannot be written is reported as damaged: %v", err)
			}
			if after := dirListing(t, dir); after != before {
				t.Fatalf("the refused start changed the directory:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

func TestCannotWriteTellsAccessFromDamage(t *testing.T) {
	for _, err := range []error{syscall.EROFS, syscall.EACCES, syscall.EPERM, syscall.ENOSPC, syscall.EDQUOT,
		&os.PathError{Op: "open", Path: "x", Err: syscall.EROFS}, fmt.Errorf("open: %w", syscall.ENOSPC)} {
		if !cannotWrite(err) {
			t.Errorf("cannotWrite(%v) = false", err)
		}
	}
	for _, err := range []error{syscall.EIO, raftlog.ErrCorrupt, errors.New("checksum mismatch"), os.ErrNotExist} {
		if cannotWrite(err) {
			t.Errorf("cannotWrite(%v) = true", err)
		}
	}
}
