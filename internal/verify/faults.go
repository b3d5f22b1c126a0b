package verify

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
)

// Snapshot settings every node runs with, so that the snapshot fault can
// force a follower onto a snapshot install within seconds.
// The raft library logs at info, which says when a follower installs a
// snapshot.
var nodeFlags = []string{"--snapshot-threshold", "64", "--trailing-logs", "16", "--snapshot-interval", "200ms", "--raft-log-level", "info"}

// entriesForSnapshot is how many entries the cluster must commit while a
// follower is cut off so that the log it needs is compacted away: more than
// the snapshot threshold plus the trailing logs.
const entriesForSnapshot = 64 + 16 + 40

// follower returns a node that is not the leader: the (k+1)th after it.
func (n *Nemesis) follower(ctx context.Context, k int) int {
	l, ok := n.C.Leader(ctx)
	if !ok {
		l = 0
	}
	return (l + 1 + k%(len(n.C.Nodes)-1)) % len(n.C.Nodes)
}

// status asks node i alone for its status.
func (n *Nemesis) status(ctx context.Context, i int) (client.Status, error) {
	return nodeStatus(ctx, n.C, i)
}

// nodeStatus asks node i of c alone for its status, within a second.
func nodeStatus(ctx context.Context, c *Cluster, i int) (client.Status, error) {
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{c.Nodes[i].API}
	cfg.RequestTimeout = 700 * time.Millisecond
	cl, err := newClient(cfg)
	if err != nil {
		return client.Status{}, err
	}
	defer cl.Close()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	return cl.Status(sctx)
}

// clusterIndex returns the highest commit index any running node reports.
func (n *Nemesis) clusterIndex(ctx context.Context) uint64 {
	var top uint64
	for i := range n.C.Nodes {
		if !n.C.Running(i) {
			continue
		}
		if st, err := n.status(ctx, i); err == nil {
			top = max(top, st.CommitIndex)
		}
	}
	return top
}

func (n *Nemesis) violation(inv, format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := Violation{inv, fmt.Sprintf(format, args...)}
	n.Violations = append(n.Violations, v)
	n.Log("  VIOLATION %s", v)
}

// waitMembers waits until the leader reports every node as a voter; the
// error says which were not when the wait ended.
func (n *Nemesis) waitMembers(ctx context.Context, what string) error {
	var last client.Status
	err := waitFor(ctx, 30*time.Second, what, func() bool {
		_, st, ok := n.C.LeaderStatus(ctx)
		if !ok {
			last = client.Status{}
			return false
		}
		last = st
		return len(voters(st)) == len(n.C.Nodes)
	})
	if err != nil {
		err = fmt.Errorf("%w (%s)", err, describeMembers(last))
	}
	return err
}

// voters returns the IDs of the voters st lists, sorted.
func voters(st client.Status) []string {
	var out []string
	for _, m := range st.Members {
		if m.Suffrage == "voter" {
			out = append(out, m.ID)
		}
	}
	slices.Sort(out)
	return out
}

// describeMembers says what a leader's status lists: "leader n2: voters
// n2, n3; non-voters n1".
func describeMembers(st client.Status) string {
	if st.NodeID == "" {
		return "no leader answered"
	}
	var vs, ns []string
	for _, m := range st.Members {
		if m.Suffrage == "voter" {
			vs = append(vs, m.ID)
		} else {
			ns = append(ns, m.ID)
		}
	}
	slices.Sort(vs)
	slices.Sort(ns)
	s := fmt.Sprintf("leader %s: voters %s", st.NodeID, strings.Join(vs, ", "))
	if len(ns) > 0 {
		s += "; non-voters " + strings.Join(ns, ", ")
	}
	return s
}

