package node

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// dirListing describes every file under dir with its size and hash, so a
// test can show that a refused start changed nothing.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %d %x", rel, len(data), sha256.Sum256(data)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
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
