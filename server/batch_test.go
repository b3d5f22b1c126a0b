package server_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
	"github.com/tenure-io/tenure/server"
)

func batchAcquire(name, holder string, ttl time.Duration) *tenurev1.BatchOp {
	return &tenurev1.BatchOp{Op: &tenurev1.BatchOp_Acquire{Acquire: &tenurev1.AcquireRequest{Name: name, Holder: holder, Ttl: durationpb.New(ttl)}}}
}

func batchPut(key, leaseName string, token uint64) *tenurev1.BatchOp {
	return &tenurev1.BatchOp{Op: &tenurev1.BatchOp_Put{Put: &tenurev1.KVPutRequest{Key: key, Value: []byte("v"), Lease: leaseName, Token: token}}}
}

// batchErr returns the error of result r, mapped as the client maps it.
func batchErr(r *tenurev1.BatchResult) error {
	if e := r.GetError(); e != nil {
		return wire.FromConnectError(wire.FromBatchError(e))
	}
	return nil
}

// TestBatchOpsAreIndependent sends, through a follower, a batch whose ops
// succeed and fail in different ways: each gets the result its own call
// would have had, a bad op changes nothing, and the others still apply.
func TestBatchOpsAreIndependent(t *testing.T) {
	_, leader, follower := cluster(t)
	ctx := ctxT(t)
	held, err := leader.lease.Acquire(ctx, acquireReq("jobs/held", "other", 10*time.Second))
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	heldToken := held.Msg.GetLease().GetToken()

	res, err := follower.lease.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{
		batchAcquire("jobs/a", "me", 5*time.Second),      // 0: granted
		batchAcquire("jobs/held", "me", 5*time.Second),   // 1: held by other
		batchAcquire("", "me", 5*time.Second),            // 2: invalid name
		batchPut("k/held", "jobs/held", heldToken),       // 3: fenced write of the current grant
		batchPut("k/stale", "jobs/held", heldToken+1000), // 4: not the current token
		{Op: &tenurev1.BatchOp_Acquire{Acquire: &tenurev1.AcquireRequest{Name: "jobs/w", Holder: "me", Ttl: durationpb.New(5 * time.Second), Wait: true}}}, // 5: waits: refused
		{}, // 6: empty
		{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: "jobs/none", Token: 1}}}, // 7: not held
	}}))
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	r := res.Msg.GetResults()
	if len(r) != 8 {
		t.Fatalf("got %d results for 8 ops", len(r))
	}
	if l := r[0].GetAcquire().GetLease(); l.GetName() != "jobs/a" || l.GetHolder() != "me" || l.GetToken() <= heldToken {
		t.Errorf("op 0: got %v, want a grant of jobs/a to me with a token above %d", r[0], heldToken)
	}
	var he *lease.HeldError
	if err := batchErr(r[1]); !errors.As(err, &he) || he.Holder != "other" || he.Token != heldToken {
		t.Errorf("op 1: got %v, want held by other with token %d", err, heldToken)
	}
	for _, i := range []int{2, 5, 6} {
		if err := batchErr(r[i]); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("op %d: got %v (%v), want invalid", i, err, r[i])
		}
	}
	if r[3].GetPut().GetRevision() == 0 {
		t.Errorf("op 3: got %v, want a revision", r[3])
	}
	if err := batchErr(r[4]); !errors.Is(err, lease.ErrStaleToken) {
		t.Errorf("op 4: got %v, want stale token", err)
	}
	if err := batchErr(r[7]); err == nil {
		t.Errorf("op 7: release of a lease nobody holds succeeded")
	}

	// The refused ops changed nothing.
	if _, err := leader.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "jobs/w"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("jobs/w after a refused batched acquire: %v, want not found", err)
	}
	if g, err := leader.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "jobs/held"})); err != nil || g.Msg.GetLease().GetHolder() != "other" {
		t.Errorf("jobs/held after the batch: %v, %v; want still held by other", g, err)
	}
	if _, err := leader.kv.Get(ctx, connect.NewRequest(&tenurev1.KVGetRequest{Key: "k/stale"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("k/stale after a stale batched put: %v, want not found", err)
	}
}

func TestBatchRefusesEmptyAndOversized(t *testing.T) {
	_, leader, _ := cluster(t)
	ctx := ctxT(t)
	if _, err := leader.lease.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("empty batch: %v, want invalid_argument", err)
	}
	big := &tenurev1.BatchRequest{}
	for range 1025 {
		big.Ops = append(big.Ops, batchAcquire("jobs/big", "me", 5*time.Second))
	}
	if _, err := leader.lease.Batch(ctx, connect.NewRequest(big)); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("batch of 1025 ops: %v, want invalid_argument", err)
	}
	if _, err := leader.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "jobs/big"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("jobs/big after a refused batch: %v, want not found", err)
	}
}

