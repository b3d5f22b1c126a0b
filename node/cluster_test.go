package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/tenure-io/tenure/lease"
)

// Cluster tests: three in-process nodes with real bbolt logs and file
// snapshots in temporary directories, linked by raft's in-memory transport
// so that tests can crash, restart and partition nodes.

// ttl outlives every test here (cluster time only moves while a leader
// leads), so no lease expires under a test's feet.
const ttl = time.Minute

// testCluster is a set of nodes joined into one raft cluster.
type testCluster struct {
	t     *testing.T
	mod   func(*Config)
	ids   []string
	dirs  []string
	trans []*raft.InmemTransport
	nodes []*Node // nil while a node is down
	cut   []bool  // partitioned away from every other node
	logs  *logRecorder
}

// newTestCluster starts size nodes: node 0 bootstraps, the others join
// through the leader. It returns once every node sees all of them as voters
// and has applied the leader's log. mod, if not nil, adjusts every node's
// configuration, on restarts too.
func newTestCluster(t *testing.T, size int, mod func(*Config)) *testCluster {
	t.Helper()
	c := &testCluster{
		t:     t,
		mod:   mod,
		trans: make([]*raft.InmemTransport, size),
		nodes: make([]*Node, size),
		cut:   make([]bool, size),
		logs:  &logRecorder{t: t},
	}
	for i := range size {
		c.ids = append(c.ids, fmt.Sprintf("n%d", i))
		c.dirs = append(c.dirs, t.TempDir())
	}
	// Registered after the TempDirs, so it runs before they are removed.
	t.Cleanup(c.stopAll)

	c.start(0, true)
	waitFor(t, "node n0 to bootstrap and lead", 5*time.Second, c.nodes[0].IsLeader)
	ctx := ctxT(t, 20*time.Second)
	for i := 1; i < size; i++ {
		c.start(i, false)
		id := c.ids[i]
		if err := c.leader().Join(ctx, id, id, "api-"+id); err != nil {
			t.Fatalf("join %s: %v", id, err)
		}
	}
	c.eventually("every node to see all nodes as voters", 10*time.Second, func() error {
		for i, n := range c.nodes {
			voters := 0
			for _, m := range n.Status().Members {
				if m.Voter {
					voters++
				}
			}
			if voters != size {
				return fmt.Errorf("%s sees %d voters: %+v", c.ids[i], voters, n.Status().Members)
			}
		}
		return nil
	})
	c.waitConverged("the new cluster to converge")
	return c
}

// start creates node i from its data directory with a fresh transport,
// linked both ways to every running node that is not partitioned.
func (c *testCluster) start(i int, bootstrap bool) *Node {
	c.t.Helper()
	addr, tr := raft.NewInmemTransport(raft.ServerAddress(c.ids[i]))
	c.trans[i] = tr
	c.cut[i] = false
	for j, other := range c.nodes {
		if j == i || other == nil || c.cut[j] {
			continue
		}
		tr.Connect(raft.ServerAddress(c.ids[j]), c.trans[j])
		c.trans[j].Connect(addr, tr)
	}
	cfg := testConfig(c.t, c.ids[i])
	cfg.DataDir = c.dirs[i]
	cfg.Transport = tr
	cfg.Bootstrap = bootstrap
	cfg.Logger = c.logs.logger(c.ids[i])
	if c.mod != nil {
		c.mod(&cfg)
	}
	n := mustNode(c.t, cfg)
	c.nodes[i] = n
	return n
}

// restart starts node i again from its data directory.
func (c *testCluster) restart(i int) *Node {
	c.t.Helper()
	if c.nodes[i] != nil {
		c.t.Fatalf("restart %s: it is still running", c.ids[i])
	}
	return c.start(i, false)
}

// crash stops node i as abruptly as raft allows (no leadership transfer)
// and unlinks it from the others.
func (c *testCluster) crash(i int) {
	c.t.Helper()
	n := c.nodes[i]
	if n == nil {
		c.t.Fatalf("crash %s: it is not running", c.ids[i])
	}
	c.unlink(i)
	if err := n.stop(false); err != nil {
		c.t.Errorf("crash %s: %v", c.ids[i], err)
	}
	c.nodes[i] = nil
}

