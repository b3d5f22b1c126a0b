package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// fleetConfig sizes the fleet workload on one cluster size.
type fleetConfig struct {
	Nodes   int `json:"nodes"`
	Members int `json:"members"`
	// Ramp is how long starting the members takes: member i starts at
	// i*Ramp/Members.
	Ramp dur `json:"ramp"`
	// Hold is the measured time, after every member started.
	Hold dur `json:"hold"`
}

// fleetMeasure is one side's result of one fleet run.
type fleetMeasure struct {
	Members int `json:"members"`
	// Started counts the members that got their lease; StartFailed
	// those that did not (StartErr is the first error), within the ramp
	// and fleetSettle after it.
	Started     int    `json:"started"`
	StartFailed int    `json:"start_failed"`
	StartErr    string `json:"start_error,omitempty"`
	// RampS is the time from the first member's start to the last one
	// holding its lease, in seconds.
	RampS float64 `json:"ramp_s"`
	// LostInRamp counts leases lost before the hold began; Lost those
	// lost during it (tenure: the lease's state became Lost; etcd: the
	// session's Done channel closed). Holding counts the members still
	// holding their lease when the hold ended.
	LostInRamp int `json:"lost_in_ramp"`
	// LostWhy are the first few distinct reasons leases were lost for,
	// as the client library gave them.
	LostWhy []string `json:"lost_why,omitempty"`
	Lost    int      `json:"lost"`
	Holding int      `json:"holding"`
	// ServerCPU is the CPU time of all the cluster's servers during the
	// hold, ClientCPU that of this process (every member's client), in
	// seconds.
	ServerCPU float64 `json:"server_cpu_s"`
	ClientCPU float64 `json:"client_cpu_s"`
	// RSSPeak is the largest sum of the servers' RSS seen (sampled every
	// second from the ramp's start to the hold's end), RSSEnd the sum at
	// the hold's end, in bytes.
	RSSPeak int64 `json:"server_rss_peak_bytes"`
	RSSEnd  int64 `json:"server_rss_end_bytes"`
	// Sockets is the number of sockets the servers hold open at the
	// hold's end beyond those they held before the ramp;
	// ConnsPerMember divides it by the members started.
	Sockets        int     `json:"server_sockets"`
	ConnsPerMember float64 `json:"connections_per_member"`
	// Note warns of what may have limited the run (the open-file limit).
	Note string `json:"note,omitempty"`
}

// fleetSettle bounds the wait for the last members to get their leases
// after the ramp.
const fleetSettle = time.Minute

// fleetMember is one member: a client of its own and one lease.
type fleetMember interface {
	// lost reports whether the member's lease ended before stop, and
	// why reports why it ended.
	lost() bool
	why() string
	// stop stops renewing and closes the client.
	stop()
}

// fleetSide starts members of one system.
type fleetSide interface {
	start(ctx context.Context, i int) (fleetMember, error)
}

