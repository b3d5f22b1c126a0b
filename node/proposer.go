package node

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// proposal is one caller's operations, waiting for their results.
type proposal struct {
	ctx   context.Context // the caller's; once it ends, nobody waits
	ops   []lease.Op
	size  int // estimated encoded size of ops in bytes
	start time.Time
	done  chan proposalResult // buffered 1
}

// opsSize estimates the encoded size of ops: their variable-length
// fields plus a few bytes per op and per ref for the fixed ones.
func opsSize(ops []lease.Op) int {
	size := 0
	for _, op := range ops {
		size += 24 + len(op.Name) + len(op.Holder) + len(op.Prefix) + len(op.Key) + len(op.Value) + len(op.Principal)
		for _, r := range op.Refs {
			size += 12 + len(r.Name)
		}
	}
	return size
}

type proposalResult struct {
	results []lease.Result
	err     error
}

// inflight is one raft entry on its way to commit.
type inflight struct {
	future raft.ApplyFuture
	props  []*proposal
	term   *leaderTerm // that proposed it
}

// Do proposes ops as part of the next batch and returns their results once
// the batch is committed, fsynced by a quorum and applied. Only the leader
// serves it; elsewhere it returns ErrNotLeader. If ctx ends first the
// outcome is unknown: the ops may still be applied.
func (n *Node) Do(ctx context.Context, ops ...lease.Op) ([]lease.Result, error) {
	t := n.term.Load()
	if t == nil {
		return nil, ErrNotLeader
	}
	if n.cfg.RenewHeadroom > 0 && onlyRenewals(ops) {
		if res, ok, err := n.renewFromMemory(ctx, t, ops); ok {
			return res, err
		}
	}
	p := &proposal{ctx: ctx, ops: ops, size: opsSize(ops), start: time.Now(), done: make(chan proposalResult, 1)}
	select {
	case n.proposeCh <- p:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.closing:
		return nil, ErrClosed
	}
	select {
	case r := <-p.done:
		return r.results, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.closing:
		return nil, ErrClosed
	}
}

// Do1 proposes one op and returns its result; the result's Err is returned
// as the error.
func (n *Node) Do1(ctx context.Context, op lease.Op) (lease.Result, error) {
	res, err := n.Do(ctx, op)
	if err != nil {
		return lease.Result{}, err
	}
	return res[0], res[0].Err
}

// proposer turns queued proposals into raft entries. While MaxInflight
// entries are on their way, proposals pile up in proposeCh and go out
// together in the next entry, up to MaxBatchOps operations and
// MaxBatchBytes bytes (a single larger proposal goes out alone).
// Proposals whose caller has gone are dropped, not proposed.
//
// Before it collects an entry's proposals it yields the processor once,
// as the client's batcher does: the handlers of requests that arrived
// with the first one (each connection's on its own goroutine) then put
// theirs in too, rather than in an entry of one followed by an entry of
// the rest. With every worker on its own connection this took entries
// from 2.1 to 3.5 operations on average.
func (n *Node) proposer() {
	defer n.wg.Done()
	defer close(n.inflight)
	var next *proposal // taken from proposeCh but left for the next batch
	for {
		first := next
		if first == nil {
			select {
			case first = <-n.proposeCh:
			case <-n.closing:
				n.failQueued(ErrClosed)
				return
			}
		}
		var (
			props []*proposal
			nops  int
		)
		runtime.Gosched()
		props, nops, next = n.collect(first)
		if len(props) == 0 {
			continue
		}
		t := n.term.Load()
		if t == nil {
			fail(props, ErrNotLeader)
			continue
		}
		// Wall is for display only (the lease history): nothing is
		// decided by it.
		b := lease.Batch{Now: n.clusterNow(t), Wall: time.Now().UnixNano(), Headroom: n.cfg.RenewHeadroom, Ops: make([]lease.Op, 0, nops)}
		for _, p := range props {
			b.Ops = append(b.Ops, p.ops...)
		}
		f := n.raft.Apply(appendTermBatch(nil, t.term, b), n.cfg.ApplyTimeout)
		n.metrics.batchOps.Observe(float64(nops))
		select {
		case n.inflight <- &inflight{future: f, props: props, term: t}:
		case <-n.closing:
			fail(props, ErrClosed)
			if next != nil {
				fail([]*proposal{next}, ErrClosed)
			}
			n.failQueued(ErrClosed)
			return
		}
	}
}