// close shuts node i down gracefully (Close, which transfers leadership)
// and unlinks it from the others.
func (c *testCluster) close(i int) {
	c.t.Helper()
	if err := c.nodes[i].Close(); err != nil {
		c.t.Errorf("close %s: %v", c.ids[i], err)
	}
	c.unlink(i)
	c.nodes[i] = nil
}

func (c *testCluster) unlink(i int) {
	addr := raft.ServerAddress(c.ids[i])
	for j := range c.nodes {
		if j != i && c.trans[j] != nil {
			c.trans[j].Disconnect(addr)
		}
	}
	c.trans[i].DisconnectAll()
}

// partition cuts every link between node i and the others.
func (c *testCluster) partition(i int) {
	c.unlink(i)
	c.cut[i] = true
}

// heal links every pair of running nodes again.
func (c *testCluster) heal() {
	for i, a := range c.nodes {
		c.cut[i] = false
		for j, b := range c.nodes {
			if i != j && a != nil && b != nil {
				c.trans[i].Connect(raft.ServerAddress(c.ids[j]), c.trans[j])
			}
		}
	}
}

func (c *testCluster) stopAll() {
	for i, n := range c.nodes {
		if n != nil {
			if err := n.stop(false); err != nil {
				c.t.Errorf("stop %s: %v", c.ids[i], err)
			}
			c.nodes[i] = nil
		}
	}
	for _, tr := range c.trans {
		if tr != nil {
			tr.Close()
		}
	}
}

// running returns the indexes of the running nodes.
func (c *testCluster) running() []int {
	var idx []int
	for i, n := range c.nodes {
		if n != nil {
			idx = append(idx, i)
		}
	}
	return idx
}

// others returns the indexes of the running nodes other than i.
func (c *testCluster) others(i int) []int {
	var idx []int
	for _, j := range c.running() {
		if j != i {
			idx = append(idx, j)
		}
	}
	return idx
}

// leader waits until exactly one running node that is not partitioned
// away leads (and has taken over), and returns it.
func (c *testCluster) leader() *Node {
	c.t.Helper()
	return c.nodes[c.leaderIndex()]
}

func (c *testCluster) leaderIndex() int {
	c.t.Helper()
	var idx []int
	for _, i := range c.running() {
		if !c.cut[i] {
			idx = append(idx, i)
		}
	}
	return c.leaderAmong(idx...)
}

// leaderAmong waits until exactly one of the nodes idx leads and returns
// its index.
func (c *testCluster) leaderAmong(idx ...int) int {
	c.t.Helper()
	names := make([]string, len(idx))
	for k, i := range idx {
		names[k] = c.ids[i]
	}
	found := -1
	c.eventually("exactly one leader among "+strings.Join(names, ","), 10*time.Second, func() error {
		var leaders []string
		found = -1
		for _, i := range idx {
			// IsLeader lags raft's step-down a little; ask both.
			if n := c.nodes[i]; n != nil && n.IsLeader() && n.raft.State() == raft.Leader {
				leaders = append(leaders, c.ids[i])
				found = i
			}
		}
		if len(leaders) != 1 {
			return fmt.Errorf("leaders: %v", leaders)
		}
		return nil
	})
	return found
}

// eventually polls cond until it returns nil, or fails the test with what
// was awaited and the last reason it was not there yet.
func (c *testCluster) eventually(what string, timeout time.Duration, cond func() error) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stateBytes returns node n's lease state in the lease snapshot format,
// which is deterministic: equal states give equal bytes.
func stateBytes(t testing.TB, n *Node) []byte {
	t.Helper()
	var buf bytes.Buffer
	n.fsm.mu.RLock()
	err := n.fsm.st.WriteSnapshot(&buf)
	n.fsm.mu.RUnlock()
	if err != nil {
		t.Fatalf("write state of %s: %v", n.ID(), err)
	}
	return buf.Bytes()
}

// stateCopy returns a private copy of node n's lease state, to query with
// Apply without touching the node.
func stateCopy(t testing.TB, n *Node) *lease.State {
	t.Helper()
	st, err := lease.ReadSnapshot(bytes.NewReader(stateBytes(t, n)))
	if err != nil {
		t.Fatalf("copy state of %s: %v", n.ID(), err)
	}
	return st
}

