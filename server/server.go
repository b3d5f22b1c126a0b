package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
)

// Node is what the server needs of a node.Node.
type Node interface {
	ID() string
	ClusterID() string
	IsLeader() bool
	Leader() (id, apiAddr string, err error)
	Limits() lease.Limits
	HistoryRetention() lease.HistoryRetention
	Do(ctx context.Context, ops ...lease.Op) ([]lease.Result, error)
	Do1(ctx context.Context, op lease.Op) (lease.Result, error)
	Acquire(ctx context.Context, op lease.Op) (lease.Result, error)
	Watch(prefix string) (*node.Watch, error)
	Status() node.Status
	Progress() node.Progress
	Join(ctx context.Context, req node.JoinRequest) (catchUpIndex uint64, err error)
	Leave(ctx context.Context, id string) error
	TransferLeadership(ctx context.Context, id string) (string, error)
	Backup(ctx context.Context, w io.Writer) (node.BackupInfo, error)
}

var _ Node = (*node.Node)(nil)

// Config configures a Server.
type Config struct {
	// Node serves the requests. Required.
	Node Node
	// Logger receives request logs. Default slog.Default().
	Logger *slog.Logger
	// Registry receives the server's metrics and is served at /metrics.
	// Nil creates a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// ForwardTimeout bounds a request forwarded to the leader when the
	// caller set no deadline. Default 30s.
	ForwardTimeout time.Duration
	// Auth authenticates requests and checks their permissions. Nil:
	// every request is allowed, as from no principal.
	Auth *Auth
	// ForwardTLS, if set, is how this node reaches the other members'
	// APIs (https, with its member certificate, so that the leader
	// trusts the principal it forwards). Nil: cleartext HTTP/2.
	ForwardTLS *tls.Config
	// CORSOrigins are the browser origins (scheme://host[:port], or "*"
	// for any) allowed to call the API from scripts. Default none.
	CORSOrigins []string
	// MaxStreams is how many watches and dashboard streams one principal
	// (or one client host, without authentication) may have open on this
	// node at once. Default DefaultMaxStreams.
	MaxStreams int
}

// Server implements the three services.
type Server struct {
	node    Node
	log     *slog.Logger
	fwd     *forwarder
	metrics *metrics
	mux     *http.ServeMux
	auth    *Auth
	handler http.Handler
	streams *streamLimiter
	// The dashboard (ui.go): its node methods (nil if the node has
	// none), the metrics sampler and when each member last answered.
	ui      uiNode
	sampler *sampler
	probes  probes
	// batchStreams are the BatchStreams being served (batch.go).
	batchStreams batchStreams
}

