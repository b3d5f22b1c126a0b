package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
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
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n", b.pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// server is one tenured process.
type server struct {
	t        *testing.T
	name     string
	api      string
	raft     string
	dataDir  string
	join     string
	extra    []string
	cmd      *exec.Cmd
	log      *bytes.Buffer
	exited   chan struct{}
	exitCode int
}

// newServer prepares a server; start starts it, and the process is
// killed when the test ends. Its log keeps the output of every start.
func newServer(t *testing.T, name, join string, extra ...string) *server {
	s := &server{
		t: t, name: name, api: freeAddr(t), raft: freeAddr(t),
		dataDir: filepath.Join(t.TempDir(), name), join: join, extra: extra,
		log: new(bytes.Buffer),
	}
	t.Cleanup(func() {
		s.kill()
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
	args := []string{"--node-id", s.name, "--listen", s.api, "--raft-listen", s.raft, "--data-dir", s.dataDir}
	if s.join != "" {
		args = append(args, "--join", s.join)
	}
	args = append(args, s.extra...)
	cmd := exec.Command(bin.tenured, args...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.name, err)
	}
	exited := make(chan struct{})
	s.cmd, s.exited = cmd, exited
	go func() {
		cmd.Wait()
		s.exitCode = cmd.ProcessState.ExitCode()
		close(exited)
	}()
}

// kill sends SIGKILL and waits for the process to exit.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exited
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() int {
	s.t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		s.t.Fatalf("%s did not exit within 20s of SIGTERM", s.name)
	}
	return s.exitCode
}

// waitReady polls /readyz until the node knows a leader.
func (s *server) waitReady(timeout time.Duration) {
	s.t.Helper()
	eventually(s.t, s.name+" to be ready", timeout, func() error {
		res, err := http.Get("http://" + s.api + "/readyz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", res.Status)
		}
		return nil
	})
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.tenure, args...)
	cmd.Env = append(os.Environ(), "TENURE_ENDPOINTS="+endpoints)
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
		t.Fatalf("running tenure %.200q: %v", strings.Join(args, " "), err)
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
