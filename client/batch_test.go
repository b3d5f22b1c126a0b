package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// TestConcurrentCallsShareABatch holds the first Put at the server, so
// that the next ten queue behind it: they must go out together, in one
// Batch call, each with its own answer.
func TestConcurrentCallsShareABatch(t *testing.T) {
	first := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	fake := &fakeserver.Server{Put: func(_ context.Context, req *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
		if req.GetKey() == "first" {
			once.Do(func() { close(first) })
			<-release
		}
		if req.GetToken() == 99 {
			return nil, wire.ToConnectError(fmt.Errorf("%w: key %s", lease.ErrStaleToken, req.GetKey()))
		}
		return &tenurev1.KVPutResponse{Revision: req.GetToken()}, nil
	}}
	c := mustClient(t, fakeserver.Start(t, fake))
	const n = 10
	ctx := ctxT(t)

	firstDone := make(chan error, 1)
	go func() {
		_, err := c.Put(ctx, "first", []byte("v"), "l", 1)
		firstDone <- err
	}()
	waitFor(t, ctx, first, "the first put to reach the server")
	allQueued := make(chan struct{})
	client.SetBatchQueueHook(c, func(q int) {
		if q == n {
			close(allQueued)
		}
	})
	var wg sync.WaitGroup
	errs := make([]error, n)
	revs := make([]uint64, n)
	for i := range n {
		wg.Go(func() {
			token := uint64(100 + i)
			if i == 3 {
				token = 99
			}
			revs[i], errs[i] = c.Put(ctx, fmt.Sprintf("k%d", i), []byte("v"), "l", token)
		})
	}
	waitFor(t, ctx, allQueued, fmt.Sprintf("%d puts to queue behind the first", n))
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatalf("first put: %v", err)
	}
	wg.Wait()
	for i := range n {
		switch {
		case i == 3:
			if !errors.Is(errs[i], lease.ErrStaleToken) || connect.CodeOf(errs[i]) != connect.CodeFailedPrecondition {
				t.Errorf("put %d: got %v, want the stale-token error of its own", i, errs[i])
			}
		case errs[i] != nil || revs[i] != uint64(100+i):
			t.Errorf("put %d: got revision %d, %v; want revision %d", i, revs[i], errs[i], 100+i)
		}
	}
	if got := fake.Calls("Batch"); got != 2 {
		t.Errorf("%d Batch calls for 1 + %d concurrent puts, want 2", got, n)
	}
	if got := fake.Calls("Put"); got != n+1 {
		t.Errorf("%d puts reached the server, want %d", got, n+1)
	}
}

