package verify

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
)

// buildHarness builds tenure-verify and tenured side by side (without
// -race: only this test process is instrumented) and returns the path of
// tenure-verify.
func buildHarness(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, b := range []struct{ out, pkg string }{
		{"tenured", "github.com/tenure-io/tenure/cmd/tenured"},
		{"tenure-verify", "github.com/tenure-io/tenure/cmd/tenure-verify"},
	} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, b.out), b.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return filepath.Join(dir, "tenure-verify")
}

// evidenceDir returns the directory a harness run leaves its evidence in
// (summary, history, visualizations, node logs). With go test -artifacts
// it is the test's artifact directory under -outputdir; otherwise a
// directory that is removed only if the test passes, so that a failure
// (which names it) keeps its evidence.
func evidenceDir(t *testing.T) string {
	t.Helper()
	if f := flag.Lookup("test.artifacts"); f != nil && f.Value.String() == "true" {
		return t.ArtifactDir()
	}
	dir, err := os.MkdirTemp("", "tenure-verify-evidence-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("evidence of the failed run (history, visualizations, node logs) kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// runHarness runs tenure-verify with args and returns its exit code and
// the summary it wrote.
func runHarness(t *testing.T, bin string, args ...string) (int, Report, string) {
	t.Helper()
	out := evidenceDir(t)
	cmd := exec.Command(bin, append(args, "--out", out)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run tenure-verify: %v", err)
	}
	var rep Report
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err != nil {
		t.Fatalf("no summary (exit %d): %v\nstdout:\n%s\nstderr:\n%s", code, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("tenure-verify %s: exit %d\n%s", strings.Join(args, " "), code, stdout.String())
	t.Cleanup(func() {
		if code != 0 || t.Failed() {
			t.Logf("stderr of tenure-verify:\n%s", stderr.String())
		}
	})
	return code, rep, out
}

// TestVerify runs the real harness: a short run with every fault kind
// must pass, and the unfenced negative control must fail.
func TestVerify(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes for about two minutes")
	}
	bin := buildHarness(t)

	t.Run("PartitionIsolatesLeader", func(t *testing.T) {
		testPartition(t, filepath.Join(filepath.Dir(bin), "tenured"))
	})

	t.Run("MemberFaultRestoresCluster", func(t *testing.T) {
		testMemberFault(t, filepath.Join(filepath.Dir(bin), "tenured"))
	})

	t.Run("Short", func(t *testing.T) {
		code, rep, out := runHarness(t, bin, "--duration", "60s", "--seed", "1")
		if code != 0 || !rep.OK {
			t.Fatalf("exit %d, violations %v; evidence in %s", code, rep.Violations, out)
		}
		for _, k := range AllFaults {
			if rep.Injected[k] == 0 {
				t.Errorf("no %s fault was injected: %v", k, rep.Injected)
			}
		}
		for _, op := range []string{OpAcquire, "acquire-wait", OpRenew, OpRelease, OpPut, OpGet, OpRevoke, OpTerm, OpTermPut} {
			if rep.Ops[op][Ok] == 0 {
				t.Errorf("no successful %s: %v", op, rep.Ops)
			}
		}
		if rep.Ops[OpAcquire][HeldLockDelay]+rep.Ops["acquire-wait"][HeldLockDelay] == 0 {
			t.Errorf("no acquire was told of a lock-delay: %v", rep.Ops)
		}
		if rep.Watches.Events == 0 || rep.Terms.Terms == 0 {
			t.Errorf("the new checks saw nothing: watches %+v, terms %+v", rep.Watches, rep.Terms)
		}
	})

	t.Run("UnsafeFails", func(t *testing.T) {
		code, rep, out := runHarness(t, bin, "--duration", "12s", "--seed", "2", "--unsafe", "--faults", FaultPauseClient)
		if code != 1 || rep.OK {
			t.Fatalf("the unfenced run passed (exit %d); the checker cannot fail", code)
		}
		stale := false
		for _, v := range rep.Violations {
			stale = stale || v.Invariant == InvStaleWrite
		}
		if !stale {
			t.Errorf("no %s violation among %v", InvStaleWrite, rep.Violations)
		}
		if _, err := os.Stat(filepath.Join(out, "history.jsonl")); err != nil {
			t.Errorf("no history left behind: %v", err)
		}
	})
}

// testPartition isolates the leader through the proxies and checks that
// the rest elect another leader while the old one cannot commit, then that
// the cluster is whole again after Heal.
func testPartition(t *testing.T, tenured string) {
	ctx := context.Background()
	c, err := NewCluster(tenured, evidenceDir(t), 3, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Boot(ctx); err != nil {
		t.Fatal(err)
	}
	old, ok := c.Leader(ctx)
	if !ok {
		t.Fatal("no leader after boot")
	}
	c.Net.Isolate(old)
	statusOf := func(i int) (client.Status, error) { return nodeStatus(ctx, c, i) }
	other := (old + 1) % 3
	err = waitFor(ctx, 15*time.Second, "the majority to elect another leader", func() bool {
		st, err := statusOf(other)
		return err == nil && st.LeaderID != "" && st.LeaderID != c.Nodes[old].ID
	})
	if err != nil {
		t.Fatal(err)
	}
	err = waitFor(ctx, 15*time.Second, "the isolated old leader to step down", func() bool {
		st, err := statusOf(old)
		return err == nil && !strings.HasPrefix(st.State, "leader")
	})
	if err != nil {
		t.Fatal(err)
	}
	c.Net.Heal()
	err = waitFor(ctx, 15*time.Second, "the old leader to follow the new one", func() bool {
		a, err1 := statusOf(old)
		b, err2 := statusOf(other)
		return err1 == nil && err2 == nil && a.LeaderID != "" && a.LeaderID == b.LeaderID && a.Term == b.Term
	})
	if err != nil {
		t.Fatal(err)
	}
}
