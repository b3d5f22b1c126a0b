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
// serve requests (it leads, or knows a leader to forward to), NOT_SERVING
// otherwise. The whole server ("") and each service answer alike; the
// ClusterService's Status is answered without a leader, but the rest of
// it needs one too.
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

// ready reports whether this node can serve requests: it leads, or it
// knows the leader's API address.
func (s *Server) ready() bool {
	if s.node.IsLeader() {
		return true
	}
	_, _, err := s.node.Leader()
	return err == nil
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
