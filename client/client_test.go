package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(withExampleCluster{m}) }

// mustClient returns a client for endpoints with short backoffs, closed
// when the test ends.
func mustClient(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.RetryBackoff = time.Millisecond
	cfg.MaxRetryBackoff = 10 * time.Millisecond
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func unavailable() error {
	return connect.NewError(connect.CodeUnavailable, errors.New("node: no leader"))
}

func protoLease(name, holder string, token uint64) *tenurev1.Lease {
	return &tenurev1.Lease{Name: name, Holder: holder, Token: token,
		Ttl: durationpb.New(5 * time.Second), Remaining: durationpb.New(4980 * time.Millisecond)}
}

func grant(_ context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	return &tenurev1.AcquireResponse{Lease: protoLease(req.GetName(), req.GetHolder(), 7)}, nil
}

func TestNewValidatesEndpoints(t *testing.T) {
	tests := []struct {
		endpoints []string
		wantErr   string
	}{
		{nil, "client: no endpoints"},
		{[]string{"https://a:99999"}, `port "99999" is not a number`},
		{[]string{"https://127.0.0.1:7400", "http://127.0.0.1:7401/"}, ""},
		{[]string{"nohost"}, "not host:port"},
		{[]string{""}, "empty endpoint"},
		{[]string{"127.0.0.1:99999"}, `port "99999" is not a number from 1 to 65535`},
		{[]string{"127.0.0.1:0"}, `port "0" is not a number`},
		{[]string{"localhost:http"}, `port "http" is not a number`},
		{[]string{"http://127.0.0.1:7400", "127.0.0.1:7401/"}, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.endpoints), func(t *testing.T) {
			c, err := client.New(client.Config{Endpoints: tt.endpoints})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				defer c.Close()
				if got := strings.Join(c.Endpoints(), ","); got != "127.0.0.1:7400,127.0.0.1:7401" {
					t.Errorf("Endpoints = %s", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "client: ") {
				t.Fatalf("New error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	if _, err := client.New(client.Config{Endpoints: []string{"a:1"}, RequestTimeout: -time.Second}); err == nil {
		t.Error("New accepted a negative RequestTimeout")
	}
}

func TestAcquire(t *testing.T) {
	var got atomic.Pointer[tenurev1.AcquireRequest]
	fake := &fakeserver.Server{Acquire: func(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
		got.Store(req)
		return grant(ctx, req)
	}}
	c := mustClient(t, fakeserver.Start(t, fake))
	before := time.Now()
	l, err := c.Acquire(t.Context(), "jobs/x", "a", 5*time.Second)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	want := client.Lease{Name: "jobs/x", Holder: "a", Token: 7, TTL: 5 * time.Second, Remaining: 4980 * time.Millisecond}
	sent := l.Sent
	l.Sent = time.Time{}
	if l != want {
		t.Errorf("Acquire = %+v, want %+v", l, want)
	}
	if sent.Before(before) || sent.After(time.Now()) {
		t.Errorf("Sent = %v, not within the call", sent)
	}
	req := got.Load()
	if req.GetTtl().AsDuration() != 5*time.Second || req.GetWait() || req.GetWaitTimeout() != nil {
		t.Errorf("request = %v, want ttl 5s and no wait", req)
	}
}

func TestAcquireWait(t *testing.T) {
	var got atomic.Pointer[tenurev1.AcquireRequest]
	fake := &fakeserver.Server{Acquire: func(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
		got.Store(req)
		return grant(ctx, req)
	}}
	c := mustClient(t, fakeserver.Start(t, fake))
	if _, err := c.Acquire(t.Context(), "jobs/x", "a", 5*time.Second, client.Wait(30*time.Second)); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	req := got.Load()
	if wt := req.GetWaitTimeout().AsDuration(); !req.GetWait() || wt <= 29*time.Second || wt > 30*time.Second {
		t.Errorf("request = %v, want wait with a timeout of about 30s", req)
	}
	if _, err := c.Acquire(t.Context(), "jobs/x", "a", 5*time.Second, client.Wait(0)); err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if req := got.Load(); !req.GetWait() || req.GetWaitTimeout() != nil {
		t.Errorf("request = %v, want wait without a timeout", req)
	}
}

func TestFailoverFromDeadEndpoint(t *testing.T) {
	fake := &fakeserver.Server{
		Acquire: grant,
		Put: func(context.Context, *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
			return &tenurev1.KVPutResponse{Revision: 9}, nil
		},
	}
	live := fakeserver.Start(t, fake)

	// Put too: a refused connection means the request never left, so
	// even a fenced write moves on to the next endpoint.
	t.Run("acquire", func(t *testing.T) {
		c := mustClient(t, fakeserver.DeadAddr(t), live)
		if _, err := c.Acquire(t.Context(), "jobs/x", "a", 5*time.Second); err != nil {
			t.Fatalf("Acquire: %v", err)
		}
	})
	t.Run("put", func(t *testing.T) {
		c := mustClient(t, fakeserver.DeadAddr(t), live)
		rev, err := c.Put(t.Context(), "k", []byte("v"), "jobs/x", 7)
		if err != nil || rev != 9 {
			t.Fatalf("Put = %d, %v; want 9, nil", rev, err)
		}
	})
}

func TestFailoverSticksToWorkingEndpoint(t *testing.T) {
	down := &fakeserver.Server{Get: func(context.Context, *tenurev1.GetRequest) (*tenurev1.GetResponse, error) {
		return nil, unavailable()
	}}
	up := &fakeserver.Server{Get: func(_ context.Context, req *tenurev1.GetRequest) (*tenurev1.GetResponse, error) {
		return &tenurev1.GetResponse{Lease: protoLease(req.GetName(), "a", 3)}, nil
	}}
	c := mustClient(t, fakeserver.Start(t, down), fakeserver.Start(t, up))
	for i := range 3 {
		if _, err := c.Get(t.Context(), "jobs/x"); err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
	}
	if n := down.Calls("Get"); n != 1 {
		t.Errorf("unavailable endpoint got %d calls, want 1 (later calls stick to the working one)", n)
	}
	if n := up.Calls("Get"); n != 3 {
		t.Errorf("working endpoint got %d calls, want 3", n)
	}
}

func TestRetryOnUnavailable(t *testing.T) {
	var failures atomic.Int32
	failures.Store(3)
	fake := &fakeserver.Server{Put: func(context.Context, *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
		if failures.Add(-1) >= 0 {
			return nil, unavailable()
		}
		return &tenurev1.KVPutResponse{Revision: 4}, nil
	}}
	c := mustClient(t, fakeserver.Start(t, fake))
	rev, err := c.Put(t.Context(), "k", []byte("v"), "jobs/x", 7)
	if err != nil || rev != 4 {
		t.Fatalf("Put = %d, %v; want 4, nil", rev, err)
	}
	if n := fake.Calls("Put"); n != 4 {
		t.Errorf("server got %d calls, want 4 (3 unavailable, then success)", n)
	}
}

func TestGiveUpWhenNothingAnswers(t *testing.T) {
	dead1, dead2 := fakeserver.DeadAddr(t), fakeserver.DeadAddr(t)
	c := mustClient(t, dead1, dead2)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := c.Get(ctx, "jobs/x")
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Get error = %v, want ErrUnavailable", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Get error = %v, want it to match the context's error too", err)
	}
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("connect.CodeOf = %v, want unavailable", connect.CodeOf(err))
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "client: no endpoint could serve the request") || !strings.Contains(msg, "connection refused") {
		t.Errorf("message = %q", msg)
	}
}

func TestNoRetryOnDomainErrors(t *testing.T) {
	held := &lease.HeldError{Name: "jobs/x", Holder: "b", Token: 3, Remaining: 4200 * time.Millisecond}
	fake := &fakeserver.Server{
		Acquire: func(context.Context, *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			return nil, wire.ToConnectError(held)
		},
		Release: func(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
			return nil, wire.ToConnectError(&lease.StaleError{Name: "jobs/x", Token: 2, Detail: "the current grant has another token"})
		},
		Get: func(context.Context, *tenurev1.GetRequest) (*tenurev1.GetResponse, error) {
			return nil, wire.ToConnectError(lease.ErrNotFound)
		},
		Put: func(context.Context, *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
			return nil, wire.ToConnectError(fmt.Errorf("%w: key is empty", lease.ErrInvalid))
		},
	}
	// A second, healthy-looking endpoint must not be tried either.
	other := &fakeserver.Server{}
	c := mustClient(t, fakeserver.Start(t, fake), fakeserver.Start(t, other))

	tests := []struct {
		method   string
		call     func(context.Context) error
		sentinel error
		code     connect.Code
		msg      string
	}{
		{"Acquire", func(ctx context.Context) error {
			_, err := c.Acquire(ctx, "jobs/x", "a", 5*time.Second)
			return err
		}, client.ErrLeaseHeld, connect.CodeFailedPrecondition, `lease: "jobs/x" held by "b" (token 3, 4.2s remaining)`},
		{"Release", func(ctx context.Context) error {
			return c.Release(ctx, "jobs/x", 2)
		}, client.ErrStaleToken, connect.CodeFailedPrecondition, `lease: stale token 2 for "jobs/x": the current grant has another token`},
		{"Get", func(ctx context.Context) error {
			_, err := c.Get(ctx, "jobs/x")
			return err
		}, client.ErrNotFound, connect.CodeNotFound, "lease: not found"},
		{"Put", func(ctx context.Context) error {
			_, err := c.Put(ctx, "", nil, "jobs/x", 1)
			return err
		}, client.ErrInvalid, connect.CodeInvalidArgument, "lease: invalid argument: key is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			err := tt.call(t.Context())
			if !errors.Is(err, tt.sentinel) {
				t.Fatalf("error = %v, want errors.Is %v", err, tt.sentinel)
			}
			if connect.CodeOf(err) != tt.code {
				t.Errorf("connect.CodeOf = %v, want %v", connect.CodeOf(err), tt.code)
			}
			if err.Error() != tt.msg {
				t.Errorf("message = %q, want the server's %q", err.Error(), tt.msg)
			}
			if n := fake.Calls(tt.method); n != 1 {
				t.Errorf("server got %d calls, want 1 (no retry)", n)
			}
		})
	}
	if n := other.TotalCalls(); n != 0 {
		t.Errorf("second endpoint got %d calls, want 0", n)
	}

	_, err := c.Acquire(t.Context(), "jobs/x", "a", 5*time.Second)
	he, ok := errors.AsType[*client.HeldError](err)
	if !ok {
		t.Fatalf("errors.As(%v, *HeldError) = false", err)
	}
	if *he != *held {
		t.Errorf("HeldError = %+v, want %+v", *he, *held)
	}
}

// TestIndeterminate: an attempt that times out after sending may have been
// applied. Reads and the calls that carry a request ID (fenced writes and
// releases too) are retried, every attempt with the call's ID; a
// membership change is not retried and is indeterminate.
func TestIndeterminate(t *testing.T) {
	hang := func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	}
	fake := &fakeserver.Server{
		Put: func(ctx context.Context, _ *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
			return nil, hang(ctx)
		},
		Delete: func(ctx context.Context, _ *tenurev1.KVDeleteRequest) (*tenurev1.KVDeleteResponse, error) {
			return nil, hang(ctx)
		},
		Release: func(ctx context.Context, _ *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
			return nil, hang(ctx)
		},
		TransferLeadership: func(ctx context.Context, _ *tenurev1.TransferLeadershipRequest) (*tenurev1.TransferLeadershipResponse, error) {
			return nil, hang(ctx)
		},
		KVGet: func(ctx context.Context, _ *tenurev1.KVGetRequest) (*tenurev1.KVGetResponse, error) {
			return nil, hang(ctx)
		},
	}
	c := impatientClient(t, fake)
	// The client's own count of the attempts it sent: an attempt cut off
	// by its timeout may not have reached the server yet (on a loaded
	// machine, opening a connection can take longer than the timeout).
	var mu sync.Mutex
	sent := map[string]int{}
	client.SetBatchSendHook(c, func(ops []*tenurev1.BatchOp) {
		mu.Lock()
		defer mu.Unlock()
		for _, op := range ops {
			sent[fmt.Sprintf("%T", op.GetOp())]++
		}
	})
	attempts := func(method string) int {
		mu.Lock()
		defer mu.Unlock()
		return sent["*tenurev1.BatchOp_"+method]
	}

	writes := []struct {
		method string
		call   func(context.Context) error
	}{
		{"Put", func(ctx context.Context) error { _, err := c.Put(ctx, "k", []byte("v"), "jobs/x", 7); return err }},
		{"Delete", func(ctx context.Context) error { _, err := c.Delete(ctx, "k", "jobs/x", 7); return err }},
		{"Release", func(ctx context.Context) error { return c.Release(ctx, "jobs/x", 7) }},
	}
	for _, w := range writes {
		t.Run(w.method, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
			defer cancel()
			err := w.call(ctx)
			if !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("error = %v, want ErrUnavailable after retries", err)
			}
			if n := attempts(w.method); n < 2 {
				t.Errorf("the client sent %d attempts, want retries", n)
			}
		})
	}

	t.Run("TransferLeadership", func(t *testing.T) {
		_, err := c.TransferLeadership(t.Context(), "n2")
		if !errors.Is(err, client.ErrIndeterminate) {
			t.Fatalf("error = %v, want ErrIndeterminate", err)
		}
		if n := fake.Calls("TransferLeadership"); n != 1 {
			t.Errorf("server got %d calls, want 1 (no retry)", n)
		}
	})

	t.Run("KVGet", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, err := c.KVGet(ctx, "k")
		if !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("error = %v, want ErrUnavailable after retries", err)
		}
		if n := fake.Calls("KVGet"); n < 2 {
			t.Errorf("server got %d calls, want retries", n)
		}
	})
}

