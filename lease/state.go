package lease

import (
	"container/heap"
	"sort"
	"strconv"
	"strings"
	"time"
)

// EventType says what happened to a lease.
type EventType uint8

// Event types, in the order a lease lives them.
const (
	EventGranted  EventType = 1
	EventReleased EventType = 2
	EventExpired  EventType = 3
)

func (t EventType) String() string {
	switch t {
	case EventGranted:
		return "granted"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	}
	return "unknown"
}

// Event is a grant, release or expiry produced by Apply, in commit order.
// Renewals produce no event.
type Event struct {
	Type  EventType
	Lease Lease
	// At is the cluster time of the batch that produced the event.
	At time.Duration
}

// RenewResult is the outcome for one Ref of an OpRenew.
type RenewResult struct {
	Ref   Ref
	Lease Lease
	Err   error
}

// Result is the outcome of one Op.
type Result struct {
	// Err is nil on success, or an error wrapping ErrHeld, ErrStaleToken,
	// ErrNotFound or ErrInvalid.
	Err error
	// Lease is the grant for OpAcquire and OpGet.
	Lease Lease
	// Queued is true when an OpAcquire with Wait found the lease held and
	// queued the holder; Err then holds the *HeldError.
	Queued bool
	// Renewed has one entry per Ref of an OpRenew.
	Renewed []RenewResult
	// Leases lists the live leases for OpList, sorted by name.
	Leases []Lease
	// Entry is the value for OpKVGet.
	Entry Entry
	// Revision is the store revision after OpPut and OpDelete.
	Revision uint64
	// Now is the cluster time the op was applied at.
	Now time.Duration
}

type waiter struct {
	Holder   string
	TTL      time.Duration
	Deadline time.Duration // cluster time after which the waiter is dropped
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
	leases    map[string]*Lease
	queues    map[string][]waiter
	kv        map[string]*fence
	expiries  expiryHeap
}

// New returns an empty state at cluster time zero.
func New() *State {
	return &State{
		leases: make(map[string]*Lease),
		queues: make(map[string][]waiter),
		kv:     make(map[string]*fence),
	}
}

// Now returns the cluster time of the last applied batch.
func (s *State) Now() time.Duration { return s.now }

// LastToken returns the highest token ever granted.
func (s *State) LastToken() uint64 { return s.lastToken }

// Revision returns the revision of the key-value store.
func (s *State) Revision() uint64 { return s.revision }

// Len returns the number of leases not yet freed. Some may have expired by
// cluster time but not been freed by an OpExpire yet.
func (s *State) Len() int { return len(s.leases) }

// Live returns the number of leases live at the cluster time of the last
// applied batch: stored and not expired.
func (s *State) Live() int {
	n := 0
	for _, l := range s.leases {
		if l.ExpiresAt > s.now {
			n++
		}
	}
	return n
}

// Lease returns the stored grant of name, live or not yet freed.
func (s *State) Lease(name string) (Lease, bool) {
	l, ok := s.leases[name]
	if !ok {
		return Lease{}, false
	}
	return *l, true
}

// Waiters returns the holders queued for name, first first.
func (s *State) Waiters(name string) []string {
	var hs []string
	for _, w := range s.queues[name] {
		hs = append(hs, w.Holder)
	}
	return hs
}

// NextDeadline returns the earliest cluster time at which a lease expires,
// and false if no lease is held. The node's expirer proposes an OpExpire
// stamped at or after it.
func (s *State) NextDeadline() (time.Duration, bool) {
	for s.expiries.Len() > 0 {
		top := s.expiries[0]
		if l, ok := s.leases[top.name]; ok && l.Token == top.token && l.ExpiresAt == top.at {
			return top.at, true
		}
		heap.Pop(&s.expiries)
	}
	return 0, false
}

