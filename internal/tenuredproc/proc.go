package tenuredproc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Node is the identity of one tenured: what its command line says.
type Node struct {
	ID            string // --node-id
	API           string // --listen
	Raft          string // --raft-listen
	RaftAdvertise string // --raft-advertise, if set
	DataDir       string // --data-dir
	Join          string // --join, if set
	Extra         []string
}

// Args returns n's command-line arguments.
func (n Node) Args() []string {
	args := []string{"--node-id", n.ID, "--listen", n.API, "--raft-listen", n.Raft, "--data-dir", n.DataDir}
	if n.RaftAdvertise != "" {
		args = append(args, "--raft-advertise", n.RaftAdvertise)
	}
	if n.Join != "" {
		args = append(args, "--join", n.Join)
	}
	return append(args, n.Extra...)
}

// Process is one running (or exited) tenured.
type Process struct {
	cmd    *exec.Cmd
	tail   *Tail
	exited chan struct{}
	code   int
}

// ErrAddrInUse is matched by the error of WaitReady when tenured exited
// because a port it was given is taken.
var ErrAddrInUse = errors.New("tenuredproc: address already in use")

// Start runs bin with args; its standard output and error go to log (if
// not nil) and a tail of them is kept for error messages.
func Start(bin string, args []string, log io.Writer) (*Process, error) {
	p := &Process{tail: &Tail{}, exited: make(chan struct{})}
	var out io.Writer = p.tail
	if log != nil {
		out = io.MultiWriter(p.tail, log)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = out, out
	DieWithParent(p.cmd)
	if err := StartCmd(p.cmd); err != nil {
		return nil, fmt.Errorf("tenuredproc: start %s: %w", bin, err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	return p, nil
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and its output is copied.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// ExitCode returns the exit code (-1 for a signal); valid after Exited.
func (p *Process) ExitCode() int {
	<-p.exited
	return p.code
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Output returns the last few KiB of the process's output.
func (p *Process) Output() string { return p.tail.String() }

// Signal sends sig unless the process has exited.
func (p *Process) Signal(sig syscall.Signal) {
	if p.Running() {
		p.cmd.Process.Signal(sig)
	}
}

// Kill sends SIGKILL (which ends a stopped process too) and waits for the
// exit.
func (p *Process) Kill() {
	p.Signal(syscall.SIGKILL)
	<-p.exited
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills. It
// returns the exit code, and whether the process exited within grace.
func (p *Process) Stop(grace time.Duration) (int, bool) {
	p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.exited:
		return p.code, true
	case <-t.C:
		p.Kill()
		return p.code, false
	}
}

// Ready reports whether api answers /readyz with 200 (the node knows a
// leader).
// A node that serves TLS is asked over https (without verifying its
// certificate: /readyz is open and nothing secret is sent).
func Ready(api string) error {
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	hc := &http.Client{Timeout: time.Second, Transport: tr}
	defer hc.CloseIdleConnections()
	res, err := hc.Get("http://" + api + "/readyz")
	if err != nil {
		return err
	}
	if res.StatusCode == http.StatusBadRequest {
		// "Client sent an HTTP request to an HTTPS server."
		res.Body.Close()
		if res, err = hc.Get("https://" + api + "/readyz"); err != nil {
			return err
		}
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz: %s", res.Status)
	}
	return nil
}

// WaitReady polls api's /readyz every 20ms until it answers 200, the
// process exits, ctx ends or timeout passes; the error says which, with
// the tail of the process's output.
func (p *Process) WaitReady(ctx context.Context, api string, timeout time.Duration) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		last := Ready(api)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.exited:
			err := fmt.Errorf("tenuredproc: tenured at %s exited (code %d) before /readyz answered 200:\n%s", api, p.code, p.Output())
			if strings.Contains(p.Output(), "address already in use") {
				err = fmt.Errorf("%w: %w", ErrAddrInUse, err)
			}
			return err
		case <-deadline.C:
			return fmt.Errorf("tenuredproc: waited %s for tenured at %s to answer /readyz with 200 (a known leader); last: %v\n%s", timeout, api, last, p.Output())
		case <-tick.C:
		}
	}
}

// Tail keeps the last few KiB written to it; safe for concurrent use.
// The zero value is ready.
type Tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4 << 10

func (b *Tail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailSize {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (b *Tail) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}

// WaitFor polls f every 50ms until it returns true, ctx ends or timeout
// passes; the error names what was awaited.
func WaitFor(ctx context.Context, timeout time.Duration, what string, f func() bool) error {
	deadline := time.Now().Add(timeout)
	for !f() {
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
