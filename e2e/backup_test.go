package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/dirdigest"
)

// jsonSnapshot is what tenure snapshot save -o json prints.
type jsonSnapshot struct {
	File      string `json:"file"`
	ClusterID string `json:"cluster_id"`
	Index     uint64 `json:"index"`
	LastToken uint64 `json:"last_token"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
}

// snapshotSave runs tenure snapshot save FILE against endpoints.
func snapshotSave(t *testing.T, endpoints, file string) jsonSnapshot {
	t.Helper()
	r := cli(t, endpoints, "snapshot", "save", file, "-o", "json")
	mustCode(t, 0, r, "snapshot save")
	var s jsonSnapshot
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &s); err != nil {
		t.Fatalf("snapshot save output %q: %v", r.stdout, err)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Size() != s.Size || s.Size == 0 {
		t.Fatalf("snapshot save says %d bytes; the file: %v, %v", s.Size, fi, err)
	}
	return s
}

// runTenured runs tenured with args until it exits (a start that is
// refused) and returns its exit code and output.
func runTenured(t *testing.T, args ...string) result {
	t.Helper()
	return runBinary(t, bin.tenured, 30*time.Second, nil, nil, args...)
}

// getToken returns the token of lease name as get -o json prints it.
func getToken(t *testing.T, endpoint, name string) uint64 {
	t.Helper()
	r := cli(t, endpoint, "get", name, "-o", "json")
	mustCode(t, 0, r, "get "+name)
	var l jsonLease
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &l); err != nil {
		t.Fatalf("get output %q: %v", r.stdout, err)
	}
	return l.Token
}

func statusClusterID(t *testing.T, endpoint string) string {
	t.Helper()
	r := cli(t, endpoint, "status", "-o", "json")
	mustCode(t, 0, r, "status")
	var st struct {
		ClusterID string `json:"cluster_id"`
		LastToken uint64 `json:"last_token"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &st); err != nil || st.ClusterID == "" {
		t.Fatalf("status output %q: %v", r.stdout, err)
	}
	return st.ClusterID
}