func TestRenew(t *testing.T) {
	fake := &fakeserver.Server{Renew: func(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
		res := &tenurev1.RenewResponse{}
		for _, r := range req.GetLeases() {
			pr := &tenurev1.RenewResult{Name: r.GetName(), Token: r.GetToken()}
			if r.GetToken() == 7 {
				pr.Lease = protoLease(r.GetName(), "a", 7)
			} else {
				pr.Reason = lease.ReasonStaleToken
				pr.Message = fmt.Sprintf("lease: stale token %d for %q: the current grant has another token", r.GetToken(), r.GetName())
			}
			res.Results = append(res.Results, pr)
		}
		return res, nil
	}}
	c := mustClient(t, fakeserver.Start(t, fake))
	res, err := c.Renew(t.Context(), client.Ref{Name: "a", Token: 7}, client.Ref{Name: "b", Token: 6})
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if len(res) != 2 {
		t.Fatalf("Renew returned %d results, want 2", len(res))
	}
	if res[0].Err != nil || res[0].Lease.Token != 7 || res[0].Lease.Name != "a" || res[0].Lease.Sent.IsZero() {
		t.Errorf("result 0 = %+v, want a renewed lease", res[0])
	}
	if !errors.Is(res[1].Err, client.ErrStaleToken) || res[1].Ref != (client.Ref{Name: "b", Token: 6}) {
		t.Errorf("result 1 = %+v, want stale", res[1])
	}
	if _, err := c.RenewOne(t.Context(), "b", 6); !errors.Is(err, client.ErrStaleToken) ||
		err.Error() != `lease: stale token 6 for "b": the current grant has another token` {
		t.Errorf("RenewOne error = %v, want the server's stale token error", err)
	}
	if l, err := c.RenewOne(t.Context(), "a", 7); err != nil || l.Token != 7 {
		t.Errorf("RenewOne = %+v, %v", l, err)
	}
}

