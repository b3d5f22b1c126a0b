package lease

import (
	"cmp"
	"container/heap"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unique"
)

// EventType says what happened to a lease.
type EventType uint8

// Event types, in the order a lease lives them.
const (
	EventGranted  EventType = 1
	EventReleased EventType = 2
	EventExpired  EventType = 3
	// EventRevoked is a grant an operator ended (OpRevoke); the event's
	// Reason says why.
	EventRevoked EventType = 4
)

func (t EventType) String() string {
	switch t {
	case EventGranted:
		return "granted"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	case EventRevoked:
		return "revoked"
	}
	return "unknown"
}

// Event is a grant, release, expiry or revocation produced by Apply, in
// commit order. Renewals produce no event.
type Event struct {
	Type  EventType
	Lease Lease
	// At is the cluster time of the batch that produced the event.
	At time.Duration
	// Reason is the operator's reason of an EventRevoked, or HandedOff
	// for the EventReleased of a grant handed off (see handoff.go).
	Reason string
}

// RenewResult is the outcome for one Ref of an OpRenew.
type RenewResult struct {
	Ref   Ref
	Lease Lease
	Err   error
	// HandoffRequested is the waiter that asks the renewed grant's
	// holder to hand over: the first of the waiters with the highest
	// priority, when that is higher than the grant's (see handoff.go).
	HandoffRequested string
}

// Result is the outcome of one Op.
type Result struct {
	// Err is nil on success, or an error wrapping ErrHeld, ErrStaleToken,
	// ErrNotFound or ErrInvalid.
	Err error
	// Lease is the grant for OpAcquire and OpGet. For OpGet of a
	// semaphore it is the slot granted first; Leases has them all.
	Lease Lease
	// Queued is true when an OpAcquire with Wait found the lease held and
	// queued the holder; Err then holds the *HeldError.
	Queued bool
	// Renewed has one entry per Ref of an OpRenew.
	Renewed []RenewResult
	// Leases lists the live leases for OpList, sorted by name and, within
	// a semaphore, by token; for OpGet, the live slots of the name; for
	// OpRevoke, the grants it ended, in the order granted.
	Leases []Lease
	// Entry is the value for OpKVGet.
	Entry Entry
	// Entries are the values of the keys with the prefix of an OpKVList,
	// sorted by key (deleted keys are left out).
	Entries []Entry
	// Revision is the store revision after OpPut and OpDelete.
	Revision uint64
	// Now is the cluster time the op was applied at: for a Remembered
	// result, the time its call first took effect.
	Now time.Duration
	// Terms are the kept terms of the name of an OpHistory, oldest
	// first (see history.go).
	Terms []Term
	// Remembered is true when the op is a retry of a call of a client
	// session that was already applied: the result is the first
	// attempt's, and the retry changed nothing (see session.go).
	Remembered bool
}

type waiter struct {
	Holder   string
	TTL      time.Duration
	Deadline time.Duration // cluster time after which the waiter is dropped
	// Limit is the semaphore limit the waiter asked for (0 for a plain
	// lease); it always equals the live limit of the name when queued.
	Limit int `json:",omitempty"`
	// Principal is the caller that queued, recorded in its grant.
	Principal string `json:",omitempty"`
	// Session and Seq name the call of a client session that queued the
	// waiter, whose result its grant becomes (see session.go).
	Session string `json:",omitempty"`
	Seq     uint64 `json:",omitempty"`
	// LockDelay is the lock-delay the waiter asked for, given to its
	// grant.
	LockDelay time.Duration `json:",omitempty"`
	// Shared is true for a waiter of a shared grant (see shared.go).
	Shared bool `json:",omitempty"`
	// Priority is the priority the waiter stated, given to its grant
	// (see handoff.go).
	Priority int `json:",omitempty"`
}

type fence struct {
	Token uint64
	Entry *Entry // nil once deleted
}

// State is the whole replicated state. The zero value is not ready; use New.
// A State is not safe for concurrent use.
type State struct {
	now       time.Duration
	lastToken uint64
	revision  uint64
	// leases holds the grants of each name: one for a plain lease, up to
	// its limit for a semaphore, in the order granted (so by token). A
	// name with no grant has no entry.
	leases   grantIndex
	queues   map[string][]waiter
	kv       map[string]*fence
	expiries expiryHeap
	// sessions are the client sessions by sessionKey (see session.go);
	// sessionSweep is the cluster time of their next sweep.
	sessions     map[sessionKey]*session
	sessionSweep time.Duration
	// delays are the lock-delays in force, or passed and not yet
	// settled, by name; revoked are the tombstones of revoked grants
	// (see lockdelay.go).
	delays  map[string]delay
	revoked tombstones
	// history keeps the recent terms of each name (see history.go).
	history termHistory
}

