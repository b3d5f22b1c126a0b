package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/client"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// benchTTL is the TTL of the leases, locks and sessions the workloads take.
const benchTTL = 10 * time.Second

// longTTL is the TTL of leases that must outlive a whole measurement
// without being renewed (renewal and fenced-write workloads).
const longTTL = 10 * time.Minute

// value is what every fenced write stores.
var value = []byte("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")

// op is one operation of a worker; it returns nil when the operation
// succeeded as a whole.
type op func(ctx context.Context) error

// worker is one worker's operation and what to undo after the
// measurement.
type worker struct {
	op      op
	cleanup func(ctx context.Context)
}

// targets are the clients of both systems that a measurement uses.
type targets struct {
	etcd   *clientv3.Client
	tenure *client.Client
	// prefix keeps the names of one measurement apart from all others on
	// the same cluster.
	prefix string
}

// workload is one throughput workload, the same operation on both systems.
type workload struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	// Etcd and Tenure are what it is on each side.
	Etcd   string `json:"etcd"`
	Tenure string `json:"tenure"`
	// setup prepares worker w (of n) of one side.
	setupEtcd   func(ctx context.Context, t targets, w int) (worker, error)
	setupTenure func(ctx context.Context, t targets, w int) (worker, error)
}

var workloads = []workload{
	{
		ID:     "lock",
		Title:  "lock cycle: acquire own name + fenced put + release",
		Etcd:   "concurrency.Mutex.Lock + Txn(If(mutex.IsOwner())).Then(Put) + Unlock, one session (TTL 10s) per worker",
		Tenure: "Acquire(own name, TTL 10s) + Put(key, lease, token) + Release",
		setupEtcd: func(ctx context.Context, t targets, w int) (worker, error) {
			return etcdLockCycle(ctx, t, fmt.Sprintf("%s/lock/%d", t.prefix, w), w)
		},
		setupTenure: func(ctx context.Context, t targets, w int) (worker, error) {
			return tenureLockCycle(t, fmt.Sprintf("%s/lock/%d", t.prefix, w), w, false), nil
		},
	},
	{
		ID:     "contended",
		Title:  "contended: all workers on one name, wait, fenced put, release (handoffs/s)",
		Etcd:   "every worker's Mutex on one prefix: Lock (waits) + Txn(If(IsOwner())).Then(Put) + Unlock",
		Tenure: "Acquire(one name, Wait) + Put(key, lease, token) + Release",
		setupEtcd: func(ctx context.Context, t targets, w int) (worker, error) {
			return etcdLockCycle(ctx, t, t.prefix+"/contended", w)
		},
		setupTenure: func(ctx context.Context, t targets, w int) (worker, error) {
			return tenureLockCycle(t, t.prefix+"/contended", w, true), nil
		},
	},
	{
		ID:     "grant",
		Title:  "grant + release of fresh names",
		Etcd:   "LeaseGrant(TTL 10s) + LeaseRevoke",
		Tenure: "Acquire(a new name, TTL 10s) + Release",
		setupEtcd: func(ctx context.Context, t targets, w int) (worker, error) {
			return worker{op: func(ctx context.Context) error {
				g, err := t.etcd.Grant(ctx, int64(benchTTL/time.Second))
				if err != nil {
					return err
				}
				_, err = t.etcd.Revoke(ctx, g.ID)
				return err
			}}, nil
		},
		setupTenure: func(ctx context.Context, t targets, w int) (worker, error) {
			var n int
			holder := fmt.Sprintf("w%d", w)
			return worker{op: func(ctx context.Context) error {
				n++
				name := fmt.Sprintf("%s/grant/%d/%d", t.prefix, w, n)
				l, err := t.tenure.Acquire(ctx, name, holder, benchTTL)
				if err != nil {
					return err
				}
				return t.tenure.Release(ctx, name, l.Token)
			}}, nil
		},
	},
	{
		ID:     "renew",
		Title:  "one renewal",
		Etcd:   "KeepAliveOnce of a held lease",
		Tenure: "RenewOne(name, token) of a held lease",
		setupEtcd: func(ctx context.Context, t targets, w int) (worker, error) {
			g, err := t.etcd.Grant(ctx, int64(longTTL/time.Second))
			if err != nil {
				return worker{}, err
			}
			return worker{
				op: func(ctx context.Context) error {
					_, err := t.etcd.KeepAliveOnce(ctx, g.ID)
					return err
				},
				cleanup: func(ctx context.Context) { t.etcd.Revoke(ctx, g.ID) },
			}, nil
		},
		setupTenure: func(ctx context.Context, t targets, w int) (worker, error) {
			name := fmt.Sprintf("%s/renew/%d", t.prefix, w)
			l, err := t.tenure.Acquire(ctx, name, fmt.Sprintf("w%d", w), longTTL)
			if err != nil {
				return worker{}, err
			}
			return worker{
				op: func(ctx context.Context) error {
					_, err := t.tenure.RenewOne(ctx, name, l.Token)
					return err
				},
				cleanup: func(ctx context.Context) { t.tenure.Release(ctx, name, l.Token) },
			}, nil
		},
	},
	{
		ID:     "write",
		Title:  "fenced writes alone",
		Etcd:   "Txn(If(mutex.IsOwner())).Then(Put) with the worker's Mutex held",
		Tenure: "Put(key, lease, token) with the worker's lease held",
		setupEtcd: func(ctx context.Context, t targets, w int) (worker, error) {
			s, err := concurrency.NewSession(t.etcd, concurrency.WithTTL(int(longTTL/time.Second)))
			if err != nil {
				return worker{}, err
			}
			m := concurrency.NewMutex(s, fmt.Sprintf("%s/write/%d", t.prefix, w))
			if err := m.Lock(ctx); err != nil {
				s.Close()
				return worker{}, err
			}
			key := fmt.Sprintf("data/%s/write/%d", t.prefix, w)
			return worker{
				op: func(ctx context.Context) error { return etcdFencedPut(ctx, t.etcd, m, key) },
				cleanup: func(ctx context.Context) {
					m.Unlock(ctx)
					s.Close()
				},
			}, nil
		},
		setupTenure: func(ctx context.Context, t targets, w int) (worker, error) {
			name := fmt.Sprintf("%s/write/%d", t.prefix, w)
			l, err := t.tenure.Acquire(ctx, name, fmt.Sprintf("w%d", w), longTTL)
			if err != nil {
				return worker{}, err
			}
			key := fmt.Sprintf("data/%s/write/%d", t.prefix, w)
			return worker{
				op: func(ctx context.Context) error {
					_, err := t.tenure.Put(ctx, key, value, name, l.Token)
					return err
				},
				cleanup: func(ctx context.Context) { t.tenure.Release(ctx, name, l.Token) },
			}, nil
		},
	},
}

