package node

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// ActivityKind says what an Activity records.
type ActivityKind uint8

// The kinds of activity. Renewals are not recorded one by one: they are
// counted per second of cluster time (Renewals).
const (
	ActivityGranted       ActivityKind = 1
	ActivityReleased      ActivityKind = 2
	ActivityExpired       ActivityKind = 3
	ActivityWriteAccepted ActivityKind = 4 // a fenced put or delete the store accepted
	ActivityWriteRejected ActivityKind = 5 // a fenced put or delete refused for its token
	// ActivityReset marks where this node replaced its state with a
	// snapshot: what happened between the entries before and after it was
	// never applied here.
	ActivityReset ActivityKind = 6
	// ActivityRevoked is a grant an operator revoked.
	ActivityRevoked ActivityKind = 7
	// ActivityHandedOff is a grant its holder handed over to a waiter
	// (lease/handoff.go): the waiter's grant follows at once.
	ActivityHandedOff ActivityKind = 8
)

func (k ActivityKind) String() string {
	switch k {
	case ActivityGranted:
		return "granted"
	case ActivityReleased:
		return "released"
	case ActivityExpired:
		return "expired"
	case ActivityWriteAccepted:
		return "write_accepted"
	case ActivityWriteRejected:
		return "write_rejected"
	case ActivityReset:
		return "reset"
	case ActivityRevoked:
		return "revoked"
	case ActivityHandedOff:
		return "handed_off"
	}
	return "unknown"
}

// activityOf returns the kind of activity of an event, and the reason it
// carries: an operator's for a revocation. A release that handed the
// grant over is ActivityHandedOff.
func activityOf(ev lease.Event) (ActivityKind, string) {
	switch ev.Type {
	case lease.EventGranted:
		return ActivityGranted, ""
	case lease.EventReleased:
		if ev.Reason == lease.HandedOff {
			return ActivityHandedOff, ""
		}
		return ActivityReleased, ""
	case lease.EventExpired:
		return ActivityExpired, ""
	case lease.EventRevoked:
		return ActivityRevoked, ev.Reason
	}
	return 0, ""
}

// Activity is one thing the state machine did, as this node applied it.
type Activity struct {
	// Seq numbers the activities this node recorded since it started,
	// from 1, without gaps.
	Seq uint64
	// Index is the raft index of the entry that did it.
	Index uint64
	// At is the cluster time of that entry.
	At time.Duration
	// Wall is when the leader appended the entry, by its wall clock
	// (raft.Log.AppendedAt), for people to read; zero if unknown. Only
	// the dashboard reads it: no decision depends on a wall clock.
	Wall time.Time
	Kind ActivityKind
	// Name is the lease, Holder its holder (grants, releases, expiries)
	// and Token the grant's token, or the token a write carried.
	Name   string
	Holder string
	Token  uint64
	// Key, Delete and Err describe a write: its key, whether it was a
	// delete, and why it was rejected.
	Key    string
	Delete bool
	Err    error
	// Reason is an operator's reason for a revocation.
	Reason string
}

// Term is one grant of a name in its History: who held it with which
// token, from when, until when and how it ended. The terms come from the
// replicated lease history (lease/history.go), so they survive restarts
// and failovers, unless the cluster keeps none (tenured --history-terms
// 0): then from what this node applied since it started.
type Term struct {
	Holder string
	Token  uint64
	Start  time.Duration
	// End is zero while the grant is held; Ended then is zero too.
	End   time.Duration
	Ended ActivityKind // ActivityReleased, ActivityExpired or ActivityRevoked
	// Reason is the operator's reason when the term was revoked.
	Reason string
	// StartWall and EndWall are Start and End by the wall clock of the
	// leader that appended them (see Activity.Wall); zero if unknown.
	StartWall, EndWall time.Time
	// Writes counts the fenced writes accepted with this term's token.
	Writes int
}

// StaleWrite is a write to a name's lease refused for its token.
type StaleWrite struct {
	At    time.Duration
	Wall  time.Time // see Activity.Wall
	Token uint64
	Key   string
	// Current is the token of the name's first live grant when the write
	// was refused (0 if none was held).
	Current uint64
	Reason  string
}

