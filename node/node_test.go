package node

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/tenure-io/tenure/lease"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig returns fast raft timing for loopback tests.
func testConfig(t testing.TB, id string) Config {
	cfg := DefaultConfig()
	cfg.ID = id
	cfg.APIAddr = "api-" + id
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	cfg.Limits.MinTTL = 200 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.RaftLogOutput = io.Discard
	return cfg
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

func mustNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return n
}

// waitFor polls cond until it holds or the deadline passes, then fails
// with what was awaited.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSingleNode(t *testing.T) {
	cfg := testConfig(t, "n1")
	cfg.InMemory = true
	cfg.Bootstrap = true
	_, cfg.Transport = raft.NewInmemTransport("n1")
	n := mustNode(t, cfg)
	defer n.Close()
	waitFor(t, "leadership", 5*time.Second, n.IsLeader)

	ctx := ctxT(t, 10*time.Second)
	ttl := 300 * time.Millisecond
	a, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "a", TTL: ttl})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	_, err = n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "b", TTL: ttl})
	var held *lease.HeldError
	if !errors.As(err, &held) || held.Holder != "a" {
		t.Fatalf("second acquire: got %v, want held by a", err)
	}

	// A waiting acquire is granted when the expirer frees the lease.
	w, err := n.Watch("")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Cancel()
	start := time.Now()
	got, err := n.Acquire(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "b", TTL: ttl, Wait: true, WaitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("waiting acquire: %v", err)
	}
	if got.Lease.Holder != "b" || got.Lease.Token <= a.Lease.Token {
		t.Fatalf("waiting acquire got %+v, want holder b with token > %d", got.Lease, a.Lease.Token)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("grant after expiry took %s", el)
	}
	var types []lease.EventType
	for len(types) < 2 {
		ev := <-w.Events
		types = append(types, ev.Type)
	}
	if types[0] != lease.EventExpired || types[1] != lease.EventGranted {
		t.Fatalf("events %v, want expired then granted", types)
	}
}