// New returns an empty state at cluster time zero.
func New() *State {
	return &State{
		leases: newGrantIndex(),
		queues: make(map[string][]waiter),
		kv:     make(map[string]*fence),

		sessions: make(map[sessionKey]*session),
		delays:   make(map[string]delay),
		revoked:  tombstones{byName: make(map[string][]tombstone)},
		history:  newTermHistory(),
	}
}

// Now returns the cluster time of the last applied batch.
func (s *State) Now() time.Duration { return s.now }

// LastToken returns the highest token ever granted.
func (s *State) LastToken() uint64 { return s.lastToken }

// Revision returns the revision of the key-value store.
func (s *State) Revision() uint64 { return s.revision }

// Len returns the number of grants not yet freed (each slot of a
// semaphore counts). Some may have expired by cluster time but not been
// freed by an OpExpire yet.
func (s *State) Len() int { return s.leases.grants() }

// Live returns the number of grants live at the cluster time of the last
// applied batch: stored and not expired. It costs in proportion to the
// grants that expired and are not freed yet (the expirer frees them
// within moments), not to the number of grants: the status and the
// metrics ask for it every second or so, with the state locked.
func (s *State) Live() int { return s.Len() - s.expiredUnfreed() }

// expiredUnfreed counts the stored grants that expired by the cluster
// time of the last applied batch. The expiry heap holds, for each grant,
// an entry no later than its expiry, so every such grant has an entry at
// or before now; the walk visits only those (a heap entry's children
// come no earlier than it) and counts each grant once.
func (s *State) expiredUnfreed() int {
	var (
		n       int
		counted map[uint64]bool
		stack   []int
	)
	if len(s.expiries) > 0 {
		stack = append(stack, 0)
	}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		e := s.expiries[i]
		if e.at > s.now {
			continue
		}
		if e.token != 0 && !counted[e.token] {
			if l := s.slot(e.name, e.token); l != nil && l.ExpiresAt <= s.now {
				if counted == nil {
					counted = make(map[uint64]bool)
				}
				counted[e.token] = true
				n++
			}
		}
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < len(s.expiries) {
				stack = append(stack, c)
			}
		}
	}
	return n
}

// Lease returns the stored grant of name, live or not yet freed; for a
// semaphore, the slot granted first (Slots has them all).
func (s *State) Lease(name string) (Lease, bool) {
	ls := s.leases.get(name)
	if len(ls) == 0 {
		return Lease{}, false
	}
	return *ls[0], true
}

// Slots returns the stored grants of name, live or not yet freed, in the
// order granted.
func (s *State) Slots(name string) []Lease {
	var out []Lease
	for _, l := range s.leases.get(name) {
		out = append(out, *l)
	}
	return out
}

// slot returns the stored grant of name with token, or nil.
func (s *State) slot(name string, token uint64) *Lease {
	for _, l := range s.leases.get(name) {
		if l.Token == token {
			return l
		}
	}
	return nil
}

// update replaces the stored grant l with a copy changed by change and
// returns the copy. A stored *Lease never changes, so a Capture can keep
// pointers to the grants while the state moves on.
func (s *State) update(l *Lease, change func(*Lease)) *Lease {
	nl := *l
	change(&nl)
	ls := s.leases.get(l.Name)
	for i := range ls {
		if ls[i] == l {
			ls[i] = &nl
			break
		}
	}
	return &nl
}

// effectiveLimit is how many holders a grant's name allows: a plain
// lease has limit 0 and allows one.
func effectiveLimit(limit int) int { return max(limit, 1) }

// Waiters returns the holders queued for name, first first.
func (s *State) Waiters(name string) []string {
	var hs []string
	for _, w := range s.queues[name] {
		hs = append(hs, w.Holder)
	}
	return hs
}

