package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer that a process writes while a test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lines returns the complete lines written so far.
func (b *syncBuffer) lines() []string {
	s := b.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	} else {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}

// proc is a background process whose output a test watches.
type proc struct {
	t              *testing.T
	name           string
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	exited         chan struct{}
	code           int
}

// startProc starts bin with args, TENURE_ENDPOINTS=endpoints in its
// environment, and kills it when the test ends.
func startProc(t *testing.T, name, endpoints, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(os.Environ(), "TENURE_ENDPOINTS="+endpoints)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("--- %s: exit %d\nstdout:\n%s\nstderr:\n%s", p.name, p.code, p.stdout, p.stderr)
		}
	})
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.exited:
	default:
		p.cmd.Process.Signal(sig)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exited:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("%s did not exit within %s; stderr:\n%s", p.name, timeout, p.stderr)
	}
	return 0
}

// waitLine polls buf until a line matches re and returns the line's
// submatches and when the match was first seen.
func waitLine(t *testing.T, what string, buf *syncBuffer, re *regexp.Regexp, timeout time.Duration) ([]string, time.Time) {
	t.Helper()
	var m []string
	eventually(t, what, timeout, func() error {
		for _, l := range buf.lines() {
			if m = re.FindStringSubmatch(l); m != nil {
				return nil
			}
		}
		return fmt.Errorf("no line matches %s yet", re)
	})
	return m, time.Now()
}

// buildTestProgram builds the program in e2e/testdata/name.
func buildTestProgram(t *testing.T, name string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("go", "build", "-o", out, "./testdata/"+name)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("building testdata/%s: %v", name, err)
	}
	return out
}
