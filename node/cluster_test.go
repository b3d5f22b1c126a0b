package node_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/localcluster"
	"github.com/tenure-io/tenure/internal/raftlog"
	"github.com/tenure-io/tenure/internal/testcluster"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
)

// Cluster tests: three in-process nodes with real bbolt logs and file
// snapshots in temporary directories, linked by raft's in-memory transport
// so that tests can crash, restart and partition nodes. They are outside
// package node because internal/testcluster imports it; export_test.go
// lets them read a node's state.

// ttl outlives every test here (cluster time only moves while a leader
// leads), so no lease expires under a test's feet.
const ttl = time.Minute

// cluster is a three-node test cluster and what the tests below do with
// it.
type cluster struct {
	*testcluster.Cluster
	t *testing.T
}

// newCluster starts three nodes and returns once every node sees all of
// them as voters and has applied the leader's log. mod, if not nil,
// adjusts every node's configuration, on restarts too.
func newCluster(t *testing.T, mod func(*node.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, Cluster: testcluster.Start(t, testcluster.Config{
		Size:    3,
		Network: localcluster.InMemory,
		DataDir: t.TempDir(),
		NoAPI:   true,
		Node: func(cfg *node.Config) {
			cfg.LeaderLeaseTimeout = cfg.HeartbeatTimeout
			if mod != nil {
				mod(cfg)
			}
		},
	})}
	c.waitConverged("the new cluster to converge")
	return c
}

// others returns the running members other than m.
func (c *cluster) others(m *testcluster.Member) []*testcluster.Member {
	var out []*testcluster.Member
	for _, o := range c.Running() {
		if o != m {
			out = append(out, o)
		}
	}
	return out
}

// within returns a context that ends after d or with the test.
func within(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// stateBytes returns node n's lease state in the lease snapshot format,
// which is deterministic: equal states give equal bytes.
func stateBytes(t testing.TB, n *node.Node) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := n.WriteState(&buf); err != nil {
		t.Fatalf("write state of %s: %v", n.ID(), err)
	}
	return buf.Bytes()
}

// stateCopy returns a private copy of node n's lease state, to query with
// Apply without touching the node.
func stateCopy(t testing.TB, n *node.Node) *lease.State {
	t.Helper()
	st, err := lease.ReadSnapshot(bytes.NewReader(stateBytes(t, n)))
	if err != nil {
		t.Fatalf("copy state of %s: %v", n.ID(), err)
	}
	return st
}

// waitConverged waits until every running node has applied the same raft
// index and holds byte-identical lease state and the same members.
func (c *cluster) waitConverged(what string) {
	c.t.Helper()
	testcluster.Eventually(c.t, what+" (equal applied index and state on every running node)", 15*time.Second, func() error {
		running := c.Running()
		ref := running[0].Node
		refApplied, refState := ref.Status().AppliedIndex, stateBytes(c.t, ref)
		for _, m := range running[1:] {
			n := m.Node
			if a := n.Status().AppliedIndex; a != refApplied {
				return fmt.Errorf("%s applied index %d, %s %d", n.ID(), a, ref.ID(), refApplied)
			}
			if s := stateBytes(c.t, n); !bytes.Equal(s, refState) {
				return fmt.Errorf("states differ at index %d:\n%s: %s%s: %s", refApplied, n.ID(), s, ref.ID(), refState)
			}
		}
		return nil
	})
}

// doFunc proposes ops and returns their results, like Node.Do.
type doFunc func(ctx context.Context, ops ...lease.Op) ([]lease.Result, error)

