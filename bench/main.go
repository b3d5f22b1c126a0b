// Command bench measures tenure against etcd 3.6.16 side by side: both
// built from source, started as real server processes on fresh data
// directories (fsync on) on loopback, the same workloads run on both in one
// run, interleaved, for several rounds. It prints each round and the median
// ratio tenure/etcd as a table (or JSON) and writes results.json and a
// chart (chart.svg) to -out.
//
//	cd bench && go run .            # everything, as docs/benchmarks.md reports it
//	cd bench && go run . -quick     # a smoke run of every workload in a few minutes
//
// See docs/benchmarks.md for the method and the figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// allWorkloads are the IDs -run accepts, in the order they run.
var allWorkloads = []string{"lock", "contended", "grant", "renew", "write", "held", "fleet", "floor", "failover", "memory"}

// standardWorkloads are what -standard runs: everything but held, which
// the fleet replaces there.
var standardWorkloads = "throughput,fleet,floor,failover,memory"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole command; it returns the exit code. Every server it
// started is killed before it returns, and the data directories are
// removed unless -keep.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, out, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	raiseFileLimit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	defer running.killAll()

	root, err := os.MkdirTemp(out.workDir, "tenure-bench-")
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if cfg.Keep {
		fmt.Fprintf(stderr, "keeping data directories and logs in %s\n", root)
	} else {
		defer os.RemoveAll(root)
	}
	res := &results{
		Date:    time.Now().UTC().Format(time.RFC3339),
		Machine: thisMachine(),
		Command: "go run . " + strings.Join(args, " "),
		Config:  cfg,
	}
	bins, err := buildBinaries(ctx, root, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	bins.tenuredFlags = cfg.TenuredFlags
	s := &suite{cfg: cfg, bins: bins, root: root, log: stderr}
	runErr := s.runAll(ctx, res)
	running.killAll()
	res.Goals = computeGoals(res)
	if runErr != nil {
		fmt.Fprintf(stderr, "bench: %v\n", runErr)
		if ctx.Err() != nil {
			return 130
		}
	}
	if out.format == "json" {
		writeJSON(stdout, res)
	} else {
		writeTable(stdout, res)
	}
	if err := writeFiles(out.dir, res); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if runErr != nil {
		return 1
	}
	return 0
}

// output is where and how the results go.
type output struct {
	format  string
	dir     string
	workDir string
}

