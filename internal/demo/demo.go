package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// Run runs the scenarios of cfg, printing the timeline to cfg.Stdout as
// they go, and returns their results. The error is a *FailedError when a
// scenario did not produce its expected outcome, and another error when
// the demo could not run (a cluster that did not start, tenured not found
// for Real, the context ended).
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Stderr == nil {
		cfg.Stderr = io.Discard
	}
	tl := newTimeline(cfg.Stdout, cfg.Format, cfg.Colour)
	start := time.Now()
	var (
		results []Result
		skipped []Scenario
		err     error
	)
	if cfg.Real {
		results, skipped, err = runReal(ctx, &cfg, tl)
	} else {
		results, err = runInProcess(ctx, &cfg, tl)
	}
	if err != nil {
		if ctx.Err() != nil {
			return results, fmt.Errorf("demo interrupted: %w", context.Cause(ctx))
		}
		return results, err
	}
	tl.summary(results, skipped, time.Since(start))
	var failed []Result
	for _, r := range results {
		if !r.Passed {
			failed = append(failed, r)
		}
	}
	if len(failed) > 0 {
		return results, &FailedError{Failed: failed}
	}
	return results, nil
}

// runScenario runs one scenario through run, stamps its time and prints
// its verdict.
func runScenario(tl *timeline, sc Scenario, n, of int, extra []string, run func() (Result, error)) (Result, error) {
	tl.begin(sc, n, of, extra...)
	start := time.Now()
	r, err := run()
	if err != nil {
		return r, fmt.Errorf("scenario %s: %w", sc, err)
	}
	r.Scenario = sc
	r.Elapsed = time.Since(start)
	tl.result(r)
	return r, nil
}

// runInProcess runs the scenarios on a cluster embedded in this process.
func runInProcess(ctx context.Context, cfg *Config, tl *timeline) ([]Result, error) {
	logs := io.Discard
	if cfg.Verbose {
		logs = cfg.Stderr
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cl, err := startCluster(sctx, logs)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	leader, err := cl.WaitLeader(sctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range cl.Members() {
		ids = append(ids, m.ID)
	}
	tl.intro([]string{
		fmt.Sprintf("tenure demo: a %d-node lease cluster inside this process (%s; leader %s),", len(ids), strings.Join(ids, ", "), leader.ID),
		"raft over loopback TCP, API servers on " + strings.Join(cl.Endpoints(), ", ") + ".",
		fmt.Sprintf("Workers A, B and C are goroutines using the Go client. Lease TTL %s, A's pause %s.", fmtDuration(cfg.TTL), fmtDuration(cfg.Pause)),
		"TIME is seconds since the scenario began.",
	}, map[string]any{"mode": "in-process", "nodes": ids, "leader": leader.ID, "endpoints": cl.Endpoints(),
		"ttl": fmtDuration(cfg.TTL), "pause": fmtDuration(cfg.Pause)})

	reader, err := newClient(cl.Endpoints())
	if err != nil {
		return nil, err
	}
	defer reader.Close()
	procs := &inProcess{endpoints: cl.Endpoints(), mem: newMemStore()}

	var results []Result
	for i, sc := range cfg.Scenarios {
		var extra []string
		if sc == TimeoutLock {
			extra = []string{"Here it is a map in this process."}
		}
		r, err := runScenario(tl, sc, i+1, len(cfg.Scenarios), extra, func() (Result, error) {
			switch sc {
			case Fenced:
				return runPausedWriter(ctx, tl, cfg, sc, pausedEnv{launcher: procs, storeSpec: storeKV, store: fencedStore{reader}})
			case TimeoutLock:
				return runPausedWriter(ctx, tl, cfg, sc, pausedEnv{launcher: procs, storeSpec: storeMemory, store: procs.mem})
			case Failover:
				return runFailover(ctx, tl, cfg, cl)
			}
			return Result{}, errors.New("unknown scenario")
		})
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	return results, nil
}
