package server_test

import (
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"

	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/server"
)

// noLeader is a node that knows no leader; only what the health check
// and the server's setup ask is implemented.
type noLeader struct{ server.Node }

func (noLeader) ID() string                      { return "n1" }
func (noLeader) IsLeader() bool                  { return false }
func (noLeader) Leader() (string, string, error) { return "", "", node.ErrNoLeader }
func (noLeader) ClusterID() string               { return "" }
func (noLeader) Limits() lease.Limits            { return lease.DefaultLimits() }

// serve serves s on a loopback port with HTTP/1.1 and cleartext HTTP/2,
// as tenured does, and returns its base URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := server.NewHTTPServer(ln.Addr().String(), h)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return "http://" + ln.Addr().String()
}

func h2c(t *testing.T) *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func checkHealth(t *testing.T, base, service string) (grpchealth.Status, error) {
	t.Helper()
	hc := grpchealth.NewClient(h2c(t), base, connect.WithGRPC())
	res, err := hc.Check(ctxT(t), &grpchealth.CheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return res.Status, nil
}

func TestHealthService(t *testing.T) {
	services := []string{"", tenurev1connect.LeaseServiceName, tenurev1connect.KVServiceName, tenurev1connect.ClusterServiceName}

	c, _, _ := cluster(t)
	base := "http://" + c.Leader().Addr
	for _, svc := range services {
		if st, err := checkHealth(t, base, svc); err != nil || st != grpchealth.StatusServing {
			t.Errorf("health of %q on a member with a leader: %v, %v; want serving", svc, st, err)
		}
	}
	if _, err := checkHealth(t, base, "no.such.Service"); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("health of an unknown service: %v, want not_found", err)
	}

	s, err := server.New(server.Config{Node: noLeader{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lone := serve(t, s.Handler())
	for _, svc := range services {
		if st, err := checkHealth(t, lone, svc); err != nil || st != grpchealth.StatusNotServing {
			t.Errorf("health of %q on a node without a leader: %v, %v; want not_serving", svc, st, err)
		}
	}
}

// A reflection client, as grpcurl uses, lists the services and fetches
// their descriptors without the proto files.
func TestReflectionListsServices(t *testing.T) {
	s, err := server.New(server.Config{Node: noLeader{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := serve(t, s.Handler())
	rc := grpcreflect.NewClient(h2c(t), base, connect.WithGRPC())
	stream := rc.NewStream(ctxT(t))
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatalf("list services by reflection: %v", err)
	}
	var got []string
	for _, n := range names {
		got = append(got, string(n))
	}
	for _, want := range []string{tenurev1connect.LeaseServiceName, tenurev1connect.KVServiceName,
		tenurev1connect.ClusterServiceName, grpchealth.HealthV1ServiceName} {
		if !slices.Contains(got, want) {
			t.Errorf("reflection lists %v; %s is missing", got, want)
		}
	}
	files, err := stream.FileContainingSymbol(tenurev1connect.LeaseServiceName + ".Acquire")
	if err != nil || len(files) == 0 {
		t.Fatalf("descriptor of LeaseService.Acquire: %v, %d files", err, len(files))
	}
	if files[0].GetName() != "tenure/v1/tenure.proto" {
		t.Errorf("LeaseService.Acquire is in %q, want tenure/v1/tenure.proto", files[0].GetName())
	}
}

func TestCORS(t *testing.T) {
	s, err := server.New(server.Config{Node: noLeader{}, CORSOrigins: []string{"https://a.example", "https://b.example"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := serve(t, s.Handler())
	preflight := func(origin string, headers string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctxT(t), http.MethodOptions, base+"/tenure.v1.LeaseService/Acquire", nil)
		req.Header.Set("Origin", origin)
		req.Header.Set("Access-Control-Request-Method", "POST")
		req.Header.Set("Access-Control-Request-Headers", headers)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	for _, hdrs := range []string{
		// As browsers send them: lower case, sorted.
		"connect-protocol-version,connect-timeout-ms,content-type", // Connect
		"content-type,grpc-timeout,x-grpc-web,x-user-agent",        // gRPC-Web
	} {
		res := preflight("https://b.example", hdrs)
		if res.StatusCode/100 != 2 || res.Header.Get("Access-Control-Allow-Origin") != "https://b.example" {
			t.Errorf("preflight from an allowed origin with %s: %s, allow-origin %q", hdrs, res.Status, res.Header.Get("Access-Control-Allow-Origin"))
		}
		if got := res.Header.Get("Access-Control-Allow-Methods"); got != "POST" {
			t.Errorf("preflight: allow-methods %q, want POST", got)
		}
	}
	res := preflight("https://evil.example", "content-type")
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("preflight from a refused origin got allow-origin %q", got)
	}

	// An actual request from an allowed origin exposes the gRPC-Web
	// status headers.
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodGet, base+"/healthz", nil)
	req.Header.Set("Origin", "https://a.example")
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.Header.Get("Access-Control-Allow-Origin") != "https://a.example" || r.Header.Get("Access-Control-Expose-Headers") == "" {
		t.Errorf("response to an allowed origin: headers %v", r.Header)
	}
	// Browser clients read the cluster ID of every answer.
	if exposed := r.Header.Get("Access-Control-Expose-Headers"); !strings.Contains(exposed, wire.ClusterIDHeader) {
		t.Errorf("response to an allowed origin exposes %q, not %s", exposed, wire.ClusterIDHeader)
	}

	if _, err := server.New(server.Config{Node: noLeader{}, CORSOrigins: []string{"a.example"}}); err == nil {
		t.Errorf("an origin without a scheme was accepted")
	}
}

// Without --cors-origins, no CORS headers are sent: browsers on other
// origins are refused.
func TestNoCORSByDefault(t *testing.T) {
	s, err := server.New(server.Config{Node: noLeader{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req, _ := http.NewRequestWithContext(ctxT(t), http.MethodOptions, serve(t, s.Handler())+"/tenure.v1.LeaseService/Acquire", nil)
	req.Header.Set("Origin", "https://a.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got := res.Header.Get("Access-Control-Allow-Origin"); got != "" {
		t.Errorf("allow-origin %q without any allowed origin", got)
	}
}
