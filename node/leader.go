package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/lease"
)

// leaderTerm is what a node knows while it leads.
type leaderTerm struct {
	// base is the cluster time applied when this node took over, read
	// after a barrier; start is the monotonic time it was read at.
	base  time.Duration
	start time.Time
	term  uint64
	// ctx ends when the term does; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	// mem is what the term promised the holders of grants, verify
	// confirms its leadership for renewals from memory (memory.go).
	mem    *memory
	verify verifier
}

// clusterNow returns the cluster time to stamp the next batch with:
// max(last applied cluster time, base + monotonic time since takeover).
// Only the leader's clock rate matters; wall clocks are never compared.
func (n *Node) clusterNow(t *leaderTerm) time.Duration {
	elapsed := time.Duration(float64(time.Since(t.start)) * n.cfg.ClockRate)
	now := t.base + elapsed
	if applied := n.fsm.now(); applied > now {
		now = applied
	}
	return now
}

// watchLeadership starts and stops the leader's duties as raft reports
// leadership changes.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	var (
		cur    *leaderTerm
		wg     sync.WaitGroup
		notify = n.notify
	)
	stopTerm := func() {
		if cur != nil {
			// Cancel and unpublish under termMu, so that takeOver
			// cannot publish the term after this point.
			n.termMu.Lock()
			cur.cancel()
			n.term.Store(nil)
			n.termMu.Unlock()
			wg.Wait()
			cur = nil
			n.metrics.isLeader.Set(0)
			n.hub.leadershipLost()
			n.log.Info("leadership lost")
		}
	}
	for {
		select {
		case <-n.closing:
			stopTerm()
			return
		case leader := <-notify:
			stopTerm()
			if !leader {
				continue
			}
			ctx, cancel := context.WithCancel(context.Background())
			cur = &leaderTerm{ctx: ctx, cancel: cancel, mem: newMemory()}
			t := cur
			wg.Go(func() { n.takeOver(t) })
		}
	}
}

// takeOver finishes becoming leader: it waits for every earlier entry to be
// applied (Barrier), fixes the cluster-time base, publishes this node's API
// address, and then runs the expirer and promoter until the term ends.
//
// The term is published (IsLeader, Do) only if it is still current: raft
// still leads in the raft term the takeover began in and watchLeadership
// has not ended it. Otherwise a term that died during the takeover would
// stay published: the node would claim to lead as a follower, and if it
// led again later it would stamp batches with the dead term's base plus the
// whole leaderless gap.
func (n *Node) takeOver(t *leaderTerm) {
	t.term = n.raft.CurrentTerm()
	for {
		err := n.prepareTerm(t)
		if err == nil {
			break
		}
		if errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrRaftShutdown) {
			// Not a failure of the takeover: the term is ending
			// (another node took over, or this one is stopping), and
			// watchLeadership ends it here too.
			n.log.Info("leadership ended during the takeover; retrying until the term ends", "term", t.term, "err", err)
		} else {
			n.log.Warn("taking over as leader failed; retrying", "term", t.term, "err", err)
		}
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !n.publishTerm(t) {
		n.log.Info("leadership ended during the takeover", "term", t.term)
		return
	}
	n.metrics.isLeader.Set(1)
	n.log.Info("leading", "term", t.term, "cluster_time", t.base)
	var wg sync.WaitGroup
	wg.Go(func() { n.expirer(t) })
	wg.Go(func() { n.promoter(t) })
	wg.Wait()
}

// prepareTerm waits for every earlier entry to be applied (Barrier), fixes
// the term's cluster-time base, and records the cluster ID, this node's
// lease history retention and its API address in the log if they are not
// there yet.
func (n *Node) prepareTerm(t *leaderTerm) error {
	if err := n.wait(n.raft.Barrier(n.cfg.ApplyTimeout)); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	if n.cfg.afterBarrier != nil {
		n.cfg.afterBarrier(n, t)
	}
	t.base, t.start = n.fsm.now(), time.Now()
	if id := n.ClusterID(); id != "" && n.fsm.cluster() == "" {
		// The first leader of a cluster records its ID in the log, so
		// every member learns it, also from snapshots.
		if err := n.wait(n.raft.Apply(append([]byte{entryCluster}, id...), n.cfg.ApplyTimeout)); err != nil {
			return fmt.Errorf("recording the cluster ID: %w", err)
		}
	}
	if want := n.cfg.History; want != (lease.HistoryRetention{}) && n.fsm.historyRetention() != want {
		// This node's lease history retention, so that every replica
		// keeps the terms this leader's operator asked for.
		b := lease.Batch{Now: t.base, Wall: time.Now().UnixNano(), Ops: []lease.Op{lease.HistoryConfigOp(want)}}
		if err := n.wait(n.raft.Apply(appendTermBatch(nil, t.term, b), n.cfg.ApplyTimeout)); err != nil {
			return fmt.Errorf("setting the lease history retention: %w", err)
		}
		n.log.Info("lease history retention set", "terms", want.Terms, "age", want.Age)
	}
	if addr, ok := n.fsm.member(n.cfg.ID); n.cfg.APIAddr != "" && (!ok || addr != n.cfg.APIAddr) {
		if err := n.wait(n.raft.Apply(encodeMember(memberInfo{ID: n.cfg.ID, APIAddr: n.cfg.APIAddr}), n.cfg.ApplyTimeout)); err != nil {
			return fmt.Errorf("publishing the API address: %w", err)
		}
	}
	return nil
}

