//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/lease"
)

// syncWriter collects output written from other goroutines and signals
// when it contains want.
type syncWriter struct {
	mu   sync.Mutex
	b    strings.Builder
	want string
	seen chan struct{}
}

func newSyncWriter(want string) *syncWriter {
	return &syncWriter{want: want, seen: make(chan struct{})}
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	had := strings.Contains(w.b.String(), w.want)
	w.b.Write(p)
	if !had && strings.Contains(w.b.String(), w.want) {
		close(w.seen)
	}
	return len(p), nil
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func TestRunGivesTheCommandItsLease(t *testing.T) {
	c := startCluster(t)
	env := map[string]string{"TENURE_ENDPOINTS": c.addr}
	res := runCLI(t.Context(), env, "run", "jobs/x", "--holder", "h1", "--ttl", "3s", "--",
		"sh", "-c", `echo "$TENURE_LEASE $TENURE_TOKEN $TENURE_HOLDER $TENURE_ENDPOINTS"; exit 5`)
	if want := fmt.Sprintf("jobs/x %d h1 %s\n", currentToken, c.addr); res.code != 5 || res.stdout != want || res.stderr != "" {
		t.Errorf("got code %d, stdout %q, stderr %q; want 5 and %q", res.code, res.stdout, res.stderr, want)
	}
	if n := c.Calls("Release"); n != 1 {
		t.Errorf("%d releases after the command exited, want 1", n)
	}
	res = runCLI(t.Context(), env, "run", "jobs/x", "--", "sh", "-c", "kill -KILL $$")
	if res.code != 128+9 {
		t.Errorf("command killed by SIGKILL: tenure run exited %d, want 137", res.code)
	}
	res = runCLI(t.Context(), env, "run", "jobs/x", "--", "/nonexistent/command")
	if res.code != exitFailure || !strings.Contains(res.stderr, "tenure: start /nonexistent/command: ") {
		t.Errorf("got code %d, stderr %q; want 1 and why the command did not start", res.code, res.stderr)
	}
}

// interruptedRun is a tenure run of script whose main context the test
// ends (as SIGINT or SIGTERM end main's).
type interruptedRun struct {
	c      *cluster
	out    *syncWriter
	errb   strings.Builder
	cancel context.CancelFunc
	done   chan int
}

// startInterruptedRun starts tenure run with script, which must print
// "started" once it runs, and returns once it has.
func startInterruptedRun(t *testing.T, script string) *interruptedRun {
	r := &interruptedRun{c: startCluster(t), out: newSyncWriter("started\n"), done: make(chan int)}
	ctx, cancel := context.WithCancel(t.Context())
	r.cancel = cancel
	go func() {
		r.done <- run(ctx, []string{"run", "jobs/x", "--", "sh", "-c", script},
			r.out, &r.errb, func(k string) string { return map[string]string{"TENURE_ENDPOINTS": r.c.addr}[k] })
	}()
	<-r.out.seen
	return r
}

func TestRunPassesOnItsInterruption(t *testing.T) {
	r := startInterruptedRun(t, `trap 'echo got TERM; exit 0' TERM; echo started; sleep 60 & wait`)
	r.cancel() // as main's context on SIGINT or SIGTERM
	if code := <-r.done; code != 0 || !strings.Contains(r.out.String(), "got TERM") {
		t.Errorf("got code %d, stdout %q, stderr %q; want the command to get SIGTERM and exit 0", code, r.out, r.errb.String())
	}
	if n := r.c.Calls("Release"); n != 1 {
		t.Errorf("%d releases, want 1", n)
	}
}

// TestRunPassesOnALateSignal: main's context can end before os/signal
// hands the signal that ended it to tenure run (on a loaded machine, more
// than 50ms before). tenure run passes on the signal once it comes, not
// SIGTERM in its place. The signal here comes 300ms after the context
// ends, on purpose: that lateness is what is under test.
func TestRunPassesOnALateSignal(t *testing.T) {
	r := startInterruptedRun(t, `trap 'echo got INT; exit 3' INT; echo started; sleep 60 & wait`)
	r.cancel() // main's context, ended by a SIGINT not delivered yet
	time.Sleep(300 * time.Millisecond)
	// The test holds SIGINT too, so that it never ends the test binary
	// (if tenure run had already stopped listening).
	held := make(chan os.Signal, 1)
	signal.Notify(held, syscall.SIGINT)
	defer signal.Stop(held)
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	if code := <-r.done; code != 3 || !strings.Contains(r.out.String(), "got INT") {
		t.Errorf("got code %d, stdout %q, stderr %q; want the command to get the SIGINT and exit 3", code, r.out, r.errb.String())
	}
}

func TestRunKillsTheCommandWhenTheLeaseIsLost(t *testing.T) {
	// Every renewal is refused: someone else has the lease now.
	c := startCluster(t, func(s *fakeserver.Server) {
		s.Renew = func(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
			res := &tenurev1.RenewResponse{}
			for _, r := range req.GetLeases() {
				err := stale(r.GetName(), r.GetToken())
				res.Results = append(res.Results, &tenurev1.RenewResult{Name: r.GetName(), Token: r.GetToken(),
					Reason: lease.Reason(err), Message: err.Error()})
			}
			return res, nil
		}
	})
	start := time.Now()
	res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": c.addr}, "run", "jobs/x", "--ttl", "3s", "--",
		"sh", "-c", "trap '' TERM; echo started; sleep 60 & wait")
	took := time.Since(start)
	if res.code != exitFenced || !strings.HasPrefix(res.stderr, "tenure: lease jobs/x lost: the server no longer has this grant: lease: stale token 3") {
		t.Fatalf("got code %d, stdout %q, stderr %q; want 4 and why the lease was lost", res.code, res.stdout, res.stderr)
	}
	// Killed at the first renewal (after 1s), without waiting for the
	// deadline or for SIGTERM to be honoured.
	if took > 2*time.Second {
		t.Errorf("tenure run took %s, want it to stop the command at the first refused renewal", took)
	}
	if n := c.Calls("Release"); n != 0 {
		t.Errorf("%d releases of a lost lease, want none", n)
	}
}

