package demo

import (
	"bufio"
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
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// runReal runs the paused-writer scenarios with real processes: a tenured
// child process serves the leases, and the workers are child processes
// running `tenure demo worker` (cfg.WorkerCommand). Worker A is frozen
// with SIGSTOP and thawed with SIGCONT. Failover has no real-process form
// here and is skipped.
func runReal(ctx context.Context, cfg *Config, tl *timeline) ([]Result, []Scenario, error) {
	if runtime.GOOS == "windows" {
		return nil, nil, errors.New("demo: --real freezes a process with SIGSTOP, which needs a Unix system")
	}
	tenured, err := findTenured(cfg)
	if err != nil {
		return nil, nil, err
	}
	var run, skipped []Scenario
	for _, sc := range cfg.Scenarios {
		if !realCapable(sc) {
			skipped = append(skipped, sc)
		} else {
			run = append(run, sc)
		}
	}
	dir, err := os.MkdirTemp("", "tenure-demo-")
	if err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	storeDir := filepath.Join(dir, "files")
	if err := os.Mkdir(storeDir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("demo: %w", err)
	}
	logs := io.Discard
	if cfg.Verbose {
		logs = cfg.Stderr
	}
	srv, err := startTenured(ctx, tenured, dir, logs, cfg.Verbose)
	if err != nil {
		return nil, nil, err
	}
	defer srv.stop()

	tl.intro([]string{
		fmt.Sprintf("tenure demo --real: a tenured server process (pid %d, API %s, data in %s)", srv.cmd.Process.Pid, srv.api, srv.dataDir),
		"and worker processes (`tenure demo worker`); A is frozen with SIGSTOP and thawed with SIGCONT.",
		fmt.Sprintf("Lease TTL %s, A frozen for %s. TIME is seconds since the scenario began.", fmtDuration(cfg.TTL), fmtDuration(cfg.Pause)),
	}, map[string]any{"mode": "real", "tenured": tenured, "tenured_pid": srv.cmd.Process.Pid, "endpoints": []string{srv.api},
		"ttl": fmtDuration(cfg.TTL), "pause": fmtDuration(cfg.Pause)})

	reader, err := newClient([]string{srv.api})
	if err != nil {
		return nil, nil, err
	}
	defer reader.Close()
	procs := &processes{command: cfg.WorkerCommand, endpoints: []string{srv.api}, logs: logs}

	var results []Result
	for i, sc := range run {
		env := pausedEnv{launcher: procs, storeSpec: storeKV, store: fencedStore{reader}, external: true}
		var extra []string
		if sc == TimeoutLock {
			env.storeSpec, env.store = storeDirPrefix+storeDir, dirStore(storeDir)
			extra = []string{"Here it is a file, " + filepath.Join(storeDir, reportKey) + "."}
		}
		r, err := runScenario(tl, sc, i+1, len(run), extra, func() (Result, error) {
			return runPausedWriter(ctx, tl, cfg, sc, env)
		})
		if err != nil {
			return results, skipped, err
		}
		results = append(results, r)
	}
	for _, sc := range skipped {
		why := "it crashes a node of an in-process cluster"
		if needsPostgres(sc) {
			why = "it runs its workers in-process"
		}
		tl.note(sc, fmt.Sprintf("Scenario %s: skipped with --real (%s); run: tenure demo --scenario %s", sc, why, sc))
	}
	return results, skipped, nil
}

// findTenured returns the tenured binary: cfg.Tenured, else the one next
// to the worker command's executable, else the one on PATH.
func findTenured(cfg *Config) (string, error) {
	if cfg.Tenured != "" {
		if _, err := os.Stat(cfg.Tenured); err != nil {
			return "", fmt.Errorf("demo: tenured: %w", err)
		}
		return cfg.Tenured, nil
	}
	name := "tenured"
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	dir := filepath.Dir(cfg.WorkerCommand[0])
	next := filepath.Join(dir, name)
	if fi, err := os.Stat(next); err == nil && !fi.IsDir() {
		return next, nil
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf(`demo --real runs the tenured server as a child process, but there is no
tenured next to this tenure (in %s) nor on PATH. Install both and try again:

    go install ./cmd/...    # in a checkout of tenure; puts tenure and tenured in $(go env GOPATH)/bin
    tenure demo --real

('go run ./cmd/tenure demo --real' builds only tenure; it works once tenured is on PATH.)`, dir)
}

// tailBuffer keeps the last few KiB written to it. It is safe for
// concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4 << 10

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailSize {
		b.buf = append([]byte(nil), b.buf[len(b.buf)-tailSize:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}

// tenuredProc is the tenured child process of --real.
type tenuredProc struct {
	cmd     *exec.Cmd
	api     string
	dataDir string
	out     *tailBuffer
	exited  chan struct{}
}

// startTenured starts a single-node tenured with its data in a new
// directory under dir and waits until it leads. A port taken between
// picking it and tenured binding it makes tenured exit: then it tries
// again with new ports.
func startTenured(ctx context.Context, path, dir string, logs io.Writer, verbose bool) (*tenuredProc, error) {
	var last error
	for attempt := 1; attempt <= 3; attempt++ {
		p, err := tryStartTenured(ctx, path, filepath.Join(dir, fmt.Sprintf("tenured-%d", attempt)), logs, verbose)
		if err == nil {
			return p, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

func tryStartTenured(ctx context.Context, path, dataDir string, logs io.Writer, verbose bool) (*tenuredProc, error) {
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, err
	}
	logLevel, raftLevel := "warn", "error"
	if verbose {
		logLevel, raftLevel = "info", "warn"
	}
	p := &tenuredProc{api: addrs[0], dataDir: dataDir, out: &tailBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(path,
		"--node-id", "demo", "--listen", addrs[0], "--raft-listen", addrs[1], "--data-dir", dataDir,
		"--election-timeout", ElectionTimeout.String(), "--min-ttl", MinTTL.String(),
		"--log-level", logLevel, "--raft-log-level", raftLevel)
	p.cmd.Stdout = io.MultiWriter(p.out, logs)
	p.cmd.Stderr = p.cmd.Stdout
	dieWithParent(p.cmd)
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start %s: %w", path, err)
	}
	go func() {
		p.cmd.Wait()
		close(p.exited)
	}()
	if err := p.waitReady(ctx, 15*time.Second); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// waitReady polls /readyz until tenured leads, it exits, or timeout.
func (p *tenuredProc) waitReady(ctx context.Context, timeout time.Duration) error {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	defer hc.CloseIdleConnections()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		res, err := hc.Get("http://" + p.api + "/readyz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("readyz: %s", res.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.exited:
			return fmt.Errorf("demo: tenured exited before it was ready: %s\n%s", p.cmd.ProcessState, p.out)
		case <-deadline.C:
			return fmt.Errorf("demo: tenured was not ready within %s (%v)\n%s", timeout, last, p.out)
		case <-tick.C:
		}
	}
}

// stop asks tenured to shut down and kills it if it has not within 5s.
func (p *tenuredProc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// freeAddrs returns n distinct loopback addresses whose ports were free a
// moment ago.
func freeAddrs(n int) ([]string, error) {
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("demo: find a free port: %w", err)
		}
		defer ln.Close()
		out = append(out, ln.Addr().String())
	}
	return out, nil
}

// processes runs workers as child processes of the demo.
type processes struct {
	command   []string
	endpoints []string
	logs      io.Writer
}

func (l *processes) launch(ctx context.Context, spec workerSpec) (*workerRun, error) {
	args := append(append([]string{}, l.command[1:]...), spec.args(l.endpoints)...)
	// The context kills the worker (SIGKILL works on a frozen process too).
	cmd := exec.CommandContext(ctx, l.command[0], args...)
	cmd.WaitDelay = 5 * time.Second
	stderr := &tailBuffer{}
	cmd.Stderr = io.MultiWriter(stderr, l.logs)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("demo: start worker %s: %w", spec.Actor, err)
	}
	p := cmd.Process
	w := &workerRun{
		events: make(chan Event, 16),
		pid:    p.Pid,
		freeze: func() error { return freezeProcess(p) },
		resume: func() error { return resumeProcess(p) },
	}
	go func() {
		defer close(w.events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var bad []string
		for sc.Scan() {
			var j eventJSON
			if err := json.Unmarshal(sc.Bytes(), &j); err != nil || j.Type != "event" {
				bad = append(bad, sc.Text())
				continue
			}
			e := j.event()
			e.Scenario, e.At = "", 0
			select {
			case w.events <- e:
			case <-ctx.Done():
			}
		}
		err := cmd.Wait()
		switch {
		case ctx.Err() != nil:
			w.err = context.Cause(ctx)
		case err != nil:
			w.err = fmt.Errorf("process %d: %v: %s", p.Pid, err, stderr)
		case len(bad) > 0:
			w.err = fmt.Errorf("process %d wrote lines that are not events: %q", p.Pid, bad)
		}
	}()
	return w, nil
}
