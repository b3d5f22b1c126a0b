package client

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/wire"
)

// Batching. Calls that change state without waiting (Acquire without
// Wait, Renew, Release, Put, Delete) go to an endpoint through its
// batcher: while batchInflight Batch calls to that endpoint are on their
// way, further calls queue, and the queue goes out as one Batch call when
// one of them returns. Every caller waits for its own answer only as long
// as its own context lets it; a Batch call that nobody waits for any more
// is cancelled. A lone caller's request goes out at once, so
// batching adds no latency; many concurrent callers share round trips,
// HTTP/2 streams and the server's raft entries. Each op still gets
// exactly the result or error its own call would have had, and the
// retry rules of each method are unchanged: an attempt is one op in one
// Batch call.
const (
	// batchInflight is how many Batch calls one endpoint has on their way
	// at once.
	batchInflight = 1
	// maxBatchOps and maxBatchBytes bound one Batch call (the server
	// takes up to 1024 ops); a single larger op goes alone.
	maxBatchOps   = 256
	maxBatchBytes = 1 << 20
)

// batcher coalesces the batchable calls to one endpoint.
type batcher struct {
	ep      *endpoint
	timeout time.Duration // of one Batch call
	// off is set once the endpoint answered that it has no Batch method
	// (a server older than the client): calls then go one by one.
	off atomic.Bool

	mu       sync.Mutex
	inflight int
	queue    []*batchCall
	// queued, if set (by tests), is called with the queue's length after
	// a call was queued, b.mu held.
	queued func(n int)
	// sending, if set (by tests), is called with the ops of each Batch
	// call just before it is made.
	sending func(ops []*tenurev1.BatchOp)
}

// batchCall is one op waiting for its result.
type batchCall struct {
	op     *tenurev1.BatchOp
	size   int
	done   chan struct{} // closed once res or err is set
	res    *tenurev1.BatchResult
	err    error
	flight *flight // the Batch call carrying it, once sent; b.mu
}

// flight is one Batch call on its way.
type flight struct {
	calls  []*batchCall
	ctx    context.Context
	cancel context.CancelFunc
	// waiting counts the calls whose callers still wait for it; when the
	// last one gives up, the Batch call is cancelled. b.mu.
	waiting int
}

// newFlight makes the Batch call for calls; b.mu is held.
func (b *batcher) newFlight(calls []*batchCall) *flight {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	f := &flight{calls: calls, ctx: ctx, cancel: cancel, waiting: len(calls)}
	for _, c := range calls {
		c.flight = f
	}
	return f
}

// do sends op in the next Batch call to the endpoint and returns its
// result, or the op's error as the error (a wire error, as the op's own
// call would have returned it), or the Batch call's error. If ctx ends
// first it returns at once: with an error wrapping errNotSent if op was
// still queued (it is then never sent), else with a Connect error for
// ctx's end (op may still be applied).
func (b *batcher) do(ctx context.Context, op *tenurev1.BatchOp) (*tenurev1.BatchResult, error) {
	call := &batchCall{op: op, size: proto.Size(op), done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, call)
	if b.queued != nil {
		b.queued(len(b.queue))
	}
	start := b.inflight < batchInflight
	if start {
		b.inflight++
	}
	b.mu.Unlock()
	if start {
		go b.run()
	}
	select {
	case <-call.done:
	case <-ctx.Done():
		b.mu.Lock()
		if i := slices.Index(b.queue, call); i >= 0 {
			// Still queued: it never leaves, so it cannot apply.
			b.queue = slices.Delete(b.queue, i, i+1)
			b.mu.Unlock()
			return nil, fmt.Errorf("%w: %w", errNotSent, ctx.Err())
		}
		if f := call.flight; f != nil {
			if f.waiting--; f.waiting == 0 {
				f.cancel() // nobody waits for its answer any more
			}
		}
		b.mu.Unlock()
		code := connect.CodeCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = connect.CodeDeadlineExceeded
		}
		return nil, connect.NewError(code, ctx.Err())
	}
	if call.err != nil {
		return nil, call.err
	}
	if e := call.res.GetError(); e != nil {
		return nil, wire.FromBatchError(e)
	}
	return call.res, nil
}

// run sends the queued calls, a batch at a time, until the queue is
// empty; then it gives up its in-flight slot. Before it takes a batch it
// yields the processor once: the callers that the last answer woke, and
// any that started with it, are then queued too and go in the same batch
// rather than in a batch of one followed by a batch of the rest.
func (b *batcher) run() {
	for {
		runtime.Gosched()
		b.mu.Lock()
		if len(b.queue) == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		f := b.newFlight(b.take())
		b.mu.Unlock()
		b.send(f)
	}
}

