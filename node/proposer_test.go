package node

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenure-io/tenure/lease"
)

// appliedFuture is a raft.ApplyFuture whose entry has been applied.
type appliedFuture struct{ resp any }

func (f appliedFuture) Error() error  { return nil }
func (f appliedFuture) Index() uint64 { return 1 }
func (f appliedFuture) Response() any { return f.resp }

// raft's log cache keeps an entry's future, and with it the FSM's
// response, for the next 512 entries; at a few thousand renewals per
// entry that held tens of megabytes of results nobody would read again.
// The completer lets them go once every caller has its part.
func TestCompleterLetsTheResultsGo(t *testing.T) {
	n := &Node{metrics: newMetrics(prometheus.NewRegistry()), inflight: make(chan *inflight, 1)}
	ar := &applyResult{results: []lease.Result{{Revision: 1}, {Revision: 2}, {Revision: 3}}}
	mk := func(ops int) *proposal {
		return &proposal{ctx: context.Background(), ops: make([]lease.Op, ops), start: time.Now(), done: make(chan proposalResult, 1)}
	}
	p1, p2 := mk(1), mk(2)
	n.inflight <- &inflight{future: appliedFuture{ar}, props: []*proposal{p1, p2}}
	close(n.inflight)
	n.wg.Add(1)
	n.completer()

	if r := <-p1.done; r.err != nil || len(r.results) != 1 || r.results[0].Revision != 1 {
		t.Errorf("first caller got %+v, want the first result", r)
	}
	if r := <-p2.done; r.err != nil || len(r.results) != 2 || r.results[1].Revision != 3 {
		t.Errorf("second caller got %+v, want the other two", r)
	}
	if ar.results != nil {
		t.Errorf("the applied entry's response still holds %d results after delivery", len(ar.results))
	}
}
