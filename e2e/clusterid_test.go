package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
)

// clusterID returns the cluster ID that `tenure status -o json` shows for
// the node at api.
func clusterID(t *testing.T, api string) string {
	t.Helper()
	r := cli(t, api, "status", "-o", "json")
	mustCode(t, 0, r, "status of "+api)
	var st struct {
		ClusterID string `json:"cluster_id"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &st); err != nil || st.ClusterID == "" {
		t.Fatalf("status of %s shows no cluster ID: %v (%v)", api, r, err)
	}
	return st.ClusterID
}

func newClient(t *testing.T, clusterID string, endpoints ...string) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Endpoints = endpoints
	cfg.ClusterID = clusterID
	cfg.RequestTimeout = 2 * time.Second
	c, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestClientRefusesAnotherCluster runs two single-node clusters, A and
// B. A client that talked to A uses A when both are in its endpoint list,
// whichever comes first. When A's address is taken over by a node of a
// new cluster (A stopped, and a fresh tenured started without --join on
// its address: it bootstraps a cluster whose tokens start again from 1),
// the client refuses its answers with ErrOtherCluster and reports no
// grant, although the new cluster granted one; the CLI pinned to A exits
// 1 naming both IDs.
func TestClientRefusesAnotherCluster(t *testing.T) {
	a := newServer(t, "a", "", "--election-timeout", "200ms")
	b := newServer(t, "b", "", "--election-timeout", "200ms")
	a.start()
	b.start()
	a.waitReady(20 * time.Second)
	b.waitReady(20 * time.Second)
	idA, idB := clusterID(t, a.api), clusterID(t, b.api)
	if idA == idB {
		t.Fatalf("two clusters bootstrapped with the same ID %s", idA)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A grants a few leases first, so its tokens are above B's.
	c := newClient(t, "", a.api)
	var last client.Lease
	for _, name := range []string{"warm/1", "warm/2", "jobs/x"} {
		l, err := c.Acquire(ctx, name, "a-holder", 10*time.Second)
		if err != nil {
			t.Fatalf("acquire %s on A: %v", name, err)
		}
		last = l
	}
	if got := c.ClusterID(); got != idA {
		t.Fatalf("client pinned %q after talking to A, want A's ID %s", got, idA)
	}

	// Both clusters in the endpoint list, B first: the client pinned to
	// A is served by A, and B's lease table is untouched by reads.
	both := newClient(t, idA, b.api, a.api)
	got, err := both.Get(ctx, "jobs/x")
	if err != nil || got.Token != last.Token || got.Holder != "a-holder" {
		t.Fatalf("Get jobs/x with endpoints B, A pinned to A: %+v, %v; want A's grant (token %d)", got, err, last.Token)
	}
	l, err := both.Acquire(ctx, "jobs/y", "both", 10*time.Second)
	if err != nil || l.Token <= last.Token {
		t.Fatalf("Acquire jobs/y with endpoints B, A pinned to A: %+v, %v; want a grant of A (token above %d)", l, err, last.Token)
	}
	if r := cli(t, b.api, "get", "jobs/y"); r.code != 6 {
		t.Fatalf("B holds jobs/y, acquired by a client pinned to A: %v", r)
	}
	// Only B to talk to: refused.
	onlyB := newClient(t, idA, b.api)
	if _, err := onlyB.Get(ctx, "jobs/x"); !errors.Is(err, client.ErrOtherCluster) {
		t.Fatalf("Get from B pinned to A: %v, want ErrOtherCluster", err)
	}

	// A stops; a fresh node (cluster C) takes over its address.
	a.stop()
	cl := newServer(t, "c", "", "--election-timeout", "200ms")
	cl.node.API, cl.api = a.api, a.api
	cl.start()
	cl.waitReady(20 * time.Second)
	idC := clusterID(t, a.api)
	if idC == idA {
		t.Fatalf("the new node at A's address has A's cluster ID %s", idA)
	}

	l, err = c.Acquire(ctx, "jobs/x", "after", 10*time.Second)
	if !errors.Is(err, client.ErrOtherCluster) {
		t.Fatalf("Acquire from the new cluster at A's address: %+v, %v; want ErrOtherCluster", l, err)
	}
	if l != (client.Lease{}) {
		t.Errorf("Acquire refused with %v still reported a grant: %+v", err, l)
	}
	oc, ok := errors.AsType[*client.OtherClusterError](err)
	if !ok || oc.Endpoint != a.api || oc.Expected != idA || oc.Seen != idC {
		t.Fatalf("error %v (%+v), want endpoint %s, expected %s, seen %s", err, oc, a.api, idA, idC)
	}
	// The request never went out: the acquire travels on the batch
	// connection, whose upgrade is answered with the cluster ID before
	// any call is sent, so the new cluster has no jobs/x.
	r := cli(t, a.api, "get", "jobs/x", "-o", "json")
	mustCode(t, 6, r, "get jobs/x on the new cluster (not found)")
	if _, err := c.Watch(ctx, "jobs/"); !errors.Is(err, client.ErrOtherCluster) {
		t.Errorf("Watch on the new cluster at A's address: %v, want ErrOtherCluster", err)
	}
	if got := c.ClusterID(); got != idA {
		t.Errorf("client's cluster ID changed to %q, want A's %s", got, idA)
	}

	// The CLI pinned to A says what happened and exits 1.
	r = runCLI(t, []string{"TENURE_ENDPOINTS=" + a.api, "TENURE_CLUSTER_ID=" + idA}, nil, "acquire", "jobs/z", "--holder", "cli")
	mustCode(t, 1, r, "acquire pinned to A on the new cluster")
	for _, want := range []string{a.api, idA, idC} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("CLI error %q does not name %s", r.stderr, want)
		}
	}
	if r.stdout != "" {
		t.Errorf("CLI printed a result from the other cluster: %q", r.stdout)
	}
	r = cli(t, a.api, "status")
	mustCode(t, 0, r, "status")
	if !strings.Contains(r.stdout, "cluster        "+idC) {
		t.Errorf("status does not show the cluster ID %s:\n%s", idC, r.stdout)
	}
}