// do proposes ops through the current leader. If leadership moves while
// they are in flight (the quick raft timing makes that possible on a
// loaded machine), it retries them through the next leader. Callers only
// pass ops that are safe to repeat: an acquire by the same holder renews
// the same grant, a put of the same value with the same token is accepted
// again, reads read.
func (c *cluster) do(ctx context.Context, ops ...lease.Op) ([]lease.Result, error) {
	c.t.Helper()
	for attempt := 1; ; attempt++ {
		n := c.Leader().Node
		res, err := n.Do(ctx, ops...)
		if err == nil || attempt == 5 || ctx.Err() != nil ||
			!(errors.Is(err, node.ErrNotLeader) || errors.Is(err, node.ErrIndeterminate) || errors.Is(err, node.ErrNoLeader)) {
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
func (l *ledger) verifyState(t testing.TB, n *node.Node) {
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
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "a", 4)

	// Keep acquiring and writing through the leader while it is killed;
	// what it acknowledged before dying must survive.
	lm := c.Leader()
	old := lm.Node
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
	testcluster.Eventually(t, "the leader to acknowledge 5 background grants", 10*time.Second, func() error {
		if n, _ := led.size(); n < 4+5 {
			return fmt.Errorf("%d grants", n)
		}
		return nil
	})
	c.Crash(lm)
	err := <-done
	if !errors.Is(err, node.ErrClosed) && !errors.Is(err, node.ErrIndeterminate) && !errors.Is(err, node.ErrNotLeader) {
		t.Fatalf("background writer on the killed leader ended with %v, want %v, %v or %v", err, node.ErrClosed, node.ErrIndeterminate, node.ErrNotLeader)
	}

	start := time.Now()
	nl := c.Leader().Node
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
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "p", 2)
	a := led.grant(t, ctx, c.do, "shared", "h1")
	led.put(t, ctx, c.do, "shared/k", "v1", a)

	lm := c.Leader()
	old := lm.Node
	c.Partition(lm)

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

	c.Heal()
	testcluster.Eventually(t, "the old leader "+old.ID()+" to follow after healing", 10*time.Second, func() error {
		if st := old.Status().State; old.IsLeader() || strings.HasPrefix(st, "leader") {
			return fmt.Errorf("%s still leads (%s)", old.ID(), st)
		}
		return nil
	})
	c.waitConverged("the old leader to catch up after healing")
	if got, want := old.Status().LastToken, c.Leader().Node.Status().LastToken; got != want {
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
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "before", 3)

	fm := c.others(c.Leader())[0]
	c.Crash(fm)
	led.fill(t, ctx, c.do, "during", 5)
	// Overwrite an earlier key while the follower is down.
	led.put(t, ctx, c.do, "before0/k1", "rewritten", led.lease("before0"))

	f := c.Restart(fm)
	c.waitConverged("restarted follower " + f.ID() + " to catch up")
	if got, want := f.Status().LastToken, c.Leader().Node.Status().LastToken; got != want {
		t.Fatalf("restarted follower's last token %d, leader's %d", got, want)
	}
	led.verifyState(t, f)
	led.verify(t, ctx, c.do)
}

func TestClusterFullRestart(t *testing.T) {
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "r", 5)
	maxToken := led.max()

	for _, m := range c.Members() {
		c.Crash(m)
	}
	for _, m := range c.Members() {
		c.Restart(m)
	}
	led.verify(t, ctx, c.do)
	checkNewToken(t, ctx, c.do, "after-restart", maxToken)
	c.waitConverged("all nodes to converge after the full restart")
	for _, m := range c.Members() {
		led.verifyState(t, m.Node)
	}
}

