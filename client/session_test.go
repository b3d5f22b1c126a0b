package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// stateServer is a fake server backed by a lease.State whose cluster time
// the test sets. Its Acquire applies the request and then runs lost, if
// set, for the attempt; lost returns true to lose the answer.
type stateServer struct {
	mu   sync.Mutex
	st   *lease.State
	now  time.Duration
	ids  []*tenurev1.RequestID
	lost func(attempt int) bool
}

func (s *stateServer) apply(op lease.Op) lease.Result {
	res, _ := s.st.Apply(lease.Batch{Now: s.now, Ops: []lease.Op{op}})
	return res[0]
}

// attempt applies op (with the request's ID) as one attempt of a call and
// returns its result, or, when lost says so, waits until the caller gives
// up: the answer never arrives.
func (s *stateServer) attempt(ctx context.Context, id *tenurev1.RequestID, op lease.Op) (lease.Result, error) {
	s.mu.Lock()
	s.ids = append(s.ids, id)
	attempt := len(s.ids)
	op.Session, op.Seq, op.Floor = id.GetSession(), id.GetSeq(), id.GetFloor()
	r := s.apply(op)
	lose := s.lost != nil && s.lost(attempt)
	s.mu.Unlock()
	if lose {
		<-ctx.Done()
		return lease.Result{}, ctx.Err()
	}
	if r.Err != nil {
		return lease.Result{}, wire.ToConnectError(r.Err)
	}
	return r, nil
}

func (s *stateServer) acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	r, err := s.attempt(ctx, req.GetRequestId(), lease.Op{Type: lease.OpAcquire, Name: req.GetName(), Holder: req.GetHolder(), TTL: req.GetTtl().AsDuration()})
	if err != nil {
		return nil, err
	}
	return &tenurev1.AcquireResponse{Lease: wire.LeaseToProto(r.Lease, r.Now)}, nil
}

func (s *stateServer) put(ctx context.Context, req *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
	r, err := s.attempt(ctx, req.GetRequestId(), lease.Op{Type: lease.OpPut, Name: req.GetLease(), Token: req.GetToken(), Key: req.GetKey(), Value: req.GetValue()})
	if err != nil {
		return nil, err
	}
	return &tenurev1.KVPutResponse{Revision: r.Revision}, nil
}