// Queues returns the holders queued for each name with the prefix that
// has any, first first.
func (s *State) Queues(prefix string) map[string][]string {
	out := make(map[string][]string)
	for name, q := range s.queues {
		if !strings.HasPrefix(name, prefix) || len(q) == 0 {
			continue
		}
		hs := make([]string, len(q))
		for i, w := range q {
			hs[i] = w.Holder
		}
		out[name] = hs
	}
	return out
}

// NextDeadline returns the earliest cluster time at which a lease expires
// or a lock-delay ends, and false if there is neither. The node's expirer
// proposes an OpExpire stamped at or after it.
func (s *State) NextDeadline() (time.Duration, bool) {
	for s.expiries.Len() > 0 {
		top := s.expiries[0]
		if top.token == 0 {
			// The end of a lock-delay (see lockdelay.go).
			if d, ok := s.delays[top.name]; ok && d.Until == top.at {
				return top.at, true
			}
			heap.Pop(&s.expiries)
			continue
		}
		l := s.slot(top.name, top.token)
		switch {
		case l == nil:
			heap.Pop(&s.expiries)
		case l.ExpiresAt == top.at:
			return top.at, true
		default:
			// Renewed since the entry was pushed: move it to the
			// grant's expiry now (see renewed).
			s.expiries[0].at = l.ExpiresAt
			heap.Fix(&s.expiries, 0)
		}
	}
	return 0, false
}

// Apply applies b and returns one Result per op and the events it produced.
// It is deterministic: it reads nothing but s and b.
func (s *State) Apply(b Batch) ([]Result, []Event) {
	if b.Now > s.now {
		s.now = b.Now
	}
	a := applier{s: s, now: s.now, wall: b.Wall, headroom: b.Headroom}
	results := make([]Result, len(b.Ops))
	for i, op := range b.Ops {
		a.left = len(b.Ops) - i
		results[i] = a.apply(op)
		if !results[i].Remembered {
			results[i].Now = s.now
		}
	}
	return results, a.events
}

type applier struct {
	s    *State
	now  time.Duration
	wall int64 // the batch's Wall, for the history's display only
	// headroom is the batch's Headroom (see memory.go).
	headroom time.Duration
	events   []Event
	left     int // the batch's ops not yet applied, this one included
}

// event adds e to the batch's events. The first makes room for one per
// op left: a grant or a release emits one, and most batches are made of
// them.
func (a *applier) event(e Event) {
	if a.events == nil {
		a.events = make([]Event, 0, max(a.left, 1))
	}
	a.events = append(a.events, e)
}

func (a *applier) emit(t EventType, l Lease) {
	a.event(Event{Type: t, Lease: l, At: a.now})
}

func (a *applier) emitRevoked(l Lease, reason string) {
	a.event(Event{Type: EventRevoked, Lease: l, At: a.now, Reason: reason})
}

func (a *applier) apply(op Op) Result {
	if op.Session != "" && sessioned(op.Type) {
		return a.applySession(op)
	}
	return a.applyOp(op)
}

func (a *applier) applyOp(op Op) Result {
	switch op.Type {
	case OpAcquire:
		return a.acquire(op)
	case OpRenew:
		return a.renew(op)
	case OpRelease:
		if op.Handoff {
			return a.handoff(op)
		}
		return a.release(op)
	case OpExpire:
		a.expireAll()
		return Result{}
	case OpGet:
		ls := a.live(op.Name)
		if len(ls) == 0 {
			return Result{Err: ErrNotFound}
		}
		return Result{Lease: *ls[0], Leases: copyLeases(ls)}
	case OpList:
		return a.list(op.Prefix)
	case OpPut:
		return a.put(op)
	case OpDelete:
		return a.del(op)
	case OpKVGet:
		f, ok := a.s.kv[op.Key]
		if !ok || f.Entry == nil {
			return Result{Err: ErrNotFound}
		}
		e := *f.Entry
		e.Value = append([]byte(nil), e.Value...)
		return Result{Entry: e}
	case OpCancelWait:
		for _, w := range a.s.queues[op.Name] {
			if w.Holder == op.Holder && w.Principal != "" && w.Principal != op.Principal {
				return Result{Err: &ForbiddenError{Name: op.Name, Principal: op.Principal, Action: "acquire"}}
			}
		}
		a.removeWaiter(op.Name, op.Holder)
		return Result{}
	case OpRevoke:
		return a.revoke(op)
	case OpHistory:
		a.s.history.trim(op.Name, a.now)
		return Result{Terms: a.s.visibleHistory(op.Name, a.now)}
	case OpHistoryConfig:
		return a.setRetention(op)
	case OpTrim:
		return a.trim(op) // memory.go
	case OpKVList:
		var out []Entry
		for _, key := range sortedKeys(a.s.kv) {
			if f := a.s.kv[key]; strings.HasPrefix(key, op.Prefix) && f.Entry != nil {
				e := *f.Entry
				e.Value = append([]byte(nil), e.Value...)
				out = append(out, e)
			}
		}
		return Result{Entries: out}
	}
	return Result{Err: invalidf("unknown operation %d", op.Type)}
}

