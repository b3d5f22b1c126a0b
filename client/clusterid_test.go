package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// clusterFake is a fake member of cluster id whose grants all carry
// token: every method answers, so any call can be sent to it.
func clusterFake(id string, token uint64) *fakeserver.Server {
	l := func(name string) *tenurev1.Lease { return protoLease(name, "h", token) }
	return &fakeserver.Server{
		ClusterID: id,
		Acquire: func(_ context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
			return &tenurev1.AcquireResponse{Lease: l(req.GetName())}, nil
		},
		Renew: func(_ context.Context, req *tenurev1.RenewRequest) (*tenurev1.RenewResponse, error) {
			res := &tenurev1.RenewResponse{}
			for _, r := range req.GetLeases() {
				res.Results = append(res.Results, &tenurev1.RenewResult{Name: r.GetName(), Token: r.GetToken(), Lease: l(r.GetName())})
			}
			return res, nil
		},
		Release: func(context.Context, *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, error) {
			return &tenurev1.ReleaseResponse{}, nil
		},
		Get: func(_ context.Context, req *tenurev1.GetRequest) (*tenurev1.GetResponse, error) {
			return &tenurev1.GetResponse{Lease: l(req.GetName())}, nil
		},
		List: func(context.Context, *tenurev1.ListRequest) (*tenurev1.ListResponse, error) {
			return &tenurev1.ListResponse{Leases: []*tenurev1.Lease{l("a")}}, nil
		},
		Watch: func(_ context.Context, _ *tenurev1.WatchRequest, send func(*tenurev1.WatchEvent) error) error {
			if err := sendAll(send, event(tenurev1.WatchEvent_TYPE_CURRENT, "a", token, 0),
				event(tenurev1.WatchEvent_TYPE_SYNCED, "", 0, 0)); err != nil {
				return err
			}
			return connect.NewError(connect.CodeInternal, errors.New("end of the test stream"))
		},
		Put: func(context.Context, *tenurev1.KVPutRequest) (*tenurev1.KVPutResponse, error) {
			return &tenurev1.KVPutResponse{Revision: token}, nil
		},
		KVGet: func(_ context.Context, req *tenurev1.KVGetRequest) (*tenurev1.KVGetResponse, error) {
			return &tenurev1.KVGetResponse{Key: req.GetKey(), Value: []byte("v"), Token: token, Revision: token}, nil
		},
		Delete: func(context.Context, *tenurev1.KVDeleteRequest) (*tenurev1.KVDeleteResponse, error) {
			return &tenurev1.KVDeleteResponse{Revision: token}, nil
		},
		Status: func(context.Context, *tenurev1.StatusRequest) (*tenurev1.StatusResponse, error) {
			return &tenurev1.StatusResponse{NodeId: "n-" + id, ClusterId: id, LastToken: token}, nil
		},
	}
}

// clusterCalls are the client's calls, each returning the token (or
// revision) its answer carried, to tell which cluster answered.
var clusterCalls = []struct {
	name string
	call func(context.Context, *client.Client) (uint64, error)
}{
	{"Acquire", func(ctx context.Context, c *client.Client) (uint64, error) {
		l, err := c.Acquire(ctx, "a", "h", 5*time.Second)
		return l.Token, err
	}},
	{"Renew", func(ctx context.Context, c *client.Client) (uint64, error) {
		l, err := c.RenewOne(ctx, "a", 7)
		return l.Token, err
	}},
	{"Release", func(ctx context.Context, c *client.Client) (uint64, error) {
		return 0, c.Release(ctx, "a", 7)
	}},
	{"Get", func(ctx context.Context, c *client.Client) (uint64, error) {
		l, err := c.Get(ctx, "a")
		return l.Token, err
	}},
	{"List", func(ctx context.Context, c *client.Client) (uint64, error) {
		ls, err := c.List(ctx, "")
		if err != nil {
			return 0, err
		}
		return ls[0].Token, nil
	}},
	{"Put", func(ctx context.Context, c *client.Client) (uint64, error) {
		return c.Put(ctx, "k", []byte("v"), "a", 7)
	}},
	{"KVGet", func(ctx context.Context, c *client.Client) (uint64, error) {
		kv, err := c.KVGet(ctx, "k")
		return kv.Revision, err
	}},
	{"Delete", func(ctx context.Context, c *client.Client) (uint64, error) {
		return c.Delete(ctx, "k", "a", 7)
	}},
	{"Status", func(ctx context.Context, c *client.Client) (uint64, error) {
		st, err := c.Status(ctx)
		return st.LastToken, err
	}},
	{"Watch", func(ctx context.Context, c *client.Client) (uint64, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := c.Watch(ctx, "")
		if err != nil {
			return 0, err
		}
		ev := <-ch
		cancel()
		drain(ch)
		return ev.Lease.Token, nil
	}},
}

