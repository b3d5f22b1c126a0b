package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// MaxBatchOps is the most ops one Batch call may carry.
const MaxBatchOps = 1024

// Batch serves several independent requests in one call: every valid op
// goes into one proposal (so one raft entry), and each gets the result or
// error its own call would have had. An invalid op gets invalid_argument
// and changes nothing; the others still run. An error that prevents the
// proposal as a whole (no leader, a timeout) is the call's error.
func (l *leaseService) Batch(ctx context.Context, req *connect.Request[tenurev1.BatchRequest]) (*connect.Response[tenurev1.BatchResponse], error) {
	return l.s.batch(ctx, req)
}

// batch serves one Batch call, unary or one message of a BatchStream.
func (s *Server) batch(ctx context.Context, req *connect.Request[tenurev1.BatchRequest]) (*connect.Response[tenurev1.BatchResponse], error) {
	in := req.Msg.GetOps()
	switch {
	case len(in) == 0:
		return nil, invalid(errors.New("batch: no ops"))
	case len(in) > MaxBatchOps:
		return nil, invalid(fmt.Errorf("batch: %d ops, at most %d allowed", len(in), MaxBatchOps))
	}
	return route(ctx, s, req,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.BatchRequest]) (*connect.Response[tenurev1.BatchResponse], error) {
			return c.lease.Batch
		},
		func(ctx context.Context) (*tenurev1.BatchResponse, error) {
			out := make([]*tenurev1.BatchResult, len(in))
			ops, idx := s.batchOps(ctx, in, out)
			return s.serveBatch(ctx, ops, idx, out)
		})
}

// serveBatch proposes ops, valid and permitted, on this node (the
// leader) and puts the result of ops[j] in out[idx[j]]; out holds the
// errors of the others already.
func (s *Server) serveBatch(ctx context.Context, ops []lease.Op, idx []int, out []*tenurev1.BatchResult) (*tenurev1.BatchResponse, error) {
	res, err := s.doBatch(ctx, ops)
	if err != nil {
		return nil, err
	}
	return s.batchResponse(ops, res, idx, out), nil
}

// doBatch applies the valid ops of a Batch call (none: nothing).
func (s *Server) doBatch(ctx context.Context, ops []lease.Op) ([]lease.Result, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	res, err := s.node.Do(ctx, ops...)
	if err != nil {
		s.metrics.reject(err)
		return nil, toConnect(err)
	}
	return res, nil
}

// batchResponse answers a Batch call: out holds the answers of the ops
// refused before they were applied, and ops, applied with results res,
// are the call's ops idx (nil: all of them, in order).
func (s *Server) batchResponse(ops []lease.Op, res []lease.Result, idx []int, out []*tenurev1.BatchResult) *tenurev1.BatchResponse {
	for j, r := range res {
		i := j
		if idx != nil {
			i = idx[j]
		}
		out[i] = s.batchResult(ops[j], r)
	}
	return &tenurev1.BatchResponse{Results: out}
}

// batchStream serves a BatchStream (see wire.BatchStreamProcedure): each
// request message is served as a Batch call and answered by one
// response message, in order; the error of a Batch call ends the stream
// with that error.
func (s *Server) batchStream(ctx context.Context, st *connect.BidiStream[tenurev1.BatchRequest, tenurev1.BatchResponse]) error {
	h := st.RequestHeader()
	for {
		msg, err := st.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if s.batchStreams.ending() {
				// EndBatchStreams cut it between two messages: nothing
				// the client sent since was served, which unavailable
				// (a wire error, not indeterminate) tells it.
				return connect.NewError(connect.CodeUnavailable, errStreamsEnded)
			}
			return err
		}
		req := connect.NewRequest(msg)
		copyCallHeader(req.Header(), h)
		res, err := s.batch(ctx, req)
		s.metrics.countCall(tenurev1connect.LeaseServiceBatchProcedure, err)
		if err != nil {
			return err
		}
		if err := st.Send(res.Msg); err != nil {
			return err
		}
	}
}

// copyCallHeader copies to dst what of the header src of a stream or
// batch connection each of its calls carries as its own request would:
// the credentials, and the mark of a forwarded call.
func copyCallHeader(dst, src http.Header) {
	for _, k := range []string{forwardedHeader, "Authorization"} {
		if v := src.Get(k); v != "" {
			dst.Set(k, v)
		}
	}
}

// errStreamsEnded ends the BatchStreams that EndBatchStreams cut.
var errStreamsEnded = errors.New("server: shutting down: batch stream ended between batches; the batches after the last answered one were not served")

// batchStreams tracks the BatchStreams and batch connections being
// served, so that EndBatchStreams can end them.
type batchStreams struct {
	mu    sync.Mutex
	open  map[ender]struct{}
	ended bool
}

// ender is a BatchStream or batch connection being served: end ends it
// between two batches.
type ender interface{ end() }

// streamBody is the request body of a BatchStream; closing it fails the
// handler's wait for the next message, and it ends its stream.
type streamBody struct {
	io.ReadCloser
}

