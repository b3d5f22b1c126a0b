package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tenure-io/tenure/internal/localcluster"
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
	summarized := false
	summary := func(results []Result, skipped []Scenario) {
		tl.summary(results, skipped, time.Since(start))
		summarized = true
	}
	if cfg.Real {
		results, skipped, err = runReal(ctx, &cfg, tl)
	} else {
		results, skipped, err = runInProcess(ctx, &cfg, tl, summary)
	}
	if err != nil {
		if ctx.Err() != nil {
			return results, fmt.Errorf("demo interrupted: %w", context.Cause(ctx))
		}
		return results, err
	}
	if !summarized {
		summary(results, skipped)
	}
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
// The Postgres scenarios are skipped, with a note, when Postgres does not
// answer. With cfg.UI it prints the dashboard's address first, and at the
// end calls summary and keeps the cluster up until ctx ends.
func runInProcess(ctx context.Context, cfg *Config, tl *timeline, summary func([]Result, []Scenario)) ([]Result, []Scenario, error) {
	logs := io.Discard
	if cfg.Verbose {
		logs = cfg.Stderr
	}
	scenarios, skipped := cfg.Scenarios, []Scenario(nil)
	var pg *pgDemo
	var pgErr error
	if slices.ContainsFunc(scenarios, needsPostgres) {
		if pg, pgErr = openPostgres(ctx, cfg.Postgres); pgErr != nil {
			scenarios = slices.DeleteFunc(slices.Clone(scenarios), func(sc Scenario) bool {
				if needsPostgres(sc) {
					skipped = append(skipped, sc)
					return true
				}
				return false
			})
		} else {
			defer pg.close()
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cl, err := startCluster(sctx, logs)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	leader, err := cl.WaitLeader(sctx)
	if err != nil {
		return nil, nil, err
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

	var dashboard string
	if cfg.UI {
		dashboard = dashboardURL(cl, leader.ID)
		fmt.Fprintf(cfg.UIOut, "tenure demo: watch it in a browser: %s\n", dashboard)
	}

	reader, err := newClient(cl.Endpoints())
	if err != nil {
		return nil, nil, err
	}
	defer reader.Close()
	procs := &inProcess{endpoints: cl.Endpoints(), mem: newMemStore(), pg: pg}

	var results []Result
	for i, sc := range scenarios {
		var extra []string
		if sc == TimeoutLock {
			extra = []string{"Here it is a map in this process."}
		}
		if sc == Postgres {
			extra = []string{"Here Postgres at " + redactURL(cfg.Postgres) + ", schema " + pg.name + " (dropped at the end)."}
		}
		r, err := runScenario(tl, sc, i+1, len(scenarios), extra, func() (Result, error) {
			switch sc {
			case Fenced:
				return runPausedWriter(ctx, tl, cfg, sc, pausedEnv{launcher: procs, storeSpec: storeKV, store: fencedStore{reader}})
			case TimeoutLock:
				return runPausedWriter(ctx, tl, cfg, sc, pausedEnv{launcher: procs, storeSpec: storeMemory, store: procs.mem})
			case Postgres:
				return runPostgres(ctx, tl, cfg, procs, pg)
			case DBLock:
				return runDBLock(ctx, tl, cfg, pg)
			case Failover:
				return runFailover(ctx, tl, cfg, cl)
			}
			return Result{}, errors.New("unknown scenario")
		})
		if err != nil {
			return results, skipped, err
		}
		results = append(results, r)
	}
	for _, sc := range skipped {
		tl.note(sc, fmt.Sprintf("Scenario %s: skipped: Postgres does not answer at %s (%v).\n"+
			"  Start one, or point --postgres at one: tenure demo --scenario %s --postgres postgres://USER@HOST:5432/DB",
			sc, redactURL(cfg.Postgres), lastLine(pgErr), sc))
	}
	if cfg.UI {
		summary(results, skipped)
		fmt.Fprintf(cfg.UIOut, "tenure demo: the dashboard stays up at %s; press Ctrl-C to end.\n", dashboard)
		<-ctx.Done()
	}
	return results, skipped, nil
}

// dashboardURL returns the address of the dashboard's timeline of every
// demo lease, served by a member that is not the leader (the failover
// scenario crashes the leader).
func dashboardURL(cl *localcluster.Cluster, leader string) string {
	ms := cl.Members()
	m := ms[0]
	for _, o := range ms {
		if o.ID != leader {
			m = o
			break
		}
	}
	return "http://" + m.Addr + "/ui/#timeline/demo/"
}

// redactURL returns a Postgres URL without its password, for the
// timeline.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// lastLine returns the last line of err's message, trimmed: the innermost
// cause of a driver's multi-line connection error.
func lastLine(err error) string {
	msg := strings.TrimSpace(err.Error())
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = strings.TrimSpace(msg[i+1:])
	}
	return msg
}