// pinnedClient returns a client pinned to cluster id (none if "") for
// endpoints.
func pinnedClient(t *testing.T, id string, noBatching bool, endpoints ...string) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.ClusterID = id
	cfg.NoBatching = noBatching
	cfg.RetryBackoff = time.Millisecond
	cfg.MaxRetryBackoff = 10 * time.Millisecond
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestRefusesAnswersFromAnotherCluster sends every call, batched and
// not, to a client pinned to cluster A: with only a member of cluster B
// to talk to, it fails with ErrOtherCluster naming the endpoint and both
// IDs, and B's answer is not returned; with B and A, it gets A's answer.
func TestRefusesAnswersFromAnotherCluster(t *testing.T) {
	for _, noBatching := range []bool{false, true} {
		for _, tc := range clusterCalls {
			t.Run(fmt.Sprintf("%s/NoBatching=%v", tc.name, noBatching), func(t *testing.T) {
				a, b := clusterFake("cluster-a", 7), clusterFake("cluster-b", 1)
				addrA, addrB := fakeserver.Start(t, a), fakeserver.Start(t, b)
				ctx := ctxT(t)

				c := pinnedClient(t, "cluster-a", noBatching, addrB)
				tok, err := tc.call(ctx, c)
				if !errors.Is(err, client.ErrOtherCluster) {
					t.Fatalf("%s on cluster B only: token %d, error %v; want ErrOtherCluster", tc.name, tok, err)
				}
				oc, ok := errors.AsType[*client.OtherClusterError](err)
				if !ok || oc.Endpoint != addrB || oc.Expected != "cluster-a" || oc.Seen != "cluster-b" {
					t.Fatalf("%s error %v (%+v), want an *OtherClusterError for %s: expected cluster-a, seen cluster-b", tc.name, err, oc, addrB)
				}
				if errors.Is(err, client.ErrUnavailable) {
					t.Errorf("%s: %v also matches ErrUnavailable: every endpoint answered, none is unavailable", tc.name, err)
				}
				for _, id := range []string{addrB, "cluster-a", "cluster-b"} {
					if !strings.Contains(err.Error(), id) {
						t.Errorf("%s error %q does not name %s", tc.name, err, id)
					}
				}
				if b.TotalCalls() == 0 {
					t.Errorf("%s never reached cluster B", tc.name)
				}

				c = pinnedClient(t, "cluster-a", noBatching, addrB, addrA)
				tok, err = tc.call(ctx, c)
				if err != nil {
					t.Fatalf("%s with endpoints B, A: %v", tc.name, err)
				}
				if tok != 7 && tc.name != "Release" {
					t.Errorf("%s with endpoints B, A returned token %d: cluster B's answer, not A's (7)", tc.name, tok)
				}
				if a.TotalCalls() == 0 {
					t.Errorf("%s never reached cluster A", tc.name)
				}
			})
		}
	}
}

