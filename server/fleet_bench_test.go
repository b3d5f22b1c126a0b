package server_test

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// BenchmarkRenewPerWorker is the renewal workload as a fleet runs it: 16
// workers, each with a client (and connection) of its own, renew a lease
// each in a loop on a single-node cluster on disk. Client and server share
// the process, as they share a machine in the bench suite; cpu-µs/op is
// the whole process's CPU time per renewal, both sides together.
func BenchmarkRenewPerWorker(b *testing.B) {
	for _, workers := range []int{1, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			c := testcluster.Start(b, testcluster.Config{Size: 1, DataDir: b.TempDir(),
				ElectionTimeout: testcluster.CalmElectionTimeout, Log: slog.DiscardHandler})
			addr := c.Leader().Addr
			ctx := b.Context()
			type worker struct {
				cl    *client.Client
				name  string
				token uint64
			}
			ws := make([]worker, workers)
			for i := range ws {
				cfg := client.DefaultConfig()
				cfg.Endpoints = []string{addr}
				cl, err := client.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { cl.Close() })
				name := fmt.Sprintf("jobs/%d", i)
				l, err := cl.Acquire(ctx, name, "h", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				ws[i] = worker{cl, name, l.Token}
			}
			var left atomic.Int64
			left.Store(int64(b.N))
			var wg sync.WaitGroup
			b.ResetTimer()
			cpu0, r0, w0 := processCPU(), syscalls("syscr"), syscalls("syscw")
			for _, w := range ws {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if _, err := w.cl.RenewOne(ctx, w.name, w.token); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(syscalls("syscr")-r0)/float64(b.N), "reads/op")
			b.ReportMetric(float64(syscalls("syscw")-w0)/float64(b.N), "writes/op")
		})
	}
}

// syscalls is a count of this process's read or write system calls
// ("syscr" or "syscw" in /proc/self/io), or 0 where there is none.
func syscalls(field string) int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+": "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkLockCycleThreeNodes is the latency floor's workload: one
// worker, its own client, lock cycles (acquire, fenced write, release:
// three commits in a row) on three members on disk.
func BenchmarkLockCycleThreeNodes(b *testing.B) {
	c := testcluster.Start(b, testcluster.Config{Size: 3, DataDir: b.TempDir(),
		ElectionTimeout: testcluster.CalmElectionTimeout, Log: slog.DiscardHandler})
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{c.Leader().Addr}
	cl, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cl.Close() })
	ctx := b.Context()
	for b.Loop() {
		l, err := cl.Acquire(ctx, "jobs/cycle", "h", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Put(ctx, "jobs/cycle/data", []byte("v"), "jobs/cycle", l.Token); err != nil {
			b.Fatal(err)
		}
		if err := cl.Release(ctx, "jobs/cycle", l.Token); err != nil {
			b.Fatal(err)
		}
	}
}
