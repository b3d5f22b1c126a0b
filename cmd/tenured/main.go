// Command tenured runs a tenure server: one member of a lease cluster.
//
// With no flags it starts a single-node cluster with its data in
// ./tenure-data, the client API on 127.0.0.1:7400 and raft on
// 127.0.0.1:7401. See `tenured -h`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/flaghelp"
	"github.com/tenure-io/tenure/internal/version"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/server"
)

type options struct {
	dataDir       string
	listen        string
	advertise     string
	raftListen    string
	raftAdvertise string
	nodeID        string
	join          string
	dev           bool
	logLevel      string
	logFormat     string
	raftLogLevel  string
	election      time.Duration
	multiplier    float64
	minTTL        time.Duration
	clockRate     float64
	skipFsync     bool
	snapThreshold uint64
	trailingLogs  uint64
	snapInterval  time.Duration
	historyTerms  int
	historyAge    time.Duration
	headroom      time.Duration
	resetDataDir  bool
	rec           recovery
	pprofListen   string
	cors          string   // --cors-origins as given
	corsOrigins   []string // parsed
	maxStreams    int
	version       bool
	sec           security
}

// baseElectionTimeout is raft's heartbeat and election timeout at
// --raft-multiplier 1: fast failover on a LAN or one machine. A leader
// sends heartbeats every tenth of it.
const baseElectionTimeout = 300 * time.Millisecond

// faultClockRateFlag injects a fault: it makes this node's clock run fast
// or slow. It exists for the fault harness, is left out of -h, and is
// logged loudly when set.
const faultClockRateFlag = "fault-inject-clock-rate"

// faultSkipFsyncFlag injects a fault: the raft log and raft.db skip
// fsync, so a power loss loses what this node acknowledged. It is the
// fault harness's negative control, left out of -h and logged loudly.
const faultSkipFsyncFlag = "fault-inject-skip-fsync"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.LookupEnv)
	stop()
	os.Exit(code)
}

// newFlagSet returns tenured's flags, bound to o.
func newFlagSet(o *options, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("tenured", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: tenured [flags]\n\nRuns a tenure server. With no flags: a single-node cluster, data in ./tenure-data,\nAPI on 127.0.0.1:7400, raft on 127.0.0.1:7401.\n\nFlags:\n")
		// The fault injector is not a setting: kept out of -h.
		fmt.Fprint(stderr, flaghelp.Defaults(fs, nil, faultClockRateFlag, faultSkipFsyncFlag))
		fmt.Fprint(stderr, envHelp)
	}
	fs.StringVar(&o.dataDir, "data-dir", "tenure-data", "directory for the raft log, snapshots and node ID")
	fs.StringVar(&o.listen, "listen", "127.0.0.1:7400", "client API address (Connect, gRPC, JSON; health and metrics)")
	fs.StringVar(&o.advertise, "advertise", "", "API address other nodes use to reach this one (default: --listen)")
	fs.StringVar(&o.raftListen, "raft-listen", "127.0.0.1:7401", "raft address")
	fs.StringVar(&o.raftAdvertise, "raft-advertise", "", "raft address other nodes use to reach this one (default: --raft-listen)")
	fs.StringVar(&o.nodeID, "node-id", "", "node ID, fixed when the data directory is created (default: the raft address)")
	fs.StringVar(&o.join, "join", "", "API address of any member of an existing cluster to join")
	fs.BoolVar(&o.dev, "dev", false, "keep everything in memory (nothing survives a restart)")
	fs.StringVar(&o.cors, "cors-origins", "", "comma-separated browser origins (https://app.example) allowed to call the API\nfrom scripts; * allows any; default none")
	fs.IntVar(&o.maxStreams, "max-streams", server.DefaultMaxStreams, "watches and dashboard streams one principal (without auth: one client host) may have\nopen on this node at once")
	fs.StringVar(&o.pprofListen, "pprof-listen", "", "serve Go's profiler (net/http/pprof) on this separate address; off by default")
	fs.BoolVar(&o.resetDataDir, "reset-data-dir", false, "move the contents of --data-dir aside (to DIR.old-TIME) and start a NEW cluster in it;\nits tokens start at 1 again, so reset the fences of your storage too")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&o.raftLogLevel, "raft-log-level", "warn", "log level of the raft library")
	fs.Float64Var(&o.multiplier, "raft-multiplier", 1, "scale raft's timing for slower networks and machines: the election timeout is\n300ms times this (a LAN or one machine: 1; a WAN or an overloaded host: 3-5)")
	fs.DurationVar(&o.election, "election-timeout", 0, "raft heartbeat and election timeout; overrides --raft-multiplier (default 300ms);\nthe minimum TTL is at least twice this")
	fs.DurationVar(&o.minTTL, "min-ttl", 0, "minimum lease TTL (default and floor: twice the election timeout)")
	fs.Uint64Var(&o.snapThreshold, "snapshot-threshold", node.DefaultConfig().SnapshotThreshold, "log entries since the last snapshot that trigger a new one")
	fs.Uint64Var(&o.trailingLogs, "trailing-logs", node.DefaultConfig().TrailingLogs, "log entries a snapshot leaves behind for slow followers")
	fs.DurationVar(&o.snapInterval, "snapshot-interval", node.DefaultConfig().SnapshotInterval, "how often to check whether a snapshot is due")
	fs.IntVar(&o.historyTerms, "history-terms", lease.DefaultHistoryRetention().Terms, "ended terms the lease history keeps per name (held ones besides); 0 keeps none.\nThe leader's setting applies to every member: set the same on all")
	fs.DurationVar(&o.historyAge, "history-age", lease.DefaultHistoryRetention().Age, "how long, in cluster time, the lease history keeps a term after it ended")
	fs.DurationVar(&o.headroom, "renew-headroom", node.DefaultConfig().RenewHeadroom, "answer renewals from the leader's memory: keep every lease up to min(TTL, this) past\nwhat its holder is told, and log a renewal only when that runs out. A lease nobody renews\nstill ends on time, but after a failover it may be kept this much longer (docs/time.md).\n0 logs every renewal")
	o.rec.register(fs)
	o.sec.register(fs)
	fs.Float64Var(&o.clockRate, faultClockRateFlag, 1, "FAULT INJECTION: scale this node's monotonic clock (breaks the time guarantees)")
	fs.BoolVar(&o.skipFsync, faultSkipFsyncFlag, false, "FAULT INJECTION: never fsync the raft log or raft.db (a power loss loses acknowledged writes)")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	return fs
}

