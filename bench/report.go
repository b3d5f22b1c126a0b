package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// results is everything one run measured; it is also the JSON output.
type results struct {
	Date    string  `json:"date"`
	Machine machine `json:"machine"`
	Command string  `json:"command"`
	Config  config  `json:"config"`
	// NotIdle counts the rounds that began on a busy machine.
	NotIdle    int               `json:"rounds_not_idle"`
	Throughput []*throughputCell `json:"throughput,omitempty"`
	Held       []*heldCell       `json:"held,omitempty"`
	Failover   *failoverResult   `json:"failover,omitempty"`
	Memory     []*memoryCell     `json:"memory,omitempty"`
	Fleet      []*fleetCell      `json:"fleet,omitempty"`
	Floor      *floorResult      `json:"floor,omitempty"`
	Goals      []goal            `json:"goals,omitempty"`
}

func (r *results) noteIdle(c idleCheck) {
	if !c.Idle {
		r.NotIdle++
	}
}

// machine describes where the run happened.
type machine struct {
	Cores  int     `json:"cores"`
	CPU    string  `json:"cpu"`
	Kernel string  `json:"kernel"`
	Go     string  `json:"go"`
	Load1  float64 `json:"load1_at_start"`
}

func thisMachine() machine {
	m := machine{Cores: runtime.NumCPU(), Go: runtime.Version(), Load1: loadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// throughputCell is one workload in one topology over all rounds.
type throughputCell struct {
	Workload string            `json:"workload"`
	Title    string            `json:"title"`
	Topology topology          `json:"topology"`
	Rounds   []throughputRound `json:"rounds"`
	// MedianRatio is the median over rounds of tenure ops/s divided by
	// etcd ops/s: above 1, tenure is faster.
	MedianRatio  float64 `json:"median_ratio"`
	MedianEtcd   float64 `json:"median_etcd_ops_per_sec"`
	MedianTenure float64 `json:"median_tenure_ops_per_sec"`
}

type throughputRound struct {
	Round  int       `json:"round"`
	Idle   idleCheck `json:"idle"`
	Etcd   measure   `json:"etcd"`
	Tenure measure   `json:"tenure"`
	Ratio  float64   `json:"ratio"`
}

func (c *throughputCell) summarize() {
	var r, e, t []float64
	for _, x := range c.Rounds {
		r = append(r, x.Ratio)
		e = append(e, x.Etcd.OpsPerSec)
		t = append(t, x.Tenure.OpsPerSec)
	}
	c.MedianRatio, c.MedianEtcd, c.MedianTenure = median(r), median(e), median(t)
}

// heldCell is the held-leases workload on one cluster size.
type heldCell struct {
	Nodes  int         `json:"nodes"`
	Config heldConfig  `json:"config"`
	Rounds []heldRound `json:"rounds"`
	// MedianCPURatio is tenure's server CPU seconds over etcd's: below 1,
	// tenure uses less.
	MedianCPURatio float64 `json:"median_cpu_ratio"`
}

type heldRound struct {
	Round    int         `json:"round"`
	Idle     idleCheck   `json:"idle"`
	Etcd     heldMeasure `json:"etcd"`
	Tenure   heldMeasure `json:"tenure"`
	CPURatio float64     `json:"cpu_ratio"`
}

func (c *heldCell) summarize() {
	var r []float64
	for _, x := range c.Rounds {
		r = append(r, x.CPURatio)
	}
	c.MedianCPURatio = median(r)
}

// failoverResult is every failover trial and their medians.
type failoverResult struct {
	Trials       []failoverTrial `json:"trials"`
	EtcdRenewS   float64         `json:"median_etcd_renew_s"`
	TenureRenewS float64         `json:"median_tenure_renew_s"`
	EtcdGrantS   float64         `json:"median_etcd_grant_s"`
	TenureGrantS float64         `json:"median_tenure_grant_s"`
	// RenewRatio is tenure's median time to renew over etcd's: below 1,
	// tenure recovers faster.
	RenewRatio     float64 `json:"renew_ratio"`
	GrantRatio     float64 `json:"grant_ratio"`
	EtcdSurvived   int     `json:"etcd_survived"`
	TenureSurvived int     `json:"tenure_survived"`
}

func (f *failoverResult) summarize() {
	var er, tr, eg, tg []float64
	for _, t := range f.Trials {
		if t.System == etcdSys {
			er, eg = append(er, t.RenewS), append(eg, t.GrantS)
			if t.Survived {
				f.EtcdSurvived++
			}
		} else {
			tr, tg = append(tr, t.RenewS), append(tg, t.GrantS)
			if t.Survived {
				f.TenureSurvived++
			}
		}
	}
	f.EtcdRenewS, f.TenureRenewS = median(er), median(tr)
	f.EtcdGrantS, f.TenureGrantS = median(eg), median(tg)
	if f.EtcdRenewS > 0 {
		f.RenewRatio = f.TenureRenewS / f.EtcdRenewS
	}
	if f.EtcdGrantS > 0 {
		f.GrantRatio = f.TenureGrantS / f.EtcdGrantS
	}
}

// memoryCell is the memory workload at one number of leases.
type memoryCell struct {
	Leases int           `json:"leases"`
	Idle   idleCheck     `json:"idle"`
	Etcd   memoryMeasure `json:"etcd"`
	Tenure memoryMeasure `json:"tenure"`
	// Ratio is tenure's bytes per lease over etcd's: below 1, tenure
	// uses less.
	Ratio float64 `json:"ratio"`
}

// fleetCell is the fleet on one cluster size.
type fleetCell struct {
	Config fleetConfig  `json:"config"`
	Idle   idleCheck    `json:"idle"`
	Etcd   fleetMeasure `json:"etcd"`
	Tenure fleetMeasure `json:"tenure"`
	// CPURatio is tenure's server CPU seconds during the hold over
	// etcd's, RSSRatio its peak server RSS over etcd's: below 1, tenure
	// uses less.
	CPURatio float64 `json:"cpu_ratio"`
	RSSRatio float64 `json:"rss_ratio"`
}

func (c *fleetCell) summarize() {
	if c.Etcd.ServerCPU > 0 {
		c.CPURatio = c.Tenure.ServerCPU / c.Etcd.ServerCPU
	}
	if c.Etcd.RSSPeak > 0 {
		c.RSSRatio = float64(c.Tenure.RSSPeak) / float64(c.Etcd.RSSPeak)
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func writeJSON(w io.Writer, r *results) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTable prints the results for people: per round, then the medians.
func writeTable(w io.Writer, r *results) {
	fmt.Fprintf(w, "tenure vs etcd 3.6.16, %s, %d cores (%s), %s\n", r.Date, r.Machine.Cores, r.Machine.CPU, r.Machine.Go)
	fmt.Fprintf(w, "load average at start %.2f; rounds that began on a busy machine: %d\n", r.Machine.Load1, r.NotIdle)
	if len(r.Throughput) > 0 {
		fmt.Fprintf(w, "\nThroughput (ops/s; ratio = tenure/etcd, above 1 means tenure is faster)\n\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "workload\tconfig\tround\tetcd ops/s\ttenure ops/s\tratio\tetcd p99 ms\ttenure p99 ms\tetcd CPU us/op\ttenure CPU us/op\terrors e/t\tmachine\t")
		for _, c := range r.Throughput {
			for _, x := range c.Rounds {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.0f\t%.0f\t%d/%d\t%s\t\n",
					c.Workload, c.Topology, x.Round, x.Etcd.OpsPerSec, x.Tenure.OpsPerSec, x.Ratio,
					x.Etcd.P99Ms, x.Tenure.P99Ms, x.Etcd.CPUPerOpUs, x.Tenure.CPUPerOpUs,
					x.Etcd.Errors, x.Tenure.Errors, idleWord(x.Idle))
			}
		}
		tw.Flush()
		writeRatioTable(w, r)
	}
	if len(r.Held) > 0 {
		fmt.Fprintf(w, "\nHeld leases (server CPU ratio = tenure/etcd, below 1 means tenure uses less)\n\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "nodes\tround\tleases held e/t\tduration\tetcd lost\ttenure lost\tetcd renew p99 ms\ttenure renew p99 ms\tetcd CPU s\ttenure CPU s\tCPU ratio\tmachine\t")
		for _, c := range r.Held {
			for _, x := range c.Rounds {
				fmt.Fprintf(tw, "%d\t%d\t%d/%d\t%s\t%d\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%s\t\n",
					c.Nodes, x.Round, x.Etcd.Leases, x.Tenure.Leases, time.Duration(c.Config.DurationS*float64(time.Second)),
					x.Etcd.Lost, x.Tenure.Lost, x.Etcd.RenewP99Ms, x.Tenure.RenewP99Ms,
					x.Etcd.ServerCPU, x.Tenure.ServerCPU, x.CPURatio, idleWord(x.Idle))
			}
			fmt.Fprintf(tw, "%d\tmedian\t\t\t\t\t\t\t\t\t%.2f\t\t\n", c.Nodes, c.MedianCPURatio)
		}
		tw.Flush()
	}
	if len(r.Fleet) > 0 {
		fmt.Fprintf(w, "\nFleet: members each with a client of its own holding one lease (TTL 10s); CPU and RSS ratio = tenure/etcd, below 1 means tenure uses less\n\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "nodes\tsystem\tmembers\tramp s\thold\tholding\tlost\tlost in ramp\tnot started\tserver CPU s\tclient CPU s\tRSS peak MB\tRSS end MB\tconns/member\tmachine\t")
		for _, c := range r.Fleet {
			for _, x := range []struct {
				sys system
				m   fleetMeasure
			}{{etcdSys, c.Etcd}, {tenureSys, c.Tenure}} {
				m := x.m
				fmt.Fprintf(tw, "%d\t%s\t%d\t%.1f\t%s\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%.0f\t%.0f\t%.2f\t%s\t\n",
					c.Config.Nodes, x.sys, m.Members, m.RampS, time.Duration(c.Config.Hold), m.Holding, m.Lost, m.LostInRamp, m.StartFailed,
					m.ServerCPU, m.ClientCPU, mb(m.RSSPeak), mb(m.RSSEnd), m.ConnsPerMember, idleWord(c.Idle))
			}
			fmt.Fprintf(tw, "%d\tratio\t\t\t\t\t\t\t\t%.2f\t\t%.2f\t\t\t\t\n", c.Config.Nodes, c.CPURatio, c.RSSRatio)
		}
		tw.Flush()
		for _, c := range r.Fleet {
			for _, x := range []struct {
				sys system
				m   fleetMeasure
			}{{etcdSys, c.Etcd}, {tenureSys, c.Tenure}} {
				if x.m.StartErr != "" {
					fmt.Fprintf(w, "fleet, %d node(s), %s: first start error: %s\n", c.Config.Nodes, x.sys, x.m.StartErr)
				}
				if x.m.Note != "" {
					fmt.Fprintf(w, "fleet, %d node(s), %s: %s\n", c.Config.Nodes, x.sys, x.m.Note)
				}
			}
		}
	}
	if f := r.Floor; f != nil {
		fmt.Fprintf(w, "\nLatency floor (%d samples each, %s): fdatasync of a 64-byte append p50 %.0f us (p99 %.0f), loopback TCP round trip p50 %.0f us (p99 %.0f)\n",
			f.Samples, idleWord(f.Idle), f.FsyncP50Us, f.FsyncP99Us, f.RTTP50Us, f.RTTP99Us)
		fmt.Fprintf(w, "one commit on 3 nodes = fdatasync + 2 round trips = %.0f us; lock cycle (3 commits) = %.2f ms\n", f.CommitUs, f.CycleMs)
	}
	if f := r.Failover; f != nil {
		fmt.Fprintf(w, "\nFailover, 3 nodes, SIGKILL of the leader (seconds from the kill; ratio = tenure/etcd, below 1 means tenure is faster)\n\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "trial\tsystem\tnext renewal s\tnext grant s\tlease survived\t")
		for _, t := range f.Trials {
			fmt.Fprintf(tw, "%d\t%s\t%.3f\t%.3f\t%v\t%s\n", t.Trial, t.System, t.RenewS, t.GrantS, t.Survived, t.Err)
		}
		fmt.Fprintf(tw, "median\tetcd\t%.3f\t%.3f\t%d/%d\t\n", f.EtcdRenewS, f.EtcdGrantS, f.EtcdSurvived, len(f.Trials)/2)
		fmt.Fprintf(tw, "median\ttenure\t%.3f\t%.3f\t%d/%d\t\n", f.TenureRenewS, f.TenureGrantS, f.TenureSurvived, len(f.Trials)/2)
		fmt.Fprintf(tw, "ratio\t\t%.2f\t%.2f\t\t\n", f.RenewRatio, f.GrantRatio)
		tw.Flush()
	}
	if len(r.Memory) > 0 {
		fmt.Fprintf(w, "\nMemory per live lease (RSS growth of the server, 1 node; ratio = tenure/etcd, below 1 means tenure uses less)\n\n")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "leases\tetcd bytes/lease\ttenure bytes/lease\tratio\ttenure snapshot\tmachine\t")
		for _, m := range r.Memory {
			fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%v\t%s\t\n", m.Leases, m.Etcd.PerLease, m.Tenure.PerLease, m.Ratio, m.Tenure.Snapshot, idleWord(m.Idle))
		}
		tw.Flush()
	}
	writeGoals(w, r.Goals)
}

// writeRatioTable prints the median ratios with workloads as rows and
// topologies as columns, the shape of the table in the issue.
func writeRatioTable(w io.Writer, r *results) {
	var wls []string
	var topos []topology
	ratio := map[string]map[topology]float64{}
	for _, c := range r.Throughput {
		if !slices.Contains(wls, c.Workload) {
			wls = append(wls, c.Workload)
			ratio[c.Workload] = map[topology]float64{}
		}
		if !slices.Contains(topos, c.Topology) {
			topos = append(topos, c.Topology)
		}
		ratio[c.Workload][c.Topology] = c.MedianRatio
	}
	fmt.Fprintf(w, "\nMedian ratio tenure/etcd over %d round(s)\n\n", r.Config.Rounds)
	fmt.Fprint(w, "| workload |")
	for _, t := range topos {
		fmt.Fprintf(w, " %s |", t)
	}
	fmt.Fprint(w, "\n|---|")
	for range topos {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, wl := range wls {
		fmt.Fprintf(w, "| %s |", wl)
		for _, t := range topos {
			if v, ok := ratio[wl][t]; ok {
				fmt.Fprintf(w, " %.2f |", v)
			} else {
				fmt.Fprint(w, " |")
			}
		}
		fmt.Fprintln(w)
	}
}

func idleWord(c idleCheck) string {
	if c.Idle {
		return "idle"
	}
	return fmt.Sprintf("BUSY %.1f cores", c.OtherCPU)
}