// History is what a node remembers of one name: its last terms, oldest
// first, and its last refused writes.
type History struct {
	Name    string
	Terms   []Term
	Stale   []StaleWrite
	Reset   bool     // a snapshot install cut the history short
	Waiters []string // the holders queued for the name now, first first
}

// RenewalCount is how many renewals were applied in one second of
// cluster time (Second is cluster time truncated to the second).
type RenewalCount struct {
	Second time.Duration
	Count  uint64
}

// Renewal is one applied renewal of a grant, with its new expiry (cluster
// time).
type Renewal struct {
	Name  string
	Token uint64
	// ExpiresAt is when the cluster keeps the grant until after the
	// renewal, Promised what its holder was told (lease.Lease).
	ExpiresAt time.Duration
	Promised  time.Duration
}

// The bounds of the activity log: the ring of recent activity, how many
// names have a history and how long each is, how many seconds of renewal
// counts are kept, and how many renewals one by one.
const (
	renewalRingSize  = 4096
	activityRingSize = 10000
	historyNames     = 4096
	historyTerms     = 32
	historyStale     = 64
	renewalSeconds   = 600
)

type nameHistory struct {
	terms []Term
	stale []StaleWrite
	reset bool
}

// activityLog records what Apply did: a bounded ring of activities, the
// recent terms of each name, and renewal counts per second. It is written
// on the FSM goroutine under the FSM lock and read under the FSM read
// lock, so recording takes no lock of its own; waking subscribers takes
// one only when there are subscribers.
type activityLog struct {
	ring [activityRingSize]Activity
	seq  uint64 // activities recorded; ring[(seq-1)%size] is the last
	ops  uint64 // operations applied, for rates

	names map[string]*nameHistory
	order []string // names in the order their history was made, for eviction
	first int      // order[first:] are the names still kept

	renewals [renewalSeconds]RenewalCount
	// renewed is a ring of the last renewals (renewedSeq of them so far),
	// for the dashboard's countdowns.
	renewed    [renewalRingSize]Renewal
	renewedSeq uint64

	nsubs atomic.Int32
	mu    sync.Mutex
	subs  map[chan struct{}]struct{}
}

func newActivityLog() *activityLog {
	return &activityLog{names: make(map[string]*nameHistory), subs: make(map[chan struct{}]struct{})}
}

func (a *activityLog) add(act Activity) {
	a.seq++
	act.Seq = a.seq
	a.ring[(a.seq-1)%activityRingSize] = act
}

// record notes one applied batch. st is the state after it; wall is when
// the leader appended its entry (for display only).
func (a *activityLog) record(index uint64, wall time.Time, st *lease.State, ops []lease.Op, results []lease.Result, events []lease.Event) {
	now := st.Now()
	a.ops += uint64(len(ops))
	recorded := a.seq
	// When the cluster keeps a lease history, Node.History reads the
	// terms from it; this node's own record of terms is only for a
	// cluster that keeps none, and is not kept twice.
	ownTerms := st.HistoryRetention().Terms == 0
	for _, ev := range events {
		kind, reason := activityOf(ev)
		a.add(Activity{Index: index, At: now, Wall: wall, Kind: kind, Name: ev.Lease.Name, Holder: ev.Lease.Holder, Token: ev.Lease.Token, Reason: reason})
		if ownTerms {
			a.term(ev, now, wall)
		}
	}
	var renewed uint64
	for i := range ops {
		op, res := &ops[i], &results[i]
		if res.Remembered {
			continue // a retry: its call was counted when it took effect
		}
		switch op.Type {
		case lease.OpRenew:
			for j := range res.Renewed {
				if r := &res.Renewed[j]; r.Err == nil {
					renewed++
					a.renewal(&r.Lease)
				}
			}
		case lease.OpAcquire:
			if res.Err == nil && res.Lease.GrantedAt < now {
				renewed++ // an acquire by the holder renews
				a.renewal(&res.Lease)
			}
		case lease.OpPut, lease.OpDelete:
			a.write(index, st, now, wall, op, res)
		}
	}
	a.countRenewals(now, renewed)
	if a.seq != recorded && a.nsubs.Load() > 0 {
		a.wake()
	}
}