// TestBatchedErrorsAreTheSame checks that an op's error comes back the
// same, batched or not: code, message, sentinel and details.
func TestBatchedErrorsAreTheSame(t *testing.T) {
	heldErr := &lease.HeldError{Name: "jobs/x", Holder: "other", Token: 41, Remaining: 3 * time.Second}
	fake := &fakeserver.Server{
		Acquire: func(context.Context, *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			return nil, wire.ToConnectError(heldErr)
		},
		Release: func(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
			return nil, wire.ToConnectError(fmt.Errorf("%w: jobs/x is not held", lease.ErrNotFound))
		},
		Delete: func(context.Context, *tenurev1.KVDeleteRequest) (*tenurev1.KVDeleteResponse, error) {
			return nil, wire.ToConnectError(fmt.Errorf("%w: key too long", lease.ErrInvalid))
		},
		Renew: func(context.Context, *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
			return nil, wire.ToConnectError(fmt.Errorf("%w: token 3 of jobs/x", lease.ErrStaleToken))
		},
	}
	addr := fakeserver.Start(t, fake)
	ctx := ctxT(t)
	calls := func(c *client.Client) []error {
		_, acqErr := c.Acquire(ctx, "jobs/x", "me", 5*time.Second)
		_, delErr := c.Delete(ctx, "k", "jobs/x", 3)
		_, renErr := c.RenewOne(ctx, "jobs/x", 3)
		return []error{acqErr, c.Release(ctx, "jobs/x", 3), delErr, renErr}
	}
	batched := calls(mustClient(t, addr))
	if got := fake.Calls("Batch"); got != 4 {
		t.Fatalf("%d Batch calls, want 4: the calls did not go batched", got)
	}
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{addr}
	cfg.NoBatching = true
	alone, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	single := calls(alone)
	if got := fake.Calls("Batch"); got != 4 {
		t.Fatalf("NoBatching still sent Batch calls (%d)", got)
	}
	for i := range batched {
		b, s := batched[i], single[i]
		if b == nil || s == nil || b.Error() != s.Error() || connect.CodeOf(b) != connect.CodeOf(s) {
			t.Errorf("call %d: batched %v (%v), alone %v (%v)", i, b, connect.CodeOf(b), s, connect.CodeOf(s))
		}
		for _, sentinel := range []error{lease.ErrHeld, lease.ErrNotFound, lease.ErrInvalid, lease.ErrStaleToken, client.ErrIndeterminate} {
			if errors.Is(b, sentinel) != errors.Is(s, sentinel) {
				t.Errorf("call %d: errors.Is(_, %v): batched %v, alone %v", i, sentinel, errors.Is(b, sentinel), errors.Is(s, sentinel))
			}
		}
	}
	var hb, hs *client.HeldError
	if !errors.As(batched[0], &hb) || !errors.As(single[0], &hs) || *hb != *hs || hb.Holder != "other" || hb.Token != 41 {
		t.Errorf("held errors differ: batched %+v, alone %+v", hb, hs)
	}
}

// TestBatchFallsBackToSingleCalls talks to a server without Batch: the
// first call learns that and goes alone, and so do the later ones.
func TestBatchFallsBackToSingleCalls(t *testing.T) {
	fake := &fakeserver.Server{NoBatch: true, Acquire: grant,
		Put: func(context.Context, *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
			return &tenurev1.KVPutResponse{Revision: 5}, nil
		}}
	c := mustClient(t, fakeserver.Start(t, fake))
	ctx := ctxT(t)
	for range 3 {
		l, err := c.Acquire(ctx, "jobs/x", "me", 5*time.Second)
		if err != nil || l.Token != 7 {
			t.Fatalf("acquire: %+v, %v", l, err)
		}
		if rev, err := c.Put(ctx, "k", []byte("v"), "jobs/x", l.Token); err != nil || rev != 5 {
			t.Fatalf("put: %d, %v", rev, err)
		}
	}
	if got := fake.Calls("Batch"); got != 1 {
		t.Errorf("%d Batch calls, want 1 (then none once the server said it has no Batch)", got)
	}
	if got := fake.Calls("Acquire") + fake.Calls("Put"); got != 6 {
		t.Errorf("%d single calls, want 6", got)
	}
}

