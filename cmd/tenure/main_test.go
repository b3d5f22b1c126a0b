package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// result is what one run of the CLI produced.
type result struct {
	code           int
	stdout, stderr string
}

// runCLI runs the CLI in-process with env as its environment.
func runCLI(ctx context.Context, env map[string]string, args ...string) result {
	var out, errb bytes.Buffer
	code := run(ctx, args, &out, &errb, func(k string) string { return env[k] })
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// cluster is a fake server with scripted answers: jobs/held is held by b,
// token 3 is the current grant of every other lease, key k has a value,
// and TTLs below 2s are invalid.
type cluster struct {
	*fakeserver.Server
	addr string

	mu       sync.Mutex
	acquires []*tenurev1.AcquireRequest
}

func (c *cluster) lastAcquire() *tenurev1.AcquireRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.acquires) == 0 {
		return nil
	}
	return c.acquires[len(c.acquires)-1]
}

const currentToken = 3

func protoLease(name, holder string, token uint64, ttl time.Duration) *tenurev1.Lease {
	return &tenurev1.Lease{Name: name, Holder: holder, Token: token,
		Ttl: durationpb.New(ttl), Remaining: durationpb.New(ttl - 20*time.Millisecond - 123*time.Microsecond)}
}

func stale(name string, token uint64) error {
	return &lease.StaleError{Name: name, Token: token, Detail: "the current grant has another token"}
}

// startCluster starts the fake; each of extra may change its behaviour
// before it starts.
func startCluster(t *testing.T, extra ...func(*fakeserver.Server)) *cluster {
	t.Helper()
	c := &cluster{}
	c.Server = &fakeserver.Server{
		Acquire: func(_ context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			c.mu.Lock()
			c.acquires = append(c.acquires, req)
			c.mu.Unlock()
			if ttl := req.GetTtl().AsDuration(); ttl < 2*time.Second {
				return nil, wire.ToConnectError(fmt.Errorf("%w: ttl %s is below the minimum of 2s", lease.ErrInvalid, ttl))
			}
			if req.GetName() == "jobs/held" {
				return nil, wire.ToConnectError(&lease.HeldError{Name: req.GetName(), Holder: "b", Token: 3, Remaining: 4200 * time.Millisecond})
			}
			return &tenurev1.AcquireResponse{Lease: protoLease(req.GetName(), req.GetHolder(), currentToken, req.GetTtl().AsDuration())}, nil
		},
		Renew: func(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
			res := &tenurev1.RenewResponse{}
			for _, r := range req.GetLeases() {
				pr := &tenurev1.RenewResult{Name: r.GetName(), Token: r.GetToken()}
				if r.GetToken() == currentToken {
					pr.Lease = protoLease(r.GetName(), "a", currentToken, 5*time.Second)
				} else {
					err := stale(r.GetName(), r.GetToken())
					pr.Reason, pr.Message = lease.Reason(err), err.Error()
				}
				res.Results = append(res.Results, pr)
			}
			return res, nil
		},
		Release: func(_ context.Context, req *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
			if req.GetToken() != currentToken {
				return nil, wire.ToConnectError(stale(req.GetName(), req.GetToken()))
			}
			return &tenurev1.ReleaseResponse{}, nil
		},
		Get: func(_ context.Context, req *tenurev1.GetRequest) (*tenurev1.GetResponse, error) {
			if req.GetName() != "jobs/x" {
				return nil, wire.ToConnectError(lease.ErrNotFound)
			}
			return &tenurev1.GetResponse{Lease: protoLease("jobs/x", "a", currentToken, 5*time.Second)}, nil
		},
		List: func(_ context.Context, req *tenurev1.ListRequest) (*tenurev1.ListResponse, error) {
			return &tenurev1.ListResponse{Leases: []*tenurev1.Lease{
				protoLease(req.GetPrefix()+"a", "h1", 1, 5*time.Second),
				protoLease(req.GetPrefix()+"b", "h2", 2, 10*time.Second),
			}}, nil
		},
		Put: func(_ context.Context, req *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
			if req.GetToken() != currentToken {
				return nil, wire.ToConnectError(stale(req.GetLease(), req.GetToken()))
			}
			return &tenurev1.KVPutResponse{Revision: 7}, nil
		},
		KVGet: func(_ context.Context, req *tenurev1.KVGetRequest) (*tenurev1.KVGetResponse, error) {
			if req.GetKey() != "k" {
				return nil, wire.ToConnectError(lease.ErrNotFound)
			}
			return &tenurev1.KVGetResponse{Key: "k", Value: []byte("v1"), Lease: "jobs/x", Token: currentToken, Revision: 7}, nil
		},
		Delete: func(_ context.Context, req *tenurev1.KVDeleteRequest) (*tenurev1.KVDeleteResponse, error) {
			if req.GetToken() != currentToken {
				return nil, wire.ToConnectError(stale(req.GetLease(), req.GetToken()))
			}
			return &tenurev1.KVDeleteResponse{Revision: 8}, nil
		},
		Status: func(context.Context, *tenurev1.StatusRequest) (*tenurev1.StatusResponse, error) {
			return &tenurev1.StatusResponse{
				NodeId: "n1", State: "leader", LeaderId: "n1", LeaderAddress: "127.0.0.1:7400", ClusterId: "c-0123abcd",
				Term: 2, AppliedIndex: 41, CommitIndex: 41, LastIndex: 42, Leases: 2, LastToken: 9,
				ClusterTime: durationpb.New(90 * time.Second), MinTtl: durationpb.New(2 * time.Second),
				Members: []*tenurev1.Member{
					{Id: "n1", RaftAddress: "127.0.0.1:7401", ApiAddress: "127.0.0.1:7400", Suffrage: "voter", Leader: true},
					{Id: "n2", RaftAddress: "127.0.0.1:7411", ApiAddress: "127.0.0.1:7410", Suffrage: "voter"},
				},
			}, nil
		},
	}
	for _, f := range extra {
		f(c.Server)
	}
	c.addr = fakeserver.Start(t, c.Server)
	return c
}

// Plain HTTP to a TLS port fails with a hint to give the CA; a port that
// does not speak TLS gets no such hint.
func TestHintWhenTheServerSpeaksTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	r := runCLI(t.Context(), nil, "get", "jobs/x", "--endpoints", addr, "--request-timeout", "300ms")
	if r.code != exitFailure || !strings.Contains(r.stderr, "the server at "+addr+" speaks TLS") || !strings.Contains(r.stderr, "--cacert") {
		t.Errorf("plain HTTP to a TLS port: exit %d, stderr:\n%s\nwant exit %d and a hint to give --cacert", r.code, r.stderr, exitFailure)
	}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	defer plain.Close()
	r = runCLI(t.Context(), nil, "get", "jobs/x", "--endpoints", strings.TrimPrefix(plain.URL, "http://"), "--request-timeout", "300ms")
	if r.code != exitFailure || strings.Contains(r.stderr, "speaks TLS") {
		t.Errorf("a plain server that breaks its connections: exit %d, stderr:\n%s\nwant exit %d and no TLS hint", r.code, r.stderr, exitFailure)
	}
}