// TestBatchStreamServesEachMessage sends Batch calls one after another
// on one BatchStream, to the leader and through a follower: each message
// is answered in turn with the results its Batch call would have had, and
// the first Batch call that fails ends the stream with its error.
func TestBatchStreamServesEachMessage(t *testing.T) {
	c, _, _ := cluster(t)
	ctx := ctxT(t)
	for _, m := range c.Members() {
		var p http.Protocols
		p.SetUnencryptedHTTP2(true)
		tr := &http.Transport{Protocols: &p}
		t.Cleanup(tr.CloseIdleConnections)
		sc := connect.NewClient[tenurev1.BatchRequest, tenurev1.BatchResponse](&http.Client{Transport: tr},
			"http://"+m.Addr+wire.BatchStreamProcedure)
		st := sc.CallBidiStream(ctx)
		call := func(ops ...*tenurev1.BatchOp) ([]*tenurev1.BatchResult, error) {
			if err := st.Send(&tenurev1.BatchRequest{Ops: ops}); err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			res, err := st.Receive()
			return res.GetResults(), err
		}
		name := "jobs/stream-" + m.ID
		r, err := call(batchAcquire(name, "me", 5*time.Second))
		if err != nil || len(r) != 1 || r[0].GetAcquire().GetLease().GetToken() == 0 {
			t.Fatalf("%s: first batch: %v, %v; want a grant", m.ID, r, err)
		}
		token := r[0].GetAcquire().GetLease().GetToken()
		r, err = call(batchPut("k/"+name, name, token), batchPut("k/"+name, name, token+1000))
		if err != nil || len(r) != 2 || r[0].GetPut().GetRevision() == 0 || !errors.Is(batchErr(r[1]), lease.ErrStaleToken) {
			t.Fatalf("%s: second batch: %v, %v; want a write and a stale token", m.ID, r, err)
		}
		r, err = call(&tenurev1.BatchOp{Op: &tenurev1.BatchOp_Release{Release: &tenurev1.ReleaseRequest{Name: name, Token: token}}})
		if err != nil || len(r) != 1 || r[0].GetRelease() == nil {
			t.Fatalf("%s: third batch: %v, %v; want a release", m.ID, r, err)
		}
		if _, err := call(); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("%s: an empty batch: %v; want the stream ended with invalid_argument", m.ID, err)
		}
		st.CloseResponse()
	}
}

// putNode is a leader that applies every put at revision 1.
type putNode struct{ server.Node }

func (putNode) ID() string                      { return "n1" }
func (putNode) IsLeader() bool                  { return true }
func (putNode) Leader() (string, string, error) { return "n1", "", nil }
func (putNode) ClusterID() string               { return "" }
func (putNode) Limits() lease.Limits            { return lease.DefaultLimits() }
func (putNode) Status() node.Status             { return node.Status{} }
func (putNode) Do(_ context.Context, ops ...lease.Op) ([]lease.Result, error) {
	res := make([]lease.Result, len(ops))
	for i := range res {
		res[i].Revision = 1
	}
	return res, nil
}

// A graceful shutdown ends the BatchStreams that clients keep open
// between batches, rather than waiting for them until its timeout, and
// tells each client that nothing after its last answer was served
// (unavailable, a wire error: safe to send elsewhere).
func TestShutdownEndsIdleBatchStreams(t *testing.T) {
	hs, addr := startPutServer(t)
	ctx := ctxT(t)
	sc := connect.NewClient[tenurev1.BatchRequest, tenurev1.BatchResponse](h2c(t),
		"http://"+addr+wire.BatchStreamProcedure)
	st := sc.CallBidiStream(ctx)
	defer st.CloseResponse()
	if err := st.Send(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{batchPut("k", "l", 1)}}); err != nil {
		t.Fatalf("send: %v", err)
	}
	if res, err := st.Receive(); err != nil || res.GetResults()[0].GetPut().GetRevision() != 1 {
		t.Fatalf("first batch: %v, %v; want revision 1", res, err)
	}

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown with an idle batch stream open: %v; want it ended, not waited for", err)
	}
	_, err := st.Receive()
	if connect.CodeOf(err) != connect.CodeUnavailable || !connect.IsWireError(err) {
		t.Errorf("the ended stream: %v; want unavailable from the server", err)
	}
}