// countRenewals counts renewed renewals at cluster time now.
func (a *activityLog) countRenewals(now time.Duration, renewed uint64) {
	if renewed == 0 {
		return
	}
	sec := now.Truncate(time.Second)
	b := &a.renewals[(sec/time.Second)%renewalSeconds]
	if b.Second != sec {
		*b = RenewalCount{Second: sec}
	}
	b.Count += renewed
}

// renewal notes the renewal of l.
func (a *activityLog) renewal(l *lease.Lease) {
	a.renewedSeq++
	a.renewed[(a.renewedSeq-1)%renewalRingSize] = Renewal{Name: l.Name, Token: l.Token, ExpiresAt: l.ExpiresAt, Promised: l.Promise()}
}

// memoryRenewals notes the renewals results the leader answered from
// memory at cluster time now.
func (a *activityLog) memoryRenewals(now time.Duration, results []lease.Result) {
	var renewed uint64
	for i := range results {
		for j := range results[i].Renewed {
			renewed++
			a.renewal(&results[i].Renewed[j].Lease)
		}
	}
	a.countRenewals(now, renewed)
}

func (a *activityLog) write(index uint64, st *lease.State, now time.Duration, wall time.Time, op *lease.Op, res *lease.Result) {
	act := Activity{Index: index, At: now, Wall: wall, Kind: ActivityWriteAccepted, Name: op.Name, Token: op.Token, Key: op.Key, Delete: op.Type == lease.OpDelete}
	switch {
	case res.Err == nil:
		if h := a.names[op.Name]; h != nil {
			for i := len(h.terms) - 1; i >= 0; i-- {
				if h.terms[i].Token == op.Token {
					h.terms[i].Writes++
					break
				}
			}
		}
	case errors.Is(res.Err, lease.ErrStaleToken):
		act.Kind, act.Err = ActivityWriteRejected, res.Err
		sw := StaleWrite{At: now, Wall: wall, Token: op.Token, Key: op.Key, Reason: res.Err.Error()}
		if l, ok := st.Lease(op.Name); ok && l.ExpiresAt > now {
			sw.Current = l.Token
		}
		h := a.history(op.Name)
		if len(h.stale) == historyStale {
			h.stale = append(h.stale[:0], h.stale[1:]...)
		}
		h.stale = append(h.stale, sw)
	default:
		return // not found, invalid: not a fencing decision
	}
	a.add(act)
}

// term updates the history of the event's name.
func (a *activityLog) term(ev lease.Event, now time.Duration, wall time.Time) {
	if ev.Type == lease.EventGranted {
		h := a.history(ev.Lease.Name)
		if len(h.terms) == historyTerms {
			h.terms = append(h.terms[:0], h.terms[1:]...)
		}
		h.terms = append(h.terms, Term{Holder: ev.Lease.Holder, Token: ev.Lease.Token, Start: now, StartWall: wall})
		return
	}
	h := a.names[ev.Lease.Name]
	if h == nil {
		return
	}
	for i := len(h.terms) - 1; i >= 0; i-- {
		if t := &h.terms[i]; t.Token == ev.Lease.Token && t.Ended == 0 {
			t.End, t.EndWall = now, wall
			t.Ended, t.Reason = activityOf(ev)
			return
		}
	}
}

// history returns the history of name, making it (and forgetting the
// oldest name's) if needed.
func (a *activityLog) history(name string) *nameHistory {
	if h := a.names[name]; h != nil {
		return h
	}
	if len(a.names) >= historyNames {
		for a.first < len(a.order) {
			old := a.order[a.first]
			a.order[a.first] = ""
			a.first++
			if _, ok := a.names[old]; ok {
				delete(a.names, old)
				break
			}
		}
	}
	if a.first > len(a.order)/2 && a.first > historyNames {
		a.order = append(a.order[:0], a.order[a.first:]...)
		a.first = 0
	}
	h := &nameHistory{}
	a.names[name] = h
	a.order = append(a.order, name)
	return h
}

