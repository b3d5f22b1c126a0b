package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// jsonSharedLease is a lease of `tenure acquire -o json` with its shared flag.
type jsonSharedLease struct {
	jsonLease
	Shared bool `json:"shared"`
}

// TestSharedLocks: two shared holders at once with their own tokens; an
// exclusive request waits for both; a shared request queued behind the
// waiting exclusive one waits too (no writer starvation), and is granted
// when the writer is done. Shared tokens do not write the fenced store.
// The state (shared grants and waiters) survives a restart from a
// snapshot.
func TestSharedLocks(t *testing.T) {
	s := newServer(t, "n1", "", "--election-timeout", "200ms", "--snapshot-interval", "100ms", "--snapshot-threshold", "5")
	s.start()
	s.waitReady(20 * time.Second)
	ep := s.api
	const name = "db/main"

	shared := func(holder string) jsonSharedLease {
		t.Helper()
		r := cli(t, ep, "acquire", name, "--shared", "--holder", holder, "--ttl", "1m", "-o", "json")
		mustCode(t, 0, r, "shared acquire by "+holder)
		var l jsonSharedLease
		if err := json.Unmarshal([]byte(r.stdout), &l); err != nil || !l.Shared || l.Holder != holder {
			t.Fatalf("shared acquire by %s printed %q (%v)", holder, r.stdout, err)
		}
		return l
	}
	r1 := shared("r1")
	r2 := shared("r2")
	if r2.Token <= r1.Token {
		t.Fatalf("tokens %d then %d: not growing", r1.Token, r2.Token)
	}
	if r := cli(t, ep, "get", name); r.code != 0 || strings.Count(r.stdout, "(shared)") != 2 {
		t.Fatalf("get of the two readers: %v", r)
	}
	// A reader's token does not write.
	r := cli(t, ep, "kv", "put", "db/k", "v", "--lease", name, "--token", fmt.Sprint(r1.Token))
	mustCode(t, 2, r, "put with a shared token")
	if !strings.Contains(r.stderr, "shared") {
		t.Fatalf("put with a shared token: %v", r)
	}
	mustCode(t, 2, cli(t, ep, "acquire", name, "--shared", "--limit", "3"), "--shared with --limit")

	// The writer waits for both readers; a plain try is told it is held.
	mustCode(t, 3, cli(t, ep, "acquire", name, "--holder", "w0"), "writer try")
	w := startCLI(t, ep, "acquire", name, "--holder", "w", "--ttl", "1m", "--wait", "--timeout", "60s", "-o", "json")
	waitQueued(t, s, name, "w")
	// A reader after the waiting writer waits too.
	mustCode(t, 3, cli(t, ep, "acquire", name, "--shared", "--holder", "r3try"), "reader try behind the writer")
	r3 := startCLI(t, ep, "acquire", name, "--shared", "--holder", "r3", "--ttl", "1m", "--wait", "--timeout", "60s", "-o", "json")
	waitQueued(t, s, name, "r3")

	// Restart from a snapshot with readers and waiters: the state is kept.
	// (The waiting CLIs retry on the same endpoint, queued again in place.)
	for i := range 6 {
		mustCode(t, 0, cli(t, ep, "kv", "put", fmt.Sprintf("fill/%d", i), "v", "--lease", "fill", "--token",
			fmt.Sprint(acquireJSON(t, ep, "fill", "--holder", "f", "--ttl", "1m").Token)), "fill the log")
	}
	eventually(t, "a snapshot with the readers and waiters", 20*time.Second, func() error {
		files, _ := filepath.Glob(filepath.Join(s.dataDir, "snapshots", "*", "state.bin"))
		for _, f := range files {
			if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(`"Shared":true`)) && bytes.Contains(b, []byte(`"Holder":"r3"`)) {
				return nil
			}
		}
		return fmt.Errorf("none in %v", files)
	})
	s.kill()
	s.start()
	s.waitReady(20 * time.Second)
	if r := cli(t, ep, "get", name, "-o", "json"); r.code != 0 || strings.Count(r.stdout, `"shared":true`) != 2 {
		t.Fatalf("get after restart: %v", r)
	}
	waitQueued(t, s, name, "w")
	waitQueued(t, s, name, "r3")

	// One reader leaving is not enough for the writer.
	mustCode(t, 0, cli(t, ep, "release", name, "--token", fmt.Sprint(r1.Token)), "release r1")
	if h := history(t, s, name); strings.Join(h.Waiters, " ") != "w r3" {
		t.Fatalf("waiters after r1 left: %v, want w r3", h.Waiters)
	}
	// The second leaving grants the writer, with a larger token; r3 waits.
	mustCode(t, 0, cli(t, ep, "release", name, "--token", fmt.Sprint(r2.Token)), "release r2")
	wl := decode[jsonSharedLease](t, w.line("w's grant"))
	if wl.Holder != "w" || wl.Shared || wl.Token <= r2.Token {
		t.Fatalf("w got %+v, want an exclusive grant above %d", wl, r2.Token)
	}
	if h := history(t, s, name); strings.Join(h.Waiters, " ") != "r3" {
		t.Fatalf("waiters while w holds: %v, want r3", h.Waiters)
	}
	mustCode(t, 0, cli(t, ep, "kv", "put", "db/k", "v", "--lease", name, "--token", fmt.Sprint(wl.Token)), "put by the writer")
	// The writer done, the reader goes.
	mustCode(t, 0, cli(t, ep, "release", name, "--token", fmt.Sprint(wl.Token)), "release w")
	rl := decode[jsonSharedLease](t, r3.line("r3's grant"))
	if rl.Holder != "r3" || !rl.Shared || rl.Token <= wl.Token {
		t.Fatalf("r3 got %+v, want a shared grant above %d", rl, wl.Token)
	}
	// The history shows every grant as its own term.
	r = cli(t, ep, "history", name, "-o", "json")
	mustCode(t, 0, r, "history")
	if n := strings.Count(r.stdout, `"shared":true`); n != 3 {
		t.Fatalf("history has %d shared terms, want 3: %s", n, r.stdout)
	}
}

