package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// goal is one line of the goals of issue 21 and what this run measured
// for it.
type goal struct {
	Goal   string `json:"goal"`
	Figure string `json:"figure"`
	// Result is PASS, FAIL, or n/a when the suite does not measure it.
	Result string `json:"result"`
	Note   string `json:"note,omitempty"`
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// sharedBaseline is the median ratio tenure/etcd of each throughput
// workload with the shared client in docs/benchmarks.md when the
// per-worker mode came in (the run of 2026-12-01 20:44 UTC, 16 workers
// and 1 worker, 3 rounds of 5 s): the shared-client goal is to stay at
// or above them.
var sharedBaseline = map[topology]map[string]float64{
	{Nodes: 1, Workers: 16, Clients: shared}: {"lock": 2.74, "contended": 3.10, "grant": 7.13, "renew": 1.04, "write": 2.53},
	{Nodes: 3, Workers: 16, Clients: shared}: {"lock": 4.72, "contended": 2.25, "grant": 10.25, "renew": 0.99, "write": 4.32},
	{Nodes: 3, Workers: 1, Clients: shared}:  {"lock": 1.52, "contended": 1.36, "grant": 2.01, "renew": 0.43, "write": 1.50},
}

// fleetGoal is the fleet's goal size and hold on each cluster size.
var fleetGoal = map[int]struct {
	members int
	hold    time.Duration
}{1: {10000, 5 * time.Minute}, 3: {1000, 5 * time.Minute}}

// goalPerWorker is the lowest ratio tenure/etcd each throughput workload
// must reach with one client per worker at 16 and 64 workers.
var goalPerWorker = map[string]float64{"lock": 2, "contended": 2, "grant": 2, "write": 2, "renew": 1}

// computeGoals judges the run's results against the goals of issue 21.
// Goals the run did not measure are left out, but for the verifier run,
// which the suite never measures.
func computeGoals(r *results) []goal {
	var out []goal
	cells := map[topology]map[string]*throughputCell{}
	for _, c := range r.Throughput {
		if cells[c.Topology] == nil {
			cells[c.Topology] = map[string]*throughputCell{}
		}
		cells[c.Topology][c.Workload] = c
	}
	for _, c := range r.Throughput {
		t := c.Topology
		if t.Clients != perWorker || (t.Workers != 16 && t.Workers != 64) {
			continue
		}
		want := goalPerWorker[c.Workload]
		out = append(out, goal{
			Goal:   fmt.Sprintf("%s, %s: at least %gx etcd", c.Workload, t, want),
			Figure: fmt.Sprintf("%.2fx (%.0f / %.0f ops/s)", c.MedianRatio, c.MedianTenure, c.MedianEtcd),
			Result: passFail(c.MedianRatio >= want),
		})
	}
	for _, t := range []topology{{1, 16, shared}, {3, 16, shared}, {3, 1, shared}} {
		note := ""
		byWl := cells[t]
		if byWl == nil && t.Workers == 1 {
			// One worker has one client either way.
			byWl = cells[topology{t.Nodes, t.Workers, perWorker}]
			note = "one worker: its own client in either mode (the per-worker row)"
		}
		for _, wl := range []string{"lock", "contended", "grant", "renew", "write"} {
			c := byWl[wl]
			if c == nil {
				continue
			}
			base := sharedBaseline[t][wl]
			out = append(out, goal{
				Goal:   fmt.Sprintf("%s, %s: not below today's %.2fx", wl, t, base),
				Figure: fmt.Sprintf("%.2fx (%.0f / %.0f ops/s)", c.MedianRatio, c.MedianTenure, c.MedianEtcd),
				Result: passFail(c.MedianRatio >= base),
				Note:   note,
			})
		}
	}
	for _, c := range r.Fleet {
		fc := c.Config
		g := fleetGoal[fc.Nodes]
		var notes string
		if fc.Members < g.members || time.Duration(fc.Hold) < g.hold {
			notes = fmt.Sprintf("smaller than the goal's %d members for %s", g.members, g.hold)
		}
		name := fmt.Sprintf("fleet, %d node(s), %d members, held %s", fc.Nodes, fc.Members, time.Duration(fc.Hold))
		tm, em := c.Tenure, c.Etcd
		tLost := tm.Lost + tm.LostInRamp + tm.StartFailed
		// The costs compare only when tenure held every lease: a server
		// that dropped members does less work.
		tHeld := tLost == 0 && tm.Holding == tm.Members
		costNote := notes
		if !tHeld {
			costNote = join(notes, "tenure did not hold every lease: the costs do not compare")
		} else if em.Holding != em.Members {
			costNote = join(notes, fmt.Sprintf("etcd held %d of %d", em.Holding, em.Members))
		}
		out = append(out,
			goal{
				Goal: name + ": no tenure lease lost",
				Figure: fmt.Sprintf("tenure %d/%d holding, %d lost (%d in the ramp), %d not started; etcd %d/%d holding, %d lost (%d in the ramp), %d not started",
					tm.Holding, tm.Members, tm.Lost, tm.LostInRamp, tm.StartFailed, em.Holding, em.Members, em.Lost, em.LostInRamp, em.StartFailed),
				Result: passFail(tHeld),
				Note:   notes,
			},
			goal{
				Goal:   name + ": server CPU at most 0.5x etcd's",
				Figure: fmt.Sprintf("%.2fx (%.2f / %.2f s)", c.CPURatio, tm.ServerCPU, em.ServerCPU),
				Result: passFail(tHeld && c.CPURatio > 0 && c.CPURatio <= 0.5),
				Note:   costNote,
			},
			goal{
				Goal: name + ": server RSS at most 0.5x etcd's (peak)",
				Figure: fmt.Sprintf("%.2fx (peak %.0f / %.0f MB; at the end %.0f / %.0f MB)",
					c.RSSRatio, mb(tm.RSSPeak), mb(em.RSSPeak), mb(tm.RSSEnd), mb(em.RSSEnd)),
				Result: passFail(tHeld && c.RSSRatio > 0 && c.RSSRatio <= 0.5),
				Note:   costNote,
			})
	}
	if f := r.Floor; f != nil && f.CycleMs > 0 {
		var lock *throughputCell
		for _, m := range []clientMode{perWorker, shared} {
			if c := cells[topology{3, 1, m}]["lock"]; c != nil && lock == nil {
				lock = c
			}
		}
		if lock != nil {
			var tp, ep []float64
			for _, x := range lock.Rounds {
				tp, ep = append(tp, x.Tenure.P50Ms), append(ep, x.Etcd.P50Ms)
			}
			t, e := median(tp), median(ep)
			out = append(out, goal{
				Goal: "lock cycle, 3 nodes, 1 worker: p50 at most 2x the floor",
				Figure: fmt.Sprintf("%.2fx (p50 %.2f ms, floor %.2f ms; etcd %.2f ms = %.2fx)",
					t/f.CycleMs, t, f.CycleMs, e, e/f.CycleMs),
				Result: passFail(t > 0 && t <= 2*f.CycleMs),
			})
		}
	}
	if f := r.Failover; f != nil {
		n := len(f.Trials) / 2
		out = append(out, goal{
			Goal: "failover, 3 nodes: next renewal at most 0.6x etcd's time, the lease surviving",
			Figure: fmt.Sprintf("%.2fx (%.3f / %.3f s), survived %d/%d",
				f.RenewRatio, f.TenureRenewS, f.EtcdRenewS, f.TenureSurvived, n),
			Result: passFail(f.RenewRatio > 0 && f.RenewRatio <= 0.6 && f.TenureSurvived == n),
		})
	}
	if len(r.Memory) > 0 {
		m := r.Memory[0]
		for _, x := range r.Memory {
			if x.Leases > m.Leases {
				m = x
			}
		}
		note := ""
		if m.Leases < 1000000 {
			note = fmt.Sprintf("measured at %d leases; the goal is at 1M, where the fixed costs weigh less", m.Leases)
		}
		out = append(out, goal{
			Goal:   "memory: at most 400 B of RSS per live lease",
			Figure: fmt.Sprintf("%.0f B (etcd %.0f B)", m.Tenure.PerLease, m.Etcd.PerLease),
			Result: passFail(m.Tenure.PerLease > 0 && m.Tenure.PerLease <= 400),
			Note:   note,
		})
	}
	out = append(out, goal{
		Goal:   "tenure-verify 30-minute run OK",
		Figure: "not measured by this suite",
		Result: "n/a",
		Note:   "run the verifier separately",
	})
	return out
}

// writeGoals prints the goals table.
func writeGoals(w io.Writer, gs []goal) {
	if len(gs) == 0 {
		return
	}
	pass, fail := 0, 0
	for _, g := range gs {
		switch g.Result {
		case "PASS":
			pass++
		case "FAIL":
			fail++
		}
	}
	fmt.Fprintf(w, "\nGoals of issue 21 (%d PASS, %d FAIL)\n\n", pass, fail)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "goal\tfigure\tresult\tnote")
	for _, g := range gs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.Goal, g.Figure, g.Result, g.Note)
	}
	tw.Flush()
}

// join joins the non-empty notes with "; ".
func join(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}