func copyLeases(ls []*Lease) []Lease {
	out := make([]Lease, len(ls))
	for i, l := range ls {
		out[i] = *l
	}
	return out
}

// live settles name and returns its grants live at a.now, in the order
// granted.
func (a *applier) live(name string) []*Lease {
	a.settle(name)
	return a.s.leases.get(name)
}

// settle frees the grants of name that have expired by a.now, in the
// order granted (starting their lock-delays), ends a lock-delay that has
// passed, and then grants free slots to the first waiters still waiting.
func (a *applier) settle(name string) {
	ls := a.s.leases.get(name)
	for i, l := range ls {
		if l.ExpiresAt > a.now {
			continue
		}
		// Something expired: keep what has not (a new slice: the
		// index owns ls).
		kept := append(make([]*Lease, 0, len(ls)-1), ls[:i]...)
		for _, l := range ls[i:] {
			if l.ExpiresAt > a.now {
				kept = append(kept, l)
				continue
			}
			a.emit(EventExpired, *l)
			a.closed(l, EndingExpired, "")
			// The lock-delay counts from the expiry, not from when it
			// was noticed.
			a.startDelay(l, l.ExpiresAt)
		}
		a.setSlots(name, kept)
		break
	}
	if d, ok := a.s.delays[name]; ok && d.Until <= a.now {
		delete(a.s.delays, name)
	}
	a.grantWaiters(name)
}

func (a *applier) setSlots(name string, ls []*Lease) {
	a.s.leases.set(name, ls)
}

// grantWaiters grants name to waiters, first first, while it has a free
// slot and no lock-delay, dropping the waiters whose deadline has passed
// on the way.
func (a *applier) grantWaiters(name string) {
	if _, ok := a.delayed(name); ok {
		return // the waiters keep their places until the delay ends
	}
	q := a.s.queues[name]
	for len(q) > 0 {
		ls := a.s.leases.get(name)
		if sharedMode(ls, q) && q[0].Deadline <= a.now {
			q = q[1:] // a gone waiter must not hold back readers behind it
			continue
		}
		if waiterBlocked(ls, q[0]) {
			break
		}
		w := q[0]
		q = q[1:]
		if w.Deadline <= a.now {
			continue
		}
		if len(ls) > 0 && effectiveLimit(w.Limit) != effectiveLimit(ls[0].Limit) {
			// Never queued so (the limit is checked when a waiter is
			// queued), but a log must apply the same way forever.
			continue
		}
		a.granted(w, a.grant(name, w.Holder, w.TTL, w.Limit, w.Principal, w.LockDelay, w.Shared, w.Priority))
	}
	if len(q) == 0 {
		delete(a.s.queues, name)
	} else {
		a.s.queues[name] = q
	}
}

func (a *applier) grant(name, holder string, ttl time.Duration, limit int, principal string, lockDelay time.Duration, shared bool, priority int) *Lease {
	a.s.lastToken++
	if limit <= 1 {
		limit = 0 // a plain lease
	}
	l := &Lease{
		Name: name,
		// Holders and principals repeat (a process holds many names
		// under one holder ID): keep one copy of each.
		Holder:    unique.Make(holder).Value(),
		Token:     a.s.lastToken,
		TTL:       ttl,
		GrantedAt: a.now,
		Limit:     limit,
		Principal: unique.Make(principal).Value(),
		LockDelay: lockDelay,
		Shared:    shared,
		Priority:  priority,
		// A new grant has no headroom (memory.go): it ends at its
		// TTL unless renewed, on any leader.
		ExpiresAt: a.now + ttl,
	}
	a.opened(l)
	a.s.leases.set(name, append(a.s.leases.get(name), l))
	a.s.pushExpiry(l)
	a.emit(EventGranted, *l)
	return l
}

