package server

import (
	"context"
	"errors"
	"fmt"

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
	s := l.s
	in := req.Msg.GetOps()
	switch {
	case len(in) == 0:
		return nil, invalid(errors.New("batch: no ops"))
	case len(in) > MaxBatchOps:
		return nil, invalid(fmt.Errorf("batch: %d ops, at most %d allowed", len(in), MaxBatchOps))
	}
	limits := s.node.Limits()
	out := make([]*tenurev1.BatchResult, len(in))
	ops := make([]lease.Op, 0, len(in))
	idx := make([]int, 0, len(in))
	for i, b := range in {
		op, err := batchOp(ctx, b)
		if err == nil {
			err = limits.Validate(op)
		}
		if err != nil {
			out[i] = batchError(invalid(err))
			continue
		}
		// Each op needs the permission its own call needs; the
		// interceptor let the batch in on any hold role.
		if proc, msg := batchProcedure(b); proc != "" {
			if err := s.auth.authorize(ctx, proc, msg); err != nil {
				s.log.Warn("refused a request", "procedure", proc, "in", tenurev1connect.LeaseServiceBatchProcedure,
					"principal", principalFrom(ctx), "err", err)
				out[i] = batchError(err)
				continue
			}
		}
		ops = append(ops, op)
		idx = append(idx, i)
	}
	return route(ctx, s, req,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.BatchRequest]) (*connect.Response[tenurev1.BatchResponse], error) {
			return c.lease.Batch
		},
		func(ctx context.Context) (*tenurev1.BatchResponse, error) {
			if len(ops) > 0 {
				res, err := s.node.Do(ctx, ops...)
				if err != nil {
					s.metrics.reject(err)
					return nil, toConnect(err)
				}
				for j, r := range res {
					out[idx[j]] = s.batchResult(ops[j], r)
				}
			}
			return &tenurev1.BatchResponse{Results: out}, nil
		})
}

// batchOp returns the op that b stands for, as its own call would build it.
func batchOp(ctx context.Context, b *tenurev1.BatchOp) (lease.Op, error) {
	switch o := b.GetOp().(type) {
	case *tenurev1.BatchOp_Acquire:
		if o.Acquire.GetWait() {
			return lease.Op{}, errors.New("batch: an acquire that waits cannot be batched; call Acquire")
		}
		return acquireOp(ctx, o.Acquire)
	case *tenurev1.BatchOp_Renew:
		return renewOp(ctx, o.Renew), nil
	case *tenurev1.BatchOp_Release:
		return releaseOp(ctx, o.Release), nil
	case *tenurev1.BatchOp_Put:
		return putOp(ctx, o.Put), nil
	case *tenurev1.BatchOp_Delete:
		return deleteOp(ctx, o.Delete), nil
	}
	return lease.Op{}, errors.New("batch: an op must be one of acquire, renew, release, put, delete")
}

// batchProcedure returns the procedure that b's own call would have been,
// with its request message, for the permission check.
func batchProcedure(b *tenurev1.BatchOp) (string, any) {
	switch o := b.GetOp().(type) {
	case *tenurev1.BatchOp_Acquire:
		return tenurev1connect.LeaseServiceAcquireProcedure, o.Acquire
	case *tenurev1.BatchOp_Renew:
		return tenurev1connect.LeaseServiceRenewProcedure, o.Renew
	case *tenurev1.BatchOp_Release:
		return tenurev1connect.LeaseServiceReleaseProcedure, o.Release
	case *tenurev1.BatchOp_Put:
		return tenurev1connect.KVServicePutProcedure, o.Put
	case *tenurev1.BatchOp_Delete:
		return tenurev1connect.KVServiceDeleteProcedure, o.Delete
	}
	return "", nil
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
		return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Release{Release: &tenurev1.ReleaseResponse{}}}
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