// injectMore carries out the faults added for issue 8; it reports whether
// the fault was injected.
func (n *Nemesis) injectMore(ctx context.Context, f Fault) bool {
	cl, err := n.C.Client()
	if err != nil {
		return false
	}
	defer cl.Close()
	switch f.Kind {
	case FaultFlap:
		// Move leadership, and again Gap after each new leader took over,
		// so takeovers are cut short right after their barrier.
		end := time.Now().Add(f.Dur)
		flips := 0
		for time.Now().Before(end) && ctx.Err() == nil {
			old, _ := n.C.Leader(ctx)
			to := n.C.Nodes[(old+1+flips%2)%len(n.C.Nodes)]
			tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := cl.TransferLeadership(tctx, to.ID)
			cancel()
			if err != nil {
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
			flips++
			sleepCtx(ctx, f.Gap)
		}
		n.Log("  %d leadership transfers, each %s after the last", flips, f.Gap.Round(time.Millisecond))
		return flips > 0
	case FaultSnapshot:
		// The follower stays up and serves its watchers while it is cut
		// off, so that it installs the snapshot under open watches.
		i := n.follower(ctx, max(f.Target, 0))
		before := n.clusterIndex(ctx)
		logSize := fileSize(n.C.Nodes[i].LogPath)
		n.C.Net.Isolate(i)
		err := waitFor(ctx, 60*time.Second, fmt.Sprintf("the cluster to commit %d entries past index %d while node %d is cut off", entriesForSnapshot, before, i+1),
			func() bool { return n.clusterIndex(ctx) > before+entriesForSnapshot })
		if err != nil {
			n.Log("  %v", err)
		}
		n.C.Net.Heal()
		err = waitFor(ctx, 20*time.Second, fmt.Sprintf("node %d to catch up", i+1), func() bool {
			st, err := n.status(ctx, i)
			return err == nil && st.AppliedIndex > before+entriesForSnapshot
		})
		installed := strings.Contains(strings.ToLower(tailFrom(n.C.Nodes[i].LogPath, logSize)), "installed remote snapshot")
		n.Log("  node %d cut off for %d entries, healed; caught up: %v; snapshot in its log: %v", i+1, entriesForSnapshot, errText(err), installed)
		if installed {
			n.mu.Lock()
			n.Snapshots++
			n.mu.Unlock()
		}
		return true
	case FaultSplit, FaultBridge:
		a, ok := n.target(ctx, f)
		if !ok {
			a = 0
		}
		if f.Kind == FaultBridge {
			b := (a + 1 + len(n.C.Nodes)/2) % len(n.C.Nodes)
			n.Log("  cut the link n%d <-> n%d; the others bridge them", a+1, b+1)
			n.C.Net.Cut(a, b)
		} else {
			minority := []int{a}
			for k := 1; len(minority) < (len(n.C.Nodes)-1)/2; k++ {
				minority = append(minority, (a+k)%len(n.C.Nodes))
			}
			var majority []int
			for i := range n.C.Nodes {
				if !slices.Contains(minority, i) {
					majority = append(majority, i)
				}
			}
			n.Log("  minority %v | majority %v", plus1(minority), plus1(majority))
			n.C.Net.Split(minority, majority)
		}
		sleepCtx(ctx, f.Dur)
		n.C.Net.Heal()
		return true
	case FaultMember:
		return n.member(ctx, n.follower(ctx, max(f.Target, 0)), f.Dur)
	case FaultRestartAll:
		for i := range n.C.Nodes {
			n.C.Kill(i)
		}
		sleepCtx(ctx, f.Dur)
		for i := range n.C.Nodes {
			n.restart(i, 1)
		}
		err := waitFor(ctx, 30*time.Second, "the restarted cluster to elect a leader", func() bool {
			_, ok := n.C.Leader(ctx)
			return ok
		})
		n.Log("  all %d nodes restarted: %s", len(n.C.Nodes), errText(err))
		return true
	case FaultDamaged:
		first := n.follower(ctx, max(f.Target, 0))
		i, ok := n.damagedTarget(ctx, first)
		if !ok {
			n.Log("  no follower has an initialised data directory (%s), so none must refuse an emptied raft.db; skipped", fileClusterID)
			return false
		}
		if i != first {
			n.Log("  n%d's data directory is not initialised (no %s: it has not joined since it was wiped); n%d instead", first+1, fileClusterID, i+1)
		}
		return n.damaged(ctx, i)
	}
	return false
}

// damagedTarget returns the first node from first on that is not the
// leader and whose data directory is initialised. tenured must refuse an
// emptied raft.db only in an initialised directory: in any other it
// rightly starts a new node (DESIGN.md section 6).
func (n *Nemesis) damagedTarget(ctx context.Context, first int) (int, bool) {
	l, hasLeader := n.C.Leader(ctx)
	for k := range n.C.Nodes {
		i := (first + k) % len(n.C.Nodes)
		if hasLeader && i == l && len(n.C.Nodes) > 1 {
			continue
		}
		if n.C.Initialised(i) {
			return i, true
		}
	}
	return 0, false
}

// Member fault timing: each Leave attempt, all attempts together, and
// how long the fault waits for the leader to answer whether a node is
// still a member when every attempt failed.
const (
	leaveAttempt = 3 * time.Second
	leaveFor     = 10 * time.Second
	memberAnswer = 20 * time.Second
)

// member removes node i from the cluster (Leave), kills it, wipes its data
// directory (its contents, durably: wipeDir) and, after d, starts it again with --join through the leader;
// then it waits until the leader lists every node as a voter. A node the
// leader does not list is not removed again, only wiped and re-added. The
// fault must leave the cluster as large as it found it: when it cannot,
// it says so in the log and in the report (Nemesis.Unrestored), and the
// run's cluster-size check decides at the end.
func (n *Nemesis) member(ctx context.Context, i int, d time.Duration) bool {
	node := n.C.Nodes[i]
	cl, err := n.C.Client()
	if err != nil {
		n.Log("  client: %v", err)
		return false
	}
	defer cl.Close()
	// What follows the Leave runs to its end even when the run ends
	// meanwhile: the cluster must end as large as it began.
	rctx := context.WithoutCancel(ctx)
	note, err := leave(ctx, cl, node.ID, leaveAttempt, leaveFor)
	if err != nil {
		// The last attempt may have removed it all the same: ask the
		// leader.
		var member, known bool
		werr := waitFor(rctx, memberAnswer, fmt.Sprintf("a leader to say whether n%d is still a member", i+1), func() bool {
			_, st, ok := n.C.LeaderStatus(rctx)
			if ok {
				_, member = memberOf(st, node.ID)
				known = true
			}
			return ok
		})
		switch {
		case !known:
			n.unrestored(fmt.Sprintf("leave n%d: %v; whether it left is unknown (%v), so it was left as it was", i+1, errText(err), errText(werr)))
			return false
		case member:
			n.Log("  leave n%d: %v; the leader still lists it, nothing changed", i+1, errText(err))
			return false
		}
		note = fmt.Sprintf("leave n%d: %v, but the leader no longer lists it: it left", i+1, errText(err))
	}
	if note != "" {
		n.Log("  %s", note)
	}
	n.C.Kill(i)
	if err := wipeDir(node.DataDir); err != nil {
		n.Log("  wipe n%d: %v", i+1, err)
	}
	sleepCtx(ctx, d)
	var join string
	if werr := waitFor(rctx, 10*time.Second, "a leader to re-add the node through", func() bool {
		l, _, ok := n.C.LeaderStatus(rctx)
		if ok && l != i {
			join = n.C.Nodes[l].API
		}
		return join != ""
	}); werr != nil {
		join = n.C.JoinAddr(rctx, i)
		n.Log("  %v; joining through %s", errText(werr), join)
	}
	if _, err := n.C.StartWith(i, 1, nil, join); err != nil {
		n.unrestored(fmt.Sprintf("re-add n%d: %v", i+1, err))
		return true
	}
	err = n.waitMembers(rctx, fmt.Sprintf("n%d to be re-added as a voter", i+1))
	n.Log("  n%d left, wiped, re-joined through %s: %s", i+1, join, errText(err))
	if err != nil {
		n.unrestored(fmt.Sprintf("n%d left, wiped and re-joined through %s: %v", i+1, join, err))
	}
	return true
}

// leave asks the cluster to remove the member id, each attempt within
// attempt, retrying for up to total. It returns nil once id is not a
// member, with a note when that was learned from a "no such member"
// answer: on a retry, an earlier attempt took effect and its answer was
// lost (a Leave is not retried by the client once sent); on the first
// attempt, id was not a member to begin with. Only the leader answers a
// Leave, so the answer is the leader's view.
func leave(ctx context.Context, cl *client.Client, id string, attempt, total time.Duration) (string, error) {
	tries := 0
	var note string
	err := retryFor(ctx, total, func() error {
		tries++
		lctx, cancel := context.WithTimeout(ctx, attempt)
		defer cancel()
		err := cl.Leave(lctx, id)
		if connect.CodeOf(err) == connect.CodeNotFound {
			if tries == 1 {
				note = fmt.Sprintf("%s is not a member (%v); it is wiped and re-added all the same", id, errText(err))
			} else {
				note = fmt.Sprintf("leave %s: attempt %d answered %q: an earlier attempt took effect", id, tries, errText(err))
			}
			return nil
		}
		return err
	})
	return note, err
}

// memberOf returns the member id of st and whether it is one.
func memberOf(st client.Status, id string) (client.Member, bool) {
	for _, m := range st.Members {
		if m.ID == id {
			return m, true
		}
	}
	return client.Member{}, false
}

// unrestored records a member fault that could not restore the cluster.
func (n *Nemesis) unrestored(what string) {
	n.mu.Lock()
	n.Unrestored = append(n.Unrestored, what)
	n.mu.Unlock()
	n.Log("  NOT RESTORED: %s", what)
}

// damaged stops node i, empties its raft.db and starts it: tenured must
// refuse (exit 1, naming raft.db). Then the directory's contents are
// restored from a copy, durably (restoreDir), and the node restarted.
func (n *Nemesis) damaged(ctx context.Context, i int) bool {
	node := n.C.Nodes[i]
	n.C.Kill(i)
	backup := node.DataDir + ".backup"
	os.RemoveAll(backup)
	if err := copyDir(node.DataDir, backup); err != nil {
		n.Log("  copy n%d's data: %v", i+1, err)
		n.restart(i, 1)
		return false
	}
	db := filepath.Join(node.DataDir, "raft.db")
	if err := os.Truncate(db, 0); err != nil {
		n.Log("  empty %s: %v", db, err)
		n.restart(i, 1)
		return false
	}
	p, err := n.C.StartWith(i, 1, nil, "")
	if err != nil {
		n.Log("  start n%d: %v", i+1, err)
		return false
	}
	deadline := time.NewTimer(5 * time.Second)
	select {
	case <-p.Exited():
		code, out := p.ExitCode(), p.Output()
		if code != 1 || !strings.Contains(out, "raft.db") {
			n.violation(InvDamagedRefused, "tenured on n%d's data directory with raft.db emptied exited %d without the exit code 1 and a message naming raft.db: %.300q", i+1, code, out)
		} else {
			n.Log("  n%d refused to start on an emptied raft.db, as it must", i+1)
		}
	case <-deadline.C:
		n.violation(InvDamagedRefused, "tenured started on n%d's data directory with raft.db emptied and was still running 5s later (it must exit 1 naming raft.db)", i+1)
	case <-ctx.Done():
	}
	deadline.Stop()
	n.C.Kill(i)
	if err := restoreDir(backup, node.DataDir); err != nil {
		n.Log("  restore n%d's data: %v", i+1, err)
	}
	os.RemoveAll(backup)
	n.restart(i, 1)
	return true
}

func plus1(xs []int) []int {
	out := make([]int, len(xs))
	for i, x := range xs {
		out[i] = x + 1
	}
	return out
}

// retryFor calls f until it succeeds, ctx ends or d passes.
func retryFor(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		sleepCtx(ctx, 300*time.Millisecond)
	}
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// tailFrom returns the contents of path from offset on.
func tailFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(f)
	return string(b)
}

// copyDir copies the regular files and directories under from to to,
// without syncing: the damaged-dir fault's backup, next to the data
// directory and never on a faultfs mount.
func copyDir(from, to string) error {
	return filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		return copyFile(p, dst)
	})
}
