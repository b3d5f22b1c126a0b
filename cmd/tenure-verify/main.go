package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/internal/verify"
	"github.com/tenure-io/tenure/internal/version"
)

func main() {
	if cfg := os.Getenv(verify.WorkerEnv); cfg != "" {
		os.Exit(verify.RunWorker(cfg))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// allFaults, as a --faults entry, stands for every fault kind
// (verify.KnownFaults), power-loss included.
const allFaults = "all"

// mode is what to do instead of a run, if anything.
type mode struct {
	plan    bool   // print the schedule
	recheck string // check a kept history again
	version bool   // print the version
}

func parseFlags(args []string, stderr io.Writer) (verify.Config, mode, error) {
	cfg := verify.DefaultConfig()
	var (
		faults string
		seed   int64
		md     mode
		strict bool
	)
	fs := flag.NewFlagSet("tenure-verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tenure-verify [flags]\n\nRuns a tenure cluster under faults and traffic, then checks every history.\nExit 0: no violation; 1: a violation (history and visualization in --out);\n2: bad usage; 3: the harness could not run or the check was inconclusive.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.Int64Var(&seed, "seed", 0, "seed of the fault schedule and the traffic (default: random, printed)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to run traffic and faults")
	fs.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "number of tenured processes")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "number of client worker processes")
	fs.IntVar(&cfg.Names, "names", cfg.Names, "number of contended lease names")
	fs.DurationVar(&cfg.TTL, "ttl", cfg.TTL, "lease TTL")
	fs.DurationVar(&cfg.Election, "election-timeout", cfg.Election, "tenured's --election-timeout")
	fs.StringVar(&faults, "faults", strings.Join(cfg.Faults, ","), "comma-separated fault kinds to inject (empty: none; "+allFaults+": every kind, power-loss included)")
	fs.BoolVar(&cfg.Unsafe, "unsafe", false, "negative control: workers write to an unfenced harness-side store; the check must fail")
	fs.BoolVar(&cfg.SkipFsync, "unsafe-skip-fsync", false, "negative control of power-loss: tenured skips fsync (--fault-inject-skip-fsync); with --faults power-loss the check must fail")
	fs.StringVar(&cfg.Out, "out", cfg.Out, "directory for summary.json and, on failure, history.jsonl and the HTML visualization")
	fs.StringVar(&cfg.Tenured, "tenured", "", "tenured binary (default: next to this one, else built with go build)")
	fs.DurationVar(&cfg.CheckTimeout, "check-timeout", cfg.CheckTimeout, "time limit of the linearizability search per lease name")
	fs.DurationVar(&cfg.EffectWindow, "effect-window", cfg.EffectWindow, "how long after its call an indeterminate operation may still take effect")
	fs.IntVar(&cfg.ElectionWorkers, "election-workers", cfg.ElectionWorkers, "number of worker processes that lead names through package election (0: none)")
	fs.BoolVar(&strict, "strict", true, "tolerate nothing; --strict=false only with --recheck, to model the fixed bugs B1b and B1c in a history recorded before their fix")
	fs.BoolVar(&cfg.TLS, "tls", false, "run the cluster with TLS on the API, mutual TLS between members and an auth file; the harness and each worker authenticate with a token")
	fs.BoolVar(&md.plan, "plan", false, "print the fault schedule for --seed and exit")
	fs.BoolVar(&md.version, "version", false, "print the version and exit")
	fs.StringVar(&md.recheck, "recheck", "", "check again the history a run left in this directory (history.jsonl, watch.jsonl, summary.json) and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, md, err
	}
	if fs.NArg() > 0 {
		return cfg, md, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if md.version {
		return cfg, md, nil
	}
	if !strict && md.recheck == "" {
		return cfg, md, fmt.Errorf("--strict=false only re-checks a history recorded before B1b and B1c were fixed (--recheck DIR)")
	}
	cfg.Legacy = !strict
	if cfg.ElectionWorkers == 0 {
		cfg.ElectionWorkers = -1 // none; the zero value of the field means the default
	}
	cfg.Faults = []string{}
	for _, f := range strings.Split(faults, ",") {
		f = strings.TrimSpace(f)
		kinds := []string{f}
		switch {
		case f == "":
			continue
		case f == allFaults:
			kinds = verify.KnownFaults
		case !slices.Contains(verify.KnownFaults, f):
			return cfg, md, fmt.Errorf("unknown fault %q (known: %s; or %s)", f, strings.Join(verify.KnownFaults, ", "), allFaults)
		}
		for _, k := range kinds {
			if !slices.Contains(cfg.Faults, k) {
				cfg.Faults = append(cfg.Faults, k)
			}
		}
	}
	switch {
	case cfg.Duration < 10*time.Second:
		return cfg, md, fmt.Errorf("--duration must be at least 10s")
	case cfg.Nodes < 1, cfg.Workers < 1, cfg.Names < 1:
		return cfg, md, fmt.Errorf("--nodes, --workers and --names must be positive")
	case cfg.ElectionWorkers < -1:
		return cfg, md, fmt.Errorf("--election-workers must not be negative")
	case cfg.EffectWindow <= 0:
		return cfg, md, fmt.Errorf("--effect-window must be positive")
	}
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000_000
	}
	cfg.Seed = uint64(seed)
	return cfg, md, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, md, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "tenure-verify: %v\n", err)
		return 2
	}
	if md.version {
		fmt.Fprintln(stdout, version.Line("tenure-verify"))
		return 0
	}
	if md.recheck != "" {
		rep, err := verify.Recheck(md.recheck, cfg)
		if err != nil {
			fmt.Fprintf(stderr, "tenure-verify: %v\n", err)
			return 3
		}
		rep.Print(stdout)
		return exitCode(rep)
	}
	if md.plan {
		s := cfg.Schedule()
		fmt.Fprintf(stdout, "seed %d schedule %s: %d faults\n", cfg.Seed, s.Hash(), len(s))
		for _, f := range s {
			fmt.Fprintln(stdout, f)
		}
		return 0
	}
	fmt.Fprintf(stderr, "tenure-verify: seed %d (replay with --seed %d)\n", cfg.Seed, cfg.Seed)
	cfg.Log = stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := verify.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "tenure-verify: %v\n", err)
		return 3
	}
	rep.Print(stdout)
	if !rep.OK {
		fmt.Fprintf(stdout, "replay with --seed %d\n", cfg.Seed)
	}
	return exitCode(rep)
}

// exitCode is 1 for a violation, 3 for an inconclusive check, else 0.
func exitCode(rep *verify.Report) int {
	switch {
	case !rep.OK:
		return 1
	case rep.Inconclusive:
		return 3
	}
	return 0
}
