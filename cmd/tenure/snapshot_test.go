package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/internal/fakeserver"
)

// fakeBackup is a file in the backup format (header, body, checksum).
func fakeBackup(body string) []byte {
	head := `{"format":"tenure-backup","version":1,"cluster_id":"c1","node_id":"n1","index":17,"last_token":5,"created":"2026-12-02T00:53:08Z"}` + "\n" + body
	return fmt.Appendf(nil, "%ssha256 %x\n", head, sha256.Sum256([]byte(head)))
}

// snapshotServer serves data as a backup in chunks of 7 bytes, then
// fails with fail if it is not nil.
func snapshotServer(t *testing.T, data []byte, fail error) string {
	return startCluster(t, func(s *fakeserver.Server) {
		s.Snapshot = func(_ context.Context, send func([]byte) error) error {
			rest := data
			for len(rest) > 0 {
				k := min(7, len(rest))
				if err := send(rest[:k]); err != nil {
					return err
				}
				rest = rest[k:]
			}
			return fail
		}
	}).addr
}

// entries lists the names in dir.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func TestSnapshotSave(t *testing.T) {
	data := fakeBackup(`{"version":1,"members":{}}` + "\n" + `{"version":1,"now":0,"last_token":5}` + "\n")
	addr := snapshotServer(t, data, nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "b.tnr")
	res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": addr}, "snapshot", "save", file)
	sum := fmt.Sprintf("%x", sha256.Sum256(data[:len(data)-72]))
	want := fmt.Sprintf("saved %s: index 17, last token 5, %d bytes, cluster c1, sha256 %s\n", file, len(data), sum)
	if res.code != exitOK || res.stdout != want {
		t.Fatalf("snapshot save: code %d, stdout %q, stderr %q; want %q", res.code, res.stdout, res.stderr, want)
	}
	if got, _ := os.ReadFile(file); string(got) != string(data) {
		t.Fatalf("FILE holds %q, want what the server sent", got)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Fatalf("the directory holds %q, want only the backup", names)
	}
	res = runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": addr}, "snapshot", "save", file, "-o", "json")
	var j snapshotJSON
	if err := json.Unmarshal([]byte(res.stdout), &j); err != nil || j.Index != 17 || j.LastToken != 5 || j.Size != int64(len(data)) || j.SHA256 != sum {
		t.Fatalf("snapshot save -o json: %q (%v)", res.stdout, err)
	}
}

// A backup that fails (the server breaks off, sends a damaged file, or
// refuses) exits non-zero and leaves FILE as it was, with no temporary
// file beside it.
func TestSnapshotSaveFailureChangesNothing(t *testing.T) {
	good := fakeBackup("state\n")
	damaged := append([]byte(nil), good...)
	damaged[10] ^= 1
	for _, tc := range []struct {
		name string
		data []byte
		fail error
		code int
		want string
	}{
		{"broken off", good[:20], connect.NewError(connect.CodeAborted, errors.New("leader stopped")), exitFailure, "broke off after 20 bytes"},
		{"damaged", damaged, nil, exitFailure, "does not verify"},
		{"truncated", good[:len(good)-5], nil, exitFailure, "checksum line"},
		{"not permitted", nil, connect.NewError(connect.CodePermissionDenied, errors.New("needs admin")), exitDenied, "needs admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := snapshotServer(t, tc.data, tc.fail)
			dir := t.TempDir()
			file := filepath.Join(dir, "b.tnr")
			if err := os.WriteFile(file, []byte("the old backup"), 0o600); err != nil {
				t.Fatal(err)
			}
			res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": addr}, "snapshot", "save", file)
			if res.code != tc.code || !strings.Contains(res.stderr, tc.want) {
				t.Fatalf("code %d, stderr %q; want %d and %q", res.code, res.stderr, tc.code, tc.want)
			}
			if got, _ := os.ReadFile(file); string(got) != "the old backup" {
				t.Fatalf("a failed save changed FILE to %q", got)
			}
			if names := entries(t, dir); len(names) != 1 {
				t.Fatalf("a failed save left %q", names)
			}
		})
	}
}

func TestSnapshotSaveUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"snapshot"},
		{"snapshot", "load"},
		{"snapshot", "save"},
		{"snapshot", "save", dir},
		{"snapshot", "save", filepath.Join(dir, "f"), "extra"},
		{"snapshot", "save", filepath.Join(dir, "f"), "--timeout", "0s"},
	} {
		if res := runCLI(t.Context(), nil, args...); res.code != exitUsage {
			t.Errorf("%q: code %d, stderr %q; want 2", args, res.code, res.stderr)
		}
	}
	if names := entries(t, dir); len(names) != 0 {
		t.Errorf("usage errors left %q", names)
	}
}