// TestPinsTheFirstClusterThatAnswers: a client without a configured
// cluster ID pins the first one it sees, and from then on refuses the
// other cluster, errors included (a LEASE_HELD from B says nothing about
// A).
func TestPinsTheFirstClusterThatAnswers(t *testing.T) {
	// down makes A answer unavailable (no leader).
	var down atomic.Bool
	a := clusterFake("cluster-a", 7)
	a.Acquire = func(_ context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
		if down.Load() {
			return nil, unavailable()
		}
		return &tenurev1.AcquireResponse{Lease: protoLease(req.GetName(), "h", 7)}, nil
	}
	b := clusterFake("cluster-b", 1)
	b.Acquire = func(context.Context, *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
		return nil, wire.ToConnectError(&lease.HeldError{Name: "a", Holder: "other", Token: 1})
	}
	addrA, addrB := fakeserver.Start(t, a), fakeserver.Start(t, b)
	ctx := ctxT(t)

	c := pinnedClient(t, "", false, addrA, addrB)
	if id := c.ClusterID(); id != "" {
		t.Fatalf("ClusterID before any answer = %q, want empty", id)
	}
	if l, err := c.Acquire(ctx, "a", "h", 5*time.Second); err != nil || l.Token != 7 {
		t.Fatalf("Acquire on A: %+v, %v", l, err)
	}
	if id := c.ClusterID(); id != "cluster-a" {
		t.Fatalf("ClusterID after A answered = %q, want cluster-a", id)
	}

	// A stops answering: only B answers, and it is refused until the
	// caller gives up.
	down.Store(true)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	l, err := c.Acquire(short, "a", "h", 5*time.Second)
	if !errors.Is(err, client.ErrOtherCluster) || !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("Acquire with A unavailable and B of another cluster: %+v, %v; want ErrOtherCluster and ErrUnavailable", l, err)
	}
	if errors.Is(err, client.ErrLeaseHeld) {
		t.Errorf("Acquire returned cluster B's LEASE_HELD: %v", err)
	}
	if l.Token != 0 {
		t.Errorf("Acquire returned a grant (token %d) with its error", l.Token)
	}
	if b.Calls("Batch")+b.Calls("Acquire") == 0 {
		t.Errorf("cluster B was never asked: the test proves nothing")
	}

	// A is back: the next call goes there.
	down.Store(false)
	if l, err := c.Acquire(ctx, "a", "h", 5*time.Second); err != nil || l.Token != 7 {
		t.Fatalf("Acquire after A came back: %+v, %v", l, err)
	}
	if id := c.ClusterID(); id != "cluster-a" {
		t.Errorf("ClusterID = %q, want cluster-a still", id)
	}
}

// An answer without a cluster ID (an older server, a node that has not
// joined yet) is accepted and pins nothing.
func TestAnswersWithoutClusterIDAreAccepted(t *testing.T) {
	for _, id := range []string{"", "cluster-a"} {
		c := pinnedClient(t, id, false, fakeserver.Start(t, clusterFake("", 3)))
		if l, err := c.Acquire(ctxT(t), "a", "h", 5*time.Second); err != nil || l.Token != 3 {
			t.Fatalf("Acquire pinned to %q from a server without cluster ID: %+v, %v", id, l, err)
		}
		if got := c.ClusterID(); got != id {
			t.Errorf("ClusterID = %q, want %q", got, id)
		}
	}
}

func TestConfigClusterIDIsChecked(t *testing.T) {
	if _, err := client.New(client.Config{Endpoints: []string{"127.0.0.1:7400"}, ClusterID: " a"}); err == nil {
		t.Error("a cluster ID with a leading space was accepted")
	}
}

// TestWatchReconnectsOnlyToItsCluster breaks a watch on cluster A and
// makes A refuse the next watch once: the client meets cluster B on the
// way back and passes over it, so every event after the reset is A's.
func TestWatchReconnectsOnlyToItsCluster(t *testing.T) {
	breakFirst := make(chan struct{})
	var streams atomic.Int32
	a := clusterFake("cluster-a", 7)
	a.Watch = func(ctx context.Context, _ *tenurev1.WatchRequest, send func(*tenurev1.WatchEvent) error) error {
		switch streams.Add(1) {
		case 1:
			if err := sendAll(send, event(tenurev1.WatchEvent_TYPE_CURRENT, "a", 7, 0), event(tenurev1.WatchEvent_TYPE_SYNCED, "", 0, 0)); err != nil {
				return err
			}
			select {
			case <-breakFirst:
				return unavailable()
			case <-ctx.Done():
				return nil
			}
		case 2:
			return unavailable() // the next endpoint, B, is tried
		}
		if err := sendAll(send, event(tenurev1.WatchEvent_TYPE_CURRENT, "a", 7, 0), event(tenurev1.WatchEvent_TYPE_SYNCED, "", 0, 0)); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}
	b := clusterFake("cluster-b", 1)
	addrA, addrB := fakeserver.Start(t, a), fakeserver.Start(t, b)
	c := pinnedClient(t, "", false, addrA, addrB)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ch, err := c.Watch(ctx, "")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	expectEvents(t, ch, "current a/7@0", "synced")
	if id := c.ClusterID(); id != "cluster-a" {
		t.Fatalf("ClusterID after the watch opened on A = %q", id)
	}
	close(breakFirst)
	expectEvents(t, ch, "reset", "current a/7@0", "synced")
	if n := b.Calls("Watch"); n == 0 {
		t.Errorf("cluster B was never asked: the test proves nothing")
	}
	cancel()
	drain(ch)
}