// Apply applies b and returns one Result per op and the events it produced.
// It is deterministic: it reads nothing but s and b.
func (s *State) Apply(b Batch) ([]Result, []Event) {
	if b.Now > s.now {
		s.now = b.Now
	}
	a := applier{s: s, now: s.now}
	results := make([]Result, len(b.Ops))
	for i, op := range b.Ops {
		results[i] = a.apply(op)
		results[i].Now = s.now
	}
	return results, a.events
}

type applier struct {
	s      *State
	now    time.Duration
	events []Event
}

func (a *applier) emit(t EventType, l Lease) {
	a.events = append(a.events, Event{Type: t, Lease: l, At: a.now})
}

func (a *applier) apply(op Op) Result {
	switch op.Type {
	case OpAcquire:
		return a.acquire(op)
	case OpRenew:
		return a.renew(op)
	case OpRelease:
		return a.release(op)
	case OpExpire:
		a.expireAll()
		return Result{}
	case OpGet:
		l, ok := a.live(op.Name)
		if !ok {
			return Result{Err: ErrNotFound}
		}
		return Result{Lease: *l}
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
		a.removeWaiter(op.Name, op.Holder)
		return Result{}
	}
	return Result{Err: invalidf("unknown operation %d", op.Type)}
}

// live settles name and returns its lease if one is live at a.now.
func (a *applier) live(name string) (*Lease, bool) {
	a.settle(name)
	l, ok := a.s.leases[name]
	return l, ok
}

// settle frees name's lease if it has expired by a.now and, if the name is
// then free, grants it to the first waiter still waiting.
func (a *applier) settle(name string) {
	if l, ok := a.s.leases[name]; ok {
		if l.ExpiresAt > a.now {
			return
		}
		delete(a.s.leases, name)
		a.emit(EventExpired, *l)
	}
	a.grantWaiter(name)
}

func (a *applier) grantWaiter(name string) {
	q := a.s.queues[name]
	for len(q) > 0 {
		w := q[0]
		q = q[1:]
		if w.Deadline > a.now {
			a.grant(name, w.Holder, w.TTL)
			break
		}
	}
	if len(q) == 0 {
		delete(a.s.queues, name)
	} else {
		a.s.queues[name] = q
	}
}

func (a *applier) grant(name, holder string, ttl time.Duration) *Lease {
	a.s.lastToken++
	l := &Lease{
		Name:      name,
		Holder:    holder,
		Token:     a.s.lastToken,
		TTL:       ttl,
		GrantedAt: a.now,
		ExpiresAt: a.now + ttl,
	}
	a.s.leases[name] = l
	a.s.pushExpiry(l)
	a.emit(EventGranted, *l)
	return l
}

func (s *State) pushExpiry(l *Lease) {
	heap.Push(&s.expiries, expiry{at: l.ExpiresAt, name: l.Name, token: l.Token})
	// Every renewal leaves a stale entry behind. NextDeadline drops stale
	// entries only as they reach the top, and a Manager never calls it, so
	// compact once the heap is much larger than the set of leases. Which
	// stale entries the heap holds never changes what Apply does.
	if n := len(s.expiries); n > 64 && n > 2*len(s.leases) {
		s.compactExpiries()
	}
}

// compactExpiries keeps one entry per lease: the one that matches it.
func (s *State) compactExpiries() {
	kept := s.expiries[:0]
	seen := make(map[string]bool, len(s.leases))
	for _, e := range s.expiries {
		if l, ok := s.leases[e.name]; ok && !seen[e.name] && l.Token == e.token && l.ExpiresAt == e.at {
			seen[e.name] = true
			kept = append(kept, e)
		}
	}
	clear(s.expiries[len(kept):])
	s.expiries = kept
	heap.Init(&s.expiries)
}

