package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

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
	// noStream is set once the endpoint answered that it has no
	// BatchStream: Batch calls then go one per request.
	noStream atomic.Bool
	// stream carries the Batch calls while it works; nil before the
	// first and after one failed. The goroutine that sends (run;
	// batchInflight is 1) uses it without b.mu while it holds the
	// in-flight slot; otherwise it is touched only with b.mu held.
	stream *batchStream
	// closeIdle asks run to end the stream once it has sent what is
	// queued (Client.Close came while a call was on its way). b.mu.
	closeIdle bool
	// closed, if not nil, is called after close ended the stream: it
	// closes the connections that are idle now.
	closed func()

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
	call := &batchCall{op: op, size: wire.Size(op), done: make(chan struct{})}
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
		return nil, ctxError(ctx)
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
			if b.closeIdle {
				b.endStream()
				b.closeIdle = false
				if b.closed != nil {
					b.closed()
				}
			}
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
	res, err := b.call(f.ctx, req)
	if err == nil && len(res.GetResults()) != len(f.calls) {
		err = fmt.Errorf("client: a batch of %d ops returned %d results", len(f.calls), len(res.GetResults()))
	}
	if err != nil && connect.CodeOf(err) == connect.CodeUnimplemented && connect.IsWireError(err) {
		b.off.Store(true)
	}
	for i, c := range f.calls {
		if err != nil {
			c.err = err
		} else {
			c.res = res.GetResults()[i]
		}
		close(c.done)
	}
}

// batchStream is one BatchStream to an endpoint and the cancellation of
// its context.
type batchStream struct {
	bidi   *connect.BidiStreamForClient[tenurev1.BatchRequest, tenurev1.BatchResponse]
	cancel context.CancelFunc
}

// close ends the endpoint's BatchStream, at once if no call is on its
// way, else once the queue is sent. A later call opens a new one.
func (b *batcher) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight > 0 {
		b.closeIdle = true
		return
	}
	b.endStream()
}

// endStream ends the stream, if any, and waits until its connection
// no longer counts it; b.mu is held and no call is on its way.
func (b *batcher) endStream() {
	if b.stream != nil {
		b.stream.end()
		b.stream = nil
	}
}

// end ends s for both sides. Cancelling its context alone does not: an
// HTTP/2 stream whose request is still open stays open until its request
// body ends. Closing the request ends the server's side; closing the
// response resets the stream and waits until the connection forgot it,
// so that the connection counts as idle again.
func (s *batchStream) end() {
	s.bidi.CloseRequest()
	s.bidi.CloseResponse()
	s.cancel()
}

// call makes one Batch call with req on the endpoint's BatchStream
// (opened if there is none), or alone when the endpoint has no
// BatchStream. When ctx ends first the stream is cancelled, as a Batch
// call alone would be, and a new one carries the next call.
func (b *batcher) call(ctx context.Context, req *tenurev1.BatchRequest) (*tenurev1.BatchResponse, error) {
	if res, err := b.ep.conn.batch(ctx, req); !errors.Is(err, errNoConn) {
		return res, err
	}
	if b.ep.batchStream == nil || b.noStream.Load() {
		res, err := b.ep.batchLease.Batch(ctx, connect.NewRequest(req))
		if err != nil {
			return nil, err
		}
		return res.Msg, nil
	}
	s := b.stream
	if s == nil {
		sctx, cancel := context.WithCancel(context.Background())
		s = &batchStream{bidi: b.ep.batchStream.CallBidiStream(sctx), cancel: cancel}
		b.stream = s
	}
	stop := context.AfterFunc(ctx, s.cancel)
	err := s.bidi.Send(req)
	var res *tenurev1.BatchResponse
	if err == nil || errors.Is(err, io.EOF) {
		// A Send that found the stream ended returns io.EOF; Receive
		// has the reason.
		res, err = s.bidi.Receive()
	}
	if !stop() || err != nil {
		// The stream was cancelled, or broke, or ended with the call's
		// error, or its answer was refused: the next call opens a new
		// one.
		s.end()
		b.stream = nil
	}
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return nil, ctxError(ctx)
	}
	if connect.CodeOf(err) == connect.CodeUnimplemented {
		// A server older than BatchStream (which answers HTTP 404, or
		// unimplemented): this call, and the next ones, go alone.
		// Nothing of it was served.
		b.noStream.Store(true)
		return b.call(ctx, req)
	}
	if !connect.IsWireError(err) && connect.CodeOf(err) != connect.CodeUnavailable && !errors.Is(err, ErrOtherCluster) {
		// The stream broke without an answer from the server: connect
		// reports a stream cut short (a member that crashed) as
		// internal. It is a broken connection, as under a unary call:
		// the batch may have been applied.
		err = connect.NewError(connect.CodeUnavailable, err)
	}
	return nil, err
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
