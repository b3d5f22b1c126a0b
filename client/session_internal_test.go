package client

import (
	"testing"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
)

// TestSessionFloor: the floor moves past every call ended below the
// lowest one in flight, and the bookkeeping stays as small as what is in
// flight.
func TestSessionFloor(t *testing.T) {
	s := newSession()
	a, b := s.begin(), s.begin()
	s.end(b)
	c := s.begin()
	if c.GetFloor() != 1 || c.GetSeq() != 3 {
		t.Fatalf("got %v, want seq 3 floor 1 (seq 1 in flight)", c)
	}
	s.end(a)
	if s.floor != 3 || len(s.ended) != 1 {
		t.Fatalf("floor %d with %d tracked, want 3 and 1", s.floor, len(s.ended))
	}
	s.end(c)
	var open []*tenurev1.RequestID
	for range 10000 {
		open = append(open, s.begin())
	}
	for i := len(open) - 1; i >= 0; i-- {
		s.end(open[i])
	}
	if d := s.begin(); d.GetFloor() != d.GetSeq() || len(s.ended) != 1 || cap(s.ended) > 2*len(open) {
		t.Fatalf("after every call ended: %v, %d tracked (cap %d)", d, len(s.ended), cap(s.ended))
	}
}

// BenchmarkSessionParallel is the cost a call pays for its request ID
// when many goroutines share one Client.
func BenchmarkSessionParallel(b *testing.B) {
	s := newSession()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.end(s.begin())
		}
	})
}
