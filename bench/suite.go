package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// config is what one run of the suite measures.
type config struct {
	Run      []string      `json:"run"`
	Configs  []topology    `json:"configs"`
	Rounds   int           `json:"rounds"`
	Duration dur           `json:"duration"`
	Warmup   dur           `json:"warmup"`
	Held     heldConfig    `json:"held"`
	HeldN    []int         `json:"held_nodes"`
	Trials   int           `json:"failover_trials"`
	MemoryN  []int         `json:"memory_leases"`
	Fleet    []fleetConfig `json:"fleet"`
	Standard bool          `json:"standard"`
	// TenuredFlags are given to every tenured.
	TenuredFlags []string    `json:"tenured_flags,omitempty"`
	Idle         idleSetting `json:"idle"`
	Keep         bool        `json:"-"`
}

// idleSetting is when the machine counts as idle before a round.
type idleSetting struct {
	// MaxOther is the CPU other processes may use, in cores.
	MaxOther float64 `json:"max_other_cores"`
	// Wait is how long to wait for the machine to become idle before
	// measuring anyway (and saying so).
	Wait dur `json:"wait"`
}

// dur is a time.Duration that reads as "10s" in JSON.
type dur time.Duration

func (d dur) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

func (d *dur) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = dur(v)
	return err
}

// clientMode is how the workers of a throughput measurement reach the
// cluster.
type clientMode string

const (
	// perWorker: every worker has a client of its own (tenure: a
	// client.Client; etcd: a clientv3.Client), and with it its own
	// connections, as when every worker is a process of its own.
	perWorker clientMode = "per-worker"
	// shared: one client per system, shared by all workers, whose library
	// may fold concurrent calls into one request.
	shared clientMode = "shared"
)

func parseClientMode(s string) (clientMode, error) {
	switch m := clientMode(s); m {
	case perWorker, shared:
		return m, nil
	}
	return "", fmt.Errorf("bad client mode %q: want %s or %s", s, perWorker, shared)
}

// topology is a cluster size, a number of concurrent workers and how they
// share clients.
type topology struct {
	Nodes   int        `json:"nodes"`
	Workers int        `json:"workers"`
	Clients clientMode `json:"clients"`
}

func (t topology) String() string {
	w := "workers"
	if t.Workers == 1 {
		w = "worker"
	}
	n := "nodes"
	if t.Nodes == 1 {
		n = "node"
	}
	c := "per-worker clients"
	if t.Clients == shared {
		c = "shared client"
	}
	return fmt.Sprintf("%d %s, %d %s, %s", t.Nodes, n, t.Workers, w, c)
}

// parseTopologies reads "1x16,3x16,3x1:shared" (nodes x workers, and the
// client mode after a colon; def when none is given).
func parseTopologies(s string, def clientMode) ([]topology, error) {
	var out []topology
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		spec, mode, hasMode := strings.Cut(f, ":")
		a, b, ok := strings.Cut(spec, "x")
		n, err1 := strconv.Atoi(a)
		w, err2 := strconv.Atoi(b)
		if !ok || err1 != nil || err2 != nil || (n != 1 && n != 3) || w < 1 {
			return nil, fmt.Errorf("bad configuration %q: want NODESxWORKERS with 1 or 3 nodes, e.g. 3x16 or 3x16:shared", f)
		}
		m := def
		if hasMode {
			var err error
			if m, err = parseClientMode(mode); err != nil {
				return nil, fmt.Errorf("configuration %q: %w", f, err)
			}
		}
		out = append(out, topology{n, w, m})
	}
	return out, nil
}