// waitConverged waits until every running node has applied the same raft
// index and holds byte-identical lease state and the same members.
func (c *testCluster) waitConverged(what string) {
	c.t.Helper()
	c.eventually(what+" (equal applied index and state on every running node)", 15*time.Second, func() error {
		idx := c.running()
		ref := c.nodes[idx[0]]
		refApplied, refState := ref.raft.AppliedIndex(), stateBytes(c.t, ref)
		for _, i := range idx[1:] {
			n := c.nodes[i]
			if a := n.raft.AppliedIndex(); a != refApplied {
				return fmt.Errorf("%s applied index %d, %s %d", n.ID(), a, ref.ID(), refApplied)
			}
			if s := stateBytes(c.t, n); !bytes.Equal(s, refState) {
				return fmt.Errorf("states differ at index %d:\n%s: %s%s: %s", refApplied, n.ID(), s, ref.ID(), refState)
			}
		}
		return nil
	})
}

// logRecorder keeps every node log line of a cluster so that a test can
// check what a node reported; warnings and errors also go to t.Log.
type logRecorder struct {
	t     testing.TB
	mu    sync.Mutex
	lines []string
}

func (r *logRecorder) logger(id string) *slog.Logger {
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelInfo})).With("node", id)
}

func (r *logRecorder) Write(p []byte) (int, error) {
	line := string(p)
	r.mu.Lock()
	r.lines = append(r.lines, line)
	r.mu.Unlock()
	if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
		r.t.Log(line)
	}
	return len(p), nil
}

// logged reports whether node id logged a line containing msg.
func (r *logRecorder) logged(id, msg string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if strings.Contains(l, "node="+id) && strings.Contains(l, msg) {
			return true
		}
	}
	return false
}

// doFunc proposes ops and returns their results, like Node.Do.
type doFunc func(ctx context.Context, ops ...lease.Op) ([]lease.Result, error)

// do proposes ops through the current leader. If leadership moves while
// they are in flight (the 100ms raft timing makes that possible on a
// loaded machine), it retries them through the next leader. Callers only
// pass ops that are safe to repeat: an acquire by the same holder renews
// the same grant, a put of the same value with the same token is accepted
// again, reads read.
func (c *testCluster) do(ctx context.Context, ops ...lease.Op) ([]lease.Result, error) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		n := c.leader()
		res, err := n.Do(ctx, ops...)
		if err == nil || attempt == 5 || ctx.Err() != nil ||
			!(errors.Is(err, ErrNotLeader) || errors.Is(err, ErrIndeterminate) || errors.Is(err, ErrNoLeader)) {
			return res, err
		}
		c.t.Logf("leadership moved while %s served %d ops; retrying: %v", n.ID(), len(ops), err)
	}
}

func do1(ctx context.Context, do doFunc, op lease.Op) (lease.Result, error) {
	res, err := do(ctx, op)
	if err != nil {
		return lease.Result{}, err
	}
	return res[0], res[0].Err
}

// ledger records every acknowledged grant and write.
type ledger struct {
	mu       sync.Mutex
	leases   map[string]lease.Lease // name -> acknowledged grant
	kv       map[string]kvWrite     // key -> last acknowledged write
	maxToken uint64
}

type kvWrite struct {
	value []byte
	token uint64
}

func newLedger() *ledger {
	return &ledger{leases: make(map[string]lease.Lease), kv: make(map[string]kvWrite)}
}

func (l *ledger) granted(g lease.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leases[g.Name] = g
	l.maxToken = max(l.maxToken, g.Token)
}

func (l *ledger) wrote(key string, value []byte, token uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kv[key] = kvWrite{value: value, token: token}
}

func (l *ledger) max() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxToken
}

func (l *ledger) lease(name string) lease.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.leases[name]
}

func (l *ledger) size() (int, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.leases), len(l.kv)
}

func acquireOp(name, holder string) lease.Op {
	return lease.Op{Type: lease.OpAcquire, Name: name, Holder: holder, TTL: ttl}
}

func putOp(key string, value []byte, name string, token uint64) lease.Op {
	return lease.Op{Type: lease.OpPut, Key: key, Value: value, Name: name, Token: token}
}

// grant acquires name for holder, records the grant and returns it.
func (l *ledger) grant(t testing.TB, ctx context.Context, do doFunc, name, holder string) lease.Lease {
	t.Helper()
	res, err := do1(ctx, do, acquireOp(name, holder))
	if err != nil {
		t.Fatalf("acquire %s for %s: %v", name, holder, err)
	}
	if res.Lease.Name != name || res.Lease.Holder != holder || res.Lease.Token == 0 {
		t.Fatalf("acquire %s for %s returned %+v", name, holder, res.Lease)
	}
	l.granted(res.Lease)
	return res.Lease
}