// reset notes that the state was replaced by a snapshot, at wall.
func (a *activityLog) reset(index uint64, now time.Duration, wall time.Time) {
	if a.seq == 0 {
		return // a node starting from its snapshot: nothing recorded yet
	}
	a.add(Activity{Index: index, At: now, Wall: wall, Kind: ActivityReset})
	for _, h := range a.names {
		h.reset = true
		for i := range h.terms {
			if h.terms[i].Ended == 0 {
				h.terms[i].End, h.terms[i].EndWall, h.terms[i].Ended = now, wall, ActivityReset
			}
		}
	}
	if a.nsubs.Load() > 0 {
		a.wake()
	}
}

func (a *activityLog) wake() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for ch := range a.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// since returns up to limit activities recorded after seq, oldest first,
// and how many after seq were already dropped from the ring.
func (a *activityLog) since(seq uint64, limit int) (acts []Activity, missed uint64) {
	oldest := uint64(1)
	if a.seq > activityRingSize {
		oldest = a.seq - activityRingSize + 1
	}
	from := seq + 1
	if from < oldest {
		missed = oldest - from
		from = oldest
	}
	if limit > 0 && a.seq >= from && a.seq-from+1 > uint64(limit) {
		skip := a.seq - uint64(limit) + 1 - from
		missed += skip
		from += skip
	}
	for s := from; s <= a.seq; s++ {
		acts = append(acts, a.ring[(s-1)%activityRingSize])
	}
	return acts, missed
}

// ActivityPage is a read of the activity log.
type ActivityPage struct {
	Activities []Activity
	// Missed counts the activities after the asked-for Seq that were
	// already dropped from the bounded log (or left out by the limit).
	Missed uint64
	// Last is the Seq of the last activity recorded.
	Last uint64
	// Ops counts the operations this node has applied; Now is the cluster
	// time of the last one.
	Ops uint64
	Now time.Duration
}

// Activity returns up to limit (0: all kept) of the activities recorded
// after seq, oldest first. The log keeps the last 10,000.
func (n *Node) Activity(seq uint64, limit int) ActivityPage {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	a := n.fsm.act
	acts, missed := a.since(seq, limit)
	return ActivityPage{Activities: acts, Missed: missed, Last: a.seq, Ops: a.ops, Now: n.fsm.st.Now()}
}

// History returns the terms of name the replicated lease history keeps
// (or, if the cluster keeps none, the last 32 this node applied), the last
// 64 refused writes this node applied, and its waiters now. A node keeps
// what it applied of the last 4096 names granted or written to.
func (n *Node) History(name string) History {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	out := History{Name: name, Waiters: n.fsm.st.Waiters(name)}
	h := n.fsm.act.names[name]
	if h != nil {
		out.Stale = append([]StaleWrite(nil), h.stale...)
	}
	if n.fsm.st.HistoryRetention().Terms > 0 {
		for _, t := range n.fsm.st.History(name) {
			out.Terms = append(out.Terms, termOf(t))
		}
		return out
	}
	if h != nil {
		out.Terms = append([]Term(nil), h.terms...)
		out.Reset = h.reset
	}
	return out
}

// termOf converts a term of the replicated lease history.
func termOf(t lease.Term) Term {
	out := Term{Holder: t.Holder, Token: t.Token, Start: t.Start, Writes: int(t.Accepted)}
	if t.StartWall != 0 {
		out.StartWall = time.Unix(0, t.StartWall)
	}
	switch t.Ending {
	case lease.EndingNone:
		return out
	case lease.EndingReleased:
		out.Ended = ActivityReleased
	case lease.EndingExpired:
		out.Ended = ActivityExpired
	case lease.EndingRevoked:
		out.Ended, out.Reason = ActivityRevoked, t.Reason
	default:
		out.Ended = ActivityHandedOff
	}
	out.End = t.End
	if t.EndWall != 0 {
		out.EndWall = time.Unix(0, t.EndWall)
	}
	return out
}

