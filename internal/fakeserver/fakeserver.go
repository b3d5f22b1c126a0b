// Package fakeserver serves the tenure API from functions a test supplies,
// for tests of the client and the CLI. A method whose function is nil
// answers unimplemented. Every call is counted, so a test can check that a
// request did or did not reach the server.
package fakeserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
)

// Server holds the behaviour of each method. Set the functions before
// Start; they may be called from many goroutines at once.
type Server struct {
	Acquire func(context.Context, *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error)
	Renew   func(context.Context, *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error)
	Release func(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error)
	Get     func(context.Context, *tenurev1.GetRequest) (*tenurev1.GetResponse, error)
	List    func(context.Context, *tenurev1.ListRequest) (*tenurev1.ListResponse, error)
	Revoke  func(context.Context, *tenurev1.RevokeRequest) (*tenurev1.RevokeResponse, error)
	History func(context.Context, *tenurev1.HistoryRequest) (*tenurev1.HistoryResponse, error)
	// Watch sends events with send until it returns.
	Watch func(ctx context.Context, req *tenurev1.WatchRequest, send func(*tenurev1.WatchEvent) error) error

	Put    func(context.Context, *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error)
	KVGet  func(context.Context, *tenurev1.KVGetRequest) (*tenurev1.KVGetResponse, error)
	Delete func(context.Context, *tenurev1.KVDeleteRequest) (*tenurev1.KVDeleteResponse, error)
	KVList func(context.Context, *tenurev1.KVListRequest) (*tenurev1.KVListResponse, error)

	Status             func(context.Context, *tenurev1.StatusRequest) (*tenurev1.StatusResponse, error)
	Join               func(context.Context, *tenurev1.JoinRequest) (*tenurev1.JoinResponse, error)
	Leave              func(context.Context, *tenurev1.LeaveRequest) (*tenurev1.LeaveResponse, error)
	TransferLeadership func(context.Context, *tenurev1.TransferLeadershipRequest) (*tenurev1.TransferLeadershipResponse, error)
	// Snapshot, if set, serves ClusterService.Snapshot: send sends one
	// chunk. Nil answers unimplemented.
	Snapshot func(ctx context.Context, send func(chunk []byte) error) error

	// NoBatch makes Batch answer unimplemented, like a server that
	// predates it (it has no BatchStream either).
	NoBatch bool
	// NoBatchStream leaves BatchStream out, like a server that predates
	// it: Batch calls then come one per request.
	NoBatchStream bool
	// OnRequest, if set, sees every HTTP request before it is served.
	OnRequest func(*http.Request)
	// ClusterID, if set, is sent with every answer in the
	// Tenure-Cluster-Id header, as a member of that cluster does.
	ClusterID string

	mu    sync.Mutex
	calls map[string]int
}

// Start serves s on a loopback port with HTTP/1.1 and cleartext HTTP/2,
// stops it when the test ends, and returns its host:port.
func Start(t testing.TB, s *Server) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle(tenurev1connect.NewLeaseServiceHandler(leaseHandler{s}))
	mux.Handle(tenurev1connect.NewKVServiceHandler(kvHandler{s}))
	mux.Handle(tenurev1connect.NewClusterServiceHandler(clusterHandler{s}))
	if !s.NoBatch && !s.NoBatchStream {
		mux.Handle(wire.BatchStreamProcedure, connect.NewBidiStreamHandler(wire.BatchStreamProcedure, leaseHandler{s}.batchStream))
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.OnRequest != nil {
			s.OnRequest(r)
		}
		if s.ClusterID != "" {
			w.Header().Set(wire.ClusterIDHeader, s.ClusterID)
		}
		mux.ServeHTTP(w, r)
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// DeadAddr returns a loopback host:port that refuses connections.
func DeadAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatalf("close listener: %v", err)
	}
	return addr
}

// Calls returns how many times method (e.g. "Acquire", "KVGet") was called.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// TotalCalls returns how many calls of any method the server received;
// each op of a Batch call counts as a call of its method, and the Batch
// call itself (Calls("Batch")) does not count.
func (s *Server) TotalCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for m, c := range s.calls {
		if m != "Batch" {
			n += c
		}
	}
	return n
}

func (s *Server) count(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = make(map[string]int)
	}
	s.calls[method]++
}

var errUnimplemented = errors.New("fakeserver: method not set by the test")

