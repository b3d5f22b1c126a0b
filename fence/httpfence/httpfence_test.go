package httpfence_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/tenure-io/tenure/fence"
	"github.com/tenure-io/tenure/fence/httpfence"
)

// post sends a request to url with the lease's headers (none for nil).
func post(t *testing.T, url string, l fence.Lease) *http.Response {
	t.Helper()
	c := http.DefaultClient
	if l != nil {
		c = &http.Client{Transport: &httpfence.Transport{Lease: l}}
	}
	resp, err := c.Post(url, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	var handled []uint64
	var mu sync.Mutex
	srv := httptest.NewServer(httpfence.Middleware(httpfence.DefaultConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l, ok := httpfence.FromContext(r.Context())
		if !ok {
			t.Error("no lease in the handler's context")
		}
		mu.Lock()
		handled = append(handled, l.Token())
		mu.Unlock()
	})))
	defer srv.Close()

	for _, s := range []struct {
		token  uint64
		status int
	}{{5, 200}, {5, 200}, {7, 200}, {6, 409}, {9, 200}, {1, 409}} {
		resp := post(t, srv.URL, fence.Grant("jobs/x", s.token))
		if resp.StatusCode != s.status {
			t.Fatalf("token %d: status %d, want %d", s.token, resp.StatusCode, s.status)
		}
		if s.status != 409 {
			continue
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("409 Content-Type %q", ct)
		}
		err := httpfence.CheckResponse(resp)
		se, ok := errors.AsType[*fence.StaleError](err)
		if !ok || !errors.Is(err, fence.ErrStale) || se.Token != s.token || se.Resource != "jobs/x" || se.Highest < 7 {
			t.Fatalf("CheckResponse = %v; want a StaleError for token %d", err, s.token)
		}
	}
	if got := len(handled); got != 4 {
		t.Fatalf("the handler ran %d times (%v), want 4", got, handled)
	}
}

func TestStaleBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(httpfence.Middleware(httpfence.Config{}, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	defer srv.Close()
	post(t, srv.URL, fence.Grant("r", 10))
	resp := post(t, srv.URL, fence.Grant("r", 4))
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["error"] != "stale_token" || body["token"] != 4.0 || body["highest"] != 10.0 || body["resource"] != "r" {
		t.Fatalf("409 body = %v; want both tokens", body)
	}
	if msg, _ := body["message"].(string); !strings.Contains(msg, "4") || !strings.Contains(msg, "10") {
		t.Fatalf("message %q does not name both tokens", msg)
	}
}

func TestBadHeaders(t *testing.T) {
	t.Parallel()
	ran := false
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true })
	srv := httptest.NewServer(httpfence.Middleware(httpfence.DefaultConfig(), h))
	defer srv.Close()
	for _, tc := range []struct {
		name          string
		lease, token  string
		status        int
		wantInHeaders bool
	}{
		{"none", "", "", http.StatusPreconditionRequired, false},
		{"no token", "r", "", http.StatusBadRequest, true},
		{"no lease", "", "5", http.StatusBadRequest, true},
		{"token 0", "r", "0", http.StatusBadRequest, true},
		{"not a number", "r", "five", http.StatusBadRequest, true},
		{"negative", "r", "-1", http.StatusBadRequest, true},
		{"too large", "r", "18446744073709551616", http.StatusBadRequest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL, nil)
			if tc.lease != "" {
				req.Header.Set(httpfence.HeaderLease, tc.lease)
			}
			if tc.token != "" {
				req.Header.Set(httpfence.HeaderToken, tc.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, b, tc.status)
			}
		})
	}
	if ran {
		t.Fatal("the handler ran for a bad request")
	}
	// The transport refuses to send a lease it cannot fence.
	for _, l := range []fence.Lease{fence.Grant("", 1), fence.Grant("r", 0), nil} {
		c := &http.Client{Transport: &httpfence.Transport{Lease: l}}
		if _, err := c.Get(srv.URL); !errors.Is(err, fence.ErrInvalid) {
			t.Fatalf("Transport with %v: %v, want ErrInvalid", l, err)
		}
	}
	// AllowUnfenced lets requests without headers through, but not bad
	// ones.
	open := httptest.NewServer(httpfence.Middleware(httpfence.Config{AllowUnfenced: true}, h))
	defer open.Close()
	if resp := post(t, open.URL, nil); resp.StatusCode != 200 || !ran {
		t.Fatalf("unfenced request with AllowUnfenced: %d", resp.StatusCode)
	}
}

