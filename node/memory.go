package node

import (
	"container/heap"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// Renewals from the leader's memory (see lease/memory.go for the rule).
//
// With Config.RenewHeadroom set, the proposer stamps every batch with it,
// so every renewal in the log keeps its lease on every replica for up
// to a TTL past what its holder is told. Do answers a call made only of
// renewals that all fit in that headroom from the leader's state, without
// a log entry, once it has confirmed that it still leads (on one voter it
// is the only one that can). The term remembers each promise it made, from
// memory or through the log, and the expirer proposes an OpTrim when the
// latest promise of a grant has passed, so that a lease whose holder
// stopped renewing ends on time.
//
// Ordering: a renewal from memory reads the state and records its promise
// under fsm.mu (so no trim applies in between), the promise under
// memory.mu unless the grant is being trimmed; the expirer marks grants as
// being trimmed under memory.mu before it proposes, with the promise it
// read there. So either the trim carries the renewal's promise, or the
// renewal sees the mark and goes to the log, where it is ordered after the
// trim, or the trim has applied and the renewal finds no grant. memory.mu
// is taken under fsm.mu (here and in onApply), never the other way.

// memory is what a leader term promised the holders of grants.
type memory struct {
	mu sync.Mutex
	// promised is the latest expiry promised each grant this term, in
	// cluster time; trimming marks grants whose OpTrim is in flight. A
	// grant is known by its token alone: no two grants share one.
	promised map[uint64]time.Duration
	trimming map[uint64]bool
	// due has at least one entry per promised grant, no later than its
	// promise (a promise that moves later moves its entry when it comes
	// up, as the state's expiry heap does).
	due dueHeap
}

func newMemory() *memory {
	return &memory{promised: make(map[uint64]time.Duration), trimming: make(map[uint64]bool)}
}

// promise records that the grant of name and token was promised until
// at, and reports whether that moved the earliest due time (the expirer
// must look again).
func (m *memory) promise(name string, token uint64, at time.Duration) (earlier bool) {
	old, ok := m.promised[token]
	if ok && old >= at {
		return false
	}
	m.promised[token] = at
	if !ok {
		earlier = m.due.Len() == 0 || at < m.due[0].at
		heap.Push(&m.due, due{at: at, name: name, token: token})
	}
	return earlier
}

// promiseAll records the promises of the renewals results, unless one of
// their grants is being trimmed (ok false: then it records none).
func (m *memory) promiseAll(results []lease.Result) (earlier, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range results {
		for _, rr := range r.Renewed {
			if m.trimming[rr.Ref.Token] {
				return false, false
			}
		}
	}
	for _, r := range results {
		for _, rr := range r.Renewed {
			earlier = m.promise(rr.Ref.Name, rr.Ref.Token, rr.Lease.Promised) || earlier
		}
	}
	return earlier, true
}

// next returns the earliest promise of a grant not being trimmed.
func (m *memory) next() (time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.due.Len() > 0 {
		top := m.due[0]
		at, ok := m.promised[top.token]
		switch {
		case !ok:
			heap.Pop(&m.due)
		case at != top.at:
			m.due[0].at = at
			heap.Fix(&m.due, 0)
		case m.trimming[top.token]:
			// Its trim is in flight; whatever it decides, the
			// trim's end re-pushes or forgets it.
			heap.Pop(&m.due)
		default:
			return at, true
		}
	}
	return 0, false
}

// takeDue marks the grants whose promise has passed by now as being
// trimmed and returns their trims.
func (m *memory) takeDue(now time.Duration) []lease.Op {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ops []lease.Op
	for m.due.Len() > 0 && m.due[0].at <= now {
		top := heap.Pop(&m.due).(due)
		at, ok := m.promised[top.token]
		if !ok || m.trimming[top.token] {
			continue
		}
		if at != top.at {
			top.at = at
			heap.Push(&m.due, top)
			continue
		}
		m.trimming[top.token] = true
		ops = append(ops, lease.Op{Type: lease.OpTrim, Name: top.name, Token: top.token, At: at})
	}
	return ops
}

// trimmed ends the trims ops: a grant promised nothing later since is
// forgotten (trimmed, or gone, or kept by a later promise in the log that
// onApply or the completer recorded); one promised later, or whose trim
// failed, is due again.
func (m *memory) trimmed(ops []lease.Op, failed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		delete(m.trimming, op.Token)
		if at := m.promised[op.Token]; at <= op.At && !failed {
			delete(m.promised, op.Token)
		} else {
			heap.Push(&m.due, due{at: at, name: op.Name, token: op.Token})
		}
	}
}

