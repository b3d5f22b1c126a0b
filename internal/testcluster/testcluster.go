// Package testcluster runs in-process clusters (internal/localcluster)
// for tests: a cluster that does not start fails the test, the members
// log to t.Log, and the cluster stops when the test ends. Tests of node,
// server, client and election use it, and so do their testable examples.
package testcluster

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/internal/localcluster"
	"github.com/tenure-io/tenure/node"
)

// Config and Member are localcluster's.
type (
	Config = localcluster.Config
	Member = localcluster.Member
)

// Calm raft timing, for tests of clusters that are not about elections:
// an election timeout long enough that a loaded machine (the race
// detector, other packages testing beside) does not elect by accident,
// and the shortest TTL the node then accepts (twice the timeout).
// Tests about failover keep localcluster's quick default.
const (
	CalmElectionTimeout = time.Second
	CalmMinTTL          = 2 * CalmElectionTimeout
)

// Cluster is a localcluster.Cluster that belongs to a test. Where
// localcluster's methods return an error, these fail the test.
type Cluster struct {
	*localcluster.Cluster
	t   testing.TB
	log *testLog
}

// Start starts a cluster for t and stops it when the test ends. Unless
// cfg.Log is set, the members log to t.Log and Logged finds their lines.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	log := &testLog{t: t}
	t.Cleanup(log.stop) // runs last: t.Log must not be called after the test
	if cfg.Log == nil {
		cfg.Log = slog.NewTextHandler(log, nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lc, err := localcluster.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	t.Cleanup(func() {
		if err := lc.Close(); err != nil {
			t.Errorf("testcluster: %v", err)
		}
	})
	return &Cluster{Cluster: lc, t: t, log: log}
}

// Leader waits up to 10s for the leader that localcluster's WaitLeader
// waits for.
func (c *Cluster) Leader() *Member {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.WaitLeader(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	return l
}

// Crash crashes m; an error marks the test failed.
func (c *Cluster) Crash(m *Member) {
	c.t.Helper()
	if err := c.Cluster.Crash(m); err != nil {
		c.t.Error(err)
	}
}

// Stop stops m gracefully; an error marks the test failed.
func (c *Cluster) Stop(m *Member) {
	c.t.Helper()
	if err := c.Cluster.Stop(m); err != nil {
		c.t.Error(err)
	}
}

// Restart restarts m and returns its new node.
func (c *Cluster) Restart(m *Member) *node.Node {
	c.t.Helper()
	if err := c.Cluster.Restart(m); err != nil {
		c.t.Fatal(err)
	}
	return m.Node
}

// Partition cuts m off from the other members.
func (c *Cluster) Partition(m *Member) {
	c.t.Helper()
	if err := c.Cluster.Partition(m); err != nil {
		c.t.Fatal(err)
	}
}

// Logged reports whether m logged a line containing msg.
func (c *Cluster) Logged(m *Member, msg string) bool {
	c.log.mu.Lock()
	defer c.log.mu.Unlock()
	for _, l := range c.log.lines {
		if strings.Contains(l, "node="+m.ID) && strings.Contains(l, msg) {
			return true
		}
	}
	return false
}

// Eventually polls cond until it returns nil, or fails t after timeout
// with what was awaited and cond's last answer.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := localcluster.Poll(ctx, what, cond); err != nil {
		t.Fatal(err)
	}
}

// testLog keeps the members' log lines and passes them to t.Log until the
// test's cleanup stops it.
type testLog struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
	done  bool
}

func (l *testLog) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if !l.done {
		l.t.Log(line)
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done = true
}

// TestingM is what a TestMain runs: *testing.M, or a wrapper of it such
// as the one goleak.VerifyTestMain takes.
type TestingM interface{ Run() int }

// RunWithCluster runs m with a one-node cluster for a package's tests and
// testable examples: it starts the cluster, stores its API addresses in
// *endpoints, runs m and stops the cluster, so that goleak, when it wraps
// the result, looks for leaks only after the cluster is gone. It returns
// m's exit code, or 1 if the cluster did not start.
func RunWithCluster(m TestingM, endpoints *[]string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := localcluster.Start(ctx, Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*endpoints = c.Endpoints()
	code := m.Run()
	if err := c.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return max(code, 1)
	}
	return code
}

// WaitWaiters waits until name has n waiters on m, failing t if ctx
// ends first.
func WaitWaiters(t testing.TB, ctx context.Context, m *Member, name string, n int) {
	t.Helper()
	for {
		w := m.Node.Waiters(name)[name]
		if len(w) == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s never had %d waiters (last: %v)", name, n, w)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