func TestKVAndList(t *testing.T) {
	fake := &fakeserver.Server{
		List: func(_ context.Context, req *tenurev1.ListRequest) (*tenurev1.ListResponse, error) {
			return &tenurev1.ListResponse{Leases: []*tenurev1.Lease{protoLease(req.GetPrefix()+"1", "a", 1), protoLease(req.GetPrefix()+"2", "b", 2)}}, nil
		},
		KVGet: func(_ context.Context, req *tenurev1.KVGetRequest) (*tenurev1.KVGetResponse, error) {
			return &tenurev1.KVGetResponse{Key: req.GetKey(), Value: []byte("v"), Lease: "jobs/x", Token: 7, Revision: 12}, nil
		},
		Delete: func(context.Context, *tenurev1.KVDeleteRequest) (*tenurev1.KVDeleteResponse, error) {
			return &tenurev1.KVDeleteResponse{Revision: 13}, nil
		},
	}
	c := mustClient(t, fakeserver.Start(t, fake))
	ls, err := c.List(t.Context(), "jobs/")
	if err != nil || len(ls) != 2 || ls[0].Name != "jobs/1" || ls[1].Token != 2 {
		t.Errorf("List = %+v, %v", ls, err)
	}
	kv, err := c.KVGet(t.Context(), "k")
	if err != nil || kv.Key != "k" || string(kv.Value) != "v" || kv.Lease != "jobs/x" || kv.Token != 7 || kv.Revision != 12 {
		t.Errorf("KVGet = %+v, %v", kv, err)
	}
	if rev, err := c.Delete(t.Context(), "k", "jobs/x", 7); err != nil || rev != 13 {
		t.Errorf("Delete = %d, %v", rev, err)
	}
}

