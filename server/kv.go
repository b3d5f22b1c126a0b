package server

import (
	"context"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/lease"
)

type kvService struct{ s *Server }

func (k *kvService) Put(ctx context.Context, req *connect.Request[tenurev1.KVPutRequest]) (*connect.Response[tenurev1.KVPutResponse], error) {
	op := putOp(ctx, req.Msg)
	return handle(ctx, k.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.KVPutRequest]) (*connect.Response[tenurev1.KVPutResponse], error) {
			return c.kv.Put
		},
		func(ctx context.Context) (*tenurev1.KVPutResponse, error) {
			res, err := k.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			return &tenurev1.KVPutResponse{Revision: res.Revision}, nil
		})
}

func (k *kvService) Get(ctx context.Context, req *connect.Request[tenurev1.KVGetRequest]) (*connect.Response[tenurev1.KVGetResponse], error) {
	op := lease.Op{Type: lease.OpKVGet, Key: req.Msg.GetKey()}
	return handle(ctx, k.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.KVGetRequest]) (*connect.Response[tenurev1.KVGetResponse], error) {
			return c.kv.Get
		},
		func(ctx context.Context) (*tenurev1.KVGetResponse, error) {
			res, err := k.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			e := res.Entry
			return &tenurev1.KVGetResponse{Key: e.Key, Value: e.Value, Token: e.Token, Lease: e.Lease, Revision: e.Revision}, nil
		})
}

func (k *kvService) List(ctx context.Context, req *connect.Request[tenurev1.KVListRequest]) (*connect.Response[tenurev1.KVListResponse], error) {
	op := lease.Op{Type: lease.OpKVList, Prefix: req.Msg.GetPrefix()}
	keysOnly := req.Msg.GetKeysOnly()
	return handle(ctx, k.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.KVListRequest]) (*connect.Response[tenurev1.KVListResponse], error) {
			return c.kv.List
		},
		func(ctx context.Context) (*tenurev1.KVListResponse, error) {
			res, err := k.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			out := &tenurev1.KVListResponse{Entries: make([]*tenurev1.KVEntry, 0, len(res.Entries))}
			for _, e := range res.Entries {
				pe := &tenurev1.KVEntry{Key: e.Key, Value: e.Value, Token: e.Token, Lease: e.Lease, Revision: e.Revision}
				if keysOnly {
					pe.Value = nil
				}
				out.Entries = append(out.Entries, pe)
			}
			return out, nil
		})
}

func (k *kvService) Delete(ctx context.Context, req *connect.Request[tenurev1.KVDeleteRequest]) (*connect.Response[tenurev1.KVDeleteResponse], error) {
	op := deleteOp(ctx, req.Msg)
	return handle(ctx, k.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.KVDeleteRequest]) (*connect.Response[tenurev1.KVDeleteResponse], error) {
			return c.kv.Delete
		},
		func(ctx context.Context) (*tenurev1.KVDeleteResponse, error) {
			res, err := k.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			return &tenurev1.KVDeleteResponse{Revision: res.Revision}, nil
		})
}

func putOp(ctx context.Context, m *tenurev1.KVPutRequest) lease.Op {
	value := m.GetValue()
	if value == nil {
		value = []byte{}
	}
	op := lease.Op{Type: lease.OpPut, Key: m.GetKey(), Value: value, Name: m.GetLease(), Token: m.GetToken(), Principal: principalFrom(ctx)}
	return withRequestID(op, m.GetRequestId())
}

func deleteOp(ctx context.Context, m *tenurev1.KVDeleteRequest) lease.Op {
	op := lease.Op{Type: lease.OpDelete, Key: m.GetKey(), Name: m.GetLease(), Token: m.GetToken(), Principal: principalFrom(ctx)}
	return withRequestID(op, m.GetRequestId())
}