// waitFor waits for ch to close, failing the test if ctx ends first.
func waitFor(t *testing.T, ctx context.Context, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("gave up waiting for %s", what)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestQueuedCallWhoseContextEndsIsNotSent: a call still queued behind a
// batch when its context ends leaves the queue, never reaches the server,
// and fails with its context's error.
func TestQueuedCallWhoseContextEndsIsNotSent(t *testing.T) {
	first := make(chan struct{})
	release := make(chan struct{})
	fake := &fakeserver.Server{Put: func(_ context.Context, req *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
		if req.GetKey() == "first" {
			close(first)
			<-release
		}
		return &tenurev1.KVPutResponse{Revision: 1}, nil
	}}
	c := mustClient(t, fakeserver.Start(t, fake))
	ctx := ctxT(t)
	firstDone := make(chan error, 1)
	go func() {
		_, err := c.Put(ctx, "first", []byte("v"), "l", 1)
		firstDone <- err
	}()
	waitFor(t, ctx, first, "the first put to reach the server")
	queued := make(chan struct{})
	client.SetBatchQueueHook(c, func(n int) {
		if n == 1 {
			close(queued)
		}
	})

	short, cancel := context.WithCancel(ctx)
	secondDone := make(chan error, 1)
	go func() {
		_, err := c.Put(short, "second", []byte("v"), "l", 1)
		secondDone <- err
	}()
	waitFor(t, ctx, queued, "the second put to queue")
	cancel()
	if err := <-secondDone; !errors.Is(err, context.Canceled) {
		t.Errorf("the cancelled queued put returned %v, want context.Canceled", err)
	}
	close(release)
	if err := <-firstDone; err != nil {
		t.Fatalf("first put: %v", err)
	}
	// One more call: it would share a batch with the cancelled one, had
	// that stayed queued.
	client.SetBatchQueueHook(c, nil)
	if _, err := c.Put(ctx, "third", []byte("v"), "l", 1); err != nil {
		t.Fatalf("third put: %v", err)
	}
	if got := fake.Calls("Put"); got != 2 {
		t.Errorf("%d puts reached the server, want 2: the cancelled one was sent", got)
	}
}

// TestInFlightCallHonoursItsContext: a call whose op is on its way in a
// Batch call returns when its own context ends, not when the Batch call
// does, and a Batch call that nobody waits for any more is cancelled.
func TestInFlightCallHonoursItsContext(t *testing.T) {
	cancelled := make(chan struct{})
	fake := &fakeserver.Server{Put: func(ctx context.Context, _ *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}}
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{fakeserver.Start(t, fake)}
	cfg.RequestTimeout = time.Minute // longer than the test may take
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := ctxT(t)
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c.Put(short, "k", []byte("v"), "l", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("put past its deadline returned %v, want context.DeadlineExceeded", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the put waited for the Batch call, not for its own context")
	}
	waitFor(t, ctx, cancelled, "the server to see the abandoned Batch call cancelled")
}

// A client of a server without the batch connection (the fake server
// has none) asks for it once, then has one connection for everything:
// batched calls travel as messages of one BatchStream (the Connect
// protocol over HTTP/2), beside a watch and the calls that are not
// batched.
func TestOneConnectionCarriesEverything(t *testing.T) {
	for _, noStream := range []bool{false, true} {
		t.Run(fmt.Sprintf("noBatchStream=%v", noStream), func(t *testing.T) {
			type seen struct{ path, proto, conn, contentType string }
			var (
				mu   sync.Mutex
				reqs []seen
			)
			watching := make(chan struct{})
			var watchOnce sync.Once
			fake := &fakeserver.Server{
				NoBatchStream: noStream,
				OnRequest: func(r *http.Request) {
					mu.Lock()
					defer mu.Unlock()
					reqs = append(reqs, seen{r.URL.Path, r.Proto, r.RemoteAddr, r.Header.Get("Content-Type")})
				},
				Put: func(_ context.Context, req *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
					return &tenurev1.KVPutResponse{Revision: req.GetToken()}, nil
				},
				Get: func(_ context.Context, req *tenurev1.GetRequest) (*tenurev1.GetResponse, error) {
					return &tenurev1.GetResponse{Lease: &tenurev1.Lease{Name: req.GetName(), Holder: "a", Token: 1}}, nil
				},
				Watch: func(ctx context.Context, _ *tenurev1.WatchRequest, send func(*tenurev1.WatchEvent) error) error {
					if err := send(&tenurev1.WatchEvent{Type: tenurev1.WatchEvent_TYPE_SYNCED}); err != nil {
						return err
					}
					watchOnce.Do(func() { close(watching) })
					<-ctx.Done()
					return ctx.Err()
				},
			}
			c := mustClient(t, fakeserver.Start(t, fake))
			ctx := ctxT(t)
			wctx, stopWatch := context.WithCancel(ctx)
			defer stopWatch()
			if _, err := c.Watch(wctx, "l"); err != nil {
				t.Fatalf("Watch: %v", err)
			}
			select {
			case <-watching:
			case <-ctx.Done():
				t.Fatal("the watch never reached the server")
			}
			for i := range 3 {
				if _, err := c.Put(ctx, "k", []byte("v"), "l", uint64(i+1)); err != nil {
					t.Fatalf("Put: %v", err)
				}
			}
			if _, err := c.Get(ctx, "l"); err != nil {
				t.Fatalf("Get: %v", err)
			}
			if got := fake.Calls("Put"); got != 3 {
				t.Errorf("the server ran %d puts, want 3", got)
			}
			mu.Lock()
			defer mu.Unlock()
			count := map[string]int{}
			conns := map[string]bool{}
			for _, r := range reqs {
				count[r.path]++
				if r.path == wire.BatchConnPath {
					if r.proto != "HTTP/1.1" {
						t.Errorf("the batch connection's upgrade went as %s; want HTTP/1.1", r.proto)
					}
					continue
				}
				conns[r.conn] = true
				if r.proto != "HTTP/2.0" {
					t.Errorf("%s went as %s; want HTTP/2.0", r.path, r.proto)
				}
				switch r.path {
				case wire.BatchStreamProcedure:
					if r.contentType != "application/connect+proto" {
						t.Errorf("BatchStream went as %s; want application/connect+proto (the Connect protocol)", r.contentType)
					}
				case tenurev1connect.LeaseServiceBatchProcedure:
					if r.contentType != "application/proto" {
						t.Errorf("Batch went as %s; want application/proto (the Connect protocol)", r.contentType)
					}
				}
			}
			if len(conns) != 1 {
				t.Errorf("requests came on %d connections, want 1: %+v", len(conns), reqs)
			}
			// Without BatchStream the client asks for it once, then sends
			// each batch as a Batch call.
			want := map[string]int{
				wire.BatchConnPath:                         1,
				wire.BatchStreamProcedure:                  1,
				tenurev1connect.LeaseServiceGetProcedure:   1,
				tenurev1connect.LeaseServiceWatchProcedure: 1,
				tenurev1connect.LeaseServiceBatchProcedure: 0,
			}
			if noStream {
				want[tenurev1connect.LeaseServiceBatchProcedure] = 3
			}
			for path, n := range want {
				if count[path] != n {
					t.Errorf("%d requests to %s, want %d (all: %+v)", count[path], path, n, reqs)
				}
			}
		})
	}
}

// A batch stream cut short by its server (a member that crashed mid-call)
// is a broken connection, not an internal error: a call that may be
// repeated goes on to the next endpoint.
func TestBrokenBatchStreamFailsOver(t *testing.T) {
	broken := &fakeserver.Server{
		Acquire: func(context.Context, *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			panic(http.ErrAbortHandler) // resets the stream, as a crash would
		},
	}
	good := &fakeserver.Server{
		Acquire: func(_ context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			return &tenurev1.AcquireResponse{Lease: &tenurev1.Lease{Name: req.GetName(), Holder: req.GetHolder(), Token: 9, Ttl: req.GetTtl(), Remaining: req.GetTtl()}}, nil
		},
	}
	c := mustClient(t, fakeserver.Start(t, broken), fakeserver.Start(t, good))
	l, err := c.Acquire(ctxT(t), "jobs/a", "h", 10*time.Second)
	if err != nil || l.Token != 9 {
		t.Fatalf("Acquire: %+v, %v; want token 9 from the second endpoint", l, err)
	}
	if broken.Calls("Acquire") != 1 || good.Calls("Acquire") != 1 {
		t.Errorf("acquires: %d on the broken endpoint, %d on the good one; want 1 and 1", broken.Calls("Acquire"), good.Calls("Acquire"))
	}
}
