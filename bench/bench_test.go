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
	code := run([]string{"-quick", "-duration", "1s", "-held-duration", "5s", "-idle-wait", "0s",
		"-out", out, "-workdir", t.TempDir()}, &stdout, &stderr)
	t.Log(stderr.String())
	if code != 0 {
		t.Fatalf("exit code %d, want 0", code)
	}
	for _, want := range []string{"Median ratio tenure/etcd", "| lock |", "Held leases", "Failover", "Memory per live lease"} {
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
	if _, err := os.Stat(filepath.Join(out, "chart.svg")); err != nil {
		t.Error(err)
	}
}