// withClients sets up worker w with the shared clients in t, or, per
// worker, with a client of cl's system of its own (every node's address,
// as the shared one), closed after the worker's own cleanup.
func withClients(ctx context.Context, mode clientMode, t targets, cl *cluster, w int,
	setup func(ctx context.Context, t targets, w int) (worker, error)) (worker, error) {
	if mode == shared {
		return setup(ctx, t, w)
	}
	var closeClient func() error
	switch cl.sys {
	case etcdSys:
		c, err := cl.etcdClient()
		if err != nil {
			return worker{}, err
		}
		t.etcd, t.tenure, closeClient = c, nil, c.Close
	case tenureSys:
		c, err := cl.tenureClient()
		if err != nil {
			return worker{}, err
		}
		t.etcd, t.tenure, closeClient = nil, c, c.Close
	}
	wk, err := setup(ctx, t, w)
	if err != nil {
		closeClient()
		return worker{}, err
	}
	inner := wk.cleanup
	wk.cleanup = func(ctx context.Context) {
		if inner != nil {
			inner(ctx)
		}
		closeClient()
	}
	return wk, nil
}

// errNotOwner is a fenced etcd write whose ownership check failed.
var errNotOwner = errors.New("bench: etcd txn: mutex no longer owned")

func etcdFencedPut(ctx context.Context, c *clientv3.Client, m *concurrency.Mutex, key string) error {
	r, err := c.Txn(ctx).If(m.IsOwner()).Then(clientv3.OpPut(key, string(value))).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		return errNotOwner
	}
	return nil
}

// etcdLockCycle is Lock + fenced put + Unlock of a mutex on prefix with a
// session of the worker's own.
func etcdLockCycle(ctx context.Context, t targets, prefix string, w int) (worker, error) {
	s, err := concurrency.NewSession(t.etcd, concurrency.WithTTL(int(benchTTL/time.Second)))
	if err != nil {
		return worker{}, err
	}
	m := concurrency.NewMutex(s, prefix)
	key := fmt.Sprintf("data/%s/%d", prefix, w)
	return worker{
		op: func(ctx context.Context) error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			err := etcdFencedPut(ctx, t.etcd, m, key)
			if uerr := m.Unlock(ctx); err == nil {
				err = uerr
			}
			return err
		},
		cleanup: func(ctx context.Context) { s.Close() },
	}, nil
}