// Renewals returns the renewal counts of the last 10 minutes of cluster
// time that had any, oldest first.
func (n *Node) Renewals() []RenewalCount {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	now := n.fsm.st.Now()
	var out []RenewalCount
	for _, b := range n.fsm.act.renewals {
		if b.Count > 0 && now-b.Second < renewalSeconds*time.Second {
			out = append(out, b)
		}
	}
	sortRenewals(out)
	return out
}

func sortRenewals(rs []RenewalCount) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].Second < rs[j-1].Second; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

// RenewedSince returns the renewals applied after seq of the grants whose
// names start with prefix, oldest first, and the seq to ask after next
// time (ask after math.MaxUint64 for just that). The node keeps the last
// 4096 renewals: complete is false if some after seq were already
// dropped, and the caller should then read the leases themselves.
func (n *Node) RenewedSince(seq uint64, prefix string) (rs []Renewal, next uint64, complete bool) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.act.renewedSince(seq, prefix)
}

func (a *activityLog) renewedSince(seq uint64, prefix string) (rs []Renewal, next uint64, complete bool) {
	if seq >= a.renewedSeq {
		return nil, a.renewedSeq, true
	}
	from := seq + 1
	complete = true
	if a.renewedSeq > renewalRingSize && from <= a.renewedSeq-renewalRingSize {
		from, complete = a.renewedSeq-renewalRingSize+1, false
	}
	for s := from; s <= a.renewedSeq; s++ {
		if r := &a.renewed[(s-1)%renewalRingSize]; strings.HasPrefix(r.Name, prefix) {
			rs = append(rs, *r)
		}
	}
	return rs, a.renewedSeq, complete
}

// LiveLeases returns the grants live at the applied cluster time whose
// names start with prefix, sorted by name, and that time.
func (n *Node) LiveLeases(prefix string) ([]lease.Lease, time.Duration) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	now := n.fsm.st.Now()
	var out []lease.Lease
	for _, l := range n.fsm.st.Leases(prefix) {
		if l.ExpiresAt > now {
			out = append(out, l)
		}
	}
	return out, now
}

// Waiters returns the holders queued for each name with the prefix that
// has any, first first.
func (n *Node) Waiters(prefix string) map[string][]string {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.st.Queues(prefix)
}

// SubscribeActivity returns a channel that receives a value (at most one
// pending) whenever activity is recorded, and a function that ends the
// subscription. Read what is new with Activity.
func (n *Node) SubscribeActivity() (<-chan struct{}, func()) {
	a := n.fsm.act
	ch := make(chan struct{}, 1)
	a.mu.Lock()
	a.subs[ch] = struct{}{}
	a.nsubs.Add(1)
	a.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			a.mu.Lock()
			delete(a.subs, ch)
			a.nsubs.Add(-1)
			a.mu.Unlock()
		})
	}
}

// AppliedOps returns how many operations this node has applied since it
// started, and the cluster time of the last.
func (n *Node) AppliedOps() (uint64, time.Duration) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	return n.fsm.act.ops, n.fsm.st.Now()
}

// Histories returns the histories of the names with the prefix that have
// one, sorted by name, at most max of them (0: all).
func (n *Node) Histories(prefix string, max int) []History {
	n.fsm.mu.RLock()
	seen := make(map[string]bool)
	var names []string
	for name := range n.fsm.act.names {
		if strings.HasPrefix(name, prefix) {
			seen[name] = true
			names = append(names, name)
		}
	}
	for _, name := range n.fsm.st.HistoryNames(prefix) {
		if !seen[name] {
			names = append(names, name)
		}
	}
	n.fsm.mu.RUnlock()
	sort.Strings(names)
	if max > 0 && len(names) > max {
		names = names[:max]
	}
	out := make([]History, 0, len(names))
	for _, name := range names {
		out = append(out, n.History(name))
	}
	return out
}
