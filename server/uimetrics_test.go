package server

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// The sampler turns counter readings into per-second rates and commit
// latencies.
func TestSamplerRates(t *testing.T) {
	var ops, requests uint64
	s := newSampler(func() uint64 { return ops }, func() uint64 { return requests }, nil)
	t0 := time.Unix(1000, 0)
	s.take(t0)
	ops, requests = 250, 7
	s.take(t0.Add(time.Second))
	got := s.samples()
	if len(got) != 1 || got[0].Ops != 250 || got[0].Requests != 7 || got[0].CommitMean != -1 {
		t.Fatalf("samples = %+v, want one of 250 ops, 7 requests and no commit latency", got)
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

// bareNode is a Node that answers only what New and the request counter
// ask of it.
type bareNode struct{ Node }

func (bareNode) ID() string           { return "n1" }
func (bareNode) ClusterID() string    { return "" }
func (bareNode) Limits() lease.Limits { return lease.DefaultLimits() }
func (bareNode) IsLeader() bool       { return false }

// The server samples its rates from its start, not from the first time a
// dashboard asks: a page opened later gets the minutes before it, not a
// chart that starts flat.
func TestSamplingStartsWithTheServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(Config{Node: bareNode{}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		time.Sleep(500 * time.Millisecond)
		for range 3 {
			s.metrics.count("Get", "ok")
			time.Sleep(time.Second)
		}
		got := s.sampler.samples()
		if len(got) != 3 {
			t.Fatalf("after 3.5s and no dashboard request the server kept %d samples %+v, want 3", len(got), got)
		}
		for i, sm := range got {
			if sm.Requests != 1 {
				t.Errorf("sample %d = %+v, want 1 request", i, sm)
			}
		}
	})
}
