package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/tenure-io/tenure/internal/tenuredproc"
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
		fmt.Sprintf("tenure demo --real: a tenured server process (pid %d, API %s, data in %s)", srv.Pid(), srv.api, srv.dataDir),
		"and worker processes (`tenure demo worker`); A is frozen with SIGSTOP and thawed with SIGCONT.",
		fmt.Sprintf("Lease TTL %s, A frozen for %s. TIME is seconds since the scenario began.", fmtDuration(cfg.TTL), fmtDuration(cfg.Pause)),
	}, map[string]any{"mode": "real", "tenured": tenured, "tenured_pid": srv.Pid(), "endpoints": []string{srv.api},
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
	dir := filepath.Dir(cfg.WorkerCommand[0])
	p, err := tenuredproc.Lookup{Dirs: []string{dir}, UsePATH: true}.Find()
	if err == nil {
		return p, nil
	}
	return "", fmt.Errorf(`demo --real runs the tenured server as a child process, but there is no
tenured next to this tenure (in %s) nor on PATH. Install both and try again:

    go install ./cmd/...    # in a checkout of tenure; puts tenure and tenured in $(go env GOPATH)/bin
    tenure demo --real

('go run ./cmd/tenure demo --real' builds only tenure; it works once tenured is on PATH.)`, dir)
}

// tenuredProc is the tenured child process of --real.
type tenuredProc struct {
	*tenuredproc.Process
	api     string
	dataDir string
	ports   *tenuredproc.Ports
}

// startTenured starts a single-node tenured with its data in a new
// directory under dir and waits until it leads. Its ports are reserved
// (tenuredproc.ReservePorts); should one be taken anyway by a program
// that does not reserve, tenured exits and it tries again with new ports.
func startTenured(ctx context.Context, path, dir string, logs io.Writer, verbose bool) (*tenuredProc, error) {
	var last error
	for attempt := 1; attempt <= 3; attempt++ {
		p, err := tryStartTenured(ctx, path, filepath.Join(dir, fmt.Sprintf("tenured-%d", attempt)), logs, verbose)
		if err == nil {
			return p, nil
		}
		last = err
		if ctx.Err() != nil || !errors.Is(err, tenuredproc.ErrAddrInUse) {
			break
		}
	}
	return nil, last
}

func tryStartTenured(ctx context.Context, path, dataDir string, logs io.Writer, verbose bool) (*tenuredProc, error) {
	ports, err := tenuredproc.ReservePorts(2)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	addrs := ports.Addrs()
	logLevel, raftLevel := "warn", "error"
	if verbose {
		logLevel, raftLevel = "info", "warn"
	}
	node := tenuredproc.Node{ID: "demo", API: addrs[0], Raft: addrs[1], DataDir: dataDir,
		Extra: []string{"--election-timeout", ElectionTimeout.String(), "--min-ttl", MinTTL.String(),
			"--log-level", logLevel, "--raft-log-level", raftLevel}}
	proc, err := tenuredproc.Start(path, node.Args(), logs)
	if err != nil {
		ports.Release()
		return nil, fmt.Errorf("demo: %w", err)
	}
	p := &tenuredProc{Process: proc, api: addrs[0], dataDir: dataDir, ports: ports}
	if err := proc.WaitReady(ctx, p.api, 15*time.Second); err != nil {
		p.stop()
		return nil, fmt.Errorf("demo: %w", err)
	}
	return p, nil
}

// stop asks tenured to shut down and kills it if it has not within 5s.
func (p *tenuredProc) stop() {
	p.Stop(5 * time.Second)
	p.ports.Release()
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
	stderr := &tenuredproc.Tail{}
	cmd.Stderr = io.MultiWriter(stderr, l.logs)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	goOn := func() {}
	if spec.Hold {
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		goOn = sync.OnceFunc(func() {
			// A line, or just the end of the input, lets it go on.
			io.WriteString(stdin, "go on\n")
			stdin.Close()
		})
	}
	tenuredproc.DieWithParent(cmd)
	if err := tenuredproc.StartCmd(cmd); err != nil {
		return nil, fmt.Errorf("demo: start worker %s: %w", spec.Actor, err)
	}
	p := cmd.Process
	w := &workerRun{
		events: make(chan Event, 16),
		pid:    p.Pid,
		freeze: func() error { return freezeProcess(p) },
		resume: func() error { return resumeProcess(p) },
		goOn:   goOn,
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