// pushExpiry schedules the expiry of a new grant l. The heap keeps at
// least one entry per grant whose time is no later than the grant's
// expiry; NextDeadline moves an entry that comes up early to the grant's
// expiry and drops one whose grant is gone.
func (s *State) pushExpiry(l *Lease) {
	heap.Push(&s.expiries, expiry{at: l.ExpiresAt, name: l.Name, token: l.Token})
	// NextDeadline drops entries of gone grants only as they reach the
	// top, and a Manager never calls it, so compact once the heap is much
	// larger than the set of leases. Which entries the heap holds never
	// changes what Apply does.
	if n := len(s.expiries); n > 64 && n > 2*(s.leases.names()+len(s.delays)) && n > 2*(s.Len()+len(s.delays)) {
		s.compactExpiries()
	}
}

// renewed schedules the expiry of l, a renewal of the grant old. A
// renewal that moves the expiry later, the usual case, needs no new
// entry: old's entry comes up no later than old's expiry and is moved
// then, once per expiry rather than once per renewal. One that moves it
// earlier (a shorter TTL) needs an entry at the new time.
func (s *State) renewed(old, l *Lease) {
	if l.ExpiresAt < old.ExpiresAt {
		s.pushExpiry(l)
	}
}

// compactExpiries keeps one entry per grant, the earliest, and none for
// grants that are gone.
func (s *State) compactExpiries() {
	type grant struct {
		name  string
		token uint64
	}
	kept := s.expiries[:0]
	at := make(map[grant]int, s.leases.names())
	for _, e := range s.expiries {
		if e.token == 0 {
			// A lock-delay's end: kept while it is the delay's.
			if d, ok := s.delays[e.name]; ok && d.Until == e.at {
				kept = append(kept, e)
			}
			continue
		}
		if s.slot(e.name, e.token) == nil {
			continue
		}
		g := grant{e.name, e.token}
		if i, ok := at[g]; ok {
			kept[i].at = min(kept[i].at, e.at)
			continue
		}
		at[g] = len(kept)
		kept = append(kept, e)
	}
	clear(s.expiries[len(kept):])
	s.expiries = kept
	heap.Init(&s.expiries)
}

func (a *applier) acquire(op Op) Result {
	ls := a.live(op.Name)
	for _, w := range a.s.queues[op.Name] {
		if w.Holder == op.Holder && w.Principal != "" && w.Principal != op.Principal {
			return Result{Err: &ForbiddenError{Name: op.Name, Principal: op.Principal, Action: "acquire"}}
		}
	}
	d, delayed := a.delayed(op.Name)
	if op.Shared || (len(ls) > 0 && ls[0].Shared) {
		return a.acquireShared(op, ls, d, delayed) // shared.go
	}
	if len(ls) == 0 {
		if delayed {
			return a.delayedAcquire(op, d, 0)
		}
		return Result{Lease: *a.grant(op.Name, op.Holder, op.TTL, op.Limit, op.Principal, op.LockDelay, false, op.Priority)}
	}
	if limit := effectiveLimit(ls[0].Limit); effectiveLimit(op.Limit) != limit {
		// The limit of a name is fixed by its first grant while any
		// grant of it is live.
		return Result{Err: invalidf("%q is held with limit %d, not %d: every holder of a name asks for the same limit",
			op.Name, limit, effectiveLimit(op.Limit))}
	}
	for _, l := range ls {
		if l.Holder == op.Holder {
			if err := owns(l, op.Principal, "acquire"); err != nil {
				return Result{Err: err}
			}
			return a.reacquire(l, op)
		}
	}
	if len(ls) < effectiveLimit(ls[0].Limit) {
		if delayed {
			return a.delayedAcquire(op, d, ls[0].Limit)
		}
		// A free slot. Waiters are granted as soon as a slot frees, so
		// none is waiting for this one.
		return Result{Lease: *a.grant(op.Name, op.Holder, op.TTL, op.Limit, op.Principal, op.LockDelay, false, op.Priority)}
	}
	// Report the grant that expires first: the soonest a slot frees
	// without a release.
	l := ls[0]
	for _, o := range ls[1:] {
		if o.ExpiresAt < l.ExpiresAt {
			l = o
		}
	}
	return a.held(op, &HeldError{Name: l.Name, Holder: l.Holder, Token: l.Token, Remaining: l.Remaining(a.now), Limit: l.Limit})
}