// parseFlags parses the command line args over the environment (see
// setFromEnv).
func parseFlags(args []string, stderr io.Writer, lookupEnv func(string) (string, bool)) (*options, error) {
	o := &options{}
	fs := newFlagSet(o, stderr)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (tenured takes only flags)", fs.Arg(0))
	}
	if o.version {
		return o, nil
	}
	fromEnv, err := setFromEnv(fs, lookupEnv)
	if err != nil {
		return nil, err
	}
	if err := checkOptions(o); err != nil {
		return nil, envNote(err, fromEnv)
	}
	return o, nil
}

// checkOptions checks the values of the flags and fills in the derived
// ones.
func checkOptions(o *options) error {
	if _, err := newLogger(o, io.Discard); err != nil {
		return err
	}
	for _, a := range []struct{ name, v string }{
		{"--listen", o.listen}, {"--raft-listen", o.raftListen},
		{"--advertise", o.advertise}, {"--raft-advertise", o.raftAdvertise}, {"--join", o.join},
	} {
		if a.v == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(strings.TrimPrefix(a.v, "http://")); err != nil {
			return fmt.Errorf("%s %q is not host:port", a.name, a.v)
		}
	}
	for _, c := range strings.Split(o.cors, ",") {
		if c = strings.TrimSpace(c); c != "" {
			o.corsOrigins = append(o.corsOrigins, c)
		}
	}
	if err := server.CheckCORSOrigins(o.corsOrigins); err != nil {
		return fmt.Errorf("--cors-origins: %s", strings.TrimPrefix(err.Error(), "server: "))
	}
	if o.maxStreams < 1 {
		return fmt.Errorf("--max-streams %d must be at least 1", o.maxStreams)
	}
	if err := o.sec.check(o.listen, o.raftListen); err != nil {
		return err
	}
	if o.resetDataDir && o.dev {
		return fmt.Errorf("--reset-data-dir and --dev do not go together (--dev keeps nothing on disk)")
	}
	if err := o.rec.check(o); err != nil {
		return err
	}
	if o.clockRate <= 0 {
		return fmt.Errorf("--%s must be positive", faultClockRateFlag)
	}
	if o.snapThreshold == 0 {
		return fmt.Errorf("--snapshot-threshold must be positive")
	}
	if o.headroom < 0 || o.headroom > lease.DefaultLimits().MaxTTL {
		return fmt.Errorf("--renew-headroom %s: want 0 (off) up to the maximum TTL %s", o.headroom, lease.DefaultLimits().MaxTTL)
	}
	if err := lease.DefaultLimits().Validate(lease.HistoryConfigOp(lease.HistoryRetention{Terms: o.historyTerms, Age: o.historyAge})); err != nil {
		return fmt.Errorf("--history-terms %d --history-age %s: %w", o.historyTerms, o.historyAge, err)
	}
	if o.snapInterval < 10*time.Millisecond {
		return fmt.Errorf("--snapshot-interval %s is too short (minimum 10ms)", o.snapInterval)
	}
	if o.multiplier <= 0 || o.multiplier > 100 {
		return fmt.Errorf("--raft-multiplier %g is out of range (0 < N <= 100)", o.multiplier)
	}
	if o.election == 0 {
		o.election = time.Duration(float64(baseElectionTimeout) * o.multiplier)
	}
	if o.election < 50*time.Millisecond {
		return fmt.Errorf("--election-timeout %s is too short (minimum 50ms)", o.election)
	}
	return nil
}

