package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/tenure-io/tenure/internal/tenuredproc"
)

// procs tracks every server process the suite starts, so that all of them
// are killed when it exits, however it exits.
type procs struct {
	mu   sync.Mutex
	live map[*proc]struct{}
}

var running = &procs{live: map[*proc]struct{}{}}

// killAll sends SIGKILL to every live process and waits for each to exit.
func (p *procs) killAll() {
	p.mu.Lock()
	var all []*proc
	for q := range p.live {
		all = append(all, q)
	}
	p.mu.Unlock()
	for _, q := range all {
		q.kill()
	}
}

// proc is one server process: etcd or tenured.
type proc struct {
	name   string
	cmd    *exec.Cmd
	exited chan struct{}
	log    io.Closer
}

// startProc starts bin with args, its output in logPath. The child gets
// SIGKILL from the kernel if this process dies first.
func startProc(name, bin string, args []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exited: make(chan struct{}), log: logf}
	running.mu.Lock()
	running.live[p] = struct{}{}
	running.mu.Unlock()
	go func() {
		cmd.Wait()
		logf.Close()
		running.mu.Lock()
		delete(running.live, p)
		running.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
}

// pid returns the process ID.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits until the process has exited.
func (p *proc) kill() {
	if p.alive() {
		p.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-p.exited
}

// ports holds every loopback port the run uses, reserved as the tests'
// are (see tenuredproc): never one a killed server's peers may still dial.
var ports tenuredproc.Ports

// freeAddr reserves a loopback address for the rest of the run.
func freeAddr() (string, error) {
	a, err := ports.Add(1)
	if err != nil {
		return "", err
	}
	return a[0], nil
}

// waitFor is tenuredproc.WaitFor.
var waitFor = tenuredproc.WaitFor

// binaries are the two servers, built once per run.
type binaries struct {
	etcd    string
	tenured string
	// tenuredFlags are given to every tenured (-tenured-flags).
	tenuredFlags []string
}

// buildBinaries builds etcd (from the module this one requires) and tenured
// (from the working tree, through the replace directive) into dir.
func buildBinaries(ctx context.Context, dir string, logw io.Writer) (binaries, error) {
	b := binaries{etcd: filepath.Join(dir, "etcd"), tenured: filepath.Join(dir, "tenured")}
	for _, t := range []struct{ out, pkg string }{
		{b.etcd, "github.com/tenure-io/tenure/bench/cmd/etcd"},
		{b.tenured, "github.com/tenure-io/tenure/cmd/tenured"},
	} {
		fmt.Fprintf(logw, "building %s\n", t.pkg)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", t.out, t.pkg)
		cmd.Dir = moduleDir()
		cmd.Stdout, cmd.Stderr = logw, logw
		if err := cmd.Run(); err != nil {
			return b, fmt.Errorf("build %s: %w", t.pkg, err)
		}
	}
	return b, nil
}

// moduleDir is the directory of the bench module: the working directory
// when run with `go run .` or `go test`, otherwise the directory holding
// its go.mod above the working directory.
func moduleDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "cmd", "etcd", "main.go")); err == nil {
			return d
		}
		if _, err := os.Stat(filepath.Join(d, "bench", "cmd", "etcd", "main.go")); err == nil {
			return filepath.Join(d, "bench")
		}
		if filepath.Dir(d) == d {
			return wd
		}
	}
}