func TestCluster(t *testing.T) {
	fake := &fakeserver.Server{
		Status: func(context.Context, *tenurev1.StatusRequest) (*tenurev1.StatusResponse, error) {
			return &tenurev1.StatusResponse{NodeId: "n1", State: "leader", LeaderId: "n1", Term: 2,
				AppliedIndex: 10, CommitIndex: 10, LastIndex: 11, LastToken: 5, Leases: 3,
				MinTtl: durationpb.New(2 * time.Second), ClusterTime: durationpb.New(time.Minute),
				Members: []*tenurev1.Member{
					{Id: "n1", RaftAddress: "r1", ApiAddress: "a1", Suffrage: "voter", Leader: true, LastContact: durationpb.New(0)},
					{Id: "n2", RaftAddress: "r2", ApiAddress: "a2", Suffrage: "nonvoter", LastContact: durationpb.New(12 * time.Millisecond)},
					{Id: "n3", RaftAddress: "r3", ApiAddress: "a3", Suffrage: "voter"},
				}}, nil
		},
		Join: func(_ context.Context, req *tenurev1.JoinRequest) (*tenurev1.JoinResponse, error) {
			return &tenurev1.JoinResponse{Members: []*tenurev1.Member{{Id: req.GetNodeId(), Suffrage: "voter"}}}, nil
		},
		Leave: func(context.Context, *tenurev1.LeaveRequest) (*tenurev1.LeaveResponse, error) {
			return &tenurev1.LeaveResponse{}, nil
		},
		TransferLeadership: func(_ context.Context, req *tenurev1.TransferLeadershipRequest) (*tenurev1.TransferLeadershipResponse, error) {
			return &tenurev1.TransferLeadershipResponse{LeaderId: req.GetNodeId()}, nil
		},
	}
	addr := fakeserver.Start(t, fake)
	c := mustClient(t, addr)
	st, err := c.Status(t.Context())
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	if st.Endpoint != addr || st.NodeID != "n1" || st.State != "leader" || st.Term != 2 || st.LastIndex != 11 ||
		st.MinTTL != 2*time.Second || st.ClusterTime != time.Minute || st.Leases != 3 || st.LastToken != 5 ||
		len(st.Members) != 3 || st.Members[0] != (client.Member{ID: "n1", RaftAddress: "r1", APIAddress: "a1", Suffrage: "voter", Leader: true}) ||
		st.Members[1] != (client.Member{ID: "n2", RaftAddress: "r2", APIAddress: "a2", Suffrage: "nonvoter", LastContact: 12 * time.Millisecond}) ||
		st.Members[2] != (client.Member{ID: "n3", RaftAddress: "r3", APIAddress: "a3", Suffrage: "voter", LastContact: -1}) {
		t.Errorf("Status = %+v", st)
	}
	if res, err := c.Join(t.Context(), client.JoinRequest{NodeID: "n2", RaftAddr: "r2:1", APIAddr: "a2:1"}); err != nil || len(res.Members) != 1 || res.Members[0].ID != "n2" {
		t.Errorf("Join = %+v, %v", res, err)
	}
	if err := c.Leave(t.Context(), "n2"); err != nil {
		t.Errorf("Leave: %v", err)
	}
	if id, err := c.TransferLeadership(t.Context(), "n3"); err != nil || id != "n3" {
		t.Errorf("TransferLeadership = %q, %v", id, err)
	}
}

// impatientClient returns a client of fake whose attempts time out after
// 50ms and which retries at once.
func impatientClient(t *testing.T, fake *fakeserver.Server) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{fakeserver.Start(t, fake)}
	cfg.RequestTimeout = 50 * time.Millisecond
	cfg.RetryBackoff = time.Millisecond
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRenewWithTTL(t *testing.T) {
	var got []*tenurev1.LeaseRef
	fake := &fakeserver.Server{Renew: func(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
		got = req.GetLeases()
		res := &tenurev1.RenewResponse{}
		for _, r := range req.GetLeases() {
			res.Results = append(res.Results, &tenurev1.RenewResult{Name: r.GetName(), Token: r.GetToken(), Lease: protoLease(r.GetName(), "a", r.GetToken())})
		}
		return res, nil
	}}
	c := mustClient(t, fakeserver.Start(t, fake))
	if _, err := c.Renew(t.Context(), client.Ref{Name: "a", Token: 7, TTL: 30 * time.Second}, client.Ref{Name: "b", Token: 8}); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if len(got) != 2 || got[0].GetTtl().AsDuration() != 30*time.Second || got[1].GetTtl() != nil {
		t.Fatalf("the server got %v, want a ttl of 30s on a only", got)
	}
}