// New returns a Server for cfg.
func New(cfg Config) (*Server, error) {
	if cfg.Node == nil {
		return nil, errors.New("server: a node is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = NewRegistry()
	}
	if cfg.ForwardTimeout <= 0 {
		cfg.ForwardTimeout = 30 * time.Second
	}
	s := &Server{
		node:    cfg.Node,
		log:     cfg.Logger,
		fwd:     newForwarder(cfg.ForwardTimeout, cfg.ForwardTLS),
		auth:    cfg.Auth,
		streams: newStreamLimiter(cfg.MaxStreams),
	}
	s.metrics = newMetrics(cfg.Registry, cfg.Node)
	// Responses are small (a lease is a few dozen bytes): compressing
	// them costs more CPU than it saves. Large values still compress
	// when the client accepts it.
	opts := connect.WithHandlerOptions(
		connect.WithInterceptors(cfg.Auth.interceptor(cfg.Logger), s.metrics.interceptor()),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithReadMaxBytes(int(maxMessage(cfg.Node.Limits()))),
		connect.WithCodec(jsonCodec{}))
	mux := http.NewServeMux()
	mux.Handle(tenurev1connect.NewLeaseServiceHandler(&leaseService{s}, opts))
	mux.HandleFunc(wire.BatchConnPath, s.serveBatchConn)
	mux.Handle(wire.BatchStreamProcedure, s.batchStreams.serve(connect.NewBidiStreamHandler(wire.BatchStreamProcedure, s.batchStream, opts)))
	mux.Handle(tenurev1connect.NewKVServiceHandler(&kvService{s}, opts))
	mux.Handle(tenurev1connect.NewClusterServiceHandler(&clusterService{s}, opts))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	s.mountOps(mux)
	s.mountUI(mux)
	s.mux = mux
	// CORS outside authentication: a browser's preflight carries no
	// credentials. The cluster ID goes on every answer, refusals too.
	h, err := withCORS(withClusterHeader(cfg.Node, cfg.Auth.middleware(withBodyLimit(mux, cfg.Node.Limits()))), cfg.CORSOrigins)
	if err != nil {
		return nil, err
	}
	s.handler = h
	// The dashboard's sampling starts with the server, so that a page
	// opened later shows the last minutes, not a chart that starts flat.
	s.sampler.start()
	return s, nil
}

// compressMinBytes is the smallest message the server and its forwarder
// compress. tenure runs on LANs, where compressing costs more time than it
// saves on the wire for all but very large messages: a renewal of a
// session's hundred leases answers with about 6 KiB, and gzip of it cost
// 15% of a server's CPU holding 30,000 leases.
const compressMinBytes = 1 << 20

// NewRegistry returns a registry with the Go runtime and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler returns the HTTP handler for the API, health (/healthz,
// /readyz and the gRPC health service), reflection and metrics.
func (s *Server) Handler() http.Handler { return s.handler }

// ReloadAuth reads the auth file again; on error the old one stays.
func (s *Server) ReloadAuth() error { return s.auth.Reload() }

// Close ends the BatchStreams being served, releases the server's
// connections to other nodes and stops its metrics sampler.
func (s *Server) Close() {
	s.EndBatchStreams()
	s.fwd.close()
	s.sampler.close()
}

// NewHTTPServer returns an http.Server for h that speaks HTTP/1.1,
// cleartext HTTP/2 (what gRPC clients use) and, served with TLS, HTTP/2.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Addr:      addr,
		Handler:   h,
		Protocols: &p,
		// A client that sends its headers slowly, or opens a connection
		// and sends nothing, is cut off; so is an idle keep-alive
		// connection after a while (clients reconnect by themselves).
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: maxConcurrentStreams,
		},
	}
}

// maxConcurrentStreams is how many calls one HTTP/2 connection may have
// in flight at once: well above what one client sends (its batcher has
// one Batch call in flight per endpoint, plus its waits and watches); a
// client that wants more waits for a free stream.
const maxConcurrentStreams = 256

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	ok, why := s.readiness()
	if ok {
		w.Write([]byte("ok: " + why + "\n"))
		return
	}
	http.Error(w, "not ready: "+why, http.StatusServiceUnavailable)
}

// toConnect maps an error from the node or the state machine to a Connect
// error.
func toConnect(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, node.ErrIndeterminate), errors.Is(err, node.ErrClosed):
		return wire.Indeterminate(err)
	case errors.Is(err, node.ErrNoSuchMember):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, node.ErrLastVoter), errors.Is(err, node.ErrNotVoter):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case isBehind(err):
		// Not now: once the member has caught up.
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, node.ErrCannotWrite):
		// Not applied; said as it is, not retried by clients on the other
		// members, whose disks are likely as full.
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, node.ErrNotLeader), errors.Is(err, node.ErrNoLeader),
		errors.Is(err, node.ErrWatchLagged), errors.Is(err, node.ErrWatchReset):
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return wire.ToConnectError(err)
}

func isBehind(err error) bool {
	_, ok := errors.AsType[*node.BehindError](err)
	return ok
}

func invalid(err error) error {
	return connect.NewError(connect.CodeInvalidArgument, err)
}
