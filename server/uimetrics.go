package server

import (
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The dashboard's rates: from the server's start, once a second the
// sampler reads three counters (the node's applied operations, the
// requests this server served, as tenure_requests_total counts them, and
// the node's commit-latency histogram, tenure_apply_latency_seconds) and
// keeps the differences for the last sampleWindow seconds in a fixed ring
// (about 24 KB), which a page gets whole when it opens. It reads those
// directly, not by gathering the registry: a gather asks the node for its
// status and reads /proc, which is not worth doing every second.

const sampleWindow = 600

type sample struct {
	T float64 `json:"t"` // Unix milliseconds
	// Ops is the operations this node applied per second (the whole
	// cluster's writes, on every member); Requests the API requests this
	// node served per second.
	Ops      float64 `json:"ops"`
	Requests float64 `json:"requests"`
	// CommitMean and CommitP99 are the commit latency, in milliseconds, of
	// the requests this node proposed as leader during the second (from
	// tenure_apply_latency_seconds); -1 when it proposed none.
	CommitMean float64 `json:"commit_mean"`
	CommitP99  float64 `json:"commit_p99"`
}

type counters struct {
	ops, requests float64
	latCount      uint64
	latSum        float64
	buckets       []float64 // upper bounds
	cum           []uint64  // cumulative counts
}

type sampler struct {
	ops      func() uint64
	requests func() uint64
	latency  func(*dto.Metric) error // nil: none
	stop     chan struct{}
	done     chan struct{}
	once     sync.Once // starts run (New), or marks it done at close if it never started

	mu   sync.Mutex
	ring [sampleWindow]sample
	n    int // samples taken
	prev counters
	have bool
}

func newSampler(ops, requests func() uint64, latency func(*dto.Metric) error) *sampler {
	return &sampler{ops: ops, requests: requests, latency: latency, stop: make(chan struct{}), done: make(chan struct{})}
}

// start starts sampling (once).
func (s *sampler) start() {
	s.once.Do(func() { go s.run() })
}

func (s *sampler) run() {
	defer close(s.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	s.take(time.Now())
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.take(now)
		}
	}
}

func (s *sampler) close() {
	s.once.Do(func() { close(s.done) }) // never started: no start after close
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
}

func (s *sampler) read() counters {
	c := counters{ops: float64(s.ops()), requests: float64(s.requests())}
	var m dto.Metric
	if s.latency != nil && s.latency(&m) == nil {
		h := m.GetHistogram()
		c.latCount, c.latSum = h.GetSampleCount(), h.GetSampleSum()
		c.buckets, c.cum = bucketsOf(h)
	}
	return c
}

func bucketsOf(h *dto.Histogram) ([]float64, []uint64) {
	var ub []float64
	var cum []uint64
	for _, b := range h.GetBucket() {
		ub = append(ub, b.GetUpperBound())
		cum = append(cum, b.GetCumulativeCount())
	}
	return ub, cum
}

func (s *sampler) take(now time.Time) {
	c := s.read()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.have {
		p := s.prev
		sm := sample{T: float64(now.UnixMilli()), Ops: c.ops - p.ops, Requests: c.requests - p.requests, CommitMean: -1, CommitP99: -1}
		if dn := c.latCount - p.latCount; dn > 0 && c.latCount >= p.latCount {
			sm.CommitMean = (c.latSum - p.latSum) / float64(dn) * 1000
			sm.CommitP99 = quantile(0.99, c.buckets, c.cum, p.cum, dn) * 1000
		}
		s.ring[s.n%sampleWindow] = sm
		s.n++
	}
	s.prev, s.have = c, true
}

// quantile estimates the q-quantile of the observations between two reads
// of a histogram: the upper bound of the bucket it falls in.
func quantile(q float64, ub []float64, cum, prev []uint64, n uint64) float64 {
	want := uint64(q*float64(n) + 0.5)
	if want == 0 {
		want = 1
	}
	for i := range ub {
		var before uint64
		if i < len(prev) {
			before = prev[i]
		}
		if cum[i]-before >= want {
			return ub[i]
		}
	}
	if len(ub) == 0 {
		return -1
	}
	return ub[len(ub)-1] * 2 // above the last bound
}

// samples returns the kept samples, oldest first.
func (s *sampler) samples() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := min(s.n, sampleWindow)
	out := make([]sample, 0, k)
	for i := s.n - k; i < s.n; i++ {
		out = append(out, s.ring[i%sampleWindow])
	}
	return out
}