// put writes key with the grant g, and records the write.
func (l *ledger) put(t testing.TB, ctx context.Context, do doFunc, key, value string, g lease.Lease) {
	t.Helper()
	if _, err := do1(ctx, do, putOp(key, []byte(value), g.Name, g.Token)); err != nil {
		t.Fatalf("put %s with %s/%d: %v", key, g.Name, g.Token, err)
	}
	l.wrote(key, []byte(value), g.Token)
}

// fill grants count leases named prefix0.. and writes a few values with
// each.
func (l *ledger) fill(t testing.TB, ctx context.Context, do doFunc, prefix string, count int) {
	t.Helper()
	for i := range count {
		name := prefix + strconv.Itoa(i)
		g := l.grant(t, ctx, do, name, "holder-"+name)
		l.put(t, ctx, do, name+"/k1", "first "+name, g)
		l.put(t, ctx, do, name+"/k2", "second "+name, g)
		l.put(t, ctx, do, name+"/k1", "third "+name, g)
	}
}

// verify checks through the leader that every acknowledged grant is still
// held with its holder and token, and every acknowledged write is readable
// with its token.
func (l *ledger) verify(t testing.TB, ctx context.Context, do doFunc) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var ops []lease.Op
	for name := range l.leases {
		ops = append(ops, lease.Op{Type: lease.OpGet, Name: name})
	}
	for key := range l.kv {
		ops = append(ops, lease.Op{Type: lease.OpKVGet, Key: key})
	}
	res, err := do(ctx, ops...)
	if err != nil {
		t.Fatalf("reading %d leases and keys through the leader: %v", len(ops), err)
	}
	for i, op := range ops {
		l.check(t, "leader", op, res[i])
	}
}

// verifyState checks the same against a copy of node n's applied state,
// which works on followers too.
func (l *ledger) verifyState(t testing.TB, n *Node) {
	t.Helper()
	st := stateCopy(t, n)
	l.mu.Lock()
	defer l.mu.Unlock()
	where := n.ID() + " (applied state)"
	for name := range l.leases {
		op := lease.Op{Type: lease.OpGet, Name: name}
		res, _ := st.Apply(lease.Batch{Ops: []lease.Op{op}})
		l.check(t, where, op, res[0])
	}
	for key := range l.kv {
		op := lease.Op{Type: lease.OpKVGet, Key: key}
		res, _ := st.Apply(lease.Batch{Ops: []lease.Op{op}})
		l.check(t, where, op, res[0])
	}
	if got := st.LastToken(); got < l.maxToken {
		t.Errorf("%s: last token %d is below the acknowledged token %d", where, got, l.maxToken)
	}
}

// check compares the result of an OpGet or OpKVGet with the ledger; l.mu
// is held.
func (l *ledger) check(t testing.TB, where string, op lease.Op, r lease.Result) {
	t.Helper()
	switch op.Type {
	case lease.OpGet:
		want := l.leases[op.Name]
		if r.Err != nil {
			t.Errorf("%s: acknowledged lease %s (holder %s, token %d) is gone: %v", where, op.Name, want.Holder, want.Token, r.Err)
		} else if r.Lease.Holder != want.Holder || r.Lease.Token != want.Token {
			t.Errorf("%s: lease %s is %s/%d, acknowledged as %s/%d", where, op.Name, r.Lease.Holder, r.Lease.Token, want.Holder, want.Token)
		}
	case lease.OpKVGet:
		want := l.kv[op.Key]
		if r.Err != nil {
			t.Errorf("%s: acknowledged write of %s (%q, token %d) is gone: %v", where, op.Key, want.value, want.token, r.Err)
		} else if !bytes.Equal(r.Entry.Value, want.value) || r.Entry.Token != want.token {
			t.Errorf("%s: key %s is %q/%d, acknowledged as %q/%d", where, op.Key, r.Entry.Value, r.Entry.Token, want.value, want.token)
		}
	}
}

