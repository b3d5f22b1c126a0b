package verify

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
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenure-io/tenure/client"
)

// Config is one harness run.
type Config struct {
	// Seed drives the fault schedule and the workers' choices.
	Seed uint64
	// Duration of traffic and faults. Default 60s.
	Duration time.Duration
	// Nodes is the number of tenured processes. Default 3.
	Nodes int
	// Workers is the number of client processes. Default 8.
	Workers int
	// Names is the number of contended lease names. Default 3.
	Names int
	// ElectionWorkers is the number of worker processes that lead names
	// through package election. Default 3; negative: none.
	ElectionWorkers int
	// ElectionNames is the number of names they contend for. Default 2.
	ElectionNames int
	// TTL of every lease. Default 2s.
	TTL time.Duration
	// Election is tenured's --election-timeout. Default 500ms.
	Election time.Duration
	// Faults are the fault kinds to inject. Default AllFaults.
	Faults []string
	// Unsafe sends the workers' writes and reads to an unfenced
	// harness-side store (the negative control).
	Unsafe bool
	// SkipFsync runs tenured with --fault-inject-skip-fsync: with the
	// power-loss fault, the negative control of durability.
	SkipFsync bool
	// Out is where a failing run leaves its history and visualization.
	Out string
	// Tenured is the tenured binary; found or built when empty.
	Tenured string
	// CheckTimeout bounds the linearizability search per lease name.
	// Default 60s.
	CheckTimeout time.Duration
	// EffectWindow is how long after its call an indeterminate op may
	// still take effect (see segments.go). Default 15s.
	EffectWindow time.Duration
	// Legacy models known bugs B1b and B1c (see RetriedAcquires) when
	// Recheck checks a history recorded before they were fixed (by the
	// client's request IDs). Run ignores it: a run tolerates nothing.
	Legacy bool
	// TLS runs the cluster with TLS on the API, mutual TLS between
	// members, and an auth file: the harness and every worker
	// authenticate with tokens of their own.
	TLS bool
	// Log receives progress lines.
	Log io.Writer
}

// DefaultConfig returns a Config with the defaults described on each
// field.
func DefaultConfig() Config {
	var c Config
	c.defaults()
	return c
}