// TestSharedRun: two `tenure run --shared` commands run at once, each with
// its own token, and an exclusive acquire is held meanwhile; once both
// end, an exclusive `tenure run` runs.
func TestSharedRun(t *testing.T) {
	s := startSingle(t)
	ep := s.api
	const name = "db/run"
	gate := filepath.Join(t.TempDir(), "gate")
	cmd := `echo token $TENURE_TOKEN; while [ ! -e "` + gate + `" ]; do sleep 0.05; done`
	r1 := startCLI(t, ep, "run", name, "--shared", "--holder", "r1", "--ttl", "10s", "--", "sh", "-c", cmd)
	r2 := startCLI(t, ep, "run", name, "--shared", "--holder", "r2", "--ttl", "10s", "--", "sh", "-c", cmd)
	l1, l2 := r1.line("r1's token"), r2.line("r2's token")
	if l1 == l2 || !strings.HasPrefix(l1, "token ") || !strings.HasPrefix(l2, "token ") {
		t.Fatalf("the shared commands printed %q and %q, want two tokens", l1, l2)
	}
	mustCode(t, 3, cli(t, ep, "acquire", name, "--holder", "w"), "an exclusive acquire while both run")
	mustCode(t, 2, cli(t, ep, "run", name, "--shared", "--limit", "2", "--", "true"), "--shared with --limit")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	<-r1.done
	<-r2.done
	if r1.code != 0 || r2.code != 0 {
		t.Fatalf("the shared commands exited %d and %d", r1.code, r2.code)
	}
	w := cli(t, ep, "run", name, "--holder", "w", "--ttl", "10s", "--", "sh", "-c", "echo token $TENURE_TOKEN")
	mustCode(t, 0, w, "the exclusive run after them")
	if !strings.HasPrefix(w.stdout, "token ") || w.stdout == l1+"\n" || w.stdout == l2+"\n" {
		t.Fatalf("the exclusive run printed %q", w.stdout)
	}
}
