package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/tenure-io/tenure/internal/demo"
)

const demoAbout = `Shows, with no setup, why a lease needs a fencing token, on a 3-node lease
cluster embedded in this process:

  fenced        A holds the lease and writes, pauses longer than the TTL; B
                takes over and writes; A wakes and writes with its old token:
                tenure's store rejects it. The final value is B's.
  timeout-lock  the same against a store that does not check tokens: A's late
                write overwrites B's (a lost update).
  failover      the cluster's leader crashes while B holds the lease: B keeps
                its token, no write is lost, the next grant's token is larger.

Two more need a Postgres server (--postgres URL, default the local one); they
run when named, or with all when --postgres is given, and are skipped with a
note when Postgres does not answer:

  postgres      the fenced timing against a table: every write is a
                transaction that starts with SELECT tenure_fence(lease, token);
                A's late transaction is rolled back, the table keeps B's rows.
  db-lock       a Postgres advisory lock instead of a lease: it keeps B out
                while A's connection lives, and frees when the connection
                drops; A, waking on a new connection, overwrites B's row.

--ui prints the address of a live dashboard (served by a member of the
embedded cluster) showing the timeline of each scenario's lease, with its
tokens and the rejected stale writes; after the scenarios the demo keeps
the cluster up for it until Ctrl-C, and still exits 0 only if every
scenario came out as expected. It launches no browser.

--real runs fenced and timeout-lock with processes instead: a tenured child
(next to this binary or on PATH) and worker children, the paused one frozen
with SIGSTOP and resumed with SIGCONT.

It needs no tenure server: --endpoints is ignored. Exits 0 only if every scenario
produced its expected outcome, 1 otherwise (2 for bad flags).`

// demo runs `tenure demo`, or a worker process of `tenure demo --real`
// (`tenure demo worker ...`, not in the usage text).
func (a *app) demo(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "worker" {
		w, err := demo.ParseWorker(args[1:])
		if err != nil {
			return &usageError{msg: err.Error()}
		}
		return w.Run(ctx, stdin, a.stdout)
	}
	c := a.newCommand("demo", "demo [--ttl 2s] [--pause D] [--scenario all] [--real] [--ui] [--postgres URL] [--verbose]", demoAbout)
	ttl := c.fs.Duration("ttl", demo.DefaultTTL, fmt.Sprintf("lease `TTL` (at least %s)", demo.MinTTL))
	pause := c.fs.Duration("pause", 0, "how long worker A stalls; must exceed the TTL (default ttl + max(ttl/2, 500ms))")
	scenario := c.fs.String("scenario", "all", "`names` to run: all, or a comma list of fenced, timeout-lock, postgres, db-lock, failover")
	pgURL := c.fs.String("postgres", demo.DefaultPostgres, "Postgres `URL` of the postgres and db-lock scenarios")
	real := c.fs.Bool("real", false, "run the workers and the server (tenured) as separate processes")
	verbose := c.fs.Bool("verbose", false, "show the logs of raft, the nodes and the child processes on stderr")
	ui := c.fs.Bool("ui", false, "print the address of a live dashboard of the scenarios (on stderr) and keep it up after them until Ctrl-C")
	if _, err := a.parse(c, args, nil, 0); err != nil {
		return err
	}

	cfg := demo.DefaultConfig()
	cfg.TTL = *ttl
	cfg.Pause = *pause
	if cfg.Pause == 0 {
		cfg.Pause = demo.DefaultPause(cfg.TTL)
	}
	var err error
	if cfg.Scenarios, err = demo.ParseScenarios(*scenario); err != nil {
		return &usageError{msg: err.Error(), usage: c.usage}
	}
	cfg.Postgres = *pgURL
	if strings.TrimSpace(*scenario) == "all" && flagSet(c.fs, "postgres") {
		cfg.Scenarios, _ = demo.ParseScenarios(scenarioNames(append(slices.Clone(demo.AllScenarios), demo.PostgresScenarios...)))
	}
	cfg.Real = *real
	cfg.Verbose = *verbose
	cfg.UI, cfg.UIOut = *ui, a.stderr
	cfg.Stdout, cfg.Stderr = a.stdout, a.stderr
	if a.g.output == "json" {
		cfg.Format = demo.JSON
	}
	cfg.Colour = cfg.Format == demo.Text && demo.UseColour(a.stdout, a.env)
	if cfg.Real {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("demo --real: find this program to run its workers: %w", err)
		}
		cfg.WorkerCommand = []string{exe, "demo", "worker"}
	}
	if err := cfg.Validate(); err != nil {
		return &usageError{msg: err.Error(), usage: c.usage}
	}
	if _, err := demo.Run(ctx, cfg); err != nil {
		// Exit 1 whatever went wrong: a failed scenario (the timeline
		// showed it; the message names it) or a demo that could not run.
		// The error is not unwrapped, so that a stale token inside it
		// does not turn into exit 4.
		return errors.New(err.Error())
	}
	return nil
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// scenarioNames joins scenarios as --scenario takes them.
func scenarioNames(scs []demo.Scenario) string {
	names := make([]string, len(scs))
	for i, sc := range scs {
		names[i] = string(sc)
	}
	return strings.Join(names, ",")
}