// TestBackupAndRestore runs the procedure "Back up" and "Restore" of
// docs/operations.md: back up at token 3, grant up to 7, restore into an
// empty directory: the leases and values of the backup are there, and
// the next token is larger than 7, although the restored cluster never
// saw 4 to 7. The restored member then restarts as usual.
func TestBackupAndRestore(t *testing.T) {
	old := startSingle(t)
	var held []jsonLease
	for i := 1; i <= 3; i++ {
		held = append(held, acquireJSON(t, old.api, fmt.Sprint("jobs/", i), "--holder", "w", "--ttl", "1h"))
	}
	mustCode(t, 0, cli(t, old.api, "kv", "put", "cfg/a", "one", "--lease", "jobs/1", "--token", fmt.Sprint(held[0].Token)), "kv put")
	file := filepath.Join(t.TempDir(), "backup.tnr")
	snap := snapshotSave(t, old.api, file)
	if snap.LastToken != 3 || snap.Index == 0 || len(snap.SHA256) != 64 || snap.ClusterID != statusClusterID(t, old.api) {
		t.Fatalf("snapshot save printed %+v; want last token 3, an index, a checksum and the cluster ID", snap)
	}
	var last uint64
	for i := 4; i <= 7; i++ {
		last = acquireJSON(t, old.api, fmt.Sprint("later/", i), "--ttl", "1h").Token
	}
	if last != 7 {
		t.Fatalf("the seventh grant has token %d", last)
	}
	old.kill()

	r := newServer(t, "r1", "", "--election-timeout", "200ms", "--restore", file)
	r.start()
	r.waitReady(20 * time.Second)
	if !strings.Contains(r.log.String(), "RESTORED the backup into a NEW one-member cluster") {
		t.Fatalf("the restored member's log does not say it restored a backup:\n%s", r.log.String())
	}
	if id := statusClusterID(t, r.api); id == snap.ClusterID {
		t.Fatalf("the restored cluster kept the old cluster ID %s", id)
	}
	for i, l := range held {
		if tok := getToken(t, r.api, l.Name); tok != uint64(i+1) {
			t.Fatalf("restored lease %s has token %d, want %d", l.Name, tok, i+1)
		}
	}
	wantValue(t, r.api, "cfg/a", "one", held[0].Token)
	mustCode(t, 6, cli(t, r.api, "get", "later/4"), "get a lease granted after the backup")
	next := acquireJSON(t, r.api, "after/restore", "--ttl", "1h").Token
	if next <= 7 {
		t.Fatalf("first token after the restore is %d, not above 7", next)
	}
	// The holder of jobs/1 still holds it, with the same token.
	mustCode(t, 0, cli(t, r.api, "kv", "put", "cfg/a", "two", "--lease", "jobs/1", "--token", fmt.Sprint(held[0].Token)), "kv put by a restored holder")

	// Restarted without --restore, it is an ordinary member.
	if code := r.stop(); code != 0 {
		t.Fatalf("restored member exited %d on SIGTERM", code)
	}
	r.node.Extra = []string{"--election-timeout", "200ms"}
	r.start()
	r.waitReady(20 * time.Second)
	if tok := acquireJSON(t, r.api, "after/restart", "--ttl", "1h").Token; tok != next+1 {
		t.Fatalf("token after a restart is %d, want %d", tok, next+1)
	}
	// A member of the old cluster that comes back cannot join the
	// restored one: it carries the old cluster ID.
	old.node.Join = r.api
	old.start()
	select {
	case <-old.proc.Exited():
		if code := old.proc.ExitCode(); code != 1 || !strings.Contains(old.proc.Output(), "cannot join") {
			t.Fatalf("an old member joining the restored cluster exited %d; output:\n%s", code, old.proc.Output())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("an old member still runs 20s after it asked to join the restored cluster; its log:\n%s", old.log.String())
	}
	checkLogDocumented(t, old, r)
}

// TestRestoreRefusals: --restore refuses a data directory that holds
// anything and a backup whose checksum does not match, with exit 1 and
// a message that says why, changing nothing; a restart of the restored
// member with --restore still set is refused the same way.
func TestRestoreRefusals(t *testing.T) {
	old := startSingle(t)
	acquireJSON(t, old.api, "a", "--ttl", "1h")
	file := filepath.Join(t.TempDir(), "backup.tnr")
	snapshotSave(t, old.api, file)
	old.kill()

	args := func(dir string, extra ...string) []string {
		return append([]string{"--data-dir", dir, "--listen", "127.0.0.1:0", "--raft-listen", "127.0.0.1:1"}, extra...)
	}
	t.Run("a non-empty directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "keep"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		before, _ := dirdigest.Of(dir)
		r := runTenured(t, args(dir, "--restore", file)...)
		if r.code != 1 || !strings.Contains(r.stderr, "the data directory is not empty") || !strings.Contains(r.stderr, "keep") {
			t.Fatalf("--restore into a non-empty directory: %v; want exit 1 and the reason", r)
		}
		if after, _ := dirdigest.Of(dir); after != before {
			t.Fatalf("the refused restore changed the directory")
		}
	})
	t.Run("a corrupt file", func(t *testing.T) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x20
		bad := filepath.Join(t.TempDir(), "bad.tnr")
		if err := os.WriteFile(bad, data, 0o600); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(t.TempDir(), "data")
		r := runTenured(t, args(dir, "--restore", bad)...)
		if r.code != 1 || !strings.Contains(r.stderr, "backup file is corrupt") || !strings.Contains(r.stderr, "SHA-256") {
			t.Fatalf("--restore of a corrupt backup: %v; want exit 1 and the checksum", r)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the refused restore made %s", dir)
		}
	})
	t.Run("a missing file", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "data")
		r := runTenured(t, args(dir, "--restore", filepath.Join(dir, "nope"))...)
		if r.code != 1 || !strings.Contains(r.stderr, "no such file") {
			t.Fatalf("--restore of a missing file: %v; want exit 1", r)
		}
	})
}

// TestRestoreTokenFloor: --token-floor sets the first token of the
// restored cluster, but never below the backup's last token + 1.
func TestRestoreTokenFloor(t *testing.T) {
	old := startSingle(t)
	for i := 1; i <= 3; i++ {
		acquireJSON(t, old.api, fmt.Sprint("a", i), "--ttl", "1h")
	}
	file := filepath.Join(t.TempDir(), "backup.tnr")
	snapshotSave(t, old.api, file)
	old.kill()
	for _, tc := range []struct {
		floor string
		want  uint64
	}{
		{"1000000", 1000000},
		{"2", 4},
	} {
		t.Run(tc.floor, func(t *testing.T) {
			r := newServer(t, "r1", "", "--election-timeout", "200ms", "--restore", file, "--token-floor", tc.floor)
			r.start()
			r.waitReady(20 * time.Second)
			if tok := acquireJSON(t, r.api, "next", "--ttl", "1h").Token; tok != tc.want {
				t.Fatalf("--token-floor %s: first token %d, want %d", tc.floor, tok, tc.want)
			}
			r.kill()
		})
	}
}

