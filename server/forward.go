package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
)

// forwardedHeader marks a request a follower forwarded to the leader. A
// node that receives one and is not the leader answers unavailable instead
// of forwarding again, so requests never loop.
const forwardedHeader = "Tenure-Forwarded"

type peerClients struct {
	lease   tenurev1connect.LeaseServiceClient
	kv      tenurev1connect.KVServiceClient
	cluster tenurev1connect.ClusterServiceClient
}

// forwarder keeps Connect clients to other nodes, one set per address.
type forwarder struct {
	scheme  string // http:// or https://
	timeout time.Duration
	http    *http.Client
	tr      *http.Transport
	mu      sync.Mutex
	peers   map[string]*peerClients
}

func newForwarder(timeout time.Duration, tlsCfg *tls.Config) *forwarder {
	var p http.Protocols
	scheme := "http://"
	if tlsCfg != nil {
		p.SetHTTP2(true)
		scheme = "https://"
	} else {
		p.SetUnencryptedHTTP2(true)
	}
	tr := &http.Transport{Protocols: &p, MaxIdleConnsPerHost: 16, TLSClientConfig: tlsCfg}
	return &forwarder{
		scheme:  scheme,
		timeout: timeout,
		http:    &http.Client{Transport: tr},
		tr:      tr,
		peers:   make(map[string]*peerClients),
	}
}

func (f *forwarder) close() { f.tr.CloseIdleConnections() }

func (f *forwarder) clients(addr string) *peerClients {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.peers[addr]; ok {
		return c
	}
	base := f.scheme + strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")
	opt := connect.WithClientOptions(connect.WithGRPC(), connect.WithCompressMinBytes(compressMinBytes))
	c := &peerClients{
		lease:   tenurev1connect.NewLeaseServiceClient(f.http, base, opt),
		kv:      tenurev1connect.NewKVServiceClient(f.http, base, opt),
		cluster: tenurev1connect.NewClusterServiceClient(f.http, base, opt),
	}
	f.peers[addr] = c
	return c
}

var errForwardLoop = errors.New("server: forwarded request reached a node that is not the leader")

// leaderClients returns clients to the leader if this node should forward
// the request, or nil if it should serve it itself.
func (s *Server) leaderClients(h http.Header) (*peerClients, error) {
	if s.node.IsLeader() {
		return nil, nil
	}
	if h.Get(forwardedHeader) != "" {
		return nil, connect.NewError(connect.CodeUnavailable, errForwardLoop)
	}
	id, addr, err := s.node.Leader()
	if err != nil {
		return nil, toConnect(err)
	}
	if id == s.node.ID() {
		// Raft says we lead but we have not finished taking over.
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("server: leader %s is still taking over", id))
	}
	return s.fwd.clients(addr), nil
}

// forward sends req to the leader with call, marking it as forwarded.
func forward[Req, Res any](ctx context.Context, s *Server, req *connect.Request[Req],
	call func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*connect.Response[Res], error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.fwd.timeout)
		defer cancel()
	}
	res, err := call(ctx, outgoing(ctx, s, req))
	if err != nil {
		if ce, ok := errors.AsType[*connect.Error](err); ok && connect.IsWireError(ce) {
			// The leader answered: pass its error on as it is.
			return nil, ce
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("server: forwarding to the leader: %w", err))
		}
		// The request may have reached the leader before the connection
		// broke.
		return nil, wire.Indeterminate(fmt.Errorf("server: forwarding to the leader: %w", err))
	}
	return connect.NewResponse(res.Msg), nil
}

// outgoing returns req to send on to the leader, marked as forwarded.
func outgoing[Req any](ctx context.Context, s *Server, req *connect.Request[Req]) *connect.Request[Req] {
	out := connect.NewRequest(req.Msg)
	out.Header().Set(forwardedHeader, s.node.ID())
	// The leader authorizes the original caller: it believes the
	// principal from a member's certificate, or authenticates the
	// caller's own token.
	if p := principalFrom(ctx); p != "" {
		out.Header().Set(principalHeader, p)
	}
	if auth := req.Header().Get("Authorization"); auth != "" {
		out.Header().Set("Authorization", auth)
	}
	return out
}
