package main

import (
	"context"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseTopologies(t *testing.T) {
	got, err := parseTopologies("1x16, 3x64:shared,3x1:per-worker", perWorker)
	if err != nil {
		t.Fatal(err)
	}
	want := []topology{{1, 16, perWorker}, {3, 64, shared}, {3, 1, perWorker}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%d: got %v, want %v", i, got[i], want[i])
		}
	}
	if got, _ := parseTopologies("1x4", shared); got[0].Clients != shared {
		t.Errorf("default mode not applied: %v", got)
	}
	for _, bad := range []string{"2x16", "1x0", "1x16:both", "x", "1x16:"} {
		if _, err := parseTopologies(bad, perWorker); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseFleet(t *testing.T) {
	got, err := parseFleet("1,3", "10000,1000", "2m", 200)
	if err != nil {
		t.Fatal(err)
	}
	want := []fleetConfig{
		{Nodes: 1, Members: 10000, Ramp: dur(50 * time.Second), Hold: dur(2 * time.Minute)},
		{Nodes: 3, Members: 1000, Ramp: dur(5 * time.Second), Hold: dur(2 * time.Minute)},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("got %+v, want %+v", got, want)
	}
	got, err = parseFleet("1,3", "50", "2m,1m", 100)
	if err != nil || got[0].Members != 50 || got[1].Members != 50 || time.Duration(got[1].Hold) != time.Minute {
		t.Errorf("one member count, two holds: %+v, %v", got, err)
	}
	for _, bad := range [][4]string{
		{"1,3", "1,2,3", "1m", ""}, {"2", "10", "1m", ""}, {"1", "10", "0s", ""}, {"1", "10", "x", ""}, {"1,3", "10", "1m,2m,3m", ""},
	} {
		if _, err := parseFleet(bad[0], bad[1], bad[2], 10); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if _, err := parseFleet("1", "10", "1m", 0); err == nil {
		t.Error("rate 0: no error")
	}
}

func TestParseFlagsModes(t *testing.T) {
	cfg, _, err := parseFlags([]string{"-standard"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Standard || len(cfg.Fleet) != 2 || cfg.Fleet[0].Members != 10000 || cfg.Fleet[1].Members != 1000 {
		t.Errorf("-standard: %+v", cfg)
	}
	var perW, sh int
	for _, c := range cfg.Configs {
		if c.Clients == shared {
			sh++
		} else {
			perW++
		}
	}
	if perW == 0 || sh == 0 {
		t.Errorf("-standard configurations %v: want both client modes", cfg.Configs)
	}
	for _, w := range []string{"lock", "contended", "grant", "renew", "write", "fleet", "floor", "failover", "memory"} {
		if !strings.Contains(strings.Join(cfg.Run, ","), w) {
			t.Errorf("-standard does not run %s: %v", w, cfg.Run)
		}
	}
	if _, _, err := parseFlags([]string{"-standard", "-quick"}, io.Discard); err == nil {
		t.Error("-standard -quick: no error")
	}
	if _, _, err := parseFlags([]string{"-clients", "pooled"}, io.Discard); err == nil {
		t.Error("-clients pooled: no error")
	}
	cfg, _, err = parseFlags([]string{"-clients", "shared", "-configs", "1x2"}, io.Discard)
	if err != nil || cfg.Configs[0].Clients != shared {
		t.Errorf("-clients shared: %+v, %v", cfg.Configs, err)
	}
}

func TestFloor(t *testing.T) {
	f, err := measureFloor(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if f.FsyncP50Us <= 0 || f.RTTP50Us <= 0 || f.FsyncP99Us < f.FsyncP50Us || f.RTTP99Us < f.RTTP50Us {
		t.Errorf("floor: %+v", f)
	}
	if want := 3 * (f.FsyncP50Us + 2*f.RTTP50Us) / 1000; f.CycleMs != want {
		t.Errorf("cycle floor %v ms, want %v", f.CycleMs, want)
	}
}

func TestCountSockets(t *testing.T) {
	self := []int{os.Getpid()}
	before := countSockets(self)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The listener, the dialled end and the accepted end.
	if got := countSockets(self) - before; got != 3 {
		t.Errorf("%d new sockets, want 3", got)
	}
}

func TestGoals(t *testing.T) {
	cell := func(wl string, topo topology, ratio float64) *throughputCell {
		return &throughputCell{Workload: wl, Topology: topo, MedianRatio: ratio, MedianEtcd: 100, MedianTenure: 100 * ratio,
			Rounds: []throughputRound{{Tenure: measure{P50Ms: 1.5}, Etcd: measure{P50Ms: 3}}}}
	}
	r := &results{
		Throughput: []*throughputCell{
			cell("lock", topology{1, 16, perWorker}, 2.5),
			cell("renew", topology{3, 64, perWorker}, 0.9),
			cell("lock", topology{3, 1, perWorker}, 1.2),
			cell("contended", topology{3, 16, shared}, 2.30),
			cell("grant", topology{1, 16, shared}, 7.0),
		},
		Floor: &floorResult{CycleMs: 1},
		Fleet: []*fleetCell{{
			Config:   fleetConfig{Nodes: 1, Members: 10000, Hold: dur(2 * time.Minute)},
			Tenure:   fleetMeasure{Members: 10000, Holding: 10000, ServerCPU: 4},
			Etcd:     fleetMeasure{Members: 10000, Holding: 9990, Lost: 10, ServerCPU: 10},
			CPURatio: 0.4, RSSRatio: 0.6,
		}, {
			// tenure lost members: cheap, but no PASS for it.
			Config:   fleetConfig{Nodes: 3, Members: 1000, Hold: dur(time.Minute)},
			Tenure:   fleetMeasure{Members: 1000, Holding: 990, Lost: 10, ServerCPU: 1},
			Etcd:     fleetMeasure{Members: 1000, Holding: 1000, ServerCPU: 10},
			CPURatio: 0.1, RSSRatio: 0.1,
		}},
		Failover: &failoverResult{Trials: make([]failoverTrial, 6), RenewRatio: 0.3, TenureSurvived: 3},
		Memory:   []*memoryCell{{Leases: 100000, Tenure: memoryMeasure{PerLease: 420}}},
	}
	got := map[string]string{}
	var notes []string
	for _, g := range computeGoals(r) {
		got[g.Goal] = g.Result
		notes = append(notes, g.Note)
	}
	for goal, want := range map[string]string{
		"lock, 1 node, 16 workers, per-worker clients: at least 2x etcd":                    "PASS",
		"renew, 3 nodes, 64 workers, per-worker clients: at least 1x etcd":                  "FAIL",
		"contended, 3 nodes, 16 workers, shared client: not below today's 2.25x":            "PASS",
		"grant, 1 node, 16 workers, shared client: not below today's 7.13x":                 "FAIL",
		"lock, 3 nodes, 1 worker, shared client: not below today's 1.52x":                   "FAIL",
		"fleet, 1 node(s), 10000 members, held 2m0s: no tenure lease lost":                  "PASS",
		"fleet, 1 node(s), 10000 members, held 2m0s: server CPU at most 0.5x etcd's":        "PASS",
		"fleet, 1 node(s), 10000 members, held 2m0s: server RSS at most 0.5x etcd's (peak)": "FAIL",
		"lock cycle, 3 nodes, 1 worker: p50 at most 2x the floor":                           "PASS",
		"failover, 3 nodes: next renewal at most 0.6x etcd's time, the lease surviving":     "PASS",
		"memory: at most 400 B of RSS per live lease":                                       "FAIL",
		"tenure-verify 30-minute run OK":                                                    "n/a",
	} {
		if got[goal] != want {
			t.Errorf("%s: %q, want %q", goal, got[goal], want)
		}
	}
	if j := strings.Join(notes, "|"); !strings.Contains(j, "smaller than the goal's 10000 members for 5m0s") ||
		!strings.Contains(j, "measured at 100000 leases") {
		t.Errorf("notes do not say what was smaller than the goal: %q", j)
	}
}