// checkNewToken grants a fresh name and checks its token is above every
// token granted before.
func checkNewToken(t testing.TB, ctx context.Context, do doFunc, name string, above uint64) lease.Lease {
	t.Helper()
	res, err := do1(ctx, do, acquireOp(name, "fresh"))
	if err != nil {
		t.Fatalf("acquire fresh lease %s: %v", name, err)
	}
	if res.Lease.Token <= above {
		t.Fatalf("fresh grant of %s got token %d, not above the earlier maximum %d", name, res.Lease.Token, above)
	}
	return res.Lease
}

func TestClusterLeaderKilled(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := ctxT(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "a", 4)

	// Keep acquiring and writing through the leader while it is killed;
	// what it acknowledged before dying must survive.
	li := c.leaderIndex()
	old := c.nodes[li]
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			name := "bg" + strconv.Itoa(i)
			res, err := old.Do1(ctx, acquireOp(name, "bg"))
			if err != nil {
				done <- fmt.Errorf("acquire %s: %w", name, err)
				return
			}
			led.granted(res.Lease)
			val := []byte("bg value " + strconv.Itoa(i))
			if _, err := old.Do1(ctx, putOp(name+"/k", val, name, res.Lease.Token)); err != nil {
				done <- fmt.Errorf("put %s/k: %w", name, err)
				return
			}
			led.wrote(name+"/k", val, res.Lease.Token)
		}
	}()
	waitFor(t, "the leader to acknowledge 5 background grants", 10*time.Second, func() bool {
		n, _ := led.size()
		return n >= 4+5
	})
	c.crash(li)
	err := <-done
	if !errors.Is(err, ErrClosed) && !errors.Is(err, ErrIndeterminate) && !errors.Is(err, ErrNotLeader) {
		t.Fatalf("background writer on the killed leader ended with %v, want %v, %v or %v", err, ErrClosed, ErrIndeterminate, ErrNotLeader)
	}

	start := time.Now()
	nl := c.leader()
	el := time.Since(start)
	if el > 5*time.Second {
		t.Errorf("electing a new leader took %s", el)
	}
	leases, writes := led.size()
	t.Logf("%s led %s after %s was killed; checking %d acknowledged grants and %d writes", nl.ID(), el, old.ID(), leases, writes)
	led.verify(t, ctx, c.do)
	checkNewToken(t, ctx, c.do, "after-failover", led.max())
}

func TestClusterPartitionedLeader(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := ctxT(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "p", 2)
	a := led.grant(t, ctx, c.do, "shared", "h1")
	led.put(t, ctx, c.do, "shared/k", "v1", a)

	li := c.leaderIndex()
	old := c.nodes[li]
	c.partition(li)

	// Without a quorum the old leader cannot commit: the acquire fails
	// (leadership lost, not leader, or the context ends) and grants
	// nothing.
	octx, cancel := context.WithTimeout(ctx, time.Second)
	res, err := old.Do(octx, acquireOp("orphan", "old-side"))
	cancel()
	if err == nil {
		t.Fatalf("partitioned leader %s acknowledged an acquire without a quorum: %+v", old.ID(), res)
	}
	if res != nil {
		t.Fatalf("partitioned leader %s returned results with its error %v: %+v", old.ID(), err, res)
	}
	t.Logf("acquire on the partitioned leader failed as expected: %v", err)

	// The majority elects a leader that serves: release h1's grant and
	// give the name to h2 in one entry. (If that entry is retried after a
	// leadership change, the release finds the grant already gone and the
	// acquire renews h2's grant.)
	res, err = c.do(ctx,
		lease.Op{Type: lease.OpRelease, Name: "shared", Token: a.Token},
		acquireOp("shared", "h2"))
	if err != nil {
		t.Fatalf("release shared/%d and acquire it for h2 on the majority side: %v", a.Token, err)
	}
	if res[0].Err != nil && !errors.Is(res[0].Err, lease.ErrStaleToken) {
		t.Fatalf("release shared/%d on the majority side: %v", a.Token, res[0].Err)
	}
	if res[1].Err != nil || res[1].Lease.Holder != "h2" {
		t.Fatalf("acquire shared for h2 on the majority side: %+v, %v", res[1].Lease, res[1].Err)
	}
	b := res[1].Lease
	led.granted(b)
	if b.Token <= a.Token {
		t.Fatalf("the majority granted token %d, not above %d", b.Token, a.Token)
	}
	led.put(t, ctx, c.do, "shared/k", "v2", b)
	led.fill(t, ctx, c.do, "q", 2)

	// A put with h1's old token fails on both sides.
	octx, cancel = context.WithTimeout(ctx, time.Second)
	_, err = old.Do1(octx, putOp("shared/k", []byte("stale"), "shared", a.Token))
	cancel()
	if err == nil {
		t.Fatalf("partitioned old leader %s accepted a put with the stale token %d", old.ID(), a.Token)
	}
	_, err = do1(ctx, c.do, putOp("shared/k", []byte("stale"), "shared", a.Token))
	if !errors.Is(err, lease.ErrStaleToken) {
		t.Fatalf("put with the stale token %d on the majority side: got %v, want %v", a.Token, err, lease.ErrStaleToken)
	}
	if l, ok := stateCopy(t, old).Lease("orphan"); ok {
		t.Fatalf("partitioned old leader applied its uncommitted grant %+v", l)
	}
	before := led.max()

	c.heal()
	c.eventually("the old leader "+old.ID()+" to follow after healing", 10*time.Second, func() error {
		if old.IsLeader() || old.raft.State() == raft.Leader {
			return fmt.Errorf("%s still leads (%s)", old.ID(), old.raft.State())
		}
		return nil
	})
	c.waitConverged("the old leader to catch up after healing")
	if got, want := old.Status().LastToken, c.leader().Status().LastToken; got != want {
		t.Fatalf("old leader's last token %d, leader's %d", got, want)
	}
	led.verifyState(t, old)
	led.verify(t, ctx, c.do)
	if r, err := do1(ctx, c.do, lease.Op{Type: lease.OpGet, Name: "orphan"}); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("the partitioned leader's uncommitted grant: got %+v, %v; want %v", r.Lease, err, lease.ErrNotFound)
	}
	checkNewToken(t, ctx, c.do, "after-heal", before)
}