func TestRunUsage(t *testing.T) {
	c := startCluster(t)
	tests := []struct {
		args []string
		msg  string
	}{
		{[]string{"run", "jobs/x", "echo"}, "missing -- CMD [ARGS...]"},
		{[]string{"run", "jobs/x", "--"}, "missing CMD after --"},
		{[]string{"run", "--", "echo"}, "missing NAME"},
		{[]string{"run", "jobs/x", "--ttl", "0s", "--", "echo"}, `invalid value "0s" for flag --ttl: must be a duration`},
		{[]string{"run", "jobs/x", "--ttl", "3s", "--kill-after", "2s", "--", "echo"},
			"--kill-after 2s does not fit --ttl 3s: it must be positive and at most 1.17s"},
		{[]string{"run", "jobs/x", "--kill-after", "-1s", "--", "echo"}, "--kill-after -1s does not fit"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			res := runCLI(t.Context(), map[string]string{"TENURE_ENDPOINTS": c.addr}, tt.args...)
			if res.code != exitUsage || !strings.HasPrefix(res.stderr, "tenure: "+tt.msg) || !strings.Contains(res.stderr, "Usage: tenure run") {
				t.Errorf("got code %d, stderr %q; want 2 and %q", res.code, res.stderr, tt.msg)
			}
		})
	}
	if n := c.TotalCalls(); n != 0 {
		t.Errorf("bad usage sent %d requests", n)
	}
	res := runCLI(t.Context(), nil, "run", "-h")
	if res.code != exitOK || !strings.Contains(res.stdout, "TENURE_TOKEN") || !strings.Contains(res.stdout, "-kill-after") {
		t.Errorf("run -h: code %d, stdout %q", res.code, res.stdout)
	}
}

func TestRunWaitsForAHeldLease(t *testing.T) {
	c := startCluster(t)
	// Interrupt the run once it waits in the server's queue (a fixed
	// 300ms was too short on a loaded machine: it was interrupted while
	// still making its first try).
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		defer cancel()
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if req := c.lastAcquire(); req != nil && req.GetWait() {
				return
			}
		}
	}()
	res := runCLI(ctx, map[string]string{"TENURE_ENDPOINTS": c.addr}, "run", "jobs/held", "--", "echo", "never")
	want := "tenure: jobs/held: held by b (token 3, 4.2s remaining); waiting for it\ntenure: interrupted while waiting for jobs/held\n"
	if res.code != exitFailure || res.stderr != want || res.stdout != "" {
		t.Errorf("got code %d, stdout %q, stderr %q; want 1 and %q", res.code, res.stdout, res.stderr, want)
	}
	if req := c.lastAcquire(); !req.GetWait() {
		t.Errorf("last acquire %v, want a wait in the server's queue", req)
	}
}
