package verify

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/tenure-io/tenure/internal/faultfs"
	"github.com/tenure-io/tenure/internal/tenuredproc"
)

// FaultPowerLoss SIGKILLs one node, a minority or every node, drops the
// writes they had not synced (their data directories are faultfs mounts),
// and restarts them after Dur. Successive power-loss faults take the
// variants in turn: one node, a minority, every node.
const FaultPowerLoss = "power-loss"

// The variants of the power-loss fault, counted in Report.Injected as
// "power-loss/one" and so on.
const (
	PowerLossOne      = "one"
	PowerLossMinority = "minority"
	PowerLossAll      = "all"
)

// PowerLossVariants lists the variants in the order the faults take them.
var PowerLossVariants = []string{PowerLossOne, PowerLossMinority, PowerLossAll}

// KnownFaults lists every fault kind: AllFaults, the default, and those a
// run must ask for. power-loss needs FUSE (root and /dev/fuse). It runs
// with every other kind: member and damaged-dir change a data directory's
// contents, durably, never the directory itself (wipeDir, restoreDir), so
// they work on its mount too.
var KnownFaults = append(slices.Clone(AllFaults), FaultPowerLoss)

// Invariants the power-loss fault checks itself.
const (
	// InvPowerLossRestart: a node restarted after a power loss must start
	// (with fsync on, a power loss never damages a data directory).
	InvPowerLossRestart = "restarts-after-power-loss"
	// InvPowerLossRecover: after a power loss the cluster elects a leader
	// and every restarted node becomes ready.
	InvPowerLossRecover = "recovers-after-power-loss"
)

// needsDisks reports whether faults need the nodes' data directories on
// faultfs mounts.
func needsDisks(faults []string) bool { return slices.Contains(faults, FaultPowerLoss) }

// MountDisks puts each node's data directory on a faultfs mount, backed
// by a directory next to it. The cluster must not have started.
func (c *Cluster) MountDisks() error {
	for _, n := range c.Nodes {
		d, err := faultfs.Mount(n.DataDir, n.DataDir+".disk")
		if err != nil {
			c.UnmountDisks()
			return fmt.Errorf("mount %s's data directory: %w", n.ID, err)
		}
		c.Disks = append(c.Disks, d)
	}
	return nil
}

// UnmountDisks unmounts what MountDisks mounted; the nodes must be down.
func (c *Cluster) UnmountDisks() {
	for _, d := range c.Disks {
		d.Unmount()
	}
	c.Disks = nil
}

// powerLossTargets returns the nodes a power-loss fault of the given
// variant cuts: for one and minority, starting with the fault's target (or
// the leader).
func (n *Nemesis) powerLossTargets(ctx context.Context, f Fault, variant string) []int {
	nodes := len(n.C.Nodes)
	if variant == PowerLossAll {
		out := make([]int, nodes)
		for i := range out {
			out[i] = i
		}
		return out
	}
	first, ok := n.target(ctx, f)
	if !ok {
		first = 0
	}
	size := 1
	if variant == PowerLossMinority {
		size = max((nodes-1)/2, 1)
	}
	var out []int
	for k := range size {
		out = append(out, (first+k)%nodes)
	}
	return out
}