// take removes the next batch from the queue; b.mu is held.
func (b *batcher) take() []*batchCall {
	n, size := 0, 0
	for n < len(b.queue) && n < maxBatchOps {
		if n > 0 && size+b.queue[n].size > maxBatchBytes {
			break
		}
		size += b.queue[n].size
		n++
	}
	calls := make([]*batchCall, n)
	copy(calls, b.queue)
	rest := copy(b.queue, b.queue[n:])
	clear(b.queue[rest:])
	b.queue = b.queue[:rest]
	return calls
}

// send makes the Batch call of f and answers each of its calls.
func (b *batcher) send(f *flight) {
	defer f.cancel()
	req := &tenurev1.BatchRequest{Ops: make([]*tenurev1.BatchOp, len(f.calls))}
	for i, c := range f.calls {
		req.Ops[i] = c.op
	}
	if b.sending != nil {
		b.sending(req.Ops)
	}
	res, err := b.ep.batchLease.Batch(f.ctx, connect.NewRequest(req))
	if err == nil && len(res.Msg.GetResults()) != len(f.calls) {
		err = fmt.Errorf("client: a batch of %d ops returned %d results", len(f.calls), len(res.Msg.GetResults()))
	}
	if err != nil && connect.CodeOf(err) == connect.CodeUnimplemented && connect.IsWireError(err) {
		b.off.Store(true)
	}
	for i, c := range f.calls {
		if err != nil {
			c.err = err
		} else {
			c.res = res.Msg.GetResults()[i]
		}
		close(c.done)
	}
}

// errNotSent is the error of a call whose context ended while it was
// queued: it was never sent, so retrying it elsewhere is safe.
var errNotSent = errors.New("client: not sent")

// errNoBatch is what a batched attempt returns when the endpoint has no
// Batch method: the attempt then goes alone.
var errNoBatch = errors.New("client: endpoint does not batch")

// batched runs one attempt of a batchable call through ep's batcher and
// returns the op's result. It returns errNoBatch when the call must go
// alone instead: batching is off or the endpoint cannot batch.
func (c *Client) batched(ctx context.Context, ep *endpoint, op *tenurev1.BatchOp) (*tenurev1.BatchResult, error) {
	if c.cfg.NoBatching || ep.batch.off.Load() {
		return nil, errNoBatch
	}
	res, err := ep.batch.do(ctx, op)
	if err != nil && connect.CodeOf(err) == connect.CodeUnimplemented && ep.batch.off.Load() {
		return nil, errNoBatch
	}
	return res, err
}

// tryBatched runs one attempt of a batchable call as op in a Batch call
// to ep and picks the method's response out of the op's result with
// result (nil if it is of another kind). sent reports whether it was
// tried: false means the call must go alone (batching is off or ep cannot
// batch).
func tryBatched[Res any](ctx context.Context, c *Client, ep *endpoint, op *tenurev1.BatchOp,
	result func(*tenurev1.BatchResult) *Res) (res *Res, sent bool, err error) {
	br, err := c.batched(ctx, ep, op)
	switch {
	case errors.Is(err, errNoBatch):
		return nil, false, nil
	case err != nil:
		return nil, true, err
	}
	if res = result(br); res == nil {
		return nil, true, fmt.Errorf("client: a batched %T returned %T", op.GetOp(), br.GetResult())
	}
	return res, true, nil
}

// unaryOrBatched is unary for a batchable method: each attempt goes as op
// in a Batch call (see tryBatched), or alone when it cannot. The time it
// returns is when the first attempt was sent: every attempt carries the
// call's request ID, so the answer may be a remembered outcome of an
// earlier attempt, which took effect after the first was sent.
func unaryOrBatched[S, Req, Res any](ctx context.Context, c *Client, p retryPolicy, msg *Req, svc func(*endpoint) S,
	method func(S, context.Context, *connect.Request[Req]) (*connect.Response[Res], error),
	op *tenurev1.BatchOp, result func(*tenurev1.BatchResult) *Res) (*Res, time.Time, error) {
	var (
		res  *Res
		sent time.Time
	)
	err := c.call(ctx, p, func(ctx context.Context, ep *endpoint) error {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
		if sent.IsZero() {
			sent = time.Now()
		}
		r, batched, err := tryBatched(ctx, c, ep, op, result)
		if batched {
			res = r
			return err
		}
		rr, err := method(svc(ep), ctx, connect.NewRequest(msg))
		if err != nil {
			return err
		}
		res = rr.Msg
		return nil
	})
	return res, sent, err
}
