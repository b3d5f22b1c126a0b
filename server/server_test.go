package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// peer holds Connect clients to one member, over cleartext HTTP/2.
type peer struct {
	lease tenurev1connect.LeaseServiceClient
	kv    tenurev1connect.KVServiceClient
	clus  tenurev1connect.ClusterServiceClient
}

func dial(t *testing.T, addr string) peer {
	t.Helper()
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	base := "http://" + addr
	return peer{
		lease: tenurev1connect.NewLeaseServiceClient(hc, base, connect.WithGRPC()),
		kv:    tenurev1connect.NewKVServiceClient(hc, base, connect.WithGRPC()),
		clus:  tenurev1connect.NewClusterServiceClient(hc, base, connect.WithGRPC()),
	}
}

// cluster starts three members and returns clients to the leader and to
// a follower.
func cluster(t *testing.T) (c *testcluster.Cluster, leader, follower peer) {
	t.Helper()
	// Calm raft timing: these tests are about the server, not about
	// elections, and the race detector slows everything down.
	c = testcluster.Start(t, testcluster.Config{Size: 3,
		ElectionTimeout: testcluster.CalmElectionTimeout, MinTTL: testcluster.CalmMinTTL})
	l := c.Leader()
	for _, m := range c.Members() {
		if m != l {
			return c, dial(t, l.Addr), dial(t, m.Addr)
		}
	}
	t.Fatal("no follower")
	return
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func acquireReq(name, holder string, ttl time.Duration) *connect.Request[tenurev1.AcquireRequest] {
	return connect.NewRequest(&tenurev1.AcquireRequest{Name: name, Holder: holder, Ttl: durationpb.New(ttl)})
}

func TestFollowerForwardsToLeader(t *testing.T) {
	_, leader, follower := cluster(t)
	ctx := ctxT(t)
	res, err := follower.lease.Acquire(ctx, acquireReq("jobs/x", "a", 5*time.Second))
	if err != nil {
		t.Fatalf("acquire through a follower: %v", err)
	}
	tok := res.Msg.GetLease().GetToken()
	if tok == 0 || res.Msg.GetLease().GetHolder() != "a" {
		t.Fatalf("acquire through a follower returned %v", res.Msg)
	}
	got, err := leader.lease.Get(ctx, connect.NewRequest(&tenurev1.GetRequest{Name: "jobs/x"}))
	if err != nil || got.Msg.GetLease().GetToken() != tok {
		t.Fatalf("leader's view of jobs/x: %v, %v; want token %d", got, err, tok)
	}

	// The leader's structured error comes back intact through the
	// follower: errors.As finds the holder and its token.
	_, err = follower.lease.Acquire(ctx, acquireReq("jobs/x", "b", 5*time.Second))
	var held *lease.HeldError
	if !errors.As(wire.FromConnectError(err), &held) || held.Holder != "a" || held.Token != tok || held.Name != "jobs/x" {
		t.Fatalf("second acquire through a follower: %v (held %+v), want held by a with token %d", err, held, tok)
	}
	if connect.CodeOf(err) != connect.CodeFailedPrecondition {
		t.Fatalf("code %v, want failed_precondition", connect.CodeOf(err))
	}
}

func TestForwardedRequestIsNotForwardedAgain(t *testing.T) {
	_, _, follower := cluster(t)
	req := acquireReq("loop", "a", 5*time.Second)
	req.Header().Set("Tenure-Forwarded", "someone")
	_, err := follower.lease.Acquire(ctxT(t), req)
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("forwarded request to a follower: %v, want unavailable", err)
	}
}

func TestInvalidRequestsChangeNothing(t *testing.T) {
	_, leader, follower := cluster(t)
	ctx := ctxT(t)
	before, err := leader.clus.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		call func(p peer) error
	}{
		{"empty name", func(p peer) error {
			_, err := p.lease.Acquire(ctx, acquireReq("", "a", 5*time.Second))
			return err
		}},
		{"no ttl", func(p peer) error {
			_, err := p.lease.Acquire(ctx, connect.NewRequest(&tenurev1.AcquireRequest{Name: "n", Holder: "a"}))
			return err
		}},
		{"ttl below minimum", func(p peer) error {
			_, err := p.lease.Acquire(ctx, acquireReq("n", "a", 500*time.Millisecond))
			return err
		}},
		{"ttl above 24h", func(p peer) error {
			_, err := p.lease.Acquire(ctx, acquireReq("n", "a", 25*time.Hour))
			return err
		}},
		{"renew nothing", func(p peer) error {
			_, err := p.lease.Renew(ctx, connect.NewRequest(&tenurev1.RenewRequest{}))
			return err
		}},
		{"release without token", func(p peer) error {
			_, err := p.lease.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{Name: "n"}))
			return err
		}},
		{"value over the limit", func(p peer) error {
			_, err := p.kv.Put(ctx, connect.NewRequest(&tenurev1.KVPutRequest{Key: "k", Value: make([]byte, 1<<20+1), Lease: "n", Token: 1}))
			return err
		}},
		{"join without address", func(p peer) error {
			_, err := p.clus.Join(ctx, connect.NewRequest(&tenurev1.JoinRequest{NodeId: "x"}))
			return err
		}},
	}
	for _, c := range cases {
		for _, p := range []struct {
			who string
			p   peer
		}{{"leader", leader}, {"follower", follower}} {
			t.Run(c.name+" via "+p.who, func(t *testing.T) {
				if err := c.call(p.p); connect.CodeOf(err) != connect.CodeInvalidArgument {
					t.Fatalf("got %v, want invalid_argument", err)
				}
			})
		}
	}
	after, err := leader.clus.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	// (The log index may move with membership entries; the lease state
	// must not.)
	if after.Msg.GetLeases() != before.Msg.GetLeases() || after.Msg.GetLastToken() != before.Msg.GetLastToken() {
		t.Fatalf("invalid requests changed the state: leases %d -> %d, last token %d -> %d",
			before.Msg.GetLeases(), after.Msg.GetLeases(), before.Msg.GetLastToken(), after.Msg.GetLastToken())
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := follower.kv.Get(ctx, connect.NewRequest(&tenurev1.KVGetRequest{Key: "k"}))
		if connect.CodeOf(err) == connect.CodeNotFound {
			break
		}
		if connect.CodeOf(err) != connect.CodeUnavailable || time.Now().After(deadline) {
			t.Fatalf("kv get k after a refused put: %v, want not_found", err)
		}
		time.Sleep(20 * time.Millisecond) // an election is under way; ask again
	}
}