// reacquire answers an acquire by the holder of l: a renewal, same
// token, with the acquire's TTL, lock-delay and priority.
func (a *applier) reacquire(l *Lease, op Op) Result {
	old := l
	l = a.s.update(l, func(l *Lease) {
		l.TTL = op.TTL
		a.extend(l, op.TTL)
		l.LockDelay = op.LockDelay
		l.Priority = op.Priority
	})
	a.s.renewed(old, l)
	a.removeWaiter(op.Name, op.Holder)
	return Result{Lease: *l}
}

// held answers an acquire that finds the name held: it queues op if it
// waits. A plain try is the holder's answer that it no longer waits: it
// leaves the queue, or a later release would grant the name to a holder
// that was told it is held and never learns the token.
func (a *applier) held(op Op, err *HeldError) Result {
	if !op.Wait {
		a.removeWaiter(op.Name, op.Holder)
		return Result{Err: err}
	}
	a.enqueue(op)
	return Result{Err: err, Queued: true}
}

func (a *applier) enqueue(op Op) {
	limit := op.Limit
	if limit <= 1 {
		limit = 0
	}
	w := waiter{Holder: op.Holder, TTL: op.TTL, Deadline: a.now + op.WaitTimeout, Limit: limit, Principal: op.Principal,
		LockDelay: op.LockDelay, Shared: op.Shared, Priority: op.Priority}
	q := a.s.queues[op.Name]
	for i := range q {
		if q[i].Holder == op.Holder {
			// A retried wait keeps its place in the queue.
			// (Its limit too: with no live grant it may have changed.)
			q[i].TTL, q[i].Deadline, q[i].Limit, q[i].LockDelay = w.TTL, w.Deadline, w.Limit, w.LockDelay
			q[i].Priority = w.Priority
			q[i].Session, q[i].Seq = "", 0
			q[i].Shared = w.Shared
			return
		}
	}
	a.s.queues[op.Name] = append(q, w)
}