// parseFleet reads the fleet's flags: cluster sizes, and for each the
// members and the hold (one value: the same for all), and the rate at
// which members start.
func parseFleet(nodes, members, holds string, rate float64) ([]fleetConfig, error) {
	ns, err := parseInts(nodes)
	if err != nil {
		return nil, fmt.Errorf("-fleet-nodes: %w", err)
	}
	ms, err := parseInts(members)
	if err != nil {
		return nil, fmt.Errorf("-fleet-members: %w", err)
	}
	var ds []time.Duration
	for f := range strings.SplitSeq(holds, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("-fleet-duration: bad duration %q", f)
		}
		ds = append(ds, d)
	}
	if rate <= 0 {
		return nil, errors.New("-fleet-rate must be positive")
	}
	pick := func(flag string, n int) (int, error) {
		switch n {
		case 1:
			return 0, nil
		case len(ns):
			return -1, nil
		}
		return 0, fmt.Errorf("%s: %d values for %d cluster sizes: give one, or one per size", flag, n, len(ns))
	}
	mi, err := pick("-fleet-members", len(ms))
	if err != nil {
		return nil, err
	}
	di, err := pick("-fleet-duration", len(ds))
	if err != nil {
		return nil, err
	}
	var out []fleetConfig
	for i, n := range ns {
		if n != 1 && n != 3 {
			return nil, fmt.Errorf("-fleet-nodes: %d nodes: want 1 or 3", n)
		}
		m, d := ms[0], ds[0]
		if mi < 0 {
			m = ms[i]
		}
		if di < 0 {
			d = ds[i]
		}
		ramp := time.Duration(float64(m) / rate * float64(time.Second))
		out = append(out, fleetConfig{Nodes: n, Members: m, Ramp: dur(ramp), Hold: dur(d)})
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// suite runs the workloads against both systems.
type suite struct {
	cfg  config
	bins binaries
	root string
	log  io.Writer
}

func (s *suite) logf(format string, args ...any) {
	fmt.Fprintf(s.log, "%s  %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (s *suite) wants(id string) bool { return slices.Contains(s.cfg.Run, id) }

// order is the order of the two systems in round r: alternating, so that
// neither always runs first (on a warmer or a busier machine).
func order(r int) [2]system {
	if r%2 == 0 {
		return [2]system{etcdSys, tenureSys}
	}
	return [2]system{tenureSys, etcdSys}
}

func (s *suite) idle(ctx context.Context, pids []int) idleCheck {
	c := checkIdle(ctx, pids, time.Second, time.Duration(s.cfg.Idle.Wait), s.cfg.Idle.MaxOther)
	if !c.Idle {
		s.logf("machine not idle before this round: %s", c)
	}
	return c
}

// runAll runs every workload the configuration asks for.
func (s *suite) runAll(ctx context.Context, res *results) error {
	if s.wants("floor") {
		if err := s.runFloor(ctx, res); err != nil {
			return err
		}
	}
	if err := s.runThroughput(ctx, res); err != nil {
		return err
	}
	if s.wants("held") {
		if err := s.runHeld(ctx, res); err != nil {
			return err
		}
	}
	if s.wants("fleet") {
		if err := s.runFleets(ctx, res); err != nil {
			return err
		}
	}
	if s.wants("failover") {
		if err := s.runFailovers(ctx, res); err != nil {
			return err
		}
	}
	if s.wants("memory") {
		if err := s.runMemories(ctx, res); err != nil {
			return err
		}
	}
	return nil
}

func (s *suite) runThroughput(ctx context.Context, res *results) error {
	var wls []workload
	for _, w := range workloads {
		if s.wants(w.ID) {
			wls = append(wls, w)
		}
	}
	if len(wls) == 0 {
		return nil
	}
	for _, topo := range s.cfg.Configs {
		s.logf("throughput, %s: starting etcd and tenure", topo)
		ec, err := startCluster(ctx, etcdSys, s.bins, s.root, topo.Nodes, nil)
		if err != nil {
			return err
		}
		tc, err := startCluster(ctx, tenureSys, s.bins, s.root, topo.Nodes, nil)
		if err != nil {
			ec.stop()
			return err
		}
		err = s.throughputOn(ctx, res, topo, wls, ec, tc)
		ec.stop()
		tc.stop()
		if !s.cfg.Keep {
			os.RemoveAll(ec.dir)
			os.RemoveAll(tc.dir)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *suite) throughputOn(ctx context.Context, res *results, topo topology, wls []workload, ec, tc *cluster) error {
	// In shared mode every worker uses these two clients; per worker,
	// each worker gets clients of its own (see ownClients).
	eclient, err := ec.etcdClient()
	if err != nil {
		return err
	}
	defer eclient.Close()
	tclient, err := tc.tenureClient()
	if err != nil {
		return err
	}
	defer tclient.Close()
	cells := make([]*throughputCell, len(wls))
	for i, w := range wls {
		cells[i] = &throughputCell{Workload: w.ID, Title: w.Title, Topology: topo}
		res.Throughput = append(res.Throughput, cells[i])
	}
	pids := append(ec.pids(), tc.pids()...)
	seq := 0
	for r := range s.cfg.Rounds {
		ic := s.idle(ctx, pids)
		res.noteIdle(ic)
		for i, w := range wls {
			round := throughputRound{Round: r + 1, Idle: ic}
			for _, sys := range order(r) {
				seq++
				t := targets{etcd: eclient, tenure: tclient, prefix: fmt.Sprintf("b%d", seq)}
				var m measure
				var err error
				switch sys {
				case etcdSys:
					m, err = runWorkers(ctx, topo.Workers, time.Duration(s.cfg.Warmup), time.Duration(s.cfg.Duration), ec.pids(),
						func(ctx context.Context, n int) (worker, error) {
							return withClients(ctx, topo.Clients, t, ec, n, w.setupEtcd)
						})
					round.Etcd = m
				case tenureSys:
					m, err = runWorkers(ctx, topo.Workers, time.Duration(s.cfg.Warmup), time.Duration(s.cfg.Duration), tc.pids(),
						func(ctx context.Context, n int) (worker, error) {
							return withClients(ctx, topo.Clients, t, tc, n, w.setupTenure)
						})
					round.Tenure = m
				}
				if err != nil {
					return fmt.Errorf("%s on %s, %s, round %d: %w", w.ID, sys, topo, r+1, err)
				}
				s.logf("%-9s %-22s round %d %-6s %9.0f ops/s  p50 %7.2fms  p99 %7.2fms  errors %d %s",
					w.ID, topo, r+1, sys, m.OpsPerSec, m.P50Ms, m.P99Ms, m.Errors, m.FirstErr)
			}
			if round.Etcd.OpsPerSec > 0 {
				round.Ratio = round.Tenure.OpsPerSec / round.Etcd.OpsPerSec
			}
			cells[i].Rounds = append(cells[i].Rounds, round)
		}
	}
	for _, c := range cells {
		c.summarize()
	}
	return nil
}

func (s *suite) runHeld(ctx context.Context, res *results) error {
	for _, n := range s.cfg.HeldN {
		cell := &heldCell{Nodes: n, Config: s.cfg.Held}
		res.Held = append(res.Held, cell)
		for r := range s.cfg.Rounds {
			ic := s.idle(ctx, nil)
			res.noteIdle(ic)
			round := heldRound{Round: r + 1, Idle: ic}
			for _, sys := range order(r) {
				s.logf("held leases, %d node(s), round %d, %s: %d sessions x %d leases for %s",
					n, r+1, sys, s.cfg.Held.Sessions, s.cfg.Held.LeasesPerSession, s.cfg.Held.Duration)
				cl, err := startCluster(ctx, sys, s.bins, s.root, n, nil)
				if err != nil {
					return err
				}
				var m heldMeasure
				if sys == etcdSys {
					m, err = runHeldEtcd(ctx, cl, s.cfg.Held)
					round.Etcd = m
				} else {
					m, err = runHeldTenure(ctx, cl, s.cfg.Held)
					round.Tenure = m
				}
				cl.close(s.cfg.Keep)
				if err != nil {
					return fmt.Errorf("held leases on %s, %d node(s): %w", sys, n, err)
				}
				s.logf("held leases %-6s %d held, lost %d (in setup %d)  renew p99 %.2fms  server CPU %.2fs  (setup %.1fs, %d not granted %s)",
					sys, m.Leases, m.Lost, m.LostInSetup, m.RenewP99Ms, m.ServerCPU, m.SetupS, m.SetupFailed, m.SetupErr)
			}
			if round.Etcd.ServerCPU > 0 {
				round.CPURatio = round.Tenure.ServerCPU / round.Etcd.ServerCPU
			}
			cell.Rounds = append(cell.Rounds, round)
		}
		cell.summarize()
	}
	return nil
}

func (s *suite) runFailovers(ctx context.Context, res *results) error {
	f := &failoverResult{}
	res.Failover = f
	for t := range s.cfg.Trials {
		ic := s.idle(ctx, nil)
		res.noteIdle(ic)
		for _, sys := range order(t) {
			tr, err := runFailover(ctx, sys, s.bins, s.root, t+1, s.cfg.Keep)
			if err != nil {
				return fmt.Errorf("failover trial %d on %s: %w", t+1, sys, err)
			}
			s.logf("failover trial %d %-6s renewal after %.3fs, grant after %.3fs, survived %v %s",
				t+1, sys, tr.RenewS, tr.GrantS, tr.Survived, tr.Err)
			f.Trials = append(f.Trials, tr)
		}
	}
	f.summarize()
	return nil
}

func (s *suite) runMemories(ctx context.Context, res *results) error {
	for _, n := range s.cfg.MemoryN {
		ic := s.idle(ctx, nil)
		res.noteIdle(ic)
		cell := &memoryCell{Leases: n, Idle: ic}
		for _, sys := range order(0) {
			s.logf("memory, %s: %d leases on a fresh node", sys, n)
			m, err := runMemory(ctx, sys, s.bins, s.root, n, 128, s.cfg.Keep)
			if err != nil {
				return fmt.Errorf("memory on %s, %d leases: %w", sys, n, err)
			}
			s.logf("memory %-6s %d leases: RSS %d -> %d bytes, %.0f bytes per lease (setup %.1fs, snapshot %v)",
				sys, n, m.RSS0, m.RSS1, m.PerLease, m.SetupS, m.Snapshot)
			if sys == etcdSys {
				cell.Etcd = m
			} else {
				cell.Tenure = m
			}
		}
		if cell.Etcd.PerLease > 0 {
			cell.Ratio = cell.Tenure.PerLease / cell.Etcd.PerLease
		}
		res.Memory = append(res.Memory, cell)
	}
	return nil
}

// runFloor measures the latency floor on the file system of the data
// directories, before any server runs.
func (s *suite) runFloor(ctx context.Context, res *results) error {
	ic := s.idle(ctx, nil)
	res.noteIdle(ic)
	f, err := measureFloor(ctx, s.root)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	f.Idle = ic
	s.logf("floor: fdatasync p50 %.0fus p99 %.0fus, loopback round trip p50 %.0fus p99 %.0fus; commit %.0fus, lock cycle %.2fms",
		f.FsyncP50Us, f.FsyncP99Us, f.RTTP50Us, f.RTTP99Us, f.CommitUs, f.CycleMs)
	res.Floor = &f
	return nil
}

// runFleets runs the fleet on each cluster size, once on each system,
// each on a fresh cluster.
func (s *suite) runFleets(ctx context.Context, res *results) error {
	for i, fc := range s.cfg.Fleet {
		ic := s.idle(ctx, nil)
		res.noteIdle(ic)
		cell := &fleetCell{Config: fc, Idle: ic}
		for _, sys := range order(i) {
			s.logf("fleet, %d node(s), %s: %d members, each its own client, started over %s, held for %s",
				fc.Nodes, sys, fc.Members, time.Duration(fc.Ramp).Round(100*time.Millisecond), time.Duration(fc.Hold))
			cl, err := startCluster(ctx, sys, s.bins, s.root, fc.Nodes, nil)
			if err != nil {
				return err
			}
			m, err := runFleet(ctx, cl, fc)
			if m.Note != "" {
				s.logf("fleet %s: warning: %s", sys, m.Note)
			}
			cl.close(s.cfg.Keep)
			if err != nil {
				return fmt.Errorf("fleet on %s, %d node(s): %w", sys, fc.Nodes, err)
			}
			s.logf("fleet %-6s %d/%d holding, lost %d (in ramp %d), start failed %d %s; server CPU %.2fs, RSS peak %.0f MB end %.0f MB, client CPU %.2fs, %.2f connections per member (ramp %.1fs)",
				sys, m.Holding, m.Members, m.Lost, m.LostInRamp, m.StartFailed, m.StartErr, m.ServerCPU,
				mb(m.RSSPeak), mb(m.RSSEnd), m.ClientCPU, m.ConnsPerMember, m.RampS)
			for _, w := range m.LostWhy {
				s.logf("fleet %-6s lost a lease: %s", sys, w)
			}
			if sys == etcdSys {
				cell.Etcd = m
			} else {
				cell.Tenure = m
			}
		}
		cell.summarize()
		res.Fleet = append(res.Fleet, cell)
	}
	return nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }
