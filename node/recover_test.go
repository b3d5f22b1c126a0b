package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// startOn starts a single node on dir with an in-memory transport at
// addr, and waits for it to lead.
func startOn(t *testing.T, dir, addr string, bootstrap bool) *Node {
	t.Helper()
	cfg := testConfig(t, "")
	cfg.DataDir = dir
	cfg.APIAddr = "api-" + addr
	_, cfg.Transport = raft.NewInmemTransport(raft.ServerAddress(addr))
	cfg.Bootstrap = bootstrap
	n := mustNode(t, cfg)
	t.Cleanup(func() { n.Abort() })
	waitFor(t, addr+" to lead", 5*time.Second, n.IsLeader)
	return n
}

func grant(t *testing.T, n *Node, name string) lease.Lease {
	t.Helper()
	res, err := n.Do1(ctxT(t, 10*time.Second), lease.Op{Type: lease.OpAcquire, Name: name, Holder: "h", TTL: time.Hour})
	if err == nil {
		err = res.Err
	}
	if err != nil {
		t.Fatalf("acquire %s: %v", name, err)
	}
	return res.Lease
}

// backupTo writes a backup of n to a file and returns its path.
func backupTo(t *testing.T, n *Node) (string, BackupInfo) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backup")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	info, err := n.Backup(ctxT(t, 10*time.Second), f)
	if err != nil {
		t.Fatalf("Backup: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return path, info
}

// TestRestoreAboveLaterTokens: back up at token 3, grant up to 7,
// restore: the restored cluster has the backup's leases and grants above
// 7, without knowing 4 to 7.
func TestRestoreAboveLaterTokens(t *testing.T) {
	for _, tc := range []struct {
		name     string
		floor    uint64
		wantNext func(uint64) bool
		wantFrom string
	}{
		{"clock", 0, func(tok uint64) bool { return tok > 7 && tok >= uint64(time.Now().Add(-time.Hour).UnixMicro()) }, "clock"},
		{"explicit", 1000, func(tok uint64) bool { return tok == 1000 }, "token-floor"},
		{"explicit below the last token", 2, func(tok uint64) bool { return tok == 4 }, "last-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := startOn(t, t.TempDir(), "old", true)
			for i := 1; i <= 3; i++ {
				grant(t, old, fmt.Sprint("a", i))
			}
			path, info := backupTo(t, old)
			if info.LastToken != 3 {
				t.Fatalf("backup's last token %d, want 3", info.LastToken)
			}
			for i := 4; i <= 7; i++ {
				grant(t, old, fmt.Sprint("b", i))
			}
			old.Abort()

			dir := filepath.Join(t.TempDir(), "restored")
			res, err := Restore(RecoverConfig{DataDir: dir, RaftAddr: "new", TokenFloor: tc.floor}, path)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if res.LastToken != 3 || res.FloorFrom != tc.wantFrom || !tc.wantNext(res.NextToken) {
				t.Fatalf("Restore = %+v; want last token 3, floor from %s", res, tc.wantFrom)
			}
			if res.ClusterID == info.ClusterID || res.OldClusterID != info.ClusterID {
				t.Fatalf("Restore made cluster %s from %s; want a new ID, and the old one %s", res.ClusterID, res.OldClusterID, info.ClusterID)
			}
			n := startOn(t, dir, "new", true)
			if n.ClusterID() != res.ClusterID {
				t.Fatalf("restored node is in cluster %s, want %s", n.ClusterID(), res.ClusterID)
			}
			for i := 1; i <= 3; i++ {
				n.fsm.mu.RLock()
				l, ok := n.fsm.st.Lease(fmt.Sprint("a", i))
				n.fsm.mu.RUnlock()
				if !ok || l.Token != uint64(i) {
					t.Fatalf("restored lease a%d = %+v, %v; want token %d", i, l, ok, i)
				}
			}
			if g := grant(t, n, "next"); g.Token != res.NextToken {
				t.Fatalf("first grant after the restore has token %d, want %d", g.Token, res.NextToken)
			}
		})
	}
}