func TestWatchOnFollowerSeesCommittedEvents(t *testing.T) {
	_, leader, follower := cluster(t)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	first, err := leader.lease.Acquire(ctx, acquireReq("w/1", "a", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// A follower serves watches from what it has applied: let it catch
	// up so w/1 is part of its current state. The wait is on the state
	// itself (its last token), not on the applied index: raft counts an
	// entry applied when it hands it to the state machine, before the
	// state machine has applied it.
	tok := first.Msg.GetLease().GetToken()
	testcluster.Eventually(t, fmt.Sprintf("the follower to apply the grant of token %d", tok), 10*time.Second, func() error {
		st, err := follower.clus.Status(ctx, connect.NewRequest(&tenurev1.StatusRequest{}))
		if err == nil && st.Msg.GetLastToken() < tok {
			err = fmt.Errorf("last token %d (applied index %d)", st.Msg.GetLastToken(), st.Msg.GetAppliedIndex())
		}
		return err
	})
	stream, err := follower.lease.Watch(ctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: "w/"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	next := func() *tenurev1.WatchEvent {
		t.Helper()
		if !stream.Receive() {
			t.Fatalf("watch ended: %v", stream.Err())
		}
		return stream.Msg().GetEvent()
	}
	if ev := next(); ev.GetType() != tenurev1.WatchEvent_TYPE_CURRENT || ev.GetLease().GetToken() != first.Msg.GetLease().GetToken() {
		t.Fatalf("first event %v, want CURRENT w/1", ev)
	}
	if ev := next(); ev.GetType() != tenurev1.WatchEvent_TYPE_SYNCED {
		t.Fatalf("second event %v, want SYNCED", ev)
	}
	if _, err := leader.lease.Release(ctx, connect.NewRequest(&tenurev1.ReleaseRequest{Name: "w/1", Token: first.Msg.GetLease().GetToken()})); err != nil {
		t.Fatal(err)
	}
	second, err := leader.lease.Acquire(ctx, acquireReq("w/2", "b", 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.lease.Acquire(ctx, acquireReq("other", "b", 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.GetType() != tenurev1.WatchEvent_TYPE_RELEASED || ev.GetLease().GetName() != "w/1" {
		t.Fatalf("event %v, want RELEASED w/1", ev)
	}
	ev := next()
	if ev.GetType() != tenurev1.WatchEvent_TYPE_GRANTED || ev.GetLease().GetToken() != second.Msg.GetLease().GetToken() || ev.GetIndex() == 0 {
		t.Fatalf("event %v, want GRANTED w/2 with token %d and an index", ev, second.Msg.GetLease().GetToken())
	}
}

// A wait forwarded by a follower lasts as long as the wait, not only the
// forwarding timeout: cut short, the waiter would leave the queue.
func TestForwardedWaitOutlivesForwardTimeout(t *testing.T) {
	// Calm raft timing: a leader change during the wait would end it
	// for another reason (leadership lost) than the one under test.
	c := testcluster.Start(t, testcluster.Config{Size: 3,
		ElectionTimeout: testcluster.CalmElectionTimeout, MinTTL: testcluster.CalmMinTTL,
		ForwardTimeout: 300 * time.Millisecond})
	l := c.Leader()
	var follower peer
	for _, m := range c.Members() {
		if m != l {
			follower = dial(t, m.Addr)
			break
		}
	}
	leader := dial(t, l.Addr)
	ctx := ctxT(t)
	// a holds the name for 2s and never renews it.
	a, err := leader.lease.Acquire(ctx, acquireReq("jobs/w", "a", 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	req := acquireReq("jobs/w", "b", 2*time.Second)
	req.Msg.Wait = true // no wait timeout: the server's maximum
	start := time.Now()
	// No deadline: the forwarding timeout is what applies.
	res, err := follower.lease.Acquire(context.Background(), req)
	if err != nil {
		t.Fatalf("waited acquire through a follower failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	}
	if got := res.Msg.GetLease(); got.GetHolder() != "b" || got.GetToken() <= a.Msg.GetLease().GetToken() {
		t.Fatalf("waited acquire returned %v", got)
	}
}