func (c *Config) defaults() {
	if c.Duration == 0 {
		c.Duration = 60 * time.Second
	}
	if c.Nodes == 0 {
		c.Nodes = 3
	}
	if c.Workers == 0 {
		c.Workers = 8
	}
	if c.Names == 0 {
		c.Names = 3
	}
	if c.ElectionWorkers == 0 {
		c.ElectionWorkers = 3
	}
	if c.ElectionNames == 0 {
		c.ElectionNames = 2
	}
	if c.TTL == 0 {
		c.TTL = 2 * time.Second
	}
	if c.Election == 0 {
		c.Election = 500 * time.Millisecond
	}
	if c.Faults == nil {
		c.Faults = AllFaults
	}
	if c.Out == "" {
		c.Out = "verify-out"
	}
	if c.CheckTimeout == 0 {
		c.CheckTimeout = 60 * time.Second
	}
	if c.EffectWindow == 0 {
		c.EffectWindow = 15 * time.Second
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// MinExpiry is the least real time a lease can last: its TTL at the
// fastest clock rate the nemesis sets, less 1% for timer slop.
func (c Config) MinExpiry() time.Duration {
	maxRate := 1.0
	for _, r := range ClockRates {
		maxRate = max(maxRate, r)
	}
	return time.Duration(float64(c.TTL) / maxRate * 0.99)
}

// DelayScale is the least real time a lock-delay lasts per unit of its
// length: the fastest clock rate the nemesis sets, less 1% for timer
// slop, as for MinExpiry.
func (c Config) DelayScale() float64 {
	maxRate := 1.0
	for _, r := range ClockRates {
		maxRate = max(maxRate, r)
	}
	return 0.99 / maxRate
}

// Drift is the clock-rate allowance of the election workers' sessions:
// the fastest clock rate the nemesis sets, less 1.
func (c Config) Drift() float64 {
	maxRate := 1.0
	for _, r := range ClockRates {
		maxRate = max(maxRate, r)
	}
	return maxRate - 1
}

// Schedule returns the fault schedule of c.
func (c Config) Schedule() Schedule {
	c.defaults()
	return NewSchedule(c.Seed, c.Duration, c.Faults, c.Nodes, c.Workers+max(c.ElectionWorkers, 0), c.TTL)
}

// Run runs the harness: cluster, traffic, faults, then the checks.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if abs, err := filepath.Abs(cfg.Out); err == nil {
		cfg.Out = abs
	}
	logf := func(format string, args ...any) { fmt.Fprintf(cfg.Log, format+"\n", args...) }
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "tenure-verify")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	bin := cfg.Tenured
	if bin == "" {
		if bin, err = FindTenured(work); err != nil {
			return nil, err
		}
	}
	sched := cfg.Schedule()
	logf("seed %d, schedule %s (%d faults), %d nodes, %d workers, ttl %s, duration %s", cfg.Seed, sched.Hash(), len(sched), cfg.Nodes, cfg.Workers, cfg.TTL, cfg.Duration)
	for _, f := range sched {
		logf("  plan %s", f)
	}

	c, err := NewCluster(bin, filepath.Join(work, "data"), cfg.Nodes, cfg.Election)
	if err != nil {
		return nil, err
	}
	c.Extra = append(slices.Clone(nodeFlags), skipFsyncFlags(cfg.SkipFsync)...)
	if needsDisks(cfg.Faults) {
		if err := c.MountDisks(); err != nil {
			c.Close()
			return nil, err
		}
		defer c.UnmountDisks() // after c.Close below has killed the nodes
		logf("data directories on faultfs mounts (unsynced writes are lost at a power-loss fault)")
	}
	if cfg.SkipFsync {
		logf("UNSAFE: tenured skips fsync (--fault-inject-skip-fsync)")
	}
	var sec *Security
	if cfg.TLS {
		if sec, err = NewSecurity(work, cfg.Nodes, cfg.Workers+max(cfg.ElectionWorkers, 0)); err != nil {
			c.Close()
			return nil, fmt.Errorf("make certificates and tokens: %w", err)
		}
		c.NodeExtra = sec.NodeFlags
		security.Store(sec)
		defer security.Store(nil)
		logf("TLS on the API and between members, authentication by tokens (auth file %s)", sec.AuthFile)
	}
	defer c.Close()
	if err := c.Boot(ctx); err != nil {
		return nil, fmt.Errorf("boot cluster: %w (logs in %s)", err, work)
	}
	logf("cluster up: %v", c.Endpoints())
	var members Membership
	if _, st, ok := c.LeaderStatus(ctx); ok {
		members.Start = voters(st)
	} else {
		// Boot saw every node a voter a moment ago.
		for _, n := range c.Nodes {
			members.Start = append(members.Start, n.ID)
		}
	}

	var store *UnsafeStore
	var storeURL string
	if cfg.Unsafe {
		store = NewUnsafeStore()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		srv := &http.Server{Handler: store}
		go srv.Serve(ln)
		defer srv.Close()
		storeURL = "http://" + ln.Addr().String()
		logf("UNSAFE: workers write to the unfenced store at %s", storeURL)
	}
	var names []string
	for i := range cfg.Names {
		names = append(names, fmt.Sprintf("lock-%d", i))
	}
	var wcfgs []WorkerConfig
	for i := range cfg.Workers {
		wcfgs = append(wcfgs, WorkerConfig{ID: i, Seed: cfg.Seed, Endpoints: c.Endpoints(), Names: names, TTL: cfg.TTL, UnsafeStore: storeURL,
			RW: []string{"rw-0"}})
	}
	var elect []string
	for i := range cfg.ElectionNames {
		elect = append(elect, fmt.Sprintf("elect-%d", i))
	}
	if cfg.ElectionWorkers > 0 {
		for i := range wcfgs {
			wcfgs[i].Elected = elect
		}
	}
	for i := range max(cfg.ElectionWorkers, 0) {
		wcfgs = append(wcfgs, WorkerConfig{ID: cfg.Workers + i, Seed: cfg.Seed, Endpoints: c.Endpoints(), TTL: cfg.TTL, Election: elect, Drift: cfg.Drift()})
	}
	if sec != nil {
		for i := range wcfgs {
			wcfgs[i].CACert, wcfgs[i].Token, wcfgs[i].AdminToken = sec.CACert, sec.workers[wcfgs[i].ID], sec.AdminToken
		}
	}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watchers := StartWatchers(wctx, c.Endpoints())
	ws, err := StartWorkers(wcfgs, os.Stderr)
	if err != nil {
		return nil, err
	}
	nem := &Nemesis{C: c, Workers: ws, Log: logf}
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	nem.Run(rctx, start, sched)
	<-rctx.Done()
	cancel()
	nem.HealAll()
	all := ws.Stop()
	stopWatch()
	wrecs, nw := watchers.Stop()
	h, terms := all.Split()
	elapsed := time.Since(start)
	logf("traffic stopped after %s: %d operations", elapsed.Round(time.Millisecond), len(h))
	members = endMembership(ctx, c, members, clusterSizeWait)
	members.Unrestored = nem.Unrestored
	logf("cluster size: %d voters at the start (%s), %d at the end (%s), after %s waiting for %s",
		len(members.Start), strings.Join(members.Start, ", "), len(members.End), strings.Join(members.End, ", "), members.Waited.Round(time.Millisecond), members.Awaited)

	// Read the final state even if the run was interrupted.
	final, finalErr := readFinal(context.WithoutCancel(ctx), c, store, names)
	if finalErr != nil {
		logf("reading the final state: %v (durability not checked)", finalErr)
	}
	rep := &Report{Seed: cfg.Seed, ScheduleHash: sched.Hash(), Duration: elapsed, Nodes: cfg.Nodes, Workers: cfg.Workers,
		Unsafe: cfg.Unsafe, SkipFsync: cfg.SkipFsync, Strict: true, Planned: len(sched), Injected: nem.Injected, Skipped: nem.Skipped, Final: final,
		Membership: members}
	rep.count(all)
	for _, e := range ws.Errs {
		logf("worker output: %s", e)
	}

	m := Model{MinExpiry: cfg.MinExpiry(), DelayScale: cfg.DelayScale()}
	checked := h
	rep.Violations = CheckInvariants(h, final, m)
	rep.Violations = append(rep.Violations, nem.Violations...)
	rep.Violations = append(rep.Violations, members.Check()...)
	rep.Violations = append(rep.Violations, EarlyExitViolations(ws.Early)...)
	rep.Violations = append(rep.Violations, unreadableAfterPowerLoss(cfg, h, finalErr)...)
	rep.SnapshotInstalls = nem.Snapshots
	rep.Pauses = nem.Pauses
	tv, tst := CheckTerms(terms, nem.Pauses)
	rep.Violations = append(rep.Violations, tv...)
	rep.Terms = tst
	wv, wst := CheckWatches(wrecs, nw, all)
	rep.Violations = append(rep.Violations, wv...)
	rep.Watches = wst
	rv, rst := CheckRW(all)
	rep.Violations = append(rep.Violations, rv...)
	rep.RW = rst
	for _, r := range CheckLinearizable(m, checked, cfg.EffectWindow, cfg.CheckTimeout) {
		rep.Histories = append(rep.Histories, HistoryResult{Name: r.Name, Ops: r.Ops, Segments: len(r.Segments), Result: string(r.Result)})
		switch r.Result {
		case porcupine.Unknown:
			rep.Inconclusive = true
		case porcupine.Illegal:
			rep.Violations = append(rep.Violations, Violation{InvLinearizable, fmt.Sprintf("the history of %q (%d ops) is not linearizable; see %s", r.Name, r.Ops,
				filepath.Join(cfg.Out, "history-"+r.Name+".html"))})
			seg := r.Segments[len(r.Segments)-1]
			rep.Violations[len(rep.Violations)-1].Detail += fmt.Sprintf(" (segment %d of its history, %s to %s, %d ops)", len(r.Segments), stamp(seg.From), stamp(seg.To), seg.Ops)
			if err := r.Visual.write(filepath.Join(cfg.Out, "history-"+r.Name+".html")); err != nil {
				logf("visualize %s: %v", r.Name, err)
			}
		}
	}
	rep.OK = len(rep.Violations) == 0
	if !rep.OK || rep.Inconclusive {
		// The evidence outlives the run's temporary directory: the
		// history, the visualizations (above) and every node's log.
		rep.Evidence = cfg.Out
		if err := all.WriteJSONL(filepath.Join(cfg.Out, "history.jsonl")); err != nil {
			logf("write history: %v", err)
		}
		if err := writeJSONL(filepath.Join(cfg.Out, "watch.jsonl"), wrecs); err != nil {
			logf("write watch events: %v", err)
		}
		for _, n := range c.Nodes {
			if err := copyFile(n.LogPath, filepath.Join(cfg.Out, filepath.Base(n.LogPath))); err != nil {
				logf("keep the log of %s: %v", n.ID, err)
			}
		}
	}
	if err := rep.WriteJSON(filepath.Join(cfg.Out, "summary.json")); err != nil {
		logf("write summary: %v", err)
	}
	return rep, nil
}