func newLogger(o *options, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		hopts.ReplaceAttr = durationText
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", o.logFormat)
}

// durationText writes a duration in JSON logs as the text logs do, "2s":
// slog's JSON handler writes nanoseconds (2000000000).
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// run runs tenured until ctx ends and returns its exit code. Flags not
// on the command line are looked up in the environment with lookupEnv.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	o, err := parseFlags(args, stderr, lookupEnv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "tenured: %v\n", err)
		return 2
	}
	if o.version {
		fmt.Fprintln(stdout, version.Line("tenured"))
		return 0
	}
	log, err := newLogger(o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "tenured: %v\n", err)
		return 2
	}
	if err := serve(ctx, o, log, stderr); err != nil {
		fmt.Fprintf(stderr, "tenured: %v\n", err)
		return 1
	}
	return 0
}

// resetDataDir moves the contents of dir aside, into a new sibling
// directory, and returns its name. Nothing is deleted.
func resetDataDir(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	aside := fmt.Sprintf("%s.old-%s", filepath.Clean(dir), time.Now().UTC().Format("20060102T150405Z"))
	if err := os.Rename(dir, aside); err != nil {
		return "", fmt.Errorf("move %s aside: %w", dir, err)
	}
	return aside, nil
}

func serve(ctx context.Context, o *options, log *slog.Logger, stderr io.Writer) error {
	if o.resetDataDir {
		aside, err := resetDataDir(o.dataDir)
		if err != nil {
			return fmt.Errorf("--reset-data-dir: %w", err)
		}
		if aside != "" {
			log.Warn("moved the old data directory aside; starting a NEW cluster whose tokens start at 1 again",
				"data_dir", o.dataDir, "old_data", aside)
		}
	}
	if err := o.sec.load(log); err != nil {
		return err
	}
	if o.rec.on() {
		if err := o.rec.prepare(o, log); err != nil {
			return err
		}
	}
	o.sec.warn(log, o.listen)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	// A raft port that is taken is found before the data directory is
	// made, so that a failed first start leaves nothing behind.
	rl, err := net.Listen("tcp", o.raftListen)
	if err != nil {
		ln.Close()
		return fmt.Errorf("raft listen on %s: %w", o.raftListen, err)
	}
	rl.Close()
	apiAddr := o.advertise
	if apiAddr == "" {
		apiAddr = ln.Addr().String()
	}
	cfg := node.DefaultConfig()
	cfg.ID = o.nodeID
	cfg.DataDir = o.dataDir
	cfg.InMemory = o.dev
	cfg.RaftAddr = o.raftListen
	cfg.RaftAdvertise = o.raftAdvertise
	cfg.APIAddr = apiAddr
	cfg.Bootstrap = o.join == ""
	cfg.HeartbeatTimeout = o.election
	cfg.ElectionTimeout = o.election
	cfg.LeaderLeaseTimeout = o.election / 2
	if o.minTTL > 0 {
		cfg.Limits.MinTTL = o.minTTL
	}
	cfg.ClockRate = o.clockRate
	if o.clockRate != 1 {
		log.Warn("FAULT INJECTION: this node's clock runs at a false rate; leases it grants may expire early or late. Never use this outside a fault test.",
			"flag", "--"+faultClockRateFlag, "rate", o.clockRate)
	}
	cfg.FaultSkipFsync = o.skipFsync
	if o.skipFsync {
		log.Warn("FAULT INJECTION: this node never fsyncs its raft log or raft.db; a power loss loses writes it acknowledged. Never use this outside a fault test.",
			"flag", "--"+faultSkipFsyncFlag)
	}
	cfg.SnapshotThreshold = o.snapThreshold
	cfg.TrailingLogs = o.trailingLogs
	cfg.SnapshotInterval = o.snapInterval
	cfg.History = lease.HistoryRetention{Terms: o.historyTerms, Age: o.historyAge}
	cfg.RenewHeadroom = o.headroom
	cfg.Logger = log
	cfg.RaftLogLevel = o.raftLogLevel
	cfg.PeerProgress = func(ctx context.Context, addr string) (node.PeerProgress, error) {
		return peerProgress(ctx, &o.sec, addr)
	}
	cfg.PeerTLS = o.sec.peer
	reg := server.NewRegistry()
	cfg.Registerer = reg
	n, err := node.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := server.New(server.Config{Node: n, Logger: log, Registry: reg, Auth: o.sec.auth, ForwardTLS: o.sec.forwardTLS,
		CORSOrigins: o.corsOrigins, MaxStreams: o.maxStreams})
	if err != nil {
		ln.Close()
		n.Close()
		return err
	}
	httpSrv := server.NewHTTPServer(o.listen, srv.Handler())
	// TLS handshake failures (plain HTTP to the TLS port, unknown or
	// expired certificates) are logged, 20 a minute at most.
	httpSrv.ErrorLog = server.NewErrorLog(log, 20, time.Minute)
	serveErr := make(chan error, 1)
	scheme := "http"
	if o.sec.apiTLS != nil {
		scheme = "https"
		httpSrv.TLSConfig = o.sec.apiTLS
		go func() { serveErr <- httpSrv.ServeTLS(ln, "", "") }()
	} else {
		go func() { serveErr <- httpSrv.Serve(server.ReadAhead(ln)) }()
	}
	stopHUP := make(chan struct{})
	defer close(stopHUP)
	reloadOnHUP(log, srv, o.sec.authFile, stopHUP)
	log.Info("serving", "api", apiAddr, "api_tls", scheme == "https", "raft_tls", o.sec.peer != nil, "auth", o.sec.authEnabled, "raft", n.RaftAddr(), "node_id", n.ID(), "data_dir", dataDirLabel(o))

	if o.pprofListen != "" {
		pln, err := net.Listen("tcp", o.pprofListen)
		if err != nil {
			n.Close()
			httpSrv.Close()
			srv.Close()
			return fmt.Errorf("--pprof-listen %s: %w", o.pprofListen, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		psrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go psrv.Serve(pln)
		defer psrv.Close()
		log.Warn("serving the profiler; keep this address private", "pprof", pln.Addr().String())
	}
	joinErr := make(chan error, 1)
	if o.join != "" {
		go func() { joinErr <- joinLoop(ctx, log, &o.sec, o.join, n, apiAddr) }()
	}
	// Stopped before the node closes.
	wctx, stopWarn := context.WithCancel(ctx)
	defer stopWarn()
	if o.join == "" {
		go warnNotMember(wctx, log, n, o.election)
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case <-n.Removed():
		log.Warn("this node was removed from the cluster; shutting down. To add it again, start it with --join API address of a member")
	case err := <-serveErr:
		stopWarn()
		n.Close()
		return fmt.Errorf("api server: %w", err)
	case err := <-joinErr:
		if err != nil {
			n.Close()
			httpSrv.Close()
			srv.Close()
			return err
		}
		select {
		case <-ctx.Done():
			log.Info("shutting down")
		case <-n.Removed():
			log.Warn("this node was removed from the cluster; shutting down. To add it again, start it with --join API address of a member")
		}
	}
	stopWarn()
	if err := n.Close(); err != nil {
		log.Warn("closing node", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	// Clients keep their batch streams open between batches: end them,
	// or Shutdown waits for its timeout.
	httpSrv.RegisterOnShutdown(srv.EndBatchStreams)
	if err := httpSrv.Shutdown(sctx); err != nil {
		httpSrv.Close()
	}
	srv.Close()
	log.Info("stopped")
	return nil
}

// notMemberRepeat is how often warnNotMember repeats its warning.
const notMemberRepeat = 5 * time.Minute

// warnNotMember warns, and again every notMemberRepeat, while this node
// has joined a cluster but is not in the latest configuration it knows: it
// was removed while it was down (or before it restarted), and without
// --join nothing will add it back, so it would sit idle without a word.
// The first look waits a few election timeouts, in which a leader that
// re-added it meanwhile reaches it. It returns when ctx ends.
func warnNotMember(ctx context.Context, log *slog.Logger, n *node.Node, election time.Duration) {
	t := time.NewTicker(max(election, 100*time.Millisecond))
	defer t.Stop()
	var last time.Time
	for looks := 0; ; looks++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		others, ok := notMember(n.Status())
		if !ok || looks < 4 || time.Since(last) < notMemberRepeat {
			continue
		}
		last = time.Now()
		log.Warn("this node is not a member of its cluster: the latest configuration it knows lists only other nodes, so it takes "+
			"no part (it neither votes nor serves). To add it again, restart it with --join API address of a member; its data is kept",
			"id", n.ID(), "cluster", n.ClusterID(), "members", strings.Join(others, ","))
	}
}

// notMember returns the members st lists and true when st is the status
// of a node that joined a cluster (it has a cluster ID and a
// configuration) that does not list it.
func notMember(st node.Status) ([]string, bool) {
	if st.ClusterID == "" || len(st.Members) == 0 {
		return nil, false
	}
	var ids []string
	for _, m := range st.Members {
		if m.ID == st.ID {
			return nil, false
		}
		ids = append(ids, m.ID)
	}
	return ids, true
}

func dataDirLabel(o *options) string {
	if o.dev {
		return "(in memory)"
	}
	return o.dataDir
}

// joinLoop asks the member at addr to add this node, retrying until it is
// accepted, refused for good, or ctx ends. Joining is idempotent, so a
// restarted node repeats it harmlessly. A new node learns the cluster's ID
// from the answer; a node whose data directory names another cluster than
// the one at addr is refused. It returns an error only if the node cannot
// be part of that cluster.
func joinLoop(ctx context.Context, log *slog.Logger, sec *security, addr string, n *node.Node, apiAddr string) error {
	c, err := peer(sec, addr)
	if err != nil {
		return fmt.Errorf("--join %s: %w", addr, err)
	}
	defer c.Close()
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		if n.ClusterID() == "" {
			// Learn the cluster's ID first, so that the leader's first
			// raft messages are let in (see node.ExpectCluster).
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if st, err := c.Status(sctx); err == nil {
				n.ExpectCluster(st.ClusterID)
			}
			cancel()
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := c.Join(rctx, client.JoinRequest{NodeID: n.ID(), RaftAddr: n.RaftAddr(), APIAddr: apiAddr, ClusterID: n.ClusterID(),
			CatchingUp: n.CatchingUp()})
		cancel()
		if err == nil {
			if err := n.Joined(res.ClusterID, res.CatchUpIndex); err != nil {
				return fmt.Errorf("--join %s: %w", addr, err)
			}
			log.Info("joined the cluster", "via", addr, "cluster", res.ClusterID, "catch_up_index", res.CatchUpIndex)
			return nil
		}
		if errors.Is(err, client.ErrInvalid) || connect.CodeOf(err) == connect.CodeFailedPrecondition {
			return fmt.Errorf("--join %s refused: %w", addr, err)
		}
		if attempt == 1 || attempt%10 == 0 {
			log.Warn("join failed; retrying", "via", addr, "attempt", attempt, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

// peer returns a client of the member whose API is at addr.
func peer(sec *security, addr string) (*client.Client, error) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{addr}
	sec.memberClientConfig(&cfg)
	return client.New(cfg)
}

// peerProgress returns how far the member whose API is at addr has come.
func peerProgress(ctx context.Context, sec *security, addr string) (node.PeerProgress, error) {
	c, err := peer(sec, addr)
	if err != nil {
		return node.PeerProgress{}, err
	}
	defer c.Close()
	st, err := c.Status(ctx)
	return node.PeerProgress{Applied: st.AppliedIndex, CatchingUp: st.CatchingUp, Behind: st.Behind}, err
}