func TestClusterSnapshotCompaction(t *testing.T) {
	const trailing = 16
	c := newCluster(t, func(cfg *node.Config) {
		cfg.SnapshotThreshold = 64
		cfg.SnapshotInterval = 100 * time.Millisecond
		cfg.TrailingLogs = trailing
	})
	ctx := within(t, 40*time.Second)
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
	testcluster.Eventually(t, "every node to take a snapshot", 10*time.Second, func() error {
		for _, m := range c.Running() {
			if m.Node.SnapshotIndex() == 0 {
				return fmt.Errorf("%s has no snapshot yet", m.ID)
			}
		}
		return nil
	})
	c.waitConverged("the cluster to converge after " + strconv.Itoa(ops) + " ops")

	// Restart a follower from disk: it restores its own snapshot, then
	// replays the log entries after it.
	fm := c.others(c.Leader())[0]
	c.Crash(fm)
	fSnap := diskSnapshot(t, fm.DataDir)
	first, last := logBounds(t, fm.DataDir)
	if first <= 1 || first > fSnap+1 {
		t.Fatalf("%s's log was not compacted: it holds entries %d..%d with a snapshot at %d", fm.ID, first, last, fSnap)
	}
	t.Logf("%s crashed with a snapshot at %d and log entries %d..%d", fm.ID, fSnap, first, last)
	f := c.Restart(fm)
	if got := f.Status().AppliedIndex; got < fSnap {
		t.Fatalf("restarted %s applied index %d, below its snapshot at %d: the snapshot was not restored", f.ID(), got, fSnap)
	}
	c.waitConverged("restarted follower " + f.ID() + " to catch up from its own snapshot and log")
	led.verifyState(t, f)

	// Crash it again and let the leader compact past the end of its log:
	// on restart the leader must send it a snapshot.
	c.Crash(fm)
	_, last = logBounds(t, fm.DataDir)
	for c.Leader().Node.SnapshotIndex() <= last+trailing+8 {
		churn("t", 20)
	}
	f = c.Restart(fm)
	c.waitConverged("restarted follower " + f.ID() + " to catch up from the leader's snapshot")
	if got := f.SnapshotIndex(); got <= last {
		t.Fatalf("%s's snapshot index %d is not past its old log end %d: no snapshot was installed", f.ID(), got, last)
	}
	led.verifyState(t, f)
	led.verify(t, ctx, c.do)
	t.Logf("%d ops; leader's snapshot at %d", ops, c.Leader().Node.SnapshotIndex())
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
	first, last, err := raftlog.Inspect(filepath.Join(dir, "raft-log"))
	if err != nil {
		t.Fatalf("read the raft log in %s: %v", dir, err)
	}
	return first, last
}

func TestClusterTransferLeadership(t *testing.T) {
	c := newCluster(t, nil)
	ctx := within(t, 30*time.Second)
	led := newLedger()
	led.fill(t, ctx, c.do, "x", 3)

	lm := c.Leader()
	l := lm.Node
	id, err := l.TransferLeadership(ctx, "")
	if err != nil {
		t.Fatalf("transfer leadership away from %s: %v", l.ID(), err)
	}
	nm := c.Leader()
	nl := nm.Node
	if nm == lm {
		t.Fatalf("%s still leads after transferring leadership", l.ID())
	}
	if id != nl.ID() {
		t.Errorf("TransferLeadership returned %q, but %s took over", id, nl.ID())
	}
	led.verify(t, ctx, c.do)
	led.fill(t, ctx, c.do, "y", 3)

	// A graceful Close of the leader hands leadership over first.
	nm = c.Leader()
	nl = nm.Node
	start := time.Now()
	c.Stop(nm)
	closed := time.Since(start)
	ml := c.Leader().Node
	el := time.Since(start)
	t.Logf("closed leader %s in %s; %s led after %s", nl.ID(), closed, ml.ID(), el)
	if !c.Logged(nm, "transferred leadership before shutdown") {
		t.Errorf("closing leader %s did not transfer leadership", nl.ID())
	}
	if el > 2*time.Second {
		t.Errorf("the cluster had no leader for %s after its leader closed", el)
	}
	led.verify(t, ctx, c.do)
	checkNewToken(t, ctx, c.do, "after-close", led.max())
}

