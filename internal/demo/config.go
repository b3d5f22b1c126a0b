package demo

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scenario names one scenario of the demo.
type Scenario string

// The scenarios, in the order they run.
const (
	// Fenced: a paused holder's late write is refused by the fenced store.
	Fenced Scenario = "fenced"
	// TimeoutLock: the same timing against a store that ignores tokens
	// loses B's update.
	TimeoutLock Scenario = "timeout-lock"
	// Failover: the lease cluster's leader crashes while B holds a lease.
	Failover Scenario = "failover"
	// Postgres: the paused-writer timing against Postgres, each write a
	// transaction fenced by tenure_fence. Needs a Postgres server.
	Postgres Scenario = "postgres"
	// DBLock: a Postgres advisory lock instead of a lease: it keeps B out
	// while A's connection lives, and no longer. Needs a Postgres server.
	DBLock Scenario = "db-lock"
)

// AllScenarios lists the scenarios that need no setup, in the order they
// run: what --scenario all runs.
var AllScenarios = []Scenario{Fenced, TimeoutLock, Failover}

// PostgresScenarios need a Postgres server (Config.Postgres). They run
// when named, or with all when a --postgres URL is given.
var PostgresScenarios = []Scenario{Postgres, DBLock}

// scenarioOrder is the order every scenario runs in: failover crashes a
// node of the cluster, so it is last.
var scenarioOrder = []Scenario{Fenced, TimeoutLock, Postgres, DBLock, Failover}

// needsPostgres reports whether sc needs a Postgres server.
func needsPostgres(sc Scenario) bool { return sc == Postgres || sc == DBLock }

// scenarioInfo is what the timeline says about each scenario.
var scenarioInfo = map[Scenario]struct {
	title string
	about []string
}{
	Fenced: {
		title: "fenced lease",
		about: []string{
			"A takes the lease and writes, then stalls (a stop-the-world pause) for",
			"longer than the lease's TTL. The lease expires and B takes over.",
			"tenure's key-value store checks the fencing token of every write.",
		},
	},
	TimeoutLock: {
		title: "lock with a timeout only",
		about: []string{
			"The same timing, but the store does NOT check tokens: it takes any",
			"write from whoever believes it holds the lock, like a file or a table",
			"guarded only by the lock's timeout.",
		},
	},
	Postgres: {
		title: "fenced Postgres transaction",
		about: []string{
			"The same timing against Postgres: each write of A and B is a transaction",
			"whose first statement is SELECT tenure_fence(lease, token), so a",
			"transaction with a stale token is rolled back whole.",
		},
	},
	DBLock: {
		title: "database lock (Postgres advisory lock)",
		about: []string{
			"A and B take pg_advisory_lock instead of a lease. The lock holds as long",
			"as the connection that took it, however long A pauses; it has no token.",
			"Then A's connection drops (a network cut, an idle timeout, a proxy).",
		},
	},
	Failover: {
		title: "lease service failover",
		about: []string{
			"B holds the lease and writes when the leader node of the lease",
			"cluster crashes. The other two nodes elect a new leader.",
		},
	},
}

// Limits of the demo's timing.
const (
	// ElectionTimeout is the raft heartbeat and election timeout of the
	// embedded cluster and of the tenured child of --real: short, so a
	// failover takes well under a second.
	ElectionTimeout = 200 * time.Millisecond
	// MinTTL is the shortest --ttl: the cluster's minimum, twice its
	// election timeout.
	MinTTL = 2 * ElectionTimeout
	// MaxTTL is the longest --ttl. The demo waits for a lease to expire
	// twice, so a long TTL only makes it slow.
	MaxTTL = time.Minute
	// DefaultTTL is the lease TTL of the workers.
	DefaultTTL = 2 * time.Second
)

// DefaultPause returns the pause used when none is given: the TTL plus
// half of it (at least 500ms), so B has time to take over and write
// before A wakes up.
func DefaultPause(ttl time.Duration) time.Duration {
	return ttl + max(ttl/2, 500*time.Millisecond)
}

// Config configures a run of the demo. Start from DefaultConfig.
type Config struct {
	// TTL is the lease TTL. Default DefaultTTL; between MinTTL and MaxTTL.
	TTL time.Duration
	// Pause is how long worker A stalls after its first write. It must be
	// longer than TTL: the point is a pause that outlives the lease.
	// Default DefaultPause(TTL).
	Pause time.Duration
	// Scenarios to run, in this order. Default AllScenarios.
	Scenarios []Scenario
	// Real runs the workers (and the lease server, tenured) as separate
	// processes and freezes worker A with SIGSTOP. Only Fenced and
	// TimeoutLock have a real-process form; Failover is skipped.
	Real bool
	// WorkerCommand is the command line that runs a worker process in
	// Real mode; the worker's flags are appended (see ParseWorker).
	// tenure sets it to its own executable and "demo", "worker".
	WorkerCommand []string
	// Tenured is the path of the tenured binary for Real mode. Default:
	// "tenured" next to WorkerCommand[0], else on PATH.
	Tenured string
	// Verbose passes the logs of raft, the nodes and child processes to
	// Stderr. Default off: they would drown the timeline.
	Verbose bool
	// UI prints to UIOut the address of the dashboard's timeline of the
	// demo's leases, served by a member of the in-process cluster, and
	// after the scenarios keeps the cluster (and the dashboard) up until
	// the context ends. The timeline on Stdout and the result are the
	// same as without it. In-process only.
	UI    bool
	UIOut io.Writer
	// Stdout receives the timeline. Required.
	Stdout io.Writer
	// Stderr receives the logs when Verbose is set.
	Stderr io.Writer
	// Format is Text or JSON. Default Text.
	Format Format
	// Colour colours the Text timeline with ANSI escapes (see UseColour).
	Colour bool
	// Postgres is the connection URL of the Postgres server of the
	// Postgres and DBLock scenarios; they are skipped, with a note, when
	// it does not answer within PostgresTimeout. Default DefaultPostgres.
	// The demo works in a schema of its own, dropped at the end.
	Postgres string
}