// TestRetriedAcquireGetsFirstOutcome: the first attempt of an Acquire is
// granted and its answer lost; before the retry the grant expires (B1c),
// or expires and goes to another holder (B1b). The retry must return the
// first grant, not a second grant and not "held", with Sent no later than
// the first attempt.
func TestRetriedAcquireGetsFirstOutcome(t *testing.T) {
	for _, other := range []bool{false, true} {
		s := &stateServer{st: lease.New()}
		var firstSeen time.Time
		s.lost = func(attempt int) bool {
			if attempt != 1 {
				return false
			}
			firstSeen = time.Now()
			// The grant expires before the retry.
			s.now += 10 * time.Second
			s.apply(lease.Op{Type: lease.OpExpire})
			if other {
				if r := s.apply(lease.Op{Type: lease.OpAcquire, Name: "jobs/x", Holder: "other", TTL: 5 * time.Second}); r.Err != nil {
					t.Errorf("other holder: %v", r.Err)
				}
			}
			return true
		}
		c := impatientClient(t, &fakeserver.Server{Acquire: s.acquire})
		l, err := c.Acquire(t.Context(), "jobs/x", "me", 5*time.Second)
		if err != nil || l.Token != 1 || l.Holder != "me" {
			t.Fatalf("other %v: Acquire = %+v, %v; want the first grant (token 1)", other, l, err)
		}
		if want := uint64(1 + btoi(other)); s.st.LastToken() != want {
			t.Fatalf("other %v: last token %d, want %d: the retry was granted again", other, s.st.LastToken(), want)
		}
		if l.Sent.After(firstSeen) {
			t.Fatalf("Sent %v is after the first attempt reached the server (%v)", l.Sent, firstSeen)
		}
		if len(s.ids) < 2 {
			t.Fatalf("%d attempts, want a retry", len(s.ids))
		}
		for _, id := range s.ids {
			if id.GetSession() != c.Session() || id.GetSeq() != s.ids[0].GetSeq() || id.GetSeq() == 0 {
				t.Fatalf("attempts carried %v and %v: want one request ID of session %q", s.ids[0], id, c.Session())
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestRequestIDs: every call that changes state takes the next seq, and
// carries as floor the lowest seq still in flight.
func TestRequestIDs(t *testing.T) {
	var (
		mu  sync.Mutex
		ids []*tenurev1.RequestID
	)
	record := func(id *tenurev1.RequestID) {
		mu.Lock()
		defer mu.Unlock()
		ids = append(ids, id)
	}
	block, arrived := make(chan struct{}), make(chan struct{})
	fake := &fakeserver.Server{
		Acquire: func(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			record(req.GetRequestId())
			if req.GetWait() {
				close(arrived)
				<-block
			}
			return grant(ctx, req)
		},
		Renew: func(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
			record(req.GetRequestId())
			return &tenurev1.RenewResponse{Results: []*tenurev1.RenewResult{{Name: "a", Token: 7, Lease: protoLease("a", "h", 7)}}}, nil
		},
		Release: func(_ context.Context, req *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
			record(req.GetRequestId())
			return &tenurev1.ReleaseResponse{}, nil
		},
		Put: func(_ context.Context, req *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
			record(req.GetRequestId())
			return &tenurev1.KVPutResponse{Revision: 1}, nil
		},
		Delete: func(_ context.Context, req *tenurev1.KVDeleteRequest) (*tenurev1.KVDeleteResponse, error) {
			record(req.GetRequestId())
			return &tenurev1.KVDeleteResponse{Revision: 2}, nil
		},
	}
	c := mustClient(t, fakeserver.Start(t, fake))
	ctx := t.Context()
	mustDo := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Acquire(ctx, "a", "h", 5*time.Second)
	mustDo(err)
	_, err = c.RenewOne(ctx, "a", 7)
	mustDo(err)
	_, err = c.Put(ctx, "k", []byte("v"), "a", 7)
	mustDo(err)
	_, err = c.Delete(ctx, "k", "a", 7)
	mustDo(err)
	// A waiting acquire stays in flight (seq 5) while a release (6) is
	// made: the release's floor stays at 5.
	done := make(chan error)
	go func() {
		_, err := c.Acquire(ctx, "b", "h", 5*time.Second, client.Wait(0))
		done <- err
	}()
	<-arrived
	mustDo(c.Release(ctx, "a", 7))
	close(block)
	mustDo(<-done)
	mustDo(c.Release(ctx, "a", 7))
	want := [][2]uint64{{1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 5}, {7, 7}}
	if len(ids) != len(want) {
		t.Fatalf("%d requests, want %d", len(ids), len(want))
	}
	for i, id := range ids {
		if id.GetSession() != c.Session() || id.GetSeq() != want[i][0] || id.GetFloor() != want[i][1] {
			t.Errorf("request %d carried %v, want seq %d floor %d of session %q", i, id, want[i][0], want[i][1], c.Session())
		}
	}
}

// TestRetriedPutGetsFirstOutcome: the first attempt of a Put writes and
// its answer is lost; before the retry the grant expires and a newer
// grant writes the key. The retry must report the first write (its
// revision), not "stale", and must not write again.
func TestRetriedPutGetsFirstOutcome(t *testing.T) {
	s := &stateServer{st: lease.New()}
	if r := s.apply(lease.Op{Type: lease.OpAcquire, Name: "jobs/x", Holder: "me", TTL: 5 * time.Second}); r.Err != nil {
		t.Fatal(r.Err)
	}
	var firstRev uint64
	s.lost = func(attempt int) bool {
		if attempt != 1 {
			return false
		}
		firstRev = s.st.Revision()
		s.now += 10 * time.Second
		s.apply(lease.Op{Type: lease.OpExpire})
		if r := s.apply(lease.Op{Type: lease.OpAcquire, Name: "jobs/x", Holder: "other", TTL: 5 * time.Second}); r.Err != nil {
			t.Errorf("other holder: %v", r.Err)
		}
		if r := s.apply(lease.Op{Type: lease.OpPut, Name: "jobs/x", Token: 2, Key: "k", Value: []byte("other's")}); r.Err != nil {
			t.Errorf("other's write: %v", r.Err)
		}
		return true
	}
	c := impatientClient(t, &fakeserver.Server{Put: s.put})
	rev, err := c.Put(t.Context(), "k", []byte("mine"), "jobs/x", 1)
	if err != nil || rev != firstRev || firstRev == 0 {
		t.Fatalf("Put = %d, %v; want the first write's revision %d", rev, err, firstRev)
	}
	if len(s.ids) < 2 {
		t.Fatalf("%d attempts, want a retry", len(s.ids))
	}
	if kv := s.apply(lease.Op{Type: lease.OpKVGet, Key: "k"}); kv.Err != nil || string(kv.Entry.Value) != "other's" || s.st.Revision() != firstRev+1 {
		t.Fatalf("store holds %+v (revision %d); want other's write, the only one after the first (revision %d)", kv.Entry, s.st.Revision(), firstRev+1)
	}
}