func parseFlags(args []string, stderr io.Writer) (config, output, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run . [flags]   (in the bench module)\n\n"+
			"Runs tenure and etcd 3.6.16 side by side; see docs/benchmarks.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var (
		quick    = fs.Bool("quick", false, "smoke run: 1 round, short durations, small counts (flags given explicitly still win)")
		standard = fs.Bool("standard", false, "the standard run: every goal of issue 21 in under 20 minutes on 2 cores, with a goals table (flags given explicitly still win)")
		runList  = fs.String("run", "all", "workloads, comma-separated: "+strings.Join(allWorkloads, ",")+"; 'throughput' = lock,contended,grant,renew,write; 'all'")
		configs  = fs.String("configs", "1x16,3x16,3x1,1x64,3x64,1x16:shared,3x16:shared,3x1:shared", "throughput configurations, NODESxWORKERS[:per-worker|:shared], comma-separated")
		clients  = fs.String("clients", string(perWorker), "client mode of configurations that name none: per-worker (every worker its own client and connections) or shared (one client for all workers)")
		tflags   = fs.String("tenured-flags", "", "flags given to every tenured, space-separated (to compare settings: -tenured-flags '--renew-headroom=0')")
		rounds   = fs.Int("rounds", 3, "rounds of each workload on each system")
		duration = fs.Duration("duration", 10*time.Second, "measured time of one throughput workload on one system in one round")
		warmup   = fs.Duration("warmup", time.Second, "unmeasured time before each throughput measurement")
		sessions = fs.Int("held-sessions", 1000, "held leases: sessions (tenure: election sessions; etcd: all leases on one client)")
		perSess  = fs.Int("held-leases", 100, "held leases: leases per session")
		heldDur  = fs.Duration("held-duration", time.Minute, "held leases: how long they are held and measured")
		heldN    = fs.String("held-nodes", "1,3", "held leases: cluster sizes")
		fleetN   = fs.String("fleet-nodes", "1,3", "fleet: cluster sizes")
		fleetM   = fs.String("fleet-members", "10000,1000", "fleet: members on each cluster size of -fleet-nodes, in its order (one number: all)")
		fleetD   = fs.String("fleet-duration", "5m", "fleet: how long the members hold their leases, measured, on each cluster size of -fleet-nodes (one duration: all)")
		fleetR   = fs.Float64("fleet-rate", 200, "fleet: members started per second (the ramp)")
		trials   = fs.Int("failover-trials", 7, "failover: trials on each system")
		memN     = fs.String("memory-leases", "100000,1000000", "memory: numbers of live leases")
		idleMax  = fs.Float64("idle-max", 0.25, "the machine counts as idle when other processes use at most this many cores")
		idleWait = fs.Duration("idle-wait", 30*time.Second, "how long to wait for an idle machine before a round, then measure anyway and say so")
		keep     = fs.Bool("keep", false, "keep the data directories, server logs and binaries")
		format   = fs.String("o", "table", "output on stdout: table or json")
		outDir   = fs.String("out", "results", "directory for results.json and chart.svg (empty: none)")
		workDir  = fs.String("workdir", "", "where the data directories go (default: the system's temporary directory)")
	)
	if err := fs.Parse(args); err != nil {
		return config{}, output{}, err
	}
	if fs.NArg() > 0 {
		return config{}, output{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	def := func(name string, apply func()) {
		if !set[name] {
			apply()
		}
	}
	if *quick && *standard {
		return config{}, output{}, errors.New("-quick and -standard exclude each other")
	}
	if *quick {
		def("configs", func() { *configs = "1x4,3x1,1x4:shared" })
		def("rounds", func() { *rounds = 1 })
		def("duration", func() { *duration = 2 * time.Second })
		def("warmup", func() { *warmup = 300 * time.Millisecond })
		def("held-sessions", func() { *sessions = 20 })
		def("held-leases", func() { *perSess = 10 })
		def("held-duration", func() { *heldDur = 8 * time.Second })
		def("held-nodes", func() { *heldN = "1" })
		def("failover-trials", func() { *trials = 1 })
		def("memory-leases", func() { *memN = "2000" })
		def("idle-wait", func() { *idleWait = 2 * time.Second })
		def("fleet-members", func() { *fleetM = "40,20" })
		def("fleet-duration", func() { *fleetD = "5s" })
		def("fleet-rate", func() { *fleetR = 100 })
	}
	if *standard {
		// Sized to finish in under 20 minutes on 2 cores; see
		// docs/benchmarks.md. The fleet holds for less than the goal's 5
		// minutes, and memory is measured at 100,000 leases, not 1M.
		def("run", func() { *runList = standardWorkloads })
		def("configs", func() { *configs = "1x16,1x64,3x16,3x64,3x1,1x16:shared,3x16:shared" })
		def("rounds", func() { *rounds = 1 })
		def("duration", func() { *duration = 3 * time.Second })
		def("warmup", func() { *warmup = 500 * time.Millisecond })
		def("fleet-duration", func() { *fleetD = "1m" })
		def("failover-trials", func() { *trials = 3 })
		def("memory-leases", func() { *memN = "100000" })
		def("idle-wait", func() { *idleWait = 5 * time.Second })
	}
	cfg := config{Rounds: *rounds, Duration: dur(*duration), Warmup: dur(*warmup), Trials: *trials, Keep: *keep,
		Idle: idleSetting{MaxOther: *idleMax, Wait: dur(*idleWait)}, Standard: *standard, TenuredFlags: strings.Fields(*tflags)}
	for f := range strings.SplitSeq(*runList, ",") {
		switch f = strings.TrimSpace(f); f {
		case "all":
			cfg.Run = append(cfg.Run, allWorkloads...)
		case "throughput":
			cfg.Run = append(cfg.Run, allWorkloads[:5]...)
		default:
			if !slices.Contains(allWorkloads, f) {
				return cfg, output{}, fmt.Errorf("-run: unknown workload %q", f)
			}
			cfg.Run = append(cfg.Run, f)
		}
	}
	mode, err := parseClientMode(*clients)
	if err != nil {
		return cfg, output{}, fmt.Errorf("-clients: %w", err)
	}
	if cfg.Configs, err = parseTopologies(*configs, mode); err != nil {
		return cfg, output{}, fmt.Errorf("-configs: %w", err)
	}
	if cfg.HeldN, err = parseInts(*heldN); err != nil {
		return cfg, output{}, fmt.Errorf("-held-nodes: %w", err)
	}
	for _, n := range cfg.HeldN {
		if n != 1 && n != 3 {
			return cfg, output{}, fmt.Errorf("-held-nodes: %d nodes: want 1 or 3", n)
		}
	}
	if cfg.MemoryN, err = parseInts(*memN); err != nil {
		return cfg, output{}, fmt.Errorf("-memory-leases: %w", err)
	}
	if cfg.Fleet, err = parseFleet(*fleetN, *fleetM, *fleetD, *fleetR); err != nil {
		return cfg, output{}, err
	}
	cfg.Held = heldConfig{Sessions: *sessions, LeasesPerSession: *perSess, Duration: *heldDur,
		DurationS: heldDur.Seconds(), SetupWorkers: 64}
	switch {
	case cfg.Rounds < 1:
		return cfg, output{}, errors.New("-rounds must be at least 1")
	case *duration <= 0 || *heldDur <= 0 || *warmup < 0:
		return cfg, output{}, errors.New("durations must be positive")
	case *sessions < 1 || *perSess < 1:
		return cfg, output{}, errors.New("-held-sessions and -held-leases must be at least 1")
	case *trials < 1:
		return cfg, output{}, errors.New("-failover-trials must be at least 1")
	case *format != "table" && *format != "json":
		return cfg, output{}, fmt.Errorf("-o %q: want table or json", *format)
	}
	return cfg, output{format: *format, dir: *outDir, workDir: *workDir}, nil
}

// writeFiles writes results.json and, when there are throughput results,
// chart.svg into dir.
func writeFiles(dir string, res *results) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	if err := writeJSON(f, res); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if len(res.Throughput) == 0 {
		return nil
	}
	f, err = os.Create(filepath.Join(dir, "chart.svg"))
	if err != nil {
		return err
	}
	if err := writeChart(f, res); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