// A voter that comes back without its log is demoted until it has caught
// up, and gets a catch-up index past every entry the leader has; the
// promoter makes it a voter again. A member that kept its log and asks
// to join again changes nothing.
func TestJoinDemotesAVoterThatLostItsLog(t *testing.T) {
	c := newCluster(t, nil)
	ctx := within(t, 20*time.Second)
	// A leader can lose its leadership under load while it serves the
	// join (an admin's call would then be made again): ask the leader of
	// the moment until one answers.
	var (
		l, f  *testcluster.Member
		last  uint64
		index uint64
		err   error
	)
	for {
		l = c.Leader()
		f = c.others(l)[0]
		last = l.Node.Status().LastIndex
		index, err = l.Node.Join(ctx, node.JoinRequest{ID: f.ID, RaftAddr: f.Node.RaftAddr(), APIAddr: "api-" + f.ID, CatchingUp: true})
		if err == nil || !(errors.Is(err, node.ErrNotLeader) || errors.Is(err, node.ErrIndeterminate)) || ctx.Err() != nil {
			break
		}
		t.Logf("join through %s: %v; again", l.ID, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if index <= last {
		t.Fatalf("catch-up index %d is not past the leader's last index %d at the join", index, last)
	}
	suffrage := func() bool {
		for _, m := range l.Node.Status().Members {
			if m.ID == f.ID {
				return m.Voter
			}
		}
		t.Fatalf("%s is no member", f.ID)
		return false
	}
	// The promoter may make it a voter again before a look at the
	// configuration here: the leader's log says it demoted it.
	demoted := false
	for _, m := range c.Running() {
		demoted = demoted || c.Logged(m, "demoted it to a non-voter")
	}
	if !demoted {
		t.Fatalf("no leader demoted %s, which joined again without its log", f.ID)
	}
	for !suffrage() {
		if ctx.Err() != nil {
			t.Fatalf("%s was not made a voter again after it caught up", f.ID)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		l = c.Leader()
		index, err = l.Node.Join(ctx, node.JoinRequest{ID: f.ID, RaftAddr: f.Node.RaftAddr(), APIAddr: "api-" + f.ID})
		if err == nil || !(errors.Is(err, node.ErrNotLeader) || errors.Is(err, node.ErrIndeterminate)) || ctx.Err() != nil {
			break
		}
	}
	if err != nil || index != 0 {
		t.Fatalf("join of a member that kept its log: index %d, %v", index, err)
	}
	if !suffrage() {
		t.Fatalf("a join of a member that kept its log demoted it")
	}
}

// The promoter makes a non-voter a voter only once it says it votes: a
// member promoted while it still refuses to vote (catching up) counts
// toward the quorum, and once the leader steps down nobody can be
// elected (seen under load: a joiner promoted with an empty log, and the
// cluster without a leader from then on).
func TestPromoterWaitsForTheNonVoterToVote(t *testing.T) {
	var (
		target atomic.Value // the API address said to be catching up
		asked  atomic.Int64 // how often the leader asked about it
	)
	target.Store("")
	c := newCluster(t, func(cfg *node.Config) {
		inner := cfg.PeerProgress
		cfg.PeerProgress = func(ctx context.Context, addr string) (node.PeerProgress, error) {
			p, err := inner(ctx, addr)
			if addr == target.Load().(string) {
				p.CatchingUp = true
				asked.Add(1)
			}
			return p, err
		}
	})
	ctx := within(t, 20*time.Second)
	var l, f *testcluster.Member
	for {
		l = c.Leader()
		f = c.others(l)[0]
		target.Store("api-" + f.ID)
		_, err := l.Node.Join(ctx, node.JoinRequest{ID: f.ID, RaftAddr: f.Node.RaftAddr(), APIAddr: "api-" + f.ID, CatchingUp: true})
		if err == nil {
			break
		}
		if !(errors.Is(err, node.ErrNotLeader) || errors.Is(err, node.ErrIndeterminate)) || ctx.Err() != nil {
			t.Fatal(err)
		}
	}
	voter := func() bool {
		for _, m := range c.Leader().Node.Status().Members {
			if m.ID == f.ID {
				return m.Voter
			}
		}
		return false
	}
	// Five looks of the promoter while f says it is catching up.
	for asked.Load() < 5 && !voter() {
		if ctx.Err() != nil {
			t.Fatalf("the promoter asked about %s %d times", f.ID, asked.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if voter() {
		t.Fatalf("%s was promoted while it said it was catching up", f.ID)
	}
	// The leader's count of voters, which decides whether a memory
	// renewal needs a quorum's confirmation, is read while f is not one
	// and must not stay stale once f is promoted.
	before := c.Leader().Node.Voters()
	target.Store("")
	for !voter() {
		if ctx.Err() != nil {
			t.Fatalf("%s was not promoted once it voted", f.ID)
		}
		c.Leader().Node.Voters()
		time.Sleep(10 * time.Millisecond)
	}
	voters := 0
	for _, m := range c.Leader().Node.Status().Members {
		if m.Voter {
			voters++
		}
	}
	if got := c.Leader().Node.Voters(); got != voters || got != before+1 {
		t.Errorf("after the promotion the leader counts %d voters (%d before); the configuration has %d", got, before, voters)
	}
}
