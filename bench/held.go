package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// heldConfig sizes the held-leases workload.
type heldConfig struct {
	Sessions         int           `json:"sessions"`
	LeasesPerSession int           `json:"leases_per_session"`
	Duration         time.Duration `json:"-"`
	DurationS        float64       `json:"duration_s"`
	// SetupWorkers grant the leases concurrently before the hold starts.
	SetupWorkers int `json:"setup_workers"`
}

// heldMeasure is one side's result of holding the leases for a while.
type heldMeasure struct {
	// Leases counts the leases held when the hold began: granted, and
	// not lost while the others were being granted.
	Leases int `json:"leases"`
	// SetupS is how long granting them all took, in seconds.
	SetupS float64 `json:"setup_s"`
	// Lost counts leases the client library gave up as lost during the
	// hold (tenure: State Lost; etcd: the KeepAlive channel closed).
	Lost int64 `json:"lost"`
	// SetupFailed counts leases that could not be granted (tenure: the
	// grant was not confirmed in time) and were left out of the hold;
	// SetupErr is the first such error.
	SetupFailed int64  `json:"setup_failed"`
	SetupErr    string `json:"setup_error,omitempty"`
	// LostInSetup counts leases lost while the others were still being
	// granted (not part of Lost).
	LostInSetup int64 `json:"lost_in_setup"`
	// Renewals counts renewal requests answered during the hold (tenure:
	// one Renew call per session carries all its leases; etcd: one
	// keep-alive request per lease on the client's stream).
	Renewals   int     `json:"renewals"`
	RenewP50Ms float64 `json:"renew_p50_ms"`
	RenewP99Ms float64 `json:"renew_p99_ms"`
	// ServerCPU is the CPU time of all the cluster's server processes
	// during the hold, in seconds.
	ServerCPU float64 `json:"server_cpu_s"`
}

// latencies collects durations from many goroutines while on is set.
type latencies struct {
	on atomic.Bool
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	if !l.on.Load() {
		return
	}
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *latencies) stop() []time.Duration {
	l.on.Store(false)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d
}

// runHeldTenure holds the leases with package election: one session per
// holder on one shared client, each renewing all its leases in one request
// every TTL/3.
func runHeldTenure(ctx context.Context, cl *cluster, cfg heldConfig) (heldMeasure, error) {
	c, err := cl.tenureClient()
	if err != nil {
		return heldMeasure{}, err
	}
	defer c.Close()
	lat := &latencies{}
	tc := &timedClient{Client: c, lat: lat}
	sessions := make([]*election.Session, cfg.Sessions)
	for i := range sessions {
		s, err := election.New(tc, election.Config{Holder: fmt.Sprintf("s%d", i), TTL: benchTTL})
		if err != nil {
			return heldMeasure{}, err
		}
		sessions[i] = s
	}
	defer func() {
		for _, s := range sessions {
			s.Orphan()
		}
	}()
	leases := make([]*election.Lease, cfg.Sessions*cfg.LeasesPerSession)
	t0 := time.Now()
	var failed setupFailures
	err = parallel(ctx, cfg.SetupWorkers, len(leases), func(ctx context.Context, i int) error {
		s := i / cfg.LeasesPerSession
		l, err := sessions[s].TryAcquire(ctx, fmt.Sprintf("held/%d/%d", s, i%cfg.LeasesPerSession))
		if err != nil {
			return failed.note(ctx, err)
		}
		leases[i] = l
		return nil
	})
	if err != nil {
		return heldMeasure{}, fmt.Errorf("acquire: %w", err)
	}
	leases = slices.DeleteFunc(leases, func(l *election.Lease) bool { return l == nil })
	m := heldMeasure{Leases: len(leases), SetupS: time.Since(t0).Seconds()}
	m.SetupFailed, m.SetupErr = failed.result()
	lost0 := 0
	for _, l := range leases {
		if l.State() == election.Lost {
			lost0++
		}
	}
	if err := m.hold(ctx, cl, lat, cfg.Duration); err != nil {
		return m, err
	}
	for _, l := range leases {
		if l.State() == election.Lost {
			m.Lost++
		}
	}
	m.Lost -= int64(lost0)
	m.LostInSetup = int64(lost0)
	m.Leases -= lost0
	return m, nil
}

// timedClient is the tenure client with every Renew timed.
type timedClient struct {
	*client.Client
	lat *latencies
}

var _ election.Client = (*timedClient)(nil)

func (t *timedClient) Renew(ctx context.Context, refs ...client.Ref) ([]client.RenewResult, error) {
	t0 := time.Now()
	r, err := t.Client.Renew(ctx, refs...)
	if err == nil {
		t.lat.add(time.Since(t0))
	}
	return r, err
}