type due struct {
	at    time.Duration
	name  string
	token uint64
}

type dueHeap []due

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(due)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// onlyRenewals reports whether ops are all renewals.
func onlyRenewals(ops []lease.Op) bool {
	for _, op := range ops {
		if op.Type != lease.OpRenew {
			return false
		}
	}
	return len(ops) > 0
}

// renewFromMemory answers ops, all renewals, from the state of the
// leader term t if every grant they renew has headroom for them. ok is
// false if any has not: the caller proposes them.
func (n *Node) renewFromMemory(ctx context.Context, t *leaderTerm, ops []lease.Op) (res []lease.Result, ok bool, err error) {
	now := n.clusterNow(t)
	var renewed []lease.RenewResult
	if len(ops) == 1 && len(ops[0].Refs) == 1 {
		// A session renewing its one lease, most calls: one allocation.
		one := new(struct {
			res     [1]lease.Result
			renewed [1]lease.RenewResult
		})
		res, renewed = one.res[:], one.renewed[:]
	} else {
		res = make([]lease.Result, len(ops))
		refs := 0
		for _, op := range ops {
			refs += len(op.Refs)
		}
		renewed = make([]lease.RenewResult, refs)
	}
	// The write lock: the renewals are noted in the activity log, for
	// the dashboard.
	n.fsm.mu.Lock()
	for i, op := range ops {
		res[i] = lease.Result{Now: now, Renewed: renewed[:len(op.Refs):len(op.Refs)]}
		renewed = renewed[len(op.Refs):]
		for j, r := range op.Refs {
			l, ok := n.fsm.st.MemoryRenewal(r, op.Principal, now)
			if !ok {
				n.fsm.mu.Unlock()
				return nil, false, nil
			}
			l.Promised = now + l.TTL
			res[i].Renewed[j] = lease.RenewResult{Ref: r, Lease: l}
		}
	}
	// Still under fsm.mu, so that no trim applies between the read
	// and the promise.
	kick, ok := t.mem.promiseAll(res)
	if ok {
		n.fsm.act.memoryRenewals(now, res)
	}
	n.fsm.mu.Unlock()
	if !ok {
		return nil, false, nil
	}
	if kick {
		n.kickExpirer()
	}
	// The promises are recorded before the leadership is confirmed: a
	// term that turns out to be over trims nothing any more.
	if err := n.confirmLeadership(ctx, t); err != nil {
		return nil, true, err
	}
	n.metrics.memoryRenewals.Add(float64(len(ops)))
	return res, true, nil
}

// notePromises records, in the memory of term t, the promises of the
// grants and renewals in results (proposals of the term), and makes the
// reads among them report the promises made from memory (show), under
// one lock.
func (n *Node) notePromises(t *leaderTerm, ops []lease.Op, results []lease.Result) {
	if t == nil || n.cfg.RenewHeadroom <= 0 {
		return
	}
	m := t.mem
	kick := false
	m.mu.Lock()
	for i, r := range results {
		switch ops[i].Type {
		case lease.OpAcquire:
			if r.Err == nil && r.Lease.Promised != 0 {
				kick = m.promise(r.Lease.Name, r.Lease.Token, r.Lease.Promised) || kick
			}
		case lease.OpRenew:
			for _, rr := range r.Renewed {
				if rr.Err == nil && rr.Lease.Promised != 0 {
					kick = m.promise(rr.Lease.Name, rr.Lease.Token, rr.Lease.Promised) || kick
				}
			}
		}
	}
	m.show(ops, results)
	m.mu.Unlock()
	if kick {
		n.kickExpirer()
	}
}

