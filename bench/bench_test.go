package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuick runs the whole suite in its smoke mode against real etcd and
// tenured processes, so that it keeps working as both sides change. It
// builds etcd, so it takes a few minutes; -short skips it.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("builds etcd and runs both servers for minutes")
	}
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run([]string{"-quick", "-duration", "1s", "-held-duration", "5s", "-fleet-duration", "4s", "-idle-wait", "0s",
		"-out", out, "-workdir", t.TempDir()}, &stdout, &stderr)
	t.Log(stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	for _, want := range []string{"Median ratio tenure/etcd", "| lock |", "Held leases", "Failover", "Memory per live lease",
		"per-worker clients", "shared client", "Fleet:", "Latency floor", "Goals of issue 21"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("results.json: %v", err)
	}
	if got, want := len(res.Throughput), 5*3; got != want {
		t.Errorf("throughput cells: %d, want %d", got, want)
	}
	for _, c := range res.Throughput {
		for _, r := range c.Rounds {
			for _, m := range []struct {
				sys system
				m   measure
			}{{etcdSys, r.Etcd}, {tenureSys, r.Tenure}} {
				if m.m.Ops == 0 || m.m.Errors > 0 {
					t.Errorf("%s, %s, %s: %d ops, %d errors (%s)", c.Workload, c.Topology, m.sys, m.m.Ops, m.m.Errors, m.m.FirstErr)
				}
			}
		}
	}
	if len(res.Held) != 1 || len(res.Held[0].Rounds) != 1 {
		t.Fatalf("held: %+v", res.Held)
	}
	h := res.Held[0].Rounds[0]
	for _, m := range []heldMeasure{h.Etcd, h.Tenure} {
		if m.Leases != 200 || m.Renewals == 0 || m.ServerCPU <= 0 {
			t.Errorf("held: %+v", m)
		}
	}
	if f := res.Failover; f == nil || len(f.Trials) != 2 {
		t.Errorf("failover: %+v", f)
	} else {
		for _, tr := range f.Trials {
			if tr.Err != "" || tr.RenewS <= 0 || tr.GrantS <= 0 {
				t.Errorf("failover trial: %+v", tr)
			}
		}
	}
	if len(res.Memory) != 1 || res.Memory[0].Etcd.RSS1 == 0 || res.Memory[0].Tenure.RSS1 == 0 {
		t.Errorf("memory: %+v", res.Memory)
	}
	if len(res.Fleet) != 2 {
		t.Errorf("fleet: %d cells, want 2 (1 and 3 nodes)", len(res.Fleet))
	}
	for _, c := range res.Fleet {
		for _, m := range []struct {
			sys system
			m   fleetMeasure
		}{{etcdSys, c.Etcd}, {tenureSys, c.Tenure}} {
			// Each member holds its own connection(s): at least one
			// server socket per member.
			if m.m.Holding != c.Config.Members || m.m.Lost+m.m.LostInRamp+m.m.StartFailed != 0 ||
				m.m.ServerCPU <= 0 || m.m.ClientCPU <= 0 || m.m.RSSPeak <= 0 || m.m.RSSEnd <= 0 || m.m.ConnsPerMember < 1 {
				t.Errorf("fleet, %d node(s), %s: %+v", c.Config.Nodes, m.sys, m.m)
			}
		}
	}
	if f := res.Floor; f == nil || f.FsyncP50Us <= 0 || f.RTTP50Us <= 0 || f.CycleMs <= 0 {
		t.Errorf("floor: %+v", f)
	}
	var floorGoal bool
	for _, g := range res.Goals {
		if g.Result != "PASS" && g.Result != "FAIL" && g.Result != "n/a" {
			t.Errorf("goal %q: result %q", g.Goal, g.Result)
		}
		if strings.HasPrefix(g.Goal, "lock cycle, 3 nodes, 1 worker") {
			floorGoal = true
		}
	}
	if !floorGoal {
		t.Errorf("no floor goal among %+v", res.Goals)
	}
	if _, err := os.Stat(filepath.Join(out, "chart.svg")); err != nil {
		t.Error(err)
	}
}