// powerLoss carries out a power-loss fault; it reports whether it was
// injected.
func (n *Nemesis) powerLoss(ctx context.Context, f Fault) bool {
	if len(n.C.Disks) != len(n.C.Nodes) {
		n.Log("  power-loss: the data directories are not faultfs mounts")
		return false
	}
	n.mu.Lock()
	variant := PowerLossVariants[n.powerLosses%len(PowerLossVariants)]
	n.powerLosses++
	n.mu.Unlock()
	targets := n.powerLossTargets(ctx, f, variant)
	for _, i := range targets {
		n.C.Kill(i)
	}
	for _, i := range targets {
		before := n.C.Disks[i].Stats()
		if err := n.C.Disks[i].Cut(); err != nil {
			n.Log("  power-loss: cut n%d's disk: %v", i+1, err)
			continue
		}
		after := n.C.Disks[i].Stats()
		n.Log("  n%d: power cut; unsynced writes dropped: %d bytes in %d files rolled back, %d entries gone",
			i+1, after.BytesRolledBack-before.BytesRolledBack, after.FilesRolledBack-before.FilesRolledBack, after.EntriesDropped-before.EntriesDropped)
	}
	n.count(FaultPowerLoss+"/"+variant, true)
	n.Log("  power-loss of %s: %v killed and cut; restart in %s", variant, plus1(targets), f.Dur.Round(time.Millisecond))
	sleepCtx(ctx, f.Dur)
	var refused []<-chan struct{}
	for _, i := range targets {
		p, err := n.C.StartWith(i, 1, nil, "")
		if err != nil {
			n.Log("  restart n%d: %v", i+1, err)
			continue
		}
		refused = append(refused, n.watchRestart(ctx, i, p))
	}
	gaveUp := false
	err := waitFor(ctx, 30*time.Second, fmt.Sprintf("a leader and nodes %v ready after the power loss", plus1(targets)), func() bool {
		for _, r := range refused {
			select {
			case <-r:
				gaveUp = true // reported as restarts-after-power-loss
				return true
			default:
			}
		}
		if _, ok := n.C.Leader(ctx); !ok {
			return false
		}
		for _, i := range targets {
			if !nodeReady(n.C.Nodes[i].API) {
				return false
			}
		}
		return true
	})
	switch {
	case gaveUp:
		n.Log("  a node refused to start after the power loss; not waiting for recovery")
	case err != nil && ctx.Err() == nil:
		n.violation(InvPowerLossRecover, "%v (node logs: %s)", err, strings.Join(logPaths(n.C, targets), ", "))
	default:
		n.Log("  nodes %v back after the power loss: %s", plus1(targets), errText(err))
	}
	return true
}

// watchRestart reports a node restarted after a power loss that exits by
// itself (not by the harness's SIGKILL): it refused its data directory.
// The channel it returns is closed when it has reported.
func (n *Nemesis) watchRestart(ctx context.Context, i int, p *tenuredproc.Process) <-chan struct{} {
	refused := make(chan struct{})
	go func() {
		select {
		case <-p.Exited():
			if code := p.ExitCode(); code >= 0 {
				n.violation(InvPowerLossRestart, "n%d exited %d after its restart after a power loss: %.600q (log %s)",
					i+1, code, lastLines(p.Output(), 4), n.C.Nodes[i].LogPath)
				close(refused)
			}
		case <-ctx.Done():
		}
	}()
	return refused
}

func logPaths(c *Cluster, nodes []int) []string {
	var out []string
	for _, i := range nodes {
		out = append(out, c.Nodes[i].LogPath)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// unreadableAfterPowerLoss reports, in a run with power-loss faults, a
// final state that could not be read as a breach of acked-writes-durable:
// the acknowledged writes cannot be shown to have survived. (Other runs
// only log it.)
func unreadableAfterPowerLoss(cfg Config, h History, err error) []Violation {
	if err == nil || !needsDisks(cfg.Faults) {
		return nil
	}
	acked := 0
	for _, r := range h {
		if r.Op == OpPut && r.Outcome == Ok {
			acked++
		}
	}
	if acked == 0 {
		return nil
	}
	return []Violation{{InvDurable, fmt.Sprintf("after the power losses the cluster could not serve the final read (%s): none of the %d acknowledged writes can be shown to have survived",
		errText(err), acked)}}
}

// printPowerLoss prints how many power-loss faults cut one node, a
// minority and every node.
func (r *Report) printPowerLoss(w io.Writer) {
	if r.Injected[FaultPowerLoss] == 0 {
		return
	}
	fmt.Fprintf(w, "power-loss cuts:")
	for _, v := range PowerLossVariants {
		fmt.Fprintf(w, " %s %d,", v, r.Injected[FaultPowerLoss+"/"+v])
	}
	fmt.Fprintln(w)
}

// skipFsyncFlags returns the tenured flags of Config.SkipFsync.
func skipFsyncFlags(on bool) []string {
	if on {
		return []string{"--fault-inject-skip-fsync"}
	}
	return nil
}
