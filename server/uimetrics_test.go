package server

import (
	"testing"
	"time"
)

// The sampler turns counter readings into per-second rates and commit
// latencies.
func TestSamplerRates(t *testing.T) {
	s := newSampler(NewRegistry(), nil)
	var ops uint64
	s.ops = func() uint64 { return ops }
	t0 := time.Unix(1000, 0)
	s.take(t0)
	ops = 250
	s.take(t0.Add(time.Second))
	got := s.samples()
	if len(got) != 1 || got[0].Ops != 250 || got[0].CommitMean != -1 {
		t.Fatalf("samples = %+v, want one of 250 ops and no commit latency", got)
	}
	for range sampleWindow + 5 {
		s.take(t0)
	}
	if n := len(s.samples()); n != sampleWindow {
		t.Errorf("kept %d samples, want %d", n, sampleWindow)
	}
	if q := quantile(0.99, []float64{0.001, 0.002, 0.004}, []uint64{10, 99, 100}, []uint64{0, 0, 0}, 100); q != 0.002 {
		t.Errorf("p99 = %v, want 0.002", q)
	}
}