func (b *streamBody) end() { b.Close() }

// add tracks e while it is served, and reports false (and tracks
// nothing) once the streams were ended: e is to be ended at once.
func (b *batchStreams) add(e ender) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return false
	}
	if b.open == nil {
		b.open = make(map[ender]struct{})
	}
	b.open[e] = struct{}{}
	return true
}

func (b *batchStreams) remove(e ender) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.open, e)
}

// serve serves one BatchStream with h, its body tracked while it lasts.
func (b *batchStreams) serve(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := &streamBody{ReadCloser: r.Body}
		if !b.add(body) {
			body.Close()
		}
		defer b.remove(body)
		r.Body = body
		h.ServeHTTP(w, r)
	})
}

// end ends every BatchStream and batch connection, now and from now on.
func (b *batchStreams) end() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ended = true
	for e := range b.open {
		e.end()
	}
}

func (b *batchStreams) ending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ended
}

// EndBatchStreams ends the BatchStreams being served, each between two
// batches, and refuses new ones, so that a graceful shutdown
// (http.Server.Shutdown; register it with RegisterOnShutdown) does not
// wait for clients to close them. Close calls it too.
func (s *Server) EndBatchStreams() { s.batchStreams.end() }

// batchOps returns the ops of in to propose and, for each, its index in
// in. An op that is invalid or not permitted gets its error in out
// instead and is left out.
func (s *Server) batchOps(ctx context.Context, in []*tenurev1.BatchOp, out []*tenurev1.BatchResult) (ops []lease.Op, idx []int) {
	limits := s.node.Limits()
	ops = make([]lease.Op, 0, len(in))
	idx = make([]int, 0, len(in))
	for i, b := range in {
		op, proc, msg, err := batchOp(ctx, b)
		if err == nil {
			err = limits.Validate(op)
		}
		if err != nil {
			out[i] = batchError(invalid(err))
			continue
		}
		// Each op needs the permission its own call needs; the
		// interceptor let the batch in on any hold role.
		if err := s.auth.authorize(ctx, proc, msg); err != nil {
			s.log.Warn("refused a request", "procedure", proc, "in", tenurev1connect.LeaseServiceBatchProcedure,
				"principal", principalFrom(ctx), "err", err)
			out[i] = batchError(err)
			continue
		}
		ops = append(ops, op)
		idx = append(idx, i)
	}
	return ops, idx
}

// batchOp returns the op that b stands for, as its own call would build
// it, with that call's procedure and request message for the permission
// check.
func batchOp(ctx context.Context, b *tenurev1.BatchOp) (op lease.Op, procedure string, msg any, err error) {
	switch o := b.GetOp().(type) {
	case *tenurev1.BatchOp_Acquire:
		if o.Acquire.GetWait() {
			return lease.Op{}, "", nil, errors.New("batch: an acquire that waits cannot be batched; call Acquire")
		}
		op, err = acquireOp(ctx, o.Acquire)
		return op, tenurev1connect.LeaseServiceAcquireProcedure, o.Acquire, err
	case *tenurev1.BatchOp_Renew:
		return renewOp(ctx, o.Renew), tenurev1connect.LeaseServiceRenewProcedure, o.Renew, nil
	case *tenurev1.BatchOp_Release:
		return releaseOp(ctx, o.Release), tenurev1connect.LeaseServiceReleaseProcedure, o.Release, nil
	case *tenurev1.BatchOp_Put:
		return putOp(ctx, o.Put), tenurev1connect.KVServicePutProcedure, o.Put, nil
	case *tenurev1.BatchOp_Delete:
		return deleteOp(ctx, o.Delete), tenurev1connect.KVServiceDeleteProcedure, o.Delete, nil
	}
	return lease.Op{}, "", nil, errors.New("batch: an op must be one of acquire, renew, release, put, delete")
}

// batchResult is the answer to op, whose result is r.
func (s *Server) batchResult(op lease.Op, r lease.Result) *tenurev1.BatchResult {
	if r.Err != nil {
		s.metrics.reject(r.Err)
		return batchError(toConnect(r.Err))
	}
	switch op.Type {
	case lease.OpAcquire:
		return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Acquire{Acquire: acquireResponse(r)}}
	case lease.OpRenew:
		return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Renew{Renew: s.renewResponse(r)}}
	case lease.OpRelease:
		return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Release{Release: releaseResponse(r)}}
	case lease.OpPut:
		return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Put{Put: &tenurev1.KVPutResponse{Revision: r.Revision}}}
	case lease.OpDelete:
		return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Delete{Delete: &tenurev1.KVDeleteResponse{Revision: r.Revision}}}
	}
	return batchError(connect.NewError(connect.CodeInternal, fmt.Errorf("batch: no result for op type %v", op.Type)))
}

func batchError(err error) *tenurev1.BatchResult {
	return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Error{Error: wire.ToBatchError(err)}}
}
