package demo

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
)

func TestWorkerArgsRoundTrip(t *testing.T) {
	endpoints := []string{"127.0.0.1:1", "127.0.0.1:2"}
	for _, spec := range []workerSpec{
		{Actor: "A", Lease: "demo/fenced", TTL: 2 * time.Second, Store: storeKV, Key: "report",
			Writes: []string{"A-1", "A-2"}, Gap: time.Second, GapKind: gapWork},
		{Actor: "B", Lease: "demo/timeout-lock", TTL: time.Second, Wait: 20 * time.Second, Store: storeDirPrefix + "/tmp/x",
			Key: "report", Writes: []string{"B-1, with a comma"}, GapKind: gapWork, Release: true},
	} {
		w, err := ParseWorker(spec.args(endpoints))
		if err != nil {
			t.Fatalf("ParseWorker(%q): %v", spec.args(endpoints), err)
		}
		if !reflect.DeepEqual(w.spec, spec) || !reflect.DeepEqual(w.endpoints, endpoints) {
			t.Fatalf("round trip of %+v gave %+v, %v", spec, w.spec, w.endpoints)
		}
	}
}

func TestParseWorkerErrors(t *testing.T) {
	base := []string{"--actor", "A", "--endpoints", "127.0.0.1:1", "--lease", "l", "--key", "k"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--actor", "A"}, "required"},
		{[]string{"--actor", "A", "--lease", "l", "--key", "k"}, "--endpoints is required"},
		{append(base, "--gap-kind", "nap"), "--gap-kind"},
		{append(base, "--store", storeMemory), "in-memory store"},
		{append(base, "extra"), "unexpected argument"},
		{append(base, "--bogus"), "bogus"},
	} {
		if _, err := ParseWorker(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseWorker(%q): %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// A timeout-only lock's store takes every write, whatever the token.
func TestUnfencedStores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ds, err := openStore(storeDirPrefix+dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]store{"memory": newMemStore(), "dir": ds} {
		t.Run(name, func(t *testing.T) {
			if st.Fenced() {
				t.Fatal("store claims to check tokens")
			}
			if _, _, err := st.Get(ctx, "a/b"); !errors.Is(err, client.ErrNotFound) {
				t.Fatalf("get of a missing key: %v, want ErrNotFound", err)
			}
			for _, w := range []struct {
				v     string
				token uint64
			}{{"new", 9}, {"late", 3}} {
				if err := st.Put(ctx, "a/b", w.v, "l", w.token); err != nil {
					t.Fatalf("put %q with token %d: %v", w.v, w.token, err)
				}
			}
			if v, _, err := st.Get(ctx, "a/b"); err != nil || v != "late" {
				t.Fatalf("get = %q, %v; want the late write", v, err)
			}
		})
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != "a_b" {
		t.Fatalf("store directory holds %v, want just a_b", entries)
	}
	if _, err := openStore(storeDirPrefix+filepath.Join(dir, "missing"), nil, nil); err == nil {
		t.Fatal("openStore of a missing directory succeeded")
	}
	if _, err := openStore(storeMemory, nil, nil); err == nil {
		t.Fatal("openStore of the memory store without one succeeded")
	}
}

// TestWorkerProcessOutput runs a worker the way a worker process does
// (parsed flags, JSON lines out) against an embedded cluster, and reads
// its lines back the way the demo does.
func TestWorkerProcessOutput(t *testing.T) {
	cl := mustCluster(t)
	spec := workerSpec{Actor: "B", Lease: "demo/worker", TTL: testTTL, Wait: 5 * time.Second, Store: storeKV,
		Key: "w", Writes: []string{"B-1"}, GapKind: gapWork, Release: true}
	w, err := ParseWorker(spec.args(cl.Endpoints()))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := w.Run(ctxT(t, 20*time.Second), strings.NewReader(""), &out); err != nil {
		t.Fatalf("Run: %v", err)
	}
	var ops []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var j eventJSON
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		e := j.event()
		if j.Type != "event" || e.Actor != "B" || e.Scenario != "" || j.Time != "" || e.Err != "" || e.Token == 0 {
			t.Fatalf("line %q decodes to %+v", l, e)
		}
		ops = append(ops, e.Op)
	}
	if want := []string{"acquire", "put", "release"}; !reflect.DeepEqual(ops, want) {
		t.Fatalf("ops %v, want %v", ops, want)
	}
}
