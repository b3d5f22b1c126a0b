package node

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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

// initialisedDir starts a single node in a new data directory, grants a
// lease, takes a snapshot if snapshot is set, and stops the node.
func initialisedDir(t *testing.T, snapshot bool) string {
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
			dir := initialisedDir(t, tc.snapshot)
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
	dir := initialisedDir(t, true)
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