func writeJSONL[T any](path string, recs []T) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, r := range recs {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// clusterSizeWait bounds how long the end of a run waits for the cluster
// to be as large as it began: long enough for a node restarted at the end
// to join, catch up and be promoted.
const clusterSizeWait = 60 * time.Second

// endMembership waits up to wait for the leader to list at least as many
// voters as m.Start, and returns m with the end's voters and what was
// waited for.
func endMembership(ctx context.Context, c *Cluster, m Membership, wait time.Duration) Membership {
	m.Awaited = fmt.Sprintf("a leader to list %d voters, as at the start (%s)", len(m.Start), strings.Join(m.Start, ", "))
	begin := time.Now()
	waitFor(ctx, wait, m.Awaited, func() bool {
		_, st, ok := c.LeaderStatus(ctx)
		m.End, m.EndLeader = nil, ""
		if ok {
			m.End, m.EndLeader = voters(st), st.NodeID
		}
		return ok && len(m.End) >= len(m.Start)
	})
	m.Waited = time.Since(begin)
	return m
}

// readFinal reads every key once the cluster has healed.
func readFinal(ctx context.Context, c *Cluster, store *UnsafeStore, names []string) (map[string]FinalValue, error) {
	out := map[string]FinalValue{}
	if store != nil {
		for _, n := range names {
			out[KeyOf(n)] = store.Final(KeyOf(n))
		}
		return out, nil
	}
	cl, err := c.Client()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	for _, n := range names {
		key := KeyOf(n)
		deadline := time.Now().Add(30 * time.Second)
		for {
			rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			kv, err := cl.KVGet(rctx, key)
			cancel()
			if err == nil {
				out[key] = FinalValue{Key: key, Found: true, Value: string(kv.Value), Token: kv.Token}
				break
			}
			if errors.Is(err, client.ErrNotFound) {
				out[key] = FinalValue{Key: key}
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("read %s: %w", key, err)
			}
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}
	return out, nil
}
