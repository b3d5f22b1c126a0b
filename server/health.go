package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"connectrpc.com/connect"
	connectcors "connectrpc.com/cors"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/rs/cors"

	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
)

// serviceNames are the API's services, for health checks and reflection.
var serviceNames = []string{
	tenurev1connect.LeaseServiceName,
	tenurev1connect.KVServiceName,
	tenurev1connect.ClusterServiceName,
}

// healthChecker answers gRPC health checks: SERVING while this node can
// serve requests (see readiness), NOT_SERVING otherwise. The whole server
// ("") and each service answer alike; the ClusterService's Status is
// answered without a leader, but the rest of it needs one too.
type healthChecker struct{ s *Server }

func (h healthChecker) Check(_ context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	if req.Service != "" && !knownService(req.Service) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("server: unknown service %q (known: %s)", req.Service, strings.Join(serviceNames, ", ")))
	}
	if h.s.ready() {
		return &grpchealth.CheckResponse{Status: grpchealth.StatusServing}, nil
	}
	return &grpchealth.CheckResponse{Status: grpchealth.StatusNotServing}, nil
}

func knownService(name string) bool {
	for _, n := range serviceNames {
		if n == name {
			return true
		}
	}
	return false
}

// ready reports whether this node can serve requests (see readiness).
func (s *Server) ready() bool {
	ok, _ := s.readiness()
	return ok
}

// readiness reports whether this node can serve requests, and says why
// or why not: it leads (and has taken over), or it follows a leader whose
// API address it knows and has applied what that leader committed (see
// node.Progress: a node catching up after a restart or an outage knows
// old leases and tokens, or none).
func (s *Server) readiness() (bool, string) {
	if s.node.IsLeader() {
		return true, "leader"
	}
	id, _, err := s.node.Leader()
	switch {
	case id == "":
		return false, "no leader"
	case id == s.node.ID():
		return false, "taking over as leader"
	}
	if p := s.node.Progress(); p.Behind {
		return false, fmt.Sprintf("catching up: applied %d of %d (leader %s)", p.Applied, p.LeaderCommit, id)
	}
	if err != nil {
		return false, fmt.Sprintf("the API address of the leader %s is not known yet", id)
	}
	return true, "following " + id
}

// mountOps adds the gRPC health service and server reflection (v1 and
// v1alpha, so grpcurl and similar tools list and call the API without the
// proto files) to mux.
func (s *Server) mountOps(mux *http.ServeMux) {
	mux.Handle(grpchealth.NewHandler(healthChecker{s}))
	reflector := grpcreflect.NewStaticReflector(append([]string{grpchealth.HealthV1ServiceName}, serviceNames...)...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
}

// CheckCORSOrigins checks origins for Config.CORSOrigins: each is "*" or
// scheme://host[:port] with scheme http or https, and nothing more.
func CheckCORSOrigins(origins []string) error {
	for _, o := range origins {
		if o == "*" {
			continue
		}
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return fmt.Errorf("server: CORS origin %q is not an origin: want scheme://host[:port] (http or https, no path), or *", o)
		}
	}
	return nil
}

// withCORS wraps h to answer browsers' CORS preflights and mark the
// responses for the allowed origins, with the headers Connect, gRPC-Web
// and the JSON API use. No origins: h unchanged (browsers on other
// origins are refused).
func withCORS(h http.Handler, origins []string) (http.Handler, error) {
	if len(origins) == 0 {
		return h, nil
	}
	if err := CheckCORSOrigins(origins); err != nil {
		return nil, err
	}
	allowed := make([]string, len(origins))
	for i, o := range origins {
		allowed[i] = strings.TrimSuffix(o, "/")
	}
	c := cors.New(cors.Options{
		AllowedOrigins: allowed,
		AllowedMethods: connectcors.AllowedMethods(),
		// Authorization carries bearer tokens.
		AllowedHeaders: append(connectcors.AllowedHeaders(), "Authorization"),
		// Browser clients check the cluster ID of every answer.
		ExposedHeaders: append(connectcors.ExposedHeaders(), wire.ClusterIDHeader),
		MaxAge:         int((2 * time.Hour).Seconds()),
	})
	return c.Handler(h), nil
}