func (a *applier) acquire(op Op) Result {
	l, ok := a.live(op.Name)
	if !ok {
		return Result{Lease: *a.grant(op.Name, op.Holder, op.TTL)}
	}
	if l.Holder == op.Holder {
		// Re-acquire by the holder is a renewal: same token, new TTL.
		l.TTL = op.TTL
		l.ExpiresAt = a.now + op.TTL
		a.s.pushExpiry(l)
		a.removeWaiter(op.Name, op.Holder)
		return Result{Lease: *l}
	}
	held := &HeldError{Name: l.Name, Holder: l.Holder, Token: l.Token, Remaining: l.Remaining(a.now)}
	if !op.Wait {
		// A plain try is the holder's answer that it no longer waits:
		// leave the queue, or a later release would grant the name to a
		// holder that was told it is held and never learns the token.
		a.removeWaiter(op.Name, op.Holder)
		return Result{Err: held}
	}
	a.enqueue(op)
	return Result{Err: held, Queued: true}
}

func (a *applier) enqueue(op Op) {
	w := waiter{Holder: op.Holder, TTL: op.TTL, Deadline: a.now + op.WaitTimeout}
	q := a.s.queues[op.Name]
	for i := range q {
		if q[i].Holder == op.Holder {
			// A retried wait keeps its place in the queue.
			q[i].TTL, q[i].Deadline = w.TTL, w.Deadline
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
}

// check returns the live lease of name if token is its current grant.
func (a *applier) check(name string, token uint64) (*Lease, error) {
	l, ok := a.live(name)
	switch {
	case !ok:
		return nil, &StaleError{Name: name, Token: token, Detail: "the lease is not held (released or expired)"}
	case l.Token != token:
		return nil, &StaleError{Name: name, Token: token, Detail: "the current grant has another token"}
	}
	return l, nil
}

func (a *applier) renew(op Op) Result {
	res := make([]RenewResult, len(op.Refs))
	for i, r := range op.Refs {
		res[i].Ref = r
		l, err := a.check(r.Name, r.Token)
		if err != nil {
			res[i].Err = err
			continue
		}
		if r.TTL != 0 {
			l.TTL = r.TTL
		}
		l.ExpiresAt = a.now + l.TTL
		a.s.pushExpiry(l)
		res[i].Lease = *l
	}
	return Result{Renewed: res}
}

func (a *applier) release(op Op) Result {
	l, err := a.check(op.Name, op.Token)
	if err != nil {
		return Result{Err: err}
	}
	delete(a.s.leases, op.Name)
	a.emit(EventReleased, *l)
	a.grantWaiter(op.Name)
	return Result{}
}

func (a *applier) expireAll() {
	for {
		at, ok := a.s.NextDeadline()
		if !ok || at > a.now {
			return
		}
		a.settle(a.s.expiries[0].name)
	}
}

func (a *applier) list(prefix string) Result {
	var names []string
	for name := range a.s.leases {
		if strings.HasPrefix(name, prefix) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []Lease
	for _, name := range names {
		if l, ok := a.live(name); ok {
			out = append(out, *l)
		}
	}
	return Result{Leases: out}
}

// fenceCheck applies the store's rule: the token must be the current grant of
// the lease and not lower than the last token accepted for the key.
func (a *applier) fenceCheck(op Op) (*fence, error) {
	if _, err := a.check(op.Name, op.Token); err != nil {
		return nil, err
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
		return Result{Err: err}
	}
	if f == nil || f.Entry == nil {
		return Result{Err: ErrNotFound}
	}
	a.s.revision++
	f.Token = op.Token
	f.Entry = nil
	return Result{Revision: a.s.revision}
}

// expiry is a heap entry; it is stale once the lease it names was renewed,
// released or re-granted.
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
	return h[i].name < h[j].name
}
func (h expiryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)   { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Leases returns the stored leases whose names start with prefix, sorted by
// name, without settling them: some may have expired by cluster time but
// not yet been freed by an OpExpire. It does not change the state.
func (s *State) Leases(prefix string) []Lease {
	var out []Lease
	for _, name := range sortedKeys(s.leases) {
		if strings.HasPrefix(name, prefix) {
			out = append(out, *s.leases[name])
		}
	}
	return out
}