func TestRestoreRefuses(t *testing.T) {
	old := startOn(t, t.TempDir(), "old", true)
	grant(t, old, "a")
	path, _ := backupTo(t, old)
	old.Abort()
	good, _ := os.ReadFile(path)

	t.Run("a non-empty directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		before := dirListing(t, dir)
		_, err := Restore(RecoverConfig{DataDir: dir, RaftAddr: "new"}, path)
		if !errors.Is(err, ErrNotEmpty) {
			t.Fatalf("Restore into a non-empty directory: %v, want ErrNotEmpty", err)
		}
		if after := dirListing(t, dir); after != before {
			t.Fatalf("a refused restore changed the directory:\n%s\nto\n%s", before, after)
		}
	})
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"a flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, "SHA-256"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-10] }, "checksum line"},
		{"empty", func(b []byte) []byte { return nil }, "too short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad")
			if err := os.WriteFile(bad, tc.edit(append([]byte(nil), good...)), 0o600); err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "restored")
			_, err := Restore(RecoverConfig{DataDir: dir, RaftAddr: "new"}, bad)
			if !errors.Is(err, ErrBackupCorrupt) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Restore of a corrupt backup: %v; want ErrBackupCorrupt saying %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a refused restore created %s", dir)
			}
		})
	}
	t.Run("a clock behind the backup", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "restored")
		past := func() time.Time { return time.Now().Add(-time.Hour) }
		_, err := Restore(RecoverConfig{DataDir: dir, RaftAddr: "new", Now: past}, path)
		if !errors.Is(err, ErrClockFloor) {
			t.Fatalf("Restore with the clock an hour behind the backup: %v, want ErrClockFloor", err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a refused restore created %s", dir)
		}
		// An explicit floor is the way out.
		res, err := Restore(RecoverConfig{DataDir: dir, RaftAddr: "new", Now: past, TokenFloor: 50}, path)
		if err != nil || res.NextToken != 50 {
			t.Fatalf("Restore with --token-floor 50: %+v, %v", res, err)
		}
	})
}

func TestChooseTokenFloor(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	us := uint64(now.UnixMicro())
	for _, tc := range []struct {
		name     string
		explicit uint64
		last     uint64
		taken    time.Time
		want     uint64
		from     string
		err      error
	}{
		{"clock", 0, 7, now.Add(-time.Minute), us, "clock", nil},
		{"clock, data time unknown", 0, 7, time.Time{}, us, "clock", nil},
		{"clock went backwards", 0, 7, now.Add(time.Second), 0, "", ErrClockFloor},
		{"tokens above the clock", 0, us, time.Time{}, 0, "", ErrClockFloor},
		{"explicit", 100, 7, now.Add(time.Hour), 100, "token-floor", nil},
		{"explicit at the last token", 7, 7, time.Time{}, 8, "last-token", nil},
		{"explicit below the last token", 3, 7, time.Time{}, 8, "last-token", nil},
		{"explicit above the clock", us * 2, us + 5, time.Time{}, us * 2, "token-floor", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, err := ChooseTokenFloor(tc.explicit, now, tc.last, tc.taken)
			if !errors.Is(err, tc.err) || got != tc.want || from != tc.from {
				t.Fatalf("ChooseTokenFloor = %d, %q, %v; want %d, %q, %v", got, from, err, tc.want, tc.from, tc.err)
			}
		})
	}
}