func TestClusterFollowerRestart(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := ctxT(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "before", 3)

	fi := c.others(c.leaderIndex())[0]
	c.crash(fi)
	led.fill(t, ctx, c.do, "during", 5)
	// Overwrite an earlier key while the follower is down.
	led.put(t, ctx, c.do, "before0/k1", "rewritten", led.lease("before0"))

	f := c.restart(fi)
	c.waitConverged("restarted follower " + f.ID() + " to catch up")
	if got, want := f.Status().LastToken, c.leader().Status().LastToken; got != want {
		t.Fatalf("restarted follower's last token %d, leader's %d", got, want)
	}
	led.verifyState(t, f)
	led.verify(t, ctx, c.do)
}

func TestClusterFullRestart(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := ctxT(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "r", 5)
	maxToken := led.max()

	for _, i := range c.running() {
		c.crash(i)
	}
	for i := range c.nodes {
		c.restart(i)
	}
	led.verify(t, ctx, c.do)
	checkNewToken(t, ctx, c.do, "after-restart", maxToken)
	c.waitConverged("all nodes to converge after the full restart")
	for _, i := range c.running() {
		led.verifyState(t, c.nodes[i])
	}
}

func TestClusterSnapshotCompaction(t *testing.T) {
	const trailing = 16
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotThreshold = 64
		cfg.SnapshotInterval = 100 * time.Millisecond
		cfg.TrailingLogs = trailing
	})
	ctx := ctxT(t, 40*time.Second)
	led := newLedger()

	// One op per raft entry: each call waits for the previous one.
	ops := 0
	churn := func(prefix string, rounds int) {
		for i := range rounds {
			name := fmt.Sprintf("%s%d", prefix, i%10)
			g := led.grant(t, ctx, c.do, name, "holder-"+name)
			led.put(t, ctx, c.do, name+"/k", fmt.Sprintf("%s round %d", name, i), g)
			led.put(t, ctx, c.do, fmt.Sprintf("%s/k%d", prefix, i), "v", g)
			ops += 3
		}
	}
	churn("s", 100)
	snapIndex := func(n *Node) uint64 {
		v, _ := strconv.ParseUint(n.raft.Stats()["last_snapshot_index"], 10, 64)
		return v
	}
	c.eventually("every node to take a snapshot", 10*time.Second, func() error {
		for _, i := range c.running() {
			if snapIndex(c.nodes[i]) == 0 {
				return fmt.Errorf("%s has no snapshot yet", c.ids[i])
			}
		}
		return nil
	})
	c.waitConverged("the cluster to converge after " + strconv.Itoa(ops) + " ops")

	// Restart a follower from disk: it restores its own snapshot, then
	// replays the log entries after it.
	fi := c.others(c.leaderIndex())[0]
	c.crash(fi)
	fSnap := diskSnapshot(t, c.dirs[fi])
	first, last := logBounds(t, c.dirs[fi])
	if first <= 1 || first > fSnap+1 {
		t.Fatalf("%s's log was not compacted: it holds entries %d..%d with a snapshot at %d", c.ids[fi], first, last, fSnap)
	}
	t.Logf("%s crashed with a snapshot at %d and log entries %d..%d", c.ids[fi], fSnap, first, last)
	f := c.restart(fi)
	if got := f.raft.AppliedIndex(); got < fSnap {
		t.Fatalf("restarted %s applied index %d, below its snapshot at %d: the snapshot was not restored", f.ID(), got, fSnap)
	}
	c.waitConverged("restarted follower " + f.ID() + " to catch up from its own snapshot and log")
	led.verifyState(t, f)

	// Crash it again and let the leader compact past the end of its log:
	// on restart the leader must send it a snapshot.
	c.crash(fi)
	_, last = logBounds(t, c.dirs[fi])
	for snapIndex(c.leader()) <= last+trailing+8 {
		churn("t", 20)
	}
	f = c.restart(fi)
	c.waitConverged("restarted follower " + f.ID() + " to catch up from the leader's snapshot")
	if got := snapIndex(f); got <= last {
		t.Fatalf("%s's snapshot index %d is not past its old log end %d: no snapshot was installed", f.ID(), got, last)
	}
	led.verifyState(t, f)
	led.verify(t, ctx, c.do)
	t.Logf("%d ops; leader's snapshot at %d", ops, snapIndex(c.leader()))
}