// publishTerm makes t the node's current term if it is still current, and
// reports whether it did.
func (n *Node) publishTerm(t *leaderTerm) bool {
	n.termMu.Lock()
	defer n.termMu.Unlock()
	if t.ctx.Err() != nil || n.raft.State() != raft.Leader || n.raft.CurrentTerm() != t.term {
		return false
	}
	n.votersChanging()
	n.term.Store(t)
	return true
}

// expirer proposes an expiry at the next lease deadline, and at the
// lease history's next sweep (so that the terms of names whose leases
// are gone leave memory too).
func (n *Node) expirer(t *leaderTerm) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	ctx := t.ctx
	for {
		wait := time.Hour
		if at, ok := n.fsm.nextDeadline(); ok {
			wait = time.Duration(float64(at-n.clusterNow(t)) / n.cfg.ClockRate)
		}
		if at, ok := n.fsm.nextHistorySweep(); ok {
			wait = min(wait, time.Duration(float64(at-n.clusterNow(t))/n.cfg.ClockRate))
		}
		if at, ok := t.mem.next(); ok {
			d := time.Duration(float64(at-n.clusterNow(t)) / n.cfg.ClockRate)
			if d <= 0 {
				if err := n.trim(t); err != nil {
					if ctx.Err() != nil {
						return
					}
					n.log.Warn("proposing trims failed", "err", err)
					d = 50 * time.Millisecond
				} else {
					continue
				}
			}
			wait = min(wait, d)
		}
		if wait <= 0 {
			if _, err := n.Do(ctx, lease.Op{Type: lease.OpExpire}); err != nil {
				if ctx.Err() != nil {
					return
				}
				n.log.Warn("proposing expiry failed", "err", err)
				wait = 50 * time.Millisecond
			} else {
				continue
			}
		}
		timer.Reset(wait)
		select {
		case <-t.ctx.Done():
			return
		case <-n.kick: // Reset above re-arms the timer (Go 1.23+ timers)
		case <-timer.C:
		}
	}
}

// promoter turns non-voters into voters once they have caught up with the
// leader's log.
func (n *Node) promoter(t *leaderTerm) {
	tick := time.NewTicker(n.cfg.HeartbeatTimeout / 2)
	defer tick.Stop()
	seen := map[raft.ServerID]int{}
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-tick.C:
		}
		f := n.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Nonvoter {
				delete(seen, s.ID)
				continue
			}
			if !n.caughtUp(s.ID, seen) {
				continue
			}
			n.votersChanging()
			err := n.wait(n.raft.AddVoter(s.ID, s.Address, 0, n.cfg.ApplyTimeout))
			n.votersChanging()
			if err != nil {
				n.log.Warn("promoting non-voter failed", "id", s.ID, "err", err)
				continue
			}
			n.log.Info("promoted non-voter to voter", "id", s.ID)
		}
	}
}

// caughtUp reports whether the non-voter id has applied (nearly) all of
// the leader's log and votes: promoting a member that still refuses to
// vote (it is catching up) would count it toward the quorum, and the
// cluster could not elect a leader without it once this one steps down,
// while it can only catch up from a leader.
func (n *Node) caughtUp(id raft.ServerID, seen map[raft.ServerID]int) bool {
	if n.cfg.PeerProgress == nil {
		seen[id]++
		return seen[id] > 2
	}
	addr, ok := n.fsm.member(string(id))
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.HeartbeatTimeout)
	defer cancel()
	p, err := n.cfg.PeerProgress(ctx, addr)
	if err != nil || p.CatchingUp || p.Applied == 0 {
		return false
	}
	const slack = 16 // entries the non-voter may still be behind
	return p.Applied+slack >= n.raft.CommitIndex()
}

// onApply runs on the FSM goroutine, under the FSM lock, after each batch.
func (n *Node) onApply(index uint64, now time.Duration, events []lease.Event) {
	n.metrics.observe(events)
	n.noteGrants(events)
	n.hub.publish(index, events)
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// onRestore runs on the FSM goroutine, under the FSM lock, after a snapshot
// replaced the state: no watch can report the events it skipped, so every
// watch ends (the client watches again and reports a reset).
func (n *Node) onRestore() {
	if ended := n.hub.reset(); ended > 0 {
		n.metrics.watchResets.Add(float64(ended))
		n.log.Info("installed a snapshot; ended the watches", "watches", ended)
	}
	select {
	case n.kick <- struct{}{}:
	default:
	}
}