// runHeldEtcd holds the leases with clientv3: one client, KeepAlive for
// each lease (the client multiplexes them on one stream and sends each
// lease's keep-alive every TTL/3).
func runHeldEtcd(ctx context.Context, cl *cluster, cfg heldConfig) (heldMeasure, error) {
	lat := &latencies{}
	kt := &keepAliveTimer{sent: map[int64]time.Time{}, lat: lat}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   cl.endpoints,
		DialTimeout: 2 * time.Second,
		Logger:      quietLogger(),
		DialOptions: []grpc.DialOption{grpc.WithChainStreamInterceptor(kt.intercept)},
	})
	if err != nil {
		return heldMeasure{}, err
	}
	defer c.Close()
	n := cfg.Sessions * cfg.LeasesPerSession
	kctx, stopKeepAlive := context.WithCancel(ctx)
	defer stopKeepAlive()
	var lost atomic.Int64
	var drained sync.WaitGroup
	defer drained.Wait()
	defer stopKeepAlive()
	t0 := time.Now()
	var failed setupFailures
	err = parallel(ctx, cfg.SetupWorkers, n, func(ctx context.Context, i int) error {
		g, err := c.Grant(ctx, int64(benchTTL/time.Second))
		if err != nil {
			return failed.note(ctx, err)
		}
		ch, err := c.KeepAlive(kctx, g.ID)
		if err != nil {
			return failed.note(ctx, err)
		}
		drained.Go(func() {
			for range ch {
			}
			if kctx.Err() == nil {
				lost.Add(1)
			}
		})
		return nil
	})
	if err != nil {
		return heldMeasure{}, fmt.Errorf("grant: %w", err)
	}
	m := heldMeasure{SetupS: time.Since(t0).Seconds()}
	m.SetupFailed, m.SetupErr = failed.result()
	m.Leases = n - int(m.SetupFailed)
	lost0 := lost.Load()
	if err := m.hold(ctx, cl, lat, cfg.Duration); err != nil {
		return m, err
	}
	m.Lost = lost.Load() - lost0
	m.LostInSetup = lost0
	m.Leases -= int(lost0)
	return m, nil
}

// hold measures the hold: it records renewal latencies for d and sets
// the server CPU seconds and the renewal figures.
func (m *heldMeasure) hold(ctx context.Context, cl *cluster, lat *latencies, d time.Duration) error {
	pids := cl.pids()
	cpu0 := sumCPU(pids)
	lat.on.Store(true)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	lats := lat.stop()
	m.ServerCPU = sumCPU(pids) - cpu0
	m.Renewals = len(lats)
	m.RenewP50Ms, m.RenewP99Ms = ms(percentile(lats, 0.5)), ms(percentile(lats, 0.99))
	return nil
}

// keepAliveTimer times each lease keep-alive on etcd's keep-alive stream:
// from the request for a lease ID to the next response for it.
type keepAliveTimer struct {
	mu   sync.Mutex
	sent map[int64]time.Time
	lat  *latencies
}

func (k *keepAliveTimer) intercept(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string,
	streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil || method != "/etcdserverpb.Lease/LeaseKeepAlive" {
		return s, err
	}
	return &timedStream{ClientStream: s, k: k}, nil
}

type timedStream struct {
	grpc.ClientStream
	k *keepAliveTimer
}

func (s *timedStream) SendMsg(m any) error {
	if r, ok := m.(*pb.LeaseKeepAliveRequest); ok {
		s.k.mu.Lock()
		if _, pending := s.k.sent[r.ID]; !pending {
			s.k.sent[r.ID] = time.Now()
		}
		s.k.mu.Unlock()
	}
	return s.ClientStream.SendMsg(m)
}

func (s *timedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*pb.LeaseKeepAliveResponse); ok && err == nil {
		s.k.mu.Lock()
		t, ok := s.k.sent[r.ID]
		delete(s.k.sent, r.ID)
		s.k.mu.Unlock()
		if ok {
			s.k.lat.add(time.Since(t))
		}
	}
	return err
}

// setupFailures counts the leases that could not be granted before a
// hold. Setup goes on without them unless the run is stopping.
type setupFailures struct {
	mu    sync.Mutex
	n     int64
	first error
}

func (f *setupFailures) note(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	if f.first == nil {
		f.first = err
	}
	return nil
}

func (f *setupFailures) result() (int64, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == nil {
		return 0, ""
	}
	return f.n, f.first.Error()
}

// parallel calls f(i) for i in [0, n) on workers goroutines and returns
// the first error.
func parallel(ctx context.Context, workers, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && err != context.Canceled {
		return err
	}
	return ctx.Err()
}
