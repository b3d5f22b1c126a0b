package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// endpoints are the API addresses of the in-process cluster the examples
// use; a program lists its cluster's members, e.g. "10.0.0.1:7400".
var endpoints []string

// withExampleCluster runs the tests and examples with a one-node cluster
// for the examples, stopped before goleak looks for leaks.
type withExampleCluster struct{ m testcluster.TestingM }

func (w withExampleCluster) Run() int { return testcluster.RunWithCluster(w.m, &endpoints) }

func ExampleClient_Acquire() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	l, err := c.Acquire(ctx, "example/jobs/nightly", "worker-1", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("granted to", l.Holder)

	_, err = c.Acquire(ctx, "example/jobs/nightly", "worker-2", 10*time.Second)
	var held *client.HeldError
	if errors.As(err, &held) {
		fmt.Println("held by", held.Holder, "with the same token:", held.Token == l.Token)
	}
	fmt.Println(errors.Is(err, client.ErrLeaseHeld))

	// Acquiring again as the holder renews, with the same token.
	again, _ := c.Acquire(ctx, "example/jobs/nightly", "worker-1", 10*time.Second)
	fmt.Println("renewed, same token:", again.Token == l.Token)
	// Output:
	// granted to worker-1
	// held by worker-1 with the same token: true
	// true
	// renewed, same token: true
}

// An operator revokes a grant: the holder's next renewal says why, and
// its token fences nothing. A grant with a lock-delay keeps the name from
// everyone for that long after it expires or is revoked.
func ExampleClient_Revoke() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	l, err := c.Acquire(ctx, "example/jobs/report", "worker-1", 10*time.Second, client.LockDelay(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// As an operator (the admin role, when the cluster authenticates):
	revoked, err := c.Revoke(ctx, "example/jobs/report", l.Token, "stuck on a bad disk")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("revoked the grant of", revoked[0].Holder)

	// The holder learns it at its next renewal, with the reason.
	_, err = c.RenewOne(ctx, "example/jobs/report", l.Token)
	var re *client.RevokedError
	if errors.As(err, &re) {
		fmt.Println("renewal refused:", re.Reason, errors.Is(err, client.ErrStaleToken))
	}

	// The lock-delay keeps the name from everyone for 2s.
	_, err = c.Acquire(ctx, "example/jobs/report", "worker-2", 10*time.Second)
	var held *client.HeldError
	if errors.As(err, &held) && held.LockDelay {
		fmt.Println("in its lock-delay, in all:", held.Ended+held.Remaining)
	}
	// Output:
	// revoked the grant of worker-1
	// renewal refused: stuck on a bad disk true
	// in its lock-delay, in all: 2s
}

// Who held a name, with which token, and how each term ended: the
// history is replicated, so it survives restarts and failovers.
func ExampleClient_History() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	first, err := c.Acquire(ctx, "example/jobs/history", "worker-1", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Put(ctx, "example/report", []byte("done"), "example/jobs/history", first.Token); err != nil {
		log.Fatal(err)
	}
	if err := c.Release(ctx, "example/jobs/history", first.Token); err != nil {
		log.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "example/jobs/history", "worker-2", 10*time.Second); err != nil {
		log.Fatal(err)
	}

	terms, err := c.History(ctx, "example/jobs/history", client.HistoryOptions{})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range terms { // newest first
		ending := string(t.Ending)
		if t.Held() {
			ending = "held"
		}
		fmt.Println(t.Holder, "token", t.Token-first.Token, ending, "writes", t.WritesAccepted, "wall clock", !t.Start.IsZero())
	}
	// Output:
	// worker-2 token 1 held writes 0 wall clock true
	// worker-1 token 0 released writes 1 wall clock true
}

// A fenced write: the store takes a write only with the current grant's
// token, so a holder that lost its lease cannot write late.
func ExampleClient_Put() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	a, _ := c.Acquire(ctx, "example/report", "a", 5*time.Second)
	if _, err := c.Put(ctx, "example/report/data", []byte("from a"), a.Name, a.Token); err != nil {
		log.Fatal(err)
	}
	c.Release(ctx, a.Name, a.Token) // as if a's lease had expired while it was paused

	b, _ := c.Acquire(ctx, "example/report", "b", 5*time.Second)
	if _, err := c.Put(ctx, "example/report/data", []byte("from b"), b.Name, b.Token); err != nil {
		log.Fatal(err)
	}
	_, err = c.Put(ctx, "example/report/data", []byte("late from a"), a.Name, a.Token)
	fmt.Println("a's late write refused:", errors.Is(err, client.ErrStaleToken))

	kv, _ := c.KVGet(ctx, "example/report/data")
	fmt.Printf("%s (token of b: %t)\n", kv.Value, kv.Token == b.Token)
	// Output:
	// a's late write refused: true
	// from b (token of b: true)
}

// Watch first reports the current leases, then every grant, release and
// expiry. After a reconnect it reports EventReset and the current state
// again, so no change goes unnoticed.
func ExampleClient_Watch() {
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	first, _ := c.Acquire(ctx, "example/watched/1", "a", 5*time.Second)
	events, err := c.Watch(ctx, "example/watched/")
	if err != nil {
		log.Fatal(err)
	}
	second, _ := c.Acquire(ctx, "example/watched/2", "b", 5*time.Second)
	c.Release(ctx, first.Name, first.Token)
	c.Release(ctx, second.Name, second.Token)

	for range 5 {
		switch ev := <-events; ev.Type {
		case client.EventSynced, client.EventReset:
			fmt.Println(ev.Type)
		default:
			fmt.Println(ev.Type, ev.Lease.Name, ev.Lease.Holder)
		}
	}
	// Output:
	// current example/watched/1 a
	// synced
	// granted example/watched/2 b
	// released example/watched/1 a
	// released example/watched/2 b
}

// Every answer names its cluster. A client pins the ID it is configured
// with, or else the first one it sees, and refuses answers from any other
// cluster: a stray node that bootstrapped a cluster of its own cannot hand
// out grants whose tokens start again from 1.
func ExampleConfig_clusterID() {
	ctx := context.Background()
	c, err := client.New(client.Config{Endpoints: endpoints})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	st, err := c.Status(ctx) // tenure status shows the ID too
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("pinned on first contact:", c.ClusterID() == st.ClusterID)

	// A client configured for another cluster refuses this one's answers.
	other, err := client.New(client.Config{Endpoints: endpoints, ClusterID: "c-another"})
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	_, err = other.Acquire(ctx, "example/jobs/pinned", "worker-1", 10*time.Second)
	fmt.Println(errors.Is(err, client.ErrOtherCluster))
	if oc, ok := errors.AsType[*client.OtherClusterError](err); ok {
		fmt.Println("expected", oc.Expected, "seen this cluster:", oc.Seen == st.ClusterID)
	}
	// Output:
	// pinned on first contact: true
	// true
	// expected c-another seen this cluster: true
}