// TestForceNewCluster: a node's own data (a snapshot and log entries
// after it) becomes a new one-member cluster with its leases, a new
// cluster ID and tokens above the floor; it goes on working across a
// restart.
func TestForceNewCluster(t *testing.T) {
	dir := t.TempDir()
	old := startOn(t, dir, "n1", true)
	oldID := old.ClusterID()
	grant(t, old, "a")
	if err := old.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	last := grant(t, old, "b").Token
	old.Abort()

	if _, err := ForceNewCluster(RecoverConfig{DataDir: dir, RaftAddr: "n1", NodeID: "other"}); err == nil || !strings.Contains(err.Error(), "belongs to node") {
		t.Fatalf("ForceNewCluster with another node ID: %v, want a refusal", err)
	}
	res, err := ForceNewCluster(RecoverConfig{DataDir: dir, RaftAddr: "n1"})
	if err != nil {
		t.Fatalf("ForceNewCluster: %v", err)
	}
	if res.LastToken != last || res.NextToken <= last || res.FloorFrom != "clock" || res.OldClusterID != oldID || res.ClusterID == oldID || res.NodeID != "n1" {
		t.Fatalf("ForceNewCluster = %+v; want last token %d, a clock floor, a new ID in place of %s", res, last, oldID)
	}
	n := startOn(t, dir, "n1", true)
	if n.ClusterID() != res.ClusterID {
		t.Fatalf("node is in cluster %s, want %s", n.ClusterID(), res.ClusterID)
	}
	for _, name := range []string{"a", "b"} {
		n.fsm.mu.RLock()
		_, ok := n.fsm.st.Lease(name)
		n.fsm.mu.RUnlock()
		if !ok {
			t.Fatalf("lease %s is gone after the forced new cluster", name)
		}
	}
	next := grant(t, n, "c").Token
	if next != res.NextToken {
		t.Fatalf("first grant has token %d, want %d", next, res.NextToken)
	}
	n.Close()
	// Restarted as it is: the state and the log since are there.
	n = startOn(t, dir, "n1", true)
	if g := grant(t, n, "d").Token; g != next+1 {
		t.Fatalf("grant after a restart has token %d, want %d", g, next+1)
	}
	if n.ClusterID() != res.ClusterID {
		t.Fatalf("after a restart the node is in cluster %s, want %s", n.ClusterID(), res.ClusterID)
	}
}

func TestForceNewClusterRefusesEmptyDir(t *testing.T) {
	dir := t.TempDir()
	_, err := ForceNewCluster(RecoverConfig{DataDir: dir, RaftAddr: "n1"})
	if err == nil || !strings.Contains(err.Error(), "nothing to recover") {
		t.Fatalf("ForceNewCluster on an empty directory: %v", err)
	}
}

// A clock that reads earlier than the survivor's last entry gives no
// safe floor: ForceNewCluster refuses and changes nothing; with an
// explicit floor it goes ahead.
func TestForceNewClusterClockBehind(t *testing.T) {
	dir := t.TempDir()
	old := startOn(t, dir, "n1", true)
	last := grant(t, old, "a").Token
	old.Abort()
	before := dirListing(t, dir)
	past := func() time.Time { return time.Now().Add(-time.Hour) }
	_, err := ForceNewCluster(RecoverConfig{DataDir: dir, RaftAddr: "n1", Now: past})
	if !errors.Is(err, ErrClockFloor) && (err == nil || !strings.Contains(err.Error(), "went backwards")) {
		t.Fatalf("ForceNewCluster with the clock an hour behind: %v, want a refusal for the clock", err)
	}
	if after := dirListing(t, dir); after != before {
		t.Fatalf("the refused ForceNewCluster changed the directory:\n%s\nto\n%s", before, after)
	}
	res, err := ForceNewCluster(RecoverConfig{DataDir: dir, RaftAddr: "n1", Now: past, TokenFloor: 1 << 40})
	if err != nil || res.NextToken != 1<<40 || res.LastToken != last {
		t.Fatalf("ForceNewCluster with --token-floor: %+v, %v", res, err)
	}
}

// A member that never caught up with its cluster since it joined may
// lack acknowledged state: forcing a new cluster from it is refused.
func TestForceNewClusterRefusesCatchingUp(t *testing.T) {
	dir := t.TempDir()
	old := startOn(t, dir, "n1", true)
	grant(t, old, "a")
	old.Abort()
	if err := os.WriteFile(filepath.Join(dir, "catching-up"), []byte("0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	before := dirListing(t, dir)
	_, err := ForceNewCluster(RecoverConfig{DataDir: dir, RaftAddr: "n1"})
	if err == nil || !strings.Contains(err.Error(), "had not caught up") {
		t.Fatalf("ForceNewCluster of a catching-up member: %v, want a refusal", err)
	}
	if after := dirListing(t, dir); after != before {
		t.Fatalf("the refusal changed the directory")
	}
}
