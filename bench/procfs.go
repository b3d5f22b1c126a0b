package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// clockTicks is USER_HZ, the unit of CPU times in /proc (100 on every
// Linux architecture Go supports).
const clockTicks = 100

// cpuSeconds returns the user+system CPU time of process pid, in seconds.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it start
	// after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad CPU times", pid)
	}
	return float64(ut+st) / clockTicks, nil
}

// sumCPU adds the CPU seconds of pids; processes that exited count 0.
func sumCPU(pids []int) float64 {
	var s float64
	for _, p := range pids {
		if v, err := cpuSeconds(p); err == nil {
			s += v
		}
	}
	return s
}

// rssBytes returns the resident set size of process pid (VmRSS).
func rssBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			fs := strings.Fields(v)
			if len(fs) < 1 {
				break
			}
			kb, err := strconv.ParseInt(fs[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// machineBusy is the CPU time all processes spent, from /proc/stat, in
// seconds (all cores together), and the wall time it was read at.
func machineBusy() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal: busy is all but idle
	// and iowait.
	var busy uint64
	for i, s := range f[1:] {
		if i == 3 || i == 4 || i >= 8 {
			continue
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, err
		}
		busy += v
	}
	return float64(busy) / clockTicks, nil
}

// loadAvg returns the 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// idleCheck is what the suite saw of the machine before a round.
type idleCheck struct {
	Load1 float64 `json:"load1"`
	// OtherCPU is the CPU used by processes other than the suite and its
	// servers over the sampling window, in cores (1.0 = one core busy).
	OtherCPU float64 `json:"other_cpu_cores"`
	Idle     bool    `json:"idle"`
}

func (c idleCheck) String() string {
	s := "idle"
	if !c.Idle {
		s = "BUSY"
	}
	return fmt.Sprintf("%s (load %.2f, other processes %.2f cores)", s, c.Load1, c.OtherCPU)
}

// checkIdle samples the CPU used by everything but this process and ours
// (the servers in pids) for window and reports whether it stays under
// maxOther cores. It retries until wait has passed, so a short burst of
// someone else's work can end first.
func checkIdle(ctx context.Context, pids []int, window, wait time.Duration, maxOther float64) idleCheck {
	deadline := time.Now().Add(wait)
	for {
		c := sampleIdle(ctx, pids, window, maxOther)
		if c.Idle || time.Now().After(deadline) || ctx.Err() != nil {
			return c
		}
	}
}

func sampleIdle(ctx context.Context, pids []int, window time.Duration, maxOther float64) idleCheck {
	own := append([]int{os.Getpid()}, pids...)
	m0, _ := machineBusy()
	o0 := sumCPU(own)
	t0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(window):
	}
	m1, _ := machineBusy()
	o1 := sumCPU(own)
	el := time.Since(t0).Seconds()
	other := ((m1 - m0) - (o1 - o0)) / el
	if other < 0 {
		other = 0
	}
	return idleCheck{Load1: loadAvg(), OtherCPU: other, Idle: other <= maxOther}
}

// quietLogger keeps the etcd client's logs out of the report.
func quietLogger() *zap.Logger { return zap.NewNop() }

// fileLimit returns this process's soft limit of open files.
func fileLimit() (uint64, error) {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0, err
	}
	return r.Cur, nil
}

// raiseFileLimit lifts the limit of open files as far as it may (root:
// up to fs.nr_open; others: up to the hard limit), so that a fleet of
// thousands of clients fits; the servers it starts inherit it. It
// returns the soft limit in force afterwards.
func raiseFileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n > r.Max {
			if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n}) == nil {
				return n
			}
		}
	}
	if r.Cur < r.Max && syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: r.Max, Max: r.Max}) == nil {
		return r.Max
	}
	return r.Cur
}