// diskSnapshot returns the index of the newest snapshot in a stopped
// node's data directory.
func diskSnapshot(t testing.TB, dir string) uint64 {
	t.Helper()
	store, err := raft.NewFileSnapshotStore(dir, 2, io.Discard)
	if err != nil {
		t.Fatalf("open snapshots in %s: %v", dir, err)
	}
	snaps, err := store.List()
	if err != nil {
		t.Fatalf("list snapshots in %s: %v", dir, err)
	}
	if len(snaps) == 0 {
		t.Fatalf("no snapshot in %s", dir)
	}
	return snaps[0].Index
}

// logBounds opens a stopped node's raft log and returns its first and last
// index.
func logBounds(t testing.TB, dir string) (first, last uint64) {
	t.Helper()
	store, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		t.Fatalf("open raft log in %s: %v", dir, err)
	}
	defer store.Close()
	if first, err = store.FirstIndex(); err != nil {
		t.Fatal(err)
	}
	if last, err = store.LastIndex(); err != nil {
		t.Fatal(err)
	}
	return first, last
}

func TestClusterTransferLeadership(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	ctx := ctxT(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "x", 3)

	li := c.leaderIndex()
	l := c.nodes[li]
	id, err := l.TransferLeadership(ctx, "")
	if err != nil {
		t.Fatalf("transfer leadership away from %s: %v", l.ID(), err)
	}
	ni := c.leaderIndex()
	nl := c.nodes[ni]
	if ni == li {
		t.Fatalf("%s still leads after transferring leadership", l.ID())
	}
	if id != nl.ID() {
		t.Errorf("TransferLeadership returned %q, but %s took over", id, nl.ID())
	}
	led.verify(t, ctx, c.do)
	led.fill(t, ctx, c.do, "y", 3)

	// A graceful Close of the leader hands leadership over first.
	ni = c.leaderIndex()
	nl = c.nodes[ni]
	start := time.Now()
	c.close(ni)
	closed := time.Since(start)
	ml := c.leader()
	el := time.Since(start)
	t.Logf("closed leader %s in %s; %s led after %s", nl.ID(), closed, ml.ID(), el)
	if !c.logs.logged(nl.ID(), "transferred leadership before shutdown") {
		t.Errorf("closing leader %s did not transfer leadership", nl.ID())
	}
	if el > 2*time.Second {
		t.Errorf("the cluster had no leader for %s after its leader closed", el)
	}
	led.verify(t, ctx, c.do)
	checkNewToken(t, ctx, c.do, "after-close", led.max())
}