// runFleet runs the fleet workload on cl: members started over the ramp,
// then held for the hold time.
func runFleet(ctx context.Context, cl *cluster, cfg fleetConfig) (fleetMeasure, error) {
	m := fleetMeasure{Members: cfg.Members, Note: fileLimitNote(cfg.Members, cl)}
	var side fleetSide
	switch cl.sys {
	case etcdSys:
		side = etcdFleet{cl: cl}
	case tenureSys:
		side = tenureFleet{cl: cl}
	}
	pids := cl.pids()
	sock0 := countSockets(pids)
	rss := newRSSSampler(pids)
	defer rss.stop()

	members := make([]fleetMember, cfg.Members)
	var failed setupFailures
	defer func() {
		stopAll(members)
	}()
	sctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Ramp)+fleetSettle)
	defer cancel()
	var wg sync.WaitGroup
	t0 := time.Now()
	step := time.Duration(cfg.Ramp) / time.Duration(cfg.Members)
	for i := range members {
		if d := time.Until(t0.Add(time.Duration(i) * step)); d > 0 {
			select {
			case <-sctx.Done():
			case <-time.After(d):
			}
		}
		if sctx.Err() != nil {
			break
		}
		wg.Go(func() {
			mb, err := side.start(sctx, i)
			if err != nil {
				failed.note(ctx, err)
				return
			}
			members[i] = mb
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return m, err
	}
	m.RampS = time.Since(t0).Seconds()
	nf, ferr := failed.result()
	m.StartFailed, m.StartErr = int(nf), ferr
	for _, mb := range members {
		if mb == nil {
			continue
		}
		m.Started++
		if mb.lost() {
			m.LostInRamp++
			m.noteLost(mb)
		}
	}
	if m.Started == 0 {
		return m, fmt.Errorf("no member got its lease: %s", m.StartErr)
	}
	self := os.Getpid()
	cpu0, ccpu0 := sumCPU(pids), sumCPU([]int{self})
	select {
	case <-ctx.Done():
		return m, ctx.Err()
	case <-time.After(time.Duration(cfg.Hold)):
	}
	m.ServerCPU, m.ClientCPU = sumCPU(pids)-cpu0, sumCPU([]int{self})-ccpu0
	m.RSSEnd = rss.sample()
	m.Sockets = countSockets(pids) - sock0
	m.ConnsPerMember = float64(m.Sockets) / float64(m.Started)
	for _, mb := range members {
		if mb == nil {
			continue
		}
		if mb.lost() {
			m.Lost++
			m.noteLost(mb)
		} else {
			m.Holding++
		}
	}
	m.Lost -= m.LostInRamp
	m.RSSPeak = rss.stop()
	return m, nil
}

// noteLost keeps why mb's lease was lost if it is a reason not seen yet,
// up to a few.
func (m *fleetMeasure) noteLost(mb fleetMember) {
	if w := mb.why(); len(m.LostWhy) < 4 && !slices.Contains(m.LostWhy, w) {
		m.LostWhy = append(m.LostWhy, w)
	}
}

// stopAll stops every member, 64 at a time.
func stopAll(members []fleetMember) {
	parallel(context.Background(), 64, len(members), func(_ context.Context, i int) error {
		if members[i] != nil {
			members[i].stop()
		}
		return nil
	})
}

// tenureFleet: each member a client.Client of its own, an election
// session (TTL 10s) and one lease taken with Session.Acquire.
type tenureFleet struct{ cl *cluster }

type tenureMember struct {
	c     *client.Client
	s     *election.Session
	l     *election.Lease
	ended atomic.Bool
}

func (f tenureFleet) start(ctx context.Context, i int) (fleetMember, error) {
	c, err := f.cl.tenureClient()
	if err != nil {
		return nil, err
	}
	s, err := election.New(c, election.Config{Holder: fmt.Sprintf("m%d", i), TTL: benchTTL})
	if err != nil {
		c.Close()
		return nil, err
	}
	l, err := s.Acquire(ctx, fmt.Sprintf("fleet/%d", i))
	if err != nil {
		s.Orphan()
		c.Close()
		return nil, err
	}
	return &tenureMember{c: c, s: s, l: l}, nil
}

func (m *tenureMember) why() string { return fmt.Sprint(context.Cause(m.l.Ctx())) }

func (m *tenureMember) lost() bool {
	select {
	case <-m.l.Done():
		return !m.ended.Load()
	default:
		return false
	}
}

func (m *tenureMember) stop() {
	m.ended.Store(true)
	m.s.Orphan()
	m.c.Close()
}

// etcdFleet: each member a clientv3.Client of its own, a
// concurrency.Session (TTL 10s) and a concurrency.Mutex on a name of its
// own, locked.
type etcdFleet struct{ cl *cluster }

type etcdMember struct {
	c     *clientv3.Client
	s     *concurrency.Session
	ended atomic.Bool
}

func (f etcdFleet) start(ctx context.Context, i int) (fleetMember, error) {
	c, err := f.cl.etcdClient()
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(c, concurrency.WithTTL(int(benchTTL/time.Second)))
	if err != nil {
		c.Close()
		return nil, err
	}
	mu := concurrency.NewMutex(s, fmt.Sprintf("fleet/%d", i))
	if err := mu.Lock(ctx); err != nil {
		s.Orphan()
		c.Close()
		return nil, err
	}
	return &etcdMember{c: c, s: s}, nil
}

func (m *etcdMember) why() string { return "the session's keep-alive ended" }

func (m *etcdMember) lost() bool {
	select {
	case <-m.s.Done():
		return !m.ended.Load()
	default:
		return false
	}
}

func (m *etcdMember) stop() {
	m.ended.Store(true)
	m.s.Orphan()
	m.c.Close()
}

// rssSampler samples the sum of the servers' RSS every second and keeps
// the largest.
type rssSampler struct {
	pids []int
	peak atomic.Int64
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func newRSSSampler(pids []int) *rssSampler {
	r := &rssSampler{pids: pids, quit: make(chan struct{}), done: make(chan struct{})}
	r.sample()
	go func() {
		defer close(r.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-r.quit:
				return
			case <-t.C:
				r.sample()
			}
		}
	}()
	return r
}

// sample reads the sum now, notes it in the peak and returns it.
func (r *rssSampler) sample() int64 {
	var sum int64
	for _, p := range r.pids {
		if v, err := rssBytes(p); err == nil {
			sum += v
		}
	}
	for {
		old := r.peak.Load()
		if sum <= old || r.peak.CompareAndSwap(old, sum) {
			return sum
		}
	}
}

// stop ends the sampling and returns the peak.
func (r *rssSampler) stop() int64 {
	r.once.Do(func() { close(r.quit) })
	<-r.done
	return r.peak.Load()
}

// countSockets counts the sockets among the open files of pids
// (/proc/PID/fd entries that link to socket:[inode]).
func countSockets(pids []int) int {
	n := 0
	for _, p := range pids {
		dir := fmt.Sprintf("/proc/%d/fd", p)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if t, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(t, "socket:") {
				n++
			}
		}
	}
	return n
}

// fileLimitNote returns a warning when the open-file limit of this
// process (and of the servers, which inherit it) is below what members
// clients of cl need: a connection to every node for etcd's client, one
// to one node for tenure's (its acquire and renewals on one batch
// connection), plus slack. Members that cannot open their connections then fail to
// start or lose their leases, and the run says why.
func fileLimitNote(members int, cl *cluster) string {
	per := len(cl.endpoints)
	if cl.sys == tenureSys {
		per = 1
	}
	need := uint64(members)*uint64(per) + 1024
	have, err := fileLimit()
	if err != nil || have >= need {
		return ""
	}
	return fmt.Sprintf("%d members need about %d open files (%d connections each) in the client and the server, the limit is %d",
		members, need, per, have)
}
