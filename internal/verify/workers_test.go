package verify

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMain lets this test binary be a worker process, as tenure-verify's
// binary is (StartWorkers runs its own executable).
func TestMain(m *testing.M) {
	if cfg := os.Getenv(WorkerEnv); cfg != "" {
		os.Exit(RunWorker(cfg))
	}
	os.Exit(m.Run())
}

// A worker process that dies before the run ends is reported, with how
// it ended: its operation in flight is missing from the history, and a
// check that then fails must not be taken for the cluster's fault.
func TestWorkerSetReportsEarlyExit(t *testing.T) {
	cfg := func(id int) WorkerConfig {
		// Nothing listens there: the workers keep failing and retrying.
		return WorkerConfig{ID: id, Seed: 1, Endpoints: []string{"127.0.0.1:1"}, Names: []string{"n"}, TTL: time.Second}
	}
	ws, err := StartWorkers([]WorkerConfig{cfg(0), cfg(1)}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if !ws.Signal(1, syscall.SIGKILL) {
		t.Fatal("could not signal worker 1")
	}
	<-ws.exited[1]
	ws.Stop()
	if len(ws.Early) != 1 || ws.Early[0].Worker != 1 || ws.Early[0].State != "signal: killed" {
		t.Fatalf("early exits = %+v, want worker 1 killed", ws.Early)
	}
	v := EarlyExitViolations(ws.Early)
	if len(v) != 1 || v[0].Invariant != InvWorkersRan || !strings.Contains(v[0].Detail, "worker 1 exited") {
		t.Fatalf("violations = %+v", v)
	}
}