// TestMemoryOrdersHandlers pauses a handler for token 5; a request with
// token 6 waits for it to finish before its handler runs, and a request
// with token 5 that arrives after 6 is refused.
func TestMemoryOrdersHandlers(t *testing.T) {
	t.Parallel()
	m := httpfence.NewMemory()
	ctx := context.Background()
	exit5, err := m.Enter(ctx, "r", 5)
	if err != nil {
		t.Fatal(err)
	}
	entered6 := make(chan func(), 1)
	go func() {
		exit, err := m.Enter(ctx, "r", 6)
		if err != nil {
			t.Error(err)
		}
		entered6 <- exit
	}()
	// Once token 6 has been seen, token 5 is stale for new requests; that
	// is also how the test knows 6 is waiting.
	waitFor(t, func() bool { return m.Highest("r") == 6 }, "token 6 to reach the fence")
	if _, err := m.Enter(ctx, "r", 5); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("a new request with token 5 = %v, want stale", err)
	}
	select {
	case <-entered6:
		t.Fatal("token 6 entered while a handler of token 5 ran")
	default:
	}
	exit5()
	exit6 := <-entered6
	exit6()
	// A waiting request gives up when its context ends.
	exit7, _ := m.Enter(ctx, "r", 7)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := m.Enter(cctx, "r", 8); !errors.Is(err, context.Canceled) {
		t.Fatalf("a waiter whose context ended = %v", err)
	}
	exit7()
}

// TestConnectInterceptor fences a Connect service: the client's
// http.Client carries a Transport.
func TestConnectInterceptor(t *testing.T) {
	t.Parallel()
	const procedure = "/test.v1.Writer/Write"
	var got []uint64
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure,
		func(ctx context.Context, req *connect.Request[emptypb.Empty]) (*connect.Response[emptypb.Empty], error) {
			l, _ := httpfence.FromContext(ctx)
			got = append(got, l.Token())
			return connect.NewResponse(&emptypb.Empty{}), nil
		}, connect.WithInterceptors(httpfence.Interceptor(httpfence.DefaultConfig()))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	call := func(l fence.Lease) error {
		hc := http.DefaultClient
		if l != nil {
			hc = &http.Client{Transport: &httpfence.Transport{Lease: l}}
		}
		c := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, srv.URL+procedure)
		_, err := c.CallUnary(context.Background(), connect.NewRequest(&emptypb.Empty{}))
		return err
	}
	if err := call(fence.Grant("svc", 3)); err != nil {
		t.Fatal(err)
	}
	if err := call(fence.Grant("svc", 4)); err != nil {
		t.Fatal(err)
	}
	err := call(fence.Grant("svc", 3))
	if connect.CodeOf(err) != connect.CodeAborted {
		t.Fatalf("stale call = %v, want aborted", err)
	}
	se, ok := httpfence.StaleFromConnect(err)
	if !ok || se.Token != 3 || se.Highest != 4 || se.Resource != "svc" {
		t.Fatalf("StaleFromConnect = %+v, %v", se, ok)
	}
	if err := call(nil); connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("call without headers = %v, want failed_precondition", err)
	}
	if len(got) != 2 {
		t.Fatalf("the handler ran for tokens %v, want 3 and 4", got)
	}
	// In the Connect protocol, aborted is HTTP 409.
	req, _ := http.NewRequest("POST", srv.URL+procedure, strings.NewReader("{}"))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(httpfence.HeaderLease, "svc")
	req.Header.Set(httpfence.HeaderToken, "2")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("stale Connect JSON call: HTTP %d, want 409", resp.StatusCode)
	}
}

// TestConnectStream fences a server stream: the whole stream is admitted
// or refused at its start.
func TestConnectStream(t *testing.T) {
	t.Parallel()
	const procedure = "/test.v1.Writer/Watch"
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewServerStreamHandler(procedure,
		func(ctx context.Context, req *connect.Request[emptypb.Empty], stream *connect.ServerStream[emptypb.Empty]) error {
			if _, ok := httpfence.FromContext(ctx); !ok {
				return connect.NewError(connect.CodeInternal, errors.New("no lease in the context"))
			}
			return stream.Send(&emptypb.Empty{})
		}, connect.WithInterceptors(httpfence.Interceptor(httpfence.DefaultConfig()))))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	call := func(token uint64) (int, error) {
		hc := &http.Client{Transport: &httpfence.Transport{Lease: fence.Grant("svc", token)}}
		c := connect.NewClient[emptypb.Empty, emptypb.Empty](hc, srv.URL+procedure)
		s, err := c.CallServerStream(context.Background(), connect.NewRequest(&emptypb.Empty{}))
		if err != nil {
			return 0, err
		}
		defer s.Close()
		n := 0
		for s.Receive() {
			n++
		}
		return n, s.Err()
	}
	if n, err := call(5); err != nil || n != 1 {
		t.Fatalf("stream with token 5: %d messages, %v", n, err)
	}
	n, err := call(4)
	if se, ok := httpfence.StaleFromConnect(err); !ok || n != 0 || se.Token != 4 || se.Highest != 5 {
		t.Fatalf("stream with token 4: %d messages, %v; want refused as stale behind 5", n, err)
	}
}
