package server_test

import (
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// TestRequestIDAppliedOnce sends requests with request IDs through a
// follower and the leader, alone and in batches: a repeated ID gets the
// first outcome and changes nothing, and an ID below the session's floor
// is refused without effect.
func TestRequestIDAppliedOnce(t *testing.T) {
	_, leader, follower := cluster(t)
	ctx := ctxT(t)
	id := func(seq, floor uint64) *tenurev1.RequestID {
		return &tenurev1.RequestID{Session: "sess", Seq: seq, Floor: floor}
	}

	// The first attempt is granted; its grant is released and taken by
	// another holder before the retry, which must still get it.
	req := acquireReq("jobs/x", "a", 5*time.Second)
	req.Msg.RequestId = id(1, 1)
	first, err := follower.lease.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	tok := first.Msg.GetLease().GetToken()
	if _, err := leader.lease.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{Name: "jobs/x", Token: tok})); err != nil {
		t.Fatal(err)
	}
	other, err := leader.lease.Acquire(ctx, acquireReq("jobs/x", "b", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	retry, err := leader.lease.Acquire(ctx, req)
	if err != nil || retry.Msg.GetLease().GetToken() != tok || retry.Msg.GetLease().GetHolder() != "a" {
		t.Fatalf("retry = %v, %v; want the first grant, token %d", retry, err, tok)
	}
	got, err := leader.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "jobs/x"}))
	if err != nil || got.Msg.GetLease().GetToken() != other.Msg.GetLease().GetToken() {
		t.Fatalf("jobs/x is %v, %v; want b's grant untouched", got, err)
	}

	// A put, batched, then retried alone: one write.
	btok := other.Msg.GetLease().GetToken()
	put := &tenurev1.KVPutRequest{Key: "k", Value: []byte("v1"), Lease: "jobs/x", Token: btok, RequestId: id(2, 2)}
	bres, err := follower.lease.Batch(ctx, connect.NewRequest(&tenurev1.BatchRequest{Ops: []*tenurev1.BatchOp{{Op: &tenurev1.BatchOp_Put{Put: put}}}}))
	if err != nil || batchErr(bres.Msg.GetResults()[0]) != nil {
		t.Fatalf("batched put: %v, %v", bres, err)
	}
	rev := bres.Msg.GetResults()[0].GetPut().GetRevision()
	again, err := leader.kv.Put(ctx, connect.NewRequest(put))
	if err != nil || again.Msg.GetRevision() != rev {
		t.Fatalf("retried put = %v, %v; want revision %d", again, err, rev)
	}
	kv, err := leader.kv.Get(ctx, connect.NewRequest(&tenurev1.KVGetRequest{Key: "k"}))
	if err != nil || kv.Msg.GetRevision() != rev {
		t.Fatalf("k = %v, %v; want revision %d: written once", kv, err, rev)
	}

	// A later call raised the floor: a late copy of an earlier one is
	// refused and writes nothing.
	newer := &tenurev1.KVPutRequest{Key: "k", Value: []byte("new"), Lease: "jobs/x", Token: btok, RequestId: id(4, 4)}
	if _, err := leader.kv.Put(ctx, connect.NewRequest(newer)); err != nil {
		t.Fatal(err)
	}
	late := &tenurev1.KVPutRequest{Key: "k", Value: []byte("late"), Lease: "jobs/x", Token: btok, RequestId: id(3, 3)}
	_, err = follower.kv.Put(ctx, connect.NewRequest(late))
	if !errors.Is(wire.FromConnectError(err), lease.ErrNotApplied) || connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("late put: %v, want failed_precondition matching ErrNotApplied", err)
	}
	kv, err = leader.kv.Get(ctx, connect.NewRequest(&tenurev1.KVGetRequest{Key: "k"}))
	if err != nil || string(kv.Msg.GetValue()) != "new" {
		t.Fatalf("k = %v, %v; want the newer value", kv, err)
	}
}

// TestWaitingAcquireRetriedOnNewLeader: a waiting acquire is queued and
// then granted, its answer is lost, the grant expires, and the leader
// changes. The retry, on the new leader, must get the waiter's grant back,
// not a second grant.
func TestWaitingAcquireRetriedOnNewLeader(t *testing.T) {
	_, leader, follower := cluster(t)
	ctx := ctxT(t)
	if _, err := leader.lease.Acquire(ctx, acquireReq("jobs/w", "a", testcluster.CalmMinTTL)); err != nil {
		t.Fatal(err)
	}
	req := acquireReq("jobs/w", "w", testcluster.CalmMinTTL)
	req.Msg.Wait = true
	req.Msg.WaitTimeout = durationpb.New(10 * time.Second)
	req.Msg.RequestId = &tenurev1.RequestID{Session: "waiter", Seq: 1, Floor: 1}
	first, err := leader.lease.Acquire(ctx, req) // granted when a's grant expires
	if err != nil {
		t.Fatal(err)
	}
	tok := first.Msg.GetLease().GetToken()

	// The answer is lost; the grant expires unrenewed.
	for {
		_, err := follower.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "jobs/w"}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("waiting for w's grant of jobs/w to expire: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // poll: cluster time has to pass
	}
	if _, err := leader.clus.TransferLeadership(ctx, connect.NewRequest(&tenurev1.TransferLeadershipRequest{})); err != nil {
		t.Fatal(err)
	}

	var retry *connect.Response[tenurev1.AcquireResponse]
	for {
		// Through the follower, which forwards to the new leader (or
		// is it); retried while leadership settles.
		retry, err = follower.lease.Acquire(ctx, req)
		if connect.CodeOf(err) != connect.CodeUnavailable || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // poll: a leader is being elected
	}
	if err != nil || retry.Msg.GetLease().GetToken() != tok || retry.Msg.GetLease().GetHolder() != "w" {
		t.Fatalf("retry on the new leader = %v, %v; want w's first grant, token %d", retry, err, tok)
	}
	if _, err := follower.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "jobs/w"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("jobs/w after the retry: %v; want not found (no second grant)", err)
	}
}