func unary[Req, Res any](ctx context.Context, s *Server, method string, fn func(context.Context, *Req) (*Res, error), req *connect.Request[Req]) (*connect.Response[Res], error) {
	s.count(method)
	if fn == nil {
		return nil, connect.NewError(connect.CodeUnimplemented, errUnimplemented)
	}
	res, err := fn(ctx, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

type leaseHandler struct{ s *Server }

var _ tenurev1connect.LeaseServiceHandler = leaseHandler{}

func (h leaseHandler) Acquire(ctx context.Context, req *connect.Request[tenurev1.AcquireRequest]) (*connect.Response[tenurev1.AcquireResponse], error) {
	return unary(ctx, h.s, "Acquire", h.s.Acquire, req)
}

func (h leaseHandler) Renew(ctx context.Context, req *connect.Request[tenurev1.RenewRequest]) (*connect.Response[tenurev1.RenewResponse], error) {
	return unary(ctx, h.s, "Renew", h.s.Renew, req)
}

func (h leaseHandler) Release(ctx context.Context, req *connect.Request[tenurev1.ReleaseRequest]) (*connect.Response[tenurev1.ReleaseResponse], error) {
	return unary(ctx, h.s, "Release", h.s.Release, req)
}

func (h leaseHandler) Get(ctx context.Context, req *connect.Request[tenurev1.GetRequest]) (*connect.Response[tenurev1.GetResponse], error) {
	return unary(ctx, h.s, "Get", h.s.Get, req)
}

func (h leaseHandler) List(ctx context.Context, req *connect.Request[tenurev1.ListRequest]) (*connect.Response[tenurev1.ListResponse], error) {
	return unary(ctx, h.s, "List", h.s.List, req)
}

func (h leaseHandler) Revoke(ctx context.Context, req *connect.Request[tenurev1.RevokeRequest]) (*connect.Response[tenurev1.RevokeResponse], error) {
	return unary(ctx, h.s, "Revoke", h.s.Revoke, req)
}

func (h leaseHandler) History(ctx context.Context, req *connect.Request[tenurev1.HistoryRequest]) (*connect.Response[tenurev1.HistoryResponse], error) {
	return unary(ctx, h.s, "History", h.s.History, req)
}

func (h leaseHandler) Watch(ctx context.Context, req *connect.Request[tenurev1.WatchRequest], stream *connect.ServerStream[tenurev1.WatchResponse]) error {
	h.s.count("Watch")
	if h.s.Watch == nil {
		return connect.NewError(connect.CodeUnimplemented, errUnimplemented)
	}
	return h.s.Watch(ctx, req.Msg, func(ev *tenurev1.WatchEvent) error {
		return stream.Send(&tenurev1.WatchResponse{Event: ev})
	})
}

// batchStream serves each message of a BatchStream as a Batch call; the
// first error ends the stream.
func (h leaseHandler) batchStream(ctx context.Context, st *connect.BidiStream[tenurev1.BatchRequest, tenurev1.BatchResponse]) error {
	for {
		msg, err := st.Receive()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		res, err := h.Batch(ctx, connect.NewRequest(msg))
		if err != nil {
			return err
		}
		if err := st.Send(res.Msg); err != nil {
			return err
		}
	}
}

// Batch runs each op with the function of its method, counted as a call
// of that method, as the real server would: an op's error of a domain
// code (invalid_argument, failed_precondition, not_found) is that op's
// result; any other error fails the whole call, and the ops after it do
// not run.
func (h leaseHandler) Batch(ctx context.Context, req *connect.Request[tenurev1.BatchRequest]) (*connect.Response[tenurev1.BatchResponse], error) {
	h.s.count("Batch")
	if h.s.NoBatch {
		return nil, connect.NewError(connect.CodeUnimplemented, errors.New("fakeserver: no Batch method"))
	}
	out := &tenurev1.BatchResponse{}
	for _, op := range req.Msg.GetOps() {
		var (
			r   *tenurev1.BatchResult
			err error
		)
		switch o := op.GetOp().(type) {
		case *tenurev1.BatchOp_Acquire:
			r, err = batchOne(ctx, h.s, "Acquire", h.s.Acquire, o.Acquire, func(m *tenurev1.AcquireResponse) *tenurev1.BatchResult {
				return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Acquire{Acquire: m}}
			})
		case *tenurev1.BatchOp_Renew:
			r, err = batchOne(ctx, h.s, "Renew", h.s.Renew, o.Renew, func(m *tenurev1.RenewResponse) *tenurev1.BatchResult {
				return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Renew{Renew: m}}
			})
		case *tenurev1.BatchOp_Release:
			r, err = batchOne(ctx, h.s, "Release", h.s.Release, o.Release, func(m *tenurev1.ReleaseResponse) *tenurev1.BatchResult {
				return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Release{Release: m}}
			})
		case *tenurev1.BatchOp_Put:
			r, err = batchOne(ctx, h.s, "Put", h.s.Put, o.Put, func(m *tenurev1.KVPutResponse) *tenurev1.BatchResult {
				return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Put{Put: m}}
			})
		case *tenurev1.BatchOp_Delete:
			r, err = batchOne(ctx, h.s, "Delete", h.s.Delete, o.Delete, func(m *tenurev1.KVDeleteResponse) *tenurev1.BatchResult {
				return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Delete{Delete: m}}
			})
		default:
			r = &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Error{Error: &tenurev1.BatchError{
				Code: uint32(connect.CodeInvalidArgument), Message: "fakeserver: empty batch op"}}}
		}
		if err != nil {
			return nil, err
		}
		out.Results = append(out.Results, r)
	}
	return connect.NewResponse(out), nil
}

