package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/tenuredproc"
)

var bin struct {
	tenured, tenure string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.tenured = filepath.Join(dir, "tenured")
	bin.tenure = filepath.Join(dir, "tenure")
	for _, b := range []struct{ out, pkg string }{
		{bin.tenured, "github.com/tenure-io/tenure/cmd/tenured"},
		{bin.tenure, "github.com/tenure-io/tenure/cmd/tenure"},
	} {
		if err := tenuredproc.Build(b.out, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// server is one tenured process.
type server struct {
	t       *testing.T
	node    tenuredproc.Node
	name    string
	api     string
	raft    string
	dataDir string
	proc    *tenuredproc.Process
	log     *syncBuffer
}

// newServer prepares a server; start starts it, and the process is
// killed when the test ends. Its ports stay reserved until then (also
// while it is down), and its log keeps the output of every start.
func newServer(t *testing.T, name, join string, extra ...string) *server {
	ports, err := tenuredproc.ReservePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	addrs := ports.Addrs()
	s := &server{t: t, name: name, api: addrs[0], raft: addrs[1], dataDir: filepath.Join(t.TempDir(), name), log: &syncBuffer{}}
	s.node = tenuredproc.Node{ID: name, API: s.api, Raft: s.raft, DataDir: s.dataDir, Join: join, Extra: extra}
	t.Cleanup(func() {
		s.kill()
		ports.Release()
		if t.Failed() {
			t.Logf("--- log of %s ---\n%s", s.name, s.log.String())
		}
	})
	return s
}

// startSingle starts a one-node cluster with a short election timeout
// and waits until it is ready.
func startSingle(t *testing.T) *server {
	t.Helper()
	s := newServer(t, "n1", "", "--election-timeout", "200ms")
	s.start()
	s.waitReady(20 * time.Second)
	return s
}

func (s *server) start() {
	s.t.Helper()
	p, err := tenuredproc.Start(bin.tenured, s.node.Args(), s.log)
	if err != nil {
		s.t.Fatal(err)
	}
	s.proc = p
}

// kill sends SIGKILL and waits for the process to exit.
func (s *server) kill() {
	if s.proc != nil {
		s.proc.Kill()
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() int {
	s.t.Helper()
	code, ok := s.proc.Stop(20 * time.Second)
	if !ok {
		s.t.Fatalf("%s did not exit within 20s of SIGTERM", s.name)
	}
	return code
}

// waitReady polls /readyz until the node knows a leader.
func (s *server) waitReady(timeout time.Duration) {
	s.t.Helper()
	if err := s.proc.WaitReady(context.Background(), s.api, timeout); err != nil {
		s.t.Fatalf("%s: %v", s.name, err)
	}
}

// eventually polls f until it returns nil or timeout passes, then fails
// with the last error and what was awaited.
func eventually(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last error: %v", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// result is one CLI run.
type result struct {
	code           int
	stdout, stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d, stdout %.2000q, stderr %.2000q", r.code, r.stdout, r.stderr)
}

// cli runs the tenure CLI against endpoints.
func cli(t *testing.T, endpoints string, args ...string) result {
	t.Helper()
	return cliStdin(t, endpoints, nil, args...)
}

// cliStdin runs the tenure CLI with stdin as its standard input.
func cliStdin(t *testing.T, endpoints string, stdin io.Reader, args ...string) result {
	t.Helper()
	return runCLI(t, []string{"TENURE_ENDPOINTS=" + endpoints}, stdin, args...)
}

// runCLI runs the tenure CLI with env added to the environment and stdin
// (if not nil) as its standard input.
func runCLI(t *testing.T, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	return runBinary(t, bin.tenure, 60*time.Second, env, stdin, args...)
}

// runBinary runs the program at path until it exits or timeout passes,
// with env added to the environment and stdin (if not nil) as its
// standard input, and returns its exit code and output.
func runBinary(t *testing.T, path string, timeout time.Duration, env []string, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	cmd.Stdin = stdin
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errOut.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running %s %.200q: %v", filepath.Base(path), strings.Join(args, " "), err)
	}
	return r
}

// jsonLease is the CLI's -o json form of a lease.
type jsonLease struct {
	Name      string `json:"name"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	TTL       string `json:"ttl"`
	Remaining string `json:"remaining"`
}

// acquireJSON runs `tenure acquire ... -o json` and decodes the lease.
func acquireJSON(t *testing.T, endpoints string, args ...string) jsonLease {
	t.Helper()
	r := cli(t, endpoints, append([]string{"acquire", "-o", "json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("tenure acquire %v: %v", args, r)
	}
	var l jsonLease
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &l); err != nil {
		t.Fatalf("acquire output %q is not a JSON lease: %v", r.stdout, err)
	}
	if l.Token == 0 {
		t.Fatalf("acquire output %q has no token", r.stdout)
	}
	return l
}

func mustCode(t *testing.T, want int, r result, what string) {
	t.Helper()
	if r.code != want {
		t.Fatalf("%s: want exit %d, got %v", what, want, r)
	}
}