// show makes the reads among results (OpGet, OpList, and the
// holder reported by an OpAcquire that found the name held) report the
// latest promise the term made their grants from memory, which the state
// does not know: otherwise a lease renewed from memory would show less
// time left than its holder has. Nothing shared with the state is
// changed: results of remembered calls share their slices with it.
// m.mu is held.
func (m *memory) show(ops []lease.Op, results []lease.Result) {
	if len(m.promised) == 0 {
		return
	}
	later := func(l *lease.Lease) bool {
		at, ok := m.promised[l.Token]
		if !ok || at <= l.Promise() || at > l.ExpiresAt {
			return false
		}
		l.Promised = at
		return true
	}
	for i := range results {
		r := &results[i]
		switch ops[i].Type {
		case lease.OpGet, lease.OpList:
			if r.Err == nil && ops[i].Type == lease.OpGet {
				later(&r.Lease)
			}
			ls := slices.Clone(r.Leases)
			changed := false
			for j := range ls {
				changed = later(&ls[j]) || changed
			}
			if changed {
				r.Leases = ls
			}
		case lease.OpAcquire:
			if held, ok := errors.AsType[*lease.HeldError](r.Err); ok && !held.LockDelay {
				at, ok := m.promised[held.Token]
				if ok && at-r.Now > held.Remaining {
					h := *held
					h.Remaining = at - r.Now
					r.Err = &h
				}
			}
		}
	}
}

// noteGrants records the promises of the grants among events, applied
// under the published term (the waiters a batch of this term granted),
// and forgets the grants that ended (nothing is left to trim). It runs
// under fsm.mu.
func (n *Node) noteGrants(events []lease.Event) {
	t := n.term.Load()
	if t == nil || n.cfg.RenewHeadroom <= 0 {
		return
	}
	m := t.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, e := range events {
		k := e.Lease.Token
		switch {
		case e.Type == lease.EventGranted && e.Lease.Promised != 0:
			m.promise(e.Lease.Name, k, e.Lease.Promised)
		case e.Type != lease.EventGranted && !m.trimming[k]:
			// Its entry in due goes when it comes up.
			delete(m.promised, k)
		}
	}
}

// trim proposes the trims of the grants of term t whose promise has
// passed.
func (n *Node) trim(t *leaderTerm) error {
	ops := t.mem.takeDue(n.clusterNow(t))
	if len(ops) == 0 {
		return nil
	}
	_, err := n.Do(t.ctx, ops...)
	t.mem.trimmed(ops, err != nil)
	return err
}

func (n *Node) kickExpirer() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// confirmLeadership returns nil once this node has been confirmed as
// leader of term t by a quorum after the call began (raft's VerifyLeader,
// one round for all the calls that wait together), or at once if it is
// the only voter.
func (n *Node) confirmLeadership(ctx context.Context, t *leaderTerm) error {
	if n.voters() <= 1 {
		if n.term.Load() != t {
			return ErrNotLeader
		}
		return nil
	}
	r := t.verify.join(n)
	select {
	case <-r.done:
		if r.err != nil {
			return mapRaftError(r.err)
		}
		if n.term.Load() != t {
			return ErrNotLeader
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.closing:
		return ErrClosed
	}
}

// verifier runs one raft VerifyLeader at a time for all the callers that
// joined while the previous one ran.
type verifier struct {
	mu      sync.Mutex
	next    *verifyRound
	running bool
}

type verifyRound struct {
	done chan struct{}
	err  error
}

// join returns the round that starts after this call.
func (v *verifier) join(n *Node) *verifyRound {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.next == nil {
		v.next = &verifyRound{done: make(chan struct{})}
	}
	r := v.next
	if !v.running {
		v.running = true
		go v.run(n)
	}
	return r
}

func (v *verifier) run(n *Node) {
	for {
		v.mu.Lock()
		r := v.next
		v.next = nil
		if r == nil {
			v.running = false
			v.mu.Unlock()
			return
		}
		v.mu.Unlock()
		r.err = n.wait(n.raft.VerifyLeader())
		close(r.done)
	}
}