// collect gathers the proposals of the next batch: first, then whatever
// is queued, up to the batch limits. A proposal whose caller has gone is
// answered and dropped. next, if not nil, was taken from the queue but
// did not fit: it starts the following batch.
func (n *Node) collect(first *proposal) (props []*proposal, nops int, next *proposal) {
	size := 0
	add := func(p *proposal) bool {
		if p.ctx.Err() != nil {
			p.done <- proposalResult{err: p.ctx.Err()}
			n.metrics.dropped.Inc()
			return true
		}
		if len(props) > 0 && (nops+len(p.ops) > n.cfg.MaxBatchOps || size+p.size > n.cfg.MaxBatchBytes) {
			return false
		}
		props = append(props, p)
		nops += len(p.ops)
		size += p.size
		return true
	}
	add(first)
	for nops < n.cfg.MaxBatchOps && size < n.cfg.MaxBatchBytes {
		select {
		case p := <-n.proposeCh:
			if !add(p) {
				return props, nops, p
			}
		default:
			return props, nops, nil
		}
	}
	return props, nops, nil
}

// completer waits for entries in proposal order and hands each caller its
// slice of the batch's results.
func (n *Node) completer() {
	defer n.wg.Done()
	for in := range n.inflight {
		err := n.wait(in.future)
		if err != nil {
			fail(in.props, mapRaftError(err))
			continue
		}
		ar, _ := in.future.Response().(*applyResult)
		if ar == nil || ar.err != nil {
			e := fmt.Errorf("node: apply: unexpected response %v", in.future.Response())
			if ar != nil {
				e = ar.err
			}
			fail(in.props, e)
			continue
		}
		i := 0
		now := time.Now()
		for _, p := range in.props {
			n.notePromises(in.term, p.ops, ar.results[i:i+len(p.ops)])
			p.done <- proposalResult{results: ar.results[i : i+len(p.ops)]}
			i += len(p.ops)
			n.metrics.applyLatency.Observe(now.Sub(p.start).Seconds())
		}
		// raft's log cache keeps the entry, and with it the future and
		// its response, for the next 512 entries: let the results go
		// once their callers have them.
		ar.results = nil
	}
}

func (n *Node) failQueued(err error) {
	for {
		select {
		case p := <-n.proposeCh:
			p.done <- proposalResult{err: err}
		default:
			return
		}
	}
}

func fail(props []*proposal, err error) {
	for _, p := range props {
		p.done <- proposalResult{err: err}
	}
}

// wait returns f.Error(), or raft.ErrRaftShutdown once raft has shut down.
// hashicorp/raft never answers a future whose entry was committed but
// still queued for the FSM when it shut down (hashicorp/raft#498), which
// would leave stop waiting for the completer for ever. raft's futures embed
// an exported ShutdownCh for this purpose but raft sets it only on some of
// them; wait sets it (through reflection: the future types are unexported)
// to a channel closed after raft's shutdown completes, when no answer can
// come any more.
func (n *Node) wait(f raft.Future) error {
	v := reflect.ValueOf(f)
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
		ch := v.Elem().FieldByName("ShutdownCh")
		if ch.IsValid() && ch.CanSet() && ch.Type() == reflect.TypeOf(n.raftDown) && ch.IsNil() {
			ch.Set(reflect.ValueOf(n.raftDown))
		}
	}
	return f.Error()
}

func mapRaftError(err error) error {
	if cannotStore(err) {
		return fmt.Errorf("%w: %v", ErrCannotWrite, err)
	}
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return ErrNotLeader
	case errors.Is(err, raft.ErrLeadershipLost):
		return fmt.Errorf("%w: %v", ErrIndeterminate, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrNoLeader, err)
	}
	return err
}

// cannotStore reports whether err is raft's answer to an append the leader
// could not write because its file system refuses writes (full,
// read-only, permissions). raft's log cache passes the store's error on
// as text (%q), so its errno is found by its message.
func cannotStore(err error) bool {
	if err == nil || !strings.Contains(err.Error(), "unable to store logs") {
		return false
	}
	msg := err.Error()
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS, syscall.EACCES, syscall.EPERM} {
		if strings.Contains(msg, errno.Error()) {
			return true
		}
	}
	return false
}