// batchOne runs one op of a batch with fn; see Batch.
func batchOne[Req, Res any](ctx context.Context, s *Server, method string, fn func(context.Context, *Req) (*Res, error), msg *Req,
	wrap func(*Res) *tenurev1.BatchResult) (*tenurev1.BatchResult, error) {
	res, err := unary(ctx, s, method, fn, connect.NewRequest(msg))
	if err != nil {
		switch connect.CodeOf(err) {
		case connect.CodeInvalidArgument, connect.CodeFailedPrecondition, connect.CodeNotFound:
			return &tenurev1.BatchResult{Result: &tenurev1.BatchResult_Error{Error: wire.ToBatchError(err)}}, nil
		}
		return nil, err
	}
	return wrap(res.Msg), nil
}

type kvHandler struct{ s *Server }

var _ tenurev1connect.KVServiceHandler = kvHandler{}

func (h kvHandler) Put(ctx context.Context, req *connect.Request[tenurev1.KVPutRequest]) (*connect.Response[tenurev1.KVPutResponse], error) {
	return unary(ctx, h.s, "Put", h.s.Put, req)
}

func (h kvHandler) Get(ctx context.Context, req *connect.Request[tenurev1.KVGetRequest]) (*connect.Response[tenurev1.KVGetResponse], error) {
	return unary(ctx, h.s, "KVGet", h.s.KVGet, req)
}

func (h kvHandler) Delete(ctx context.Context, req *connect.Request[tenurev1.KVDeleteRequest]) (*connect.Response[tenurev1.KVDeleteResponse], error) {
	return unary(ctx, h.s, "Delete", h.s.Delete, req)
}

func (h kvHandler) List(ctx context.Context, req *connect.Request[tenurev1.KVListRequest]) (*connect.Response[tenurev1.KVListResponse], error) {
	return unary(ctx, h.s, "KVList", h.s.KVList, req)
}

type clusterHandler struct{ s *Server }

var _ tenurev1connect.ClusterServiceHandler = clusterHandler{}

func (h clusterHandler) Status(ctx context.Context, req *connect.Request[tenurev1.StatusRequest]) (*connect.Response[tenurev1.StatusResponse], error) {
	return unary(ctx, h.s, "Status", h.s.Status, req)
}

func (h clusterHandler) Join(ctx context.Context, req *connect.Request[tenurev1.JoinRequest]) (*connect.Response[tenurev1.JoinResponse], error) {
	return unary(ctx, h.s, "Join", h.s.Join, req)
}

func (h clusterHandler) Leave(ctx context.Context, req *connect.Request[tenurev1.LeaveRequest]) (*connect.Response[tenurev1.LeaveResponse], error) {
	return unary(ctx, h.s, "Leave", h.s.Leave, req)
}

func (h clusterHandler) TransferLeadership(ctx context.Context, req *connect.Request[tenurev1.TransferLeadershipRequest]) (*connect.Response[tenurev1.TransferLeadershipResponse], error) {
	return unary(ctx, h.s, "TransferLeadership", h.s.TransferLeadership, req)
}

func (h clusterHandler) Snapshot(ctx context.Context, _ *connect.Request[tenurev1.SnapshotRequest], stream *connect.ServerStream[tenurev1.SnapshotResponse]) error {
	h.s.count("Snapshot")
	if h.s.Snapshot == nil {
		return connect.NewError(connect.CodeUnimplemented, errors.New("fakeserver: Snapshot is not implemented"))
	}
	return h.s.Snapshot(ctx, func(chunk []byte) error { return stream.Send(&tenurev1.SnapshotResponse{Chunk: chunk}) })
}