// tenureLockCycle is Acquire + fenced put + Release of name.
func tenureLockCycle(t targets, name string, w int, wait bool) worker {
	holder := fmt.Sprintf("w%d", w)
	key := fmt.Sprintf("data/%s/%d", name, w)
	var opts []client.AcquireOption
	if wait {
		opts = append(opts, client.Wait(30*time.Second))
	}
	return worker{op: func(ctx context.Context) error {
		l, err := t.tenure.Acquire(ctx, name, holder, benchTTL, opts...)
		if err != nil {
			return err
		}
		_, err = t.tenure.Put(ctx, key, value, name, l.Token)
		if rerr := t.tenure.Release(ctx, name, l.Token); err == nil {
			err = rerr
		}
		return err
	}}
}

// measure is one side's result of one workload in one round.
type measure struct {
	Ops       int64   `json:"ops"`
	Errors    int64   `json:"errors"`
	FirstErr  string  `json:"first_error,omitempty"`
	Seconds   float64 `json:"seconds"`
	OpsPerSec float64 `json:"ops_per_sec"`
	P50Ms     float64 `json:"p50_ms"`
	P99Ms     float64 `json:"p99_ms"`
	// ServerCPU is the CPU time of all server processes of the cluster
	// during the measurement, in seconds; CPUPerOpUs divides it by Ops.
	ServerCPU  float64 `json:"server_cpu_s"`
	CPUPerOpUs float64 `json:"server_cpu_per_op_us"`
}

// runWorkers runs n workers made by setup for warmup+dur and counts the
// operations that started after the warmup and ended within dur.
func runWorkers(ctx context.Context, n int, warmup, dur time.Duration, pids []int,
	setup func(ctx context.Context, w int) (worker, error)) (measure, error) {
	ws := make([]worker, n)
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, w := range ws {
			if w.cleanup != nil {
				w.cleanup(cctx)
			}
		}
	}()
	for i := range n {
		w, err := setup(ctx, i)
		if err != nil {
			return measure{}, fmt.Errorf("set up worker %d: %w", i, err)
		}
		ws[i] = w
	}
	var (
		ops, errs atomic.Int64
		mu        sync.Mutex
		firstErr  error
		lats      = make([][]time.Duration, n)
		wg        sync.WaitGroup
	)
	start := time.Now()
	from, until := start.Add(warmup), start.Add(warmup+dur)
	rctx, cancel := context.WithDeadline(ctx, until.Add(5*time.Second))
	defer cancel()
	cpu0c := make(chan float64, 1)
	go func() {
		select {
		case <-time.After(warmup):
		case <-rctx.Done():
		}
		cpu0c <- sumCPU(pids)
	}()
	for i, w := range ws {
		wg.Go(func() {
			for {
				t0 := time.Now()
				if !t0.Before(until) || rctx.Err() != nil {
					return
				}
				err := w.op(rctx)
				t1 := time.Now()
				if t0.Before(from) || t1.After(until) {
					continue
				}
				if err != nil {
					errs.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					// Do not spin on a failing server.
					time.Sleep(10 * time.Millisecond)
					continue
				}
				ops.Add(1)
				lats[i] = append(lats[i], t1.Sub(t0))
			}
		})
	}
	wg.Wait()
	cpu1 := sumCPU(pids)
	cpu0 := <-cpu0c
	if err := ctx.Err(); err != nil {
		return measure{}, err
	}
	all := slices.Concat(lats...)
	m := measure{
		Ops:       ops.Load(),
		Errors:    errs.Load(),
		Seconds:   dur.Seconds(),
		OpsPerSec: float64(ops.Load()) / dur.Seconds(),
		P50Ms:     ms(percentile(all, 0.50)),
		P99Ms:     ms(percentile(all, 0.99)),
		ServerCPU: cpu1 - cpu0,
	}
	if m.Ops > 0 {
		m.CPUPerOpUs = m.ServerCPU / float64(m.Ops) * 1e6
	}
	if firstErr != nil {
		m.FirstErr = firstErr.Error()
	}
	return m, nil
}

// percentile returns the q-quantile of d (sorted in place).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(q * float64(len(d)-1))
	return d[i]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
