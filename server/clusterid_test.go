package server_test

import (
	"bytes"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/server"
)

// TestEveryAnswerCarriesTheClusterID checks that answers of every kind
// name the cluster of the node that gave them: unary calls on the leader
// and forwarded by a follower, errors, a Batch over the Connect protocol,
// a watch stream and a JSON call. Clients rely on it to refuse answers
// from another cluster.
func TestEveryAnswerCarriesTheClusterID(t *testing.T) {
	c, leader, follower := cluster(t)
	ctx := ctxT(t)
	want := c.Leader().Node.ClusterID()
	if want == "" {
		t.Fatal("the leader knows no cluster ID")
	}
	check := func(what string, h http.Header) {
		t.Helper()
		if got := h.Values(wire.ClusterIDHeader); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %s %q, want %q (headers %v)", what, wire.ClusterIDHeader, got, want, h)
		}
	}
	errHeader := func(err error) http.Header {
		t.Helper()
		ce, ok := errors.AsType[*connect.Error](err)
		if !ok {
			t.Fatalf("want a Connect error, got %v", err)
		}
		return ce.Meta()
	}

	for name, p := range map[string]peer{"leader": leader, "follower": follower} {
		res, err := p.lease.Acquire(ctx, acquireReq("jobs/"+name, "a", 5*time.Second))
		if err != nil {
			t.Fatalf("acquire on the %s: %v", name, err)
		}
		check("acquire on the "+name, res.Header())
		_, err = p.lease.Acquire(ctx, acquireReq("jobs/"+name, "b", 5*time.Second))
		if connect.CodeOf(err) != connect.CodeFailedPrecondition {
			t.Fatalf("acquire of a held lease on the %s: %v, want failed_precondition", name, err)
		}
		check("held error on the "+name, errHeader(err))
		_, err = p.lease.Acquire(ctx, acquireReq("", "b", 5*time.Second))
		check("invalid_argument on the "+name, errHeader(err))
		st, err := p.clus.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		if err != nil {
			t.Fatalf("status of the %s: %v", name, err)
		}
		check("status of the "+name, st.Header())
	}

	// Batch, as the client's batcher sends it: the Connect protocol over
	// HTTP/1.1.
	addr := c.Leader().Addr
	batch := tenurev1connect.NewLeaseServiceClient(http.DefaultClient, "http://"+addr)
	br, err := batch.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchAcquire("jobs/batch", "a", 5*time.Second)}}))
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	check("batch", br.Header())
	_, err = batch.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{}))
	check("empty batch (invalid_argument)", errHeader(err))

	stream, err := follower.lease.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "jobs/"}))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if !stream.Receive() {
		t.Fatalf("watch ended before its first event: %v", stream.Err())
	}
	check("watch stream", stream.ResponseHeader())
	stream.Close()

	hr, err := http.Post("http://"+addr+"/tenure.v1.LeaseService/Get", "application/json", bytes.NewReader([]byte(`{"name":"jobs/leader"}`)))
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != http.StatusOK {
		t.Fatalf("JSON Get: %s", hr.Status)
	}
	check("JSON Get", hr.Header)
}

// A node that knows no cluster yet (started with --join, not yet added)
// sends no cluster ID.
func TestNoClusterIDBeforeJoining(t *testing.T) {
	s, err := server.New(server.Config{Node: noLeader{}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	base := serve(t, s.Handler())
	res, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got, ok := res.Header[wire.ClusterIDHeader]; ok {
		t.Errorf("a node without a cluster sent %s %q", wire.ClusterIDHeader, got)
	}
}

// inCluster is a node of cluster c-1 that knows no leader.
type inCluster struct{ noLeader }

func (inCluster) ClusterID() string { return "c-1" }

// A request the server refuses before any service sees it (no
// credentials) still names the cluster.
func TestRefusalsCarryTheClusterID(t *testing.T) {
	file := filepath.Join(t.TempDir(), "auth.json")
	if err := server.AddToken(file, "u", server.NewToken(), []string{"hold:"}); err != nil {
		t.Fatal(err)
	}
	a, err := server.NewAuth(server.AuthConfig{File: file}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.New(server.Config{Node: inCluster{}, Auth: a})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := http.Post(serve(t, s.Handler())+"/tenure.v1.LeaseService/Get", "application/json", bytes.NewReader([]byte(`{"name":"x"}`)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a request without credentials: %s, want 401", res.Status)
	}
	if got := res.Header.Get(wire.ClusterIDHeader); got != "c-1" {
		t.Errorf("refusal's %s = %q, want c-1 (headers %v)", wire.ClusterIDHeader, got, res.Header)
	}
}