func (a *applier) removeWaiter(name, holder string) {
	q := a.s.queues[name]
	for i := range q {
		if q[i].Holder == holder {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(a.s.queues, name)
	} else {
		a.s.queues[name] = q
	}
	if sharedMode(a.s.leases.get(name), q) {
		// Readers queued behind the waiter that left may be free to go.
		a.grantWaiters(name)
	}
}

// owns returns a *ForbiddenError if grant l was acquired by another
// principal than the caller's. A grant with no principal (acquired while
// the server authenticated nobody) is anyone's.
func owns(l *Lease, principal, action string) error {
	if l.Principal == "" || l.Principal == principal {
		return nil
	}
	return &ForbiddenError{Name: l.Name, Token: l.Token, Principal: principal, Action: action}
}

// check returns the live grant of name with token: the current grant of
// a lease, or a held slot of a semaphore.
func (a *applier) check(name string, token uint64) (*Lease, error) {
	ls := a.live(name)
	for _, l := range ls {
		if l.Token == token {
			return l, nil
		}
	}
	if t, ok := a.s.revoked.find(name, token, a.now); ok {
		return nil, &RevokedError{Name: name, Token: token, Reason: t.Reason}
	}
	if len(ls) == 0 {
		return nil, &StaleError{Name: name, Token: token, Detail: "the lease is not held (released or expired)"}
	}
	if ls[0].Limit > 1 {
		return nil, &StaleError{Name: name, Token: token, Detail: "no slot held now has this token"}
	}
	if ls[0].Shared {
		return nil, &StaleError{Name: name, Token: token, Detail: "no grant held now has this token"}
	}
	return nil, &StaleError{Name: name, Token: token, Detail: "the current grant has another token"}
}

func (a *applier) renew(op Op) Result {
	res := make([]RenewResult, len(op.Refs))
	for i, r := range op.Refs {
		res[i].Ref = r
		l, err := a.check(r.Name, r.Token)
		if err == nil {
			err = owns(l, op.Principal, "renew")
		}
		if err != nil {
			res[i].Err = err
			continue
		}
		old := l
		l = a.s.update(l, func(l *Lease) {
			if r.TTL != 0 {
				l.TTL = r.TTL
			}
			a.extend(l, l.TTL)
		})
		a.s.renewed(old, l)
		res[i].Lease = *l
		res[i].HandoffRequested = a.handoffRequest(l)
	}
	return Result{Renewed: res}
}

func (a *applier) release(op Op) Result {
	l, err := a.check(op.Name, op.Token)
	if err == nil {
		err = owns(l, op.Principal, "release")
	}
	if err != nil {
		return Result{Err: err}
	}
	ls := a.s.leases.get(op.Name)
	kept := make([]*Lease, 0, len(ls)-1)
	for _, o := range ls {
		if o != l {
			kept = append(kept, o)
		}
	}
	a.setSlots(op.Name, kept)
	a.emit(EventReleased, *l)
	a.closed(l, EndingReleased, "")
	a.grantWaiters(op.Name)
	return Result{}
}

// expireAll frees every grant that has expired by a.now, earliest
// first and, among those that expired at the same time, by name.
func (a *applier) expireAll() {
	var due []expiry
	for {
		at, ok := a.s.NextDeadline()
		if !ok || at > a.now {
			break
		}
		due = append(due, heap.Pop(&a.s.expiries).(expiry))
	}
	// The heap breaks ties by token, which is cheaper than by name.
	slices.SortFunc(due, func(x, y expiry) int {
		return cmp.Or(cmp.Compare(x.at, y.at), strings.Compare(x.name, y.name))
	})
	for _, e := range due {
		a.settle(e.name)
	}
	a.s.sweepSessions(a.now)
	a.s.revoked.sweep(a.now)
	a.s.sweepHistory(a.now)
}

func (a *applier) list(prefix string) Result {
	var names []string
	for name := range a.s.leases.all() {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []Lease
	for _, name := range names {
		for _, l := range a.live(name) {
			out = append(out, *l)
		}
	}
	return Result{Leases: out}
}

// fenceCheck applies the store's rule: the token must be the current grant of
// the lease and not lower than the last token accepted for the key.
func (a *applier) fenceCheck(op Op) (*fence, error) {
	l, err := a.check(op.Name, op.Token)
	if err != nil {
		return nil, err
	}
	if err := owns(l, op.Principal, "write with"); err != nil {
		return nil, err
	}
	if l.Shared {
		return nil, sharedWriteError(l)
	}
	f := a.s.kv[op.Key]
	if f != nil && op.Token < f.Token {
		return nil, &StaleError{Name: op.Name, Token: op.Token,
			Detail: "key " + strconv.Quote(op.Key) + " was last written with a higher token"}
	}
	return f, nil
}

func (a *applier) put(op Op) Result {
	f, err := a.fenceCheck(op)
	a.wrote(op.Name, op.Token, err)
	if err != nil {
		return Result{Err: err}
	}
	if f == nil {
		f = &fence{}
		a.s.kv[op.Key] = f
	}
	a.s.revision++
	f.Token = op.Token
	f.Entry = &Entry{
		Key:      op.Key,
		Value:    append([]byte(nil), op.Value...),
		Lease:    op.Name,
		Token:    op.Token,
		Revision: a.s.revision,
	}
	return Result{Revision: a.s.revision}
}

func (a *applier) del(op Op) Result {
	f, err := a.fenceCheck(op)
	if err != nil {
		a.wrote(op.Name, op.Token, err)
		return Result{Err: err}
	}
	if f == nil || f.Entry == nil {
		return Result{Err: ErrNotFound}
	}
	a.wrote(op.Name, op.Token, nil)
	a.s.revision++
	f.Token = op.Token
	f.Entry = nil
	return Result{Revision: a.s.revision}
}

// expiry is a heap entry; it is stale once the grant it names (by name
// and token) was renewed, released or expired.
type expiry struct {
	at    time.Duration
	name  string
	token uint64
}

type expiryHeap []expiry

func (h expiryHeap) Len() int { return len(h) }
func (h expiryHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	// Every grant has its own token, and comparing tokens reads no
	// string: the leases renewed together share their expiry.
	return h[i].token < h[j].token
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Leases returns the stored grants whose names start with prefix, sorted
// by name and, within a semaphore, in the order granted, without settling
// them: some may have expired by cluster time but not yet been freed by an
// OpExpire. It does not change the state.
func (s *State) Leases(prefix string) []Lease {
	var out []Lease
	for _, name := range s.leases.sortedNames() {
		if strings.HasPrefix(name, prefix) {
			for _, l := range s.leases.get(name) {
				out = append(out, *l)
			}
		}
	}
	return out
}