// DefaultPostgres is the Postgres server the demo tries by default: the
// local one, as the user of $PGUSER or of this process.
const DefaultPostgres = "postgres://127.0.0.1:5432/postgres"

// PostgresTimeout bounds the demo's first connection to Postgres.
const PostgresTimeout = 3 * time.Second

// DefaultConfig returns the defaults described on each Config field,
// without Stdout.
func DefaultConfig() Config {
	return Config{
		TTL:       DefaultTTL,
		Pause:     DefaultPause(DefaultTTL),
		Scenarios: AllScenarios,
		Stderr:    io.Discard,
		Postgres:  DefaultPostgres,
	}
}

// Validate reports the first problem with c, as a message meant for the
// user of the tenure CLI (it names the flags).
func (c *Config) Validate() error {
	switch {
	case c.Stdout == nil:
		return errors.New("demo: no output writer")
	case c.TTL < MinTTL:
		return fmt.Errorf("--ttl %s is too short: the demo's cluster accepts leases of at least %s (twice its %s election timeout)",
			c.TTL, MinTTL, ElectionTimeout)
	case c.TTL > MaxTTL:
		return fmt.Errorf("--ttl %s is too long for a demo (at most %s)", c.TTL, MaxTTL)
	case c.Pause <= c.TTL:
		return fmt.Errorf("--pause %s must be longer than --ttl %s: the demo is about a pause that outlives the lease", c.Pause, c.TTL)
	case len(c.Scenarios) == 0:
		return errors.New("no scenario to run")
	case c.Real && len(c.WorkerCommand) == 0:
		return errors.New("demo: --real needs a worker command")
	case c.UI && c.Real:
		return errors.New("--ui shows the in-process cluster's dashboard: drop --real (a tenured of your own serves its dashboard at /ui)")
	case c.UI && c.UIOut == nil:
		return errors.New("demo: --ui needs a writer for the dashboard's address")
	}
	seen := map[Scenario]bool{}
	for _, s := range c.Scenarios {
		if _, ok := scenarioInfo[s]; !ok {
			return fmt.Errorf("unknown scenario %q (want all, %s)", s, scenarioList())
		}
		if seen[s] {
			return fmt.Errorf("scenario %q given twice", s)
		}
		seen[s] = true
	}
	if c.Real && !slices.ContainsFunc(c.Scenarios, realCapable) {
		return errors.New("--real runs the fenced and timeout-lock scenarios; failover runs in-process only, and so do postgres and db-lock (drop --real)")
	}
	if slices.ContainsFunc(c.Scenarios, needsPostgres) {
		if _, err := pgx.ParseConfig(c.Postgres); err != nil {
			return fmt.Errorf("--postgres: %v", err)
		}
	}
	return nil
}

// ParseScenarios parses the --scenario flag: "all" or a comma-separated
// list of scenario names. The scenarios run in the order of AllScenarios
// whatever the order given (failover crashes a node, so it runs last).
func ParseScenarios(s string) ([]Scenario, error) {
	if strings.TrimSpace(s) == "all" {
		return AllScenarios, nil
	}
	want := map[Scenario]bool{}
	for _, name := range strings.Split(s, ",") {
		sc := Scenario(strings.TrimSpace(name))
		if _, ok := scenarioInfo[sc]; !ok {
			return nil, fmt.Errorf("unknown scenario %q (want all, %s)", name, scenarioList())
		}
		want[sc] = true
	}
	var out []Scenario
	for _, sc := range scenarioOrder {
		if want[sc] {
			out = append(out, sc)
		}
	}
	return out, nil
}

// realCapable reports whether sc has a real-process form (--real).
func realCapable(sc Scenario) bool { return sc == Fenced || sc == TimeoutLock }

func scenarioList() string {
	names := make([]string, len(scenarioOrder))
	for i, s := range scenarioOrder {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Result is the verdict of one scenario.
type Result struct {
	Scenario Scenario
	// Passed reports whether the scenario produced its expected outcome.
	Passed bool
	// Summary says what happened, or what went wrong.
	Summary string
	// Elapsed is how long the scenario ran.
	Elapsed time.Duration
}

// FailedError is returned by Run when a scenario did not produce its
// expected outcome.
type FailedError struct {
	Failed []Result
}

func (e *FailedError) Error() string {
	parts := make([]string, len(e.Failed))
	for i, r := range e.Failed {
		parts[i] = fmt.Sprintf("scenario %s: %s", r.Scenario, r.Summary)
	}
	return "demo failed: " + strings.Join(parts, "; ")
}