// TestForceNewCluster runs the procedure "Recover from losing a
// majority" of docs/operations.md: of three members, two are lost for
// good (killed, their directories deleted). The survivor starts as a new
// one-member cluster from its own data with --force-new-cluster: it
// keeps its leases and values, its next token is larger than every token
// granted before, and a new member joins it and becomes a voter.
func TestForceNewCluster(t *testing.T) {
	ns := startThree(t)
	all := ns[0].api + "," + ns[1].api + "," + ns[2].api
	var top uint64
	var held []jsonLease
	for i := range 5 {
		l := acquireJSON(t, all, fmt.Sprint("svc/", i), "--holder", "w", "--ttl", "1h")
		held = append(held, l)
		top = max(top, l.Token)
	}
	mustCode(t, 0, cli(t, all, "kv", "put", "svc/config", "v1", "--lease", "svc/0", "--token", fmt.Sprint(held[0].Token)), "kv put")
	// A backup through a follower: it relays the leader's.
	st, err := status(t, ns[0].api)
	if err != nil {
		t.Fatal(err)
	}
	var survivor *server
	var lost []*server
	for _, s := range ns {
		if s.name != st.Leader && survivor == nil {
			survivor = s
		} else {
			lost = append(lost, s)
		}
	}
	snap := snapshotSave(t, survivor.api, filepath.Join(t.TempDir(), "via-follower.tnr"))
	if snap.LastToken != top {
		t.Fatalf("backup through a follower has last token %d, want %d", snap.LastToken, top)
	}
	// The survivor has everything up to here; then the others are lost.
	eventually(t, "the survivor to apply every grant", 20*time.Second, func() error {
		if tok := getToken(t, survivor.api, "svc/4"); tok != held[4].Token {
			return fmt.Errorf("survivor has svc/4 at token %d", tok)
		}
		return nil
	})
	oldID := statusClusterID(t, survivor.api)
	for _, s := range lost {
		s.kill()
		if err := os.RemoveAll(s.dataDir); err != nil {
			t.Fatal(err)
		}
	}
	survivor.kill()
	// The survivor was started with --join; it starts a new cluster now,
	// which joins nothing.
	survivor.node.Join = ""
	survivor.node.Extra = []string{"--election-timeout", calmElection, "--force-new-cluster"}
	survivor.start()
	survivor.waitReady(20 * time.Second)
	if !strings.Contains(survivor.log.String(), "FORCED a NEW one-member cluster") {
		t.Fatalf("the survivor's log does not say it forced a new cluster:\n%s", survivor.log.String())
	}
	if id := statusClusterID(t, survivor.api); id == oldID {
		t.Fatalf("the forced cluster kept the old ID %s", id)
	}
	for _, l := range held {
		if tok := getToken(t, survivor.api, l.Name); tok != l.Token {
			t.Fatalf("after the forced new cluster %s has token %d, want %d", l.Name, tok, l.Token)
		}
	}
	wantValue(t, survivor.api, "svc/config", "v1", held[0].Token)
	next := acquireJSON(t, survivor.api, "svc/new", "--ttl", "1h").Token
	if next <= top {
		t.Fatalf("first token of the forced cluster is %d, not above %d", next, top)
	}

	// Restarted without the flag (as the procedure says), then a new
	// member with an empty directory joins.
	if code := survivor.stop(); code != 0 {
		t.Fatalf("survivor exited %d on SIGTERM", code)
	}
	survivor.node.Extra = []string{"--election-timeout", calmElection}
	survivor.start()
	survivor.waitReady(20 * time.Second)
	n4 := newServer(t, "n4", survivor.api, "--election-timeout", calmElection)
	n4.start()
	waitVoters(t, survivor.api, 2)
	waitVoters(t, n4.api, 2)
	eventually(t, "n4 to have the survivor's leases", 20*time.Second, func() error {
		r := cli(t, n4.api, "status", "-o", "json")
		var s struct {
			LastToken uint64 `json:"last_token"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &s); err != nil || s.LastToken != next {
			return fmt.Errorf("n4 status %v", r)
		}
		return nil
	})
	if tok := acquireJSON(t, survivor.api+","+n4.api, "svc/after-join", "--ttl", "1h").Token; tok != next+1 {
		t.Fatalf("token after the join is %d, want %d", tok, next+1)
	}
	checkLogDocumented(t, append(ns, n4)...)
}
