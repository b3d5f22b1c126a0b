package lease

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The property test drives a State with random batches over a few names,
// holders and keys, and after every batch checks it against a reference
// model written from the rules, against invariants read from the events
// alone, against a replica restored from a snapshot (fed each batch through
// the binary codec), and against a Manager fed the same operations through
// a fake clock.

var (
	propNames   = []string{"a", "b", "c"}
	propHolders = []string{"h1", "h2", "h3"}
	propKeys    = []string{"k1", "k2"}
	propLimits  = Limits{
		MaxNameLen: 16, MaxHolderLen: 16, MaxValueLen: 8,
		MinTTL: sec, MaxTTL: 10 * sec, MaxWait: 20 * sec, MaxRenew: 4, MaxLimit: 4,
		MaxLockDelay: 5 * sec, MaxReasonLen: 8,
	}
	// propLimit is the limit each name is usually acquired with: a plain
	// lease and two semaphores.
	propLimit = map[string]int{"a": 0, "b": 2, "c": 3}
)

// ---- reference model ----

type modelKey struct {
	fence uint64
	entry *Entry
}

// model is a direct, unoptimised reading of the rules: no heap, linear
// scans, everything recomputed. A name has a list of grants (slots), in
// the order granted: one at most for a plain lease, up to the limit for
// a semaphore.
type model struct {
	now    time.Duration
	last   uint64
	rev    uint64
	leases map[string][]Lease
	queues map[string][]waiter
	kv     map[string]modelKey
	events []Event
	// delays: no new grant of a name before until; the grant whose delay
	// it is.
	delays map[string]modelDelay
	// tombs are the revoked grants, kept until their old expiry.
	tombs []modelTomb
}

type modelDelay struct {
	until time.Duration
	grant Lease
}

type modelTomb struct {
	name   string
	token  uint64
	reason string
	until  time.Duration
}

func newModel() *model {
	return &model{leases: map[string][]Lease{}, queues: map[string][]waiter{}, kv: map[string]modelKey{},
		delays: map[string]modelDelay{}}
}

func (m *model) emit(t EventType, l Lease) {
	m.events = append(m.events, Event{Type: t, Lease: l, At: m.now})
}

// delayed returns the lock-delay of name in force now.
func (m *model) delayed(name string) (modelDelay, bool) {
	d, ok := m.delays[name]
	return d, ok && d.until > m.now
}

// ended starts the lock-delay of l, which ended at from without a
// release.
func (m *model) ended(l Lease, from time.Duration) {
	if l.LockDelay == 0 || from+l.LockDelay <= m.now {
		return
	}
	if d, ok := m.delays[l.Name]; !ok || from+l.LockDelay > d.until {
		m.delays[l.Name] = modelDelay{until: from + l.LockDelay, grant: l}
	}
}

// revokedErr returns the error of a token whose grant was revoked, while
// its tombstone is kept, or nil.
func (m *model) revokedErr(name string, token uint64) error {
	for _, tb := range m.tombs {
		if tb.name == name && tb.token == token && tb.until > m.now {
			return &RevokedError{Name: name, Token: token, Reason: tb.reason}
		}
	}
	return nil
}

// stale is the error of a refused token: revoked, or stale.
func (m *model) stale(name string, token uint64) error {
	if err := m.revokedErr(name, token); err != nil {
		return err
	}
	return errModelStale
}

// lim is how many holders a limit allows: 0 (a plain lease) allows one.
func lim(limit int) int { return max(limit, 1) }

// plain maps the limits of a plain lease (0 and 1) to 0.
func plain(limit int) int {
	if limit <= 1 {
		return 0
	}
	return limit
}

func (m *model) set(name string, ls []Lease) {
	if len(ls) == 0 {
		delete(m.leases, name)
	} else {
		m.leases[name] = ls
	}
}

func (m *model) grant(name, holder string, ttl time.Duration, limit int, lockDelay time.Duration, shared bool, prio int) Lease {
	m.last++
	l := Lease{Name: name, Holder: holder, Token: m.last, TTL: ttl, GrantedAt: m.now, ExpiresAt: m.now + ttl, Limit: plain(limit),
		LockDelay: lockDelay, Shared: shared, Priority: prio}
	m.leases[name] = append(slices.Clone(m.leases[name]), l)
	m.emit(EventGranted, l)
	return l
}

// free grants the free slots of name to the first waiters whose deadline
// is still ahead, dropping the ones that gave up on the way.
func (m *model) free(name string) {
	if _, ok := m.delayed(name); ok {
		return
	}
	q := m.queues[name]
	for len(q) > 0 {
		ls := m.leases[name]
		rw := (len(ls) > 0 && ls[0].Shared) || q[0].Shared
		if rw && q[0].Deadline <= m.now {
			// A read-write lock drops a gone waiter at once: it must not
			// hold back the readers behind it.
			q = q[1:]
			continue
		}
		if len(ls) > 0 {
			if rw && !(ls[0].Shared && q[0].Shared && len(ls) < MaxShared) {
				break // an exclusive grant or waiter: wait for every grant to end
			}
			if !rw && len(ls) >= lim(ls[0].Limit) {
				break
			}
		}
		w := q[0]
		q = q[1:]
		if w.Deadline > m.now && (len(ls) == 0 || lim(w.Limit) == lim(ls[0].Limit)) {
			m.grant(name, w.Holder, w.TTL, w.Limit, w.LockDelay, w.Shared, w.Priority)
		}
	}
	if len(q) == 0 {
		delete(m.queues, name)
	} else {
		m.queues[name] = q
	}
}

// liveSlots frees the grants of name that have expired (in the order
// granted), gives free slots to waiters, and returns the live grants.
func (m *model) liveSlots(name string) []Lease {
	var kept []Lease
	for _, l := range m.leases[name] {
		if l.ExpiresAt > m.now {
			kept = append(kept, l)
		} else {
			m.emit(EventExpired, l)
			m.ended(l, l.ExpiresAt)
		}
	}
	m.set(name, kept)
	if d, ok := m.delays[name]; ok && d.until <= m.now {
		delete(m.delays, name)
	}
	m.free(name)
	return m.leases[name]
}

func (m *model) removeWaiter(name, holder string) {
	q := slices.DeleteFunc(slices.Clone(m.queues[name]), func(w waiter) bool { return w.Holder == holder })
	if len(q) == 0 {
		delete(m.queues, name)
	} else {
		m.queues[name] = q
	}
	if ls := m.leases[name]; (len(ls) > 0 && ls[0].Shared) || (len(q) > 0 && q[0].Shared) {
		m.free(name) // readers behind a waiter that left may go
	}
}

var errModelStale = &StaleError{Detail: "model"}

// current returns the live grants of name and the index of the one with
// token, or -1: a token fences only while its slot is held.
func (m *model) current(name string, token uint64) ([]Lease, int) {
	ls := slices.Clone(m.liveSlots(name))
	return ls, slices.IndexFunc(ls, func(l Lease) bool { return l.Token == token })
}

func (m *model) apply(b Batch) ([]Result, []Event) {
	m.now = max(m.now, b.Now)
	m.events = nil
	var res []Result
	for _, op := range b.Ops {
		r := m.op(op)
		r.Now = m.now
		res = append(res, r)
	}
	return res, m.events
}

func (m *model) op(op Op) Result {
	switch op.Type {
	case OpAcquire:
		ls := slices.Clone(m.liveSlots(op.Name))
		d, delayed := m.delayed(op.Name)
		if op.Shared || (len(ls) > 0 && ls[0].Shared) {
			return m.acquireShared(op, ls, d, delayed)
		}
		if len(ls) > 0 && lim(op.Limit) != lim(ls[0].Limit) {
			return Result{Err: ErrInvalid}
		}
		if i := slices.IndexFunc(ls, func(l Lease) bool { return l.Holder == op.Holder }); i >= 0 {
			ls[i].TTL, ls[i].ExpiresAt, ls[i].LockDelay, ls[i].Priority = op.TTL, m.now+op.TTL, op.LockDelay, op.Priority
			m.leases[op.Name] = ls
			m.removeWaiter(op.Name, op.Holder)
			return Result{Lease: ls[i]}
		}
		if (len(ls) == 0 || len(ls) < lim(ls[0].Limit)) && delayed {
			// A new grant, but the name is in its lock-delay.
			limit := 0
			if len(ls) > 0 {
				limit = ls[0].Limit
			}
			held := &HeldError{Name: op.Name, Holder: d.grant.Holder, Token: d.grant.Token, Remaining: d.until - m.now,
				Limit: limit, LockDelay: true, Ended: m.now - (d.until - d.grant.LockDelay)}
			if !op.Wait {
				m.removeWaiter(op.Name, op.Holder)
				return Result{Err: held}
			}
			for _, w := range m.queues[op.Name] {
				if w.Holder != op.Holder && lim(w.Limit) != lim(op.Limit) {
					return Result{Err: ErrInvalid}
				}
			}
			m.queue(op)
			return Result{Err: held, Queued: true}
		}
		if len(ls) == 0 || len(ls) < lim(ls[0].Limit) {
			return Result{Lease: m.grant(op.Name, op.Holder, op.TTL, op.Limit, op.LockDelay, false, op.Priority)}
		}
		first := ls[0]
		for _, l := range ls {
			if l.ExpiresAt < first.ExpiresAt {
				first = l
			}
		}
		held := &HeldError{Name: op.Name, Holder: first.Holder, Token: first.Token, Remaining: first.ExpiresAt - m.now, Limit: first.Limit}
		if !op.Wait {
			m.removeWaiter(op.Name, op.Holder) // a plain try stops waiting
			return Result{Err: held}
		}
		m.queue(op)
		return Result{Err: held, Queued: true}
	case OpRenew:
		var rr []RenewResult
		for _, ref := range op.Refs {
			ls, i := m.current(ref.Name, ref.Token)
			if i < 0 {
				rr = append(rr, RenewResult{Ref: ref, Err: m.stale(ref.Name, ref.Token)})
				continue
			}
			if ref.TTL != 0 {
				ls[i].TTL = ref.TTL
			}
			ls[i].ExpiresAt = m.now + ls[i].TTL
			m.leases[ref.Name] = ls
			// A waiter of a higher priority than the holder's asks
			// for a handoff: the first of the highest; not of a slot
			// or a shared grant, which cannot be handed off.
			req, best := "", ls[i].Priority
			for _, w := range m.queues[ref.Name] {
				if ls[i].Limit <= 1 && !ls[i].Shared && w.Deadline > m.now && w.Priority > best {
					req, best = w.Holder, w.Priority
				}
			}
			rr = append(rr, RenewResult{Ref: ref, Lease: ls[i], HandoffRequested: req})
		}
		return Result{Renewed: rr}
	case OpRelease:
		ls, i := m.current(op.Name, op.Token)
		if i < 0 {
			return Result{Err: m.stale(op.Name, op.Token)}
		}
		l := ls[i]
		if op.Handoff {
			// The old grant ends and the candidate is granted, at
			// once: no lock-delay, nobody else in between.
			if l.Limit > 1 || l.Shared {
				return Result{Err: ErrInvalid}
			}
			q := m.queues[op.Name]
			c := slices.IndexFunc(q, func(w waiter) bool {
				return w.Deadline > m.now && (op.HandoffTo == "" || w.Holder == op.HandoffTo)
			})
			if c < 0 {
				return Result{Err: ErrNotFound}
			}
			w := q[c]
			m.removeWaiter(op.Name, w.Holder)
			m.set(op.Name, nil)
			m.events = append(m.events, Event{Type: EventReleased, Lease: l, At: m.now, Reason: HandedOff})
			next := m.grant(op.Name, w.Holder, w.TTL, w.Limit, w.LockDelay, w.Shared, w.Priority)
			if next.Shared {
				m.free(op.Name) // the readers first in line join it
			}
			return Result{Lease: next}
		}
		m.set(op.Name, slices.Delete(ls, i, i+1))
		m.emit(EventReleased, l)
		m.free(op.Name)
		return Result{}
	case OpRevoke:
		ls := slices.Clone(m.liveSlots(op.Name))
		var ended, kept []Lease
		for _, l := range ls {
			if op.Token == 0 || l.Token == op.Token {
				ended = append(ended, l)
			} else {
				kept = append(kept, l)
			}
		}
		if len(ended) == 0 {
			return Result{Err: ErrNotFound}
		}
		m.set(op.Name, kept)
		for _, l := range ended {
			m.events = append(m.events, Event{Type: EventRevoked, Lease: l, At: m.now, Reason: op.Reason})
			m.tombs = append(m.tombs, modelTomb{name: op.Name, token: l.Token, reason: op.Reason, until: l.ExpiresAt})
			m.ended(l, m.now)
		}
		m.free(op.Name)
		return Result{Leases: ended}
	case OpExpire:
		// Every name with an expired grant or a passed lock-delay is
		// settled, in order of (that time, name).
		for {
			var (
				at    time.Duration
				first string
			)
			due := func(t time.Duration, name string) {
				if t <= m.now && (first == "" || t < at || t == at && name < first) {
					at, first = t, name
				}
			}
			for _, ls := range m.leases {
				for _, l := range ls {
					due(l.ExpiresAt, l.Name)
				}
			}
			for name, d := range m.delays {
				due(d.until, name)
			}
			if first == "" {
				return Result{}
			}
			m.liveSlots(first)
		}
	case OpGet:
		ls := m.liveSlots(op.Name)
		if len(ls) == 0 {
			return Result{Err: ErrNotFound}
		}
		return Result{Lease: ls[0], Leases: slices.Clone(ls)}
	case OpList:
		var out []Lease
		for _, name := range sortedKeys(m.leases) {
			if !strings.HasPrefix(name, op.Prefix) {
				continue
			}
			out = append(out, m.liveSlots(name)...)
		}
		return Result{Leases: out}
	case OpPut, OpDelete:
		// The fenced store's rule: the token is a live grant of the named
		// lease (a held slot of a semaphore), and not lower than the
		// key's fence.
		ls, i := m.current(op.Name, op.Token)
		if i < 0 {
			return Result{Err: m.stale(op.Name, op.Token)}
		}
		if ls[i].Shared {
			return Result{Err: ErrInvalid} // readers do not write
		}
		k := m.kv[op.Key]
		if op.Token < k.fence {
			return Result{Err: errModelStale}
		}
		if op.Type == OpDelete {
			if k.entry == nil {
				return Result{Err: ErrNotFound}
			}
			m.rev++
			m.kv[op.Key] = modelKey{fence: op.Token}
			return Result{Revision: m.rev}
		}
		m.rev++
		var v []byte
		if len(op.Value) > 0 {
			v = slices.Clone(op.Value)
		}
		m.kv[op.Key] = modelKey{fence: op.Token, entry: &Entry{Key: op.Key, Value: v, Lease: op.Name, Token: op.Token, Revision: m.rev}}
		return Result{Revision: m.rev}
	case OpKVGet:
		k := m.kv[op.Key]
		if k.entry == nil {
			return Result{Err: ErrNotFound}
		}
		return Result{Entry: *k.entry}
	case OpCancelWait:
		m.removeWaiter(op.Name, op.Holder)
		return Result{}
	case OpKVList:
		var out []Entry
		for _, key := range sortedKeys(m.kv) {
			if k := m.kv[key]; strings.HasPrefix(key, op.Prefix) && k.entry != nil {
				out = append(out, *k.entry)
			}
		}
		return Result{Entries: out}
	}
	return Result{Err: ErrInvalid}
}

// acquireShared is an acquire of a read-write lock: shared, or of a name
// held shared. Shared grants coexist (at most MaxShared), an exclusive one
// is alone, and nobody overtakes a waiter.
func (m *model) acquireShared(op Op, ls []Lease, d modelDelay, delayed bool) Result {
	if op.Limit > 1 || (len(ls) > 0 && ls[0].Limit > 1) {
		return Result{Err: ErrInvalid}
	}
	if i := slices.IndexFunc(ls, func(l Lease) bool { return l.Holder == op.Holder }); i >= 0 {
		if ls[i].Shared != op.Shared {
			return Result{Err: ErrInvalid} // no upgrade, no downgrade
		}
		ls[i].TTL, ls[i].ExpiresAt, ls[i].LockDelay, ls[i].Priority = op.TTL, m.now+op.TTL, op.LockDelay, op.Priority
		m.leases[op.Name] = ls
		m.removeWaiter(op.Name, op.Holder)
		return Result{Lease: ls[i]}
	}
	q := m.queues[op.Name]
	nobodyAhead := len(q) == 0 || q[0].Holder == op.Holder
	if len(ls) == 0 || (op.Shared && ls[0].Shared && len(ls) < MaxShared && nobodyAhead) {
		if delayed {
			held := &HeldError{Name: op.Name, Holder: d.grant.Holder, Token: d.grant.Token, Remaining: d.until - m.now,
				LockDelay: true, Ended: m.now - (d.until - d.grant.LockDelay)}
			if !op.Wait {
				m.removeWaiter(op.Name, op.Holder)
				return Result{Err: held}
			}
			for _, w := range q {
				if w.Holder != op.Holder && lim(w.Limit) != lim(op.Limit) {
					return Result{Err: ErrInvalid}
				}
			}
			m.queue(op)
			return Result{Err: held, Queued: true}
		}
		l := m.grant(op.Name, op.Holder, op.TTL, op.Limit, op.LockDelay, op.Shared, op.Priority)
		m.removeWaiter(op.Name, op.Holder)
		return Result{Lease: l}
	}
	last := ls[0]
	for _, l := range ls {
		if l.ExpiresAt > last.ExpiresAt {
			last = l
		}
	}
	held := &HeldError{Name: op.Name, Holder: last.Holder, Token: last.Token, Remaining: last.ExpiresAt - m.now}
	if !op.Wait {
		m.removeWaiter(op.Name, op.Holder)
		return Result{Err: held}
	}
	m.queue(op)
	return Result{Err: held, Queued: true}
}

// queue queues op's holder, or updates its place.
func (m *model) queue(op Op) {
	w := waiter{Holder: op.Holder, TTL: op.TTL, Deadline: m.now + op.WaitTimeout, Limit: plain(op.Limit), LockDelay: op.LockDelay,
		Shared: op.Shared, Priority: op.Priority}
	q := m.queues[op.Name]
	if i := slices.IndexFunc(q, func(x waiter) bool { return x.Holder == op.Holder }); i >= 0 {
		q[i] = w
	} else {
		m.queues[op.Name] = append(slices.Clone(q), w)
	}
}

// errKind reduces an error to what the model can predict.
func errKind(err error) string {
	var (
		held    *HeldError
		revoked *RevokedError
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &held):
		return fmt.Sprintf("held %+v", *held)
	case errors.As(err, &revoked):
		if !errors.Is(err, ErrStaleToken) || !errors.Is(err, ErrRevoked) {
			return "revoked, not matching ErrStaleToken and ErrRevoked"
		}
		return fmt.Sprintf("revoked %+v", *revoked)
	case errors.Is(err, ErrStaleToken):
		return "stale"
	case errors.Is(err, ErrNotFound):
		return "not found"
	case errors.Is(err, ErrInvalid):
		return "invalid"
	}
	return "other: " + err.Error()
}

type normRenew struct {
	Ref              Ref
	Lease            Lease
	Err              string
	HandoffRequested string
}

type normResult struct {
	Err      string
	Lease    Lease
	Queued   bool
	Renewed  []normRenew
	Leases   []Lease
	Entry    string
	Entries  []string
	Revision uint64
	Now      time.Duration
}

func normalize(r Result) normResult {
	n := normResult{Err: errKind(r.Err), Lease: r.Lease, Queued: r.Queued, Leases: r.Leases, Revision: r.Revision, Now: r.Now}
	for _, rr := range r.Renewed {
		n.Renewed = append(n.Renewed, normRenew{Ref: rr.Ref, Lease: rr.Lease, Err: errKind(rr.Err), HandoffRequested: rr.HandoffRequested})
	}
	for _, e := range r.Entries {
		n.Entries = append(n.Entries, fmt.Sprintf("%s=%q lease=%s token=%d rev=%d", e.Key, e.Value, e.Lease, e.Token, e.Revision))
	}
	if r.Entry.Key != "" {
		n.Entry = fmt.Sprintf("%s=%q lease=%s token=%d rev=%d", r.Entry.Key, r.Entry.Value, r.Entry.Lease, r.Entry.Token, r.Entry.Revision)
	}
	return n
}

// ---- invariants read from the events ----

type history struct {
	lastToken uint64
	live      map[string][]Lease         // the live grants of each name, per the events
	ended     map[string][]time.Duration // when grants of a name ended, for overlap checks
	endedExcl map[string][]time.Duration // when exclusive grants of a name ended
	shared    map[uint64]bool            // tokens of shared grants
	fences    map[string]uint64          // highest token each key accepted
	granted   map[uint64]string          // the name each token was granted for
	endedNow  map[uint64]bool            // tokens whose grant ended in the last batch
	endedOld  map[uint64]bool            // tokens whose grant ended in an earlier batch
	// delayed is when the lock-delays of each name end: no grant
	// before.
	delayed map[string]time.Duration
}

func newHistory() *history {
	return &history{live: map[string][]Lease{}, ended: map[string][]time.Duration{}, fences: map[string]uint64{},
		granted: map[uint64]string{}, endedNow: map[uint64]bool{}, endedOld: map[uint64]bool{},
		delayed: map[string]time.Duration{}, endedExcl: map[string][]time.Duration{}, shared: map[uint64]bool{}}
}

// liveCount returns the number of live grants of all names.
func (h *history) liveCount() int {
	n := 0
	for _, ls := range h.live {
		n += len(ls)
	}
	return n
}

func (h *history) check(ev []Event, now time.Duration) error {
	for tok := range h.endedNow {
		h.endedOld[tok] = true
	}
	clear(h.endedNow)
	for _, e := range ev {
		if e.At != now {
			return fmt.Errorf("event %+v stamped at %s, batch applied at %s", e, e.At, now)
		}
		name := e.Lease.Name
		switch e.Type {
		case EventGranted:
			if e.Lease.Token <= h.lastToken {
				return fmt.Errorf("grant %+v: token not above the last token %d", e.Lease, h.lastToken)
			}
			h.lastToken = e.Lease.Token
			if e.Lease.Limit == 1 || e.Lease.Limit < 0 {
				return fmt.Errorf("grant %+v has the limit %d", e.Lease, e.Lease.Limit)
			}
			live := h.live[name]
			for _, prev := range live {
				if prev.Limit != e.Lease.Limit {
					return fmt.Errorf("grant %+v with limit %d while %+v has limit %d", e.Lease, e.Lease.Limit, prev, prev.Limit)
				}
			}
			// Grants that ended after this one started still took a
			// slot when it was granted.
			ended := slices.DeleteFunc(h.ended[name], func(end time.Duration) bool { return end <= e.At })
			h.ended[name] = ended
			endedExcl := slices.DeleteFunc(h.endedExcl[name], func(end time.Duration) bool { return end <= e.At })
			h.endedExcl[name] = endedExcl
			if e.Lease.Shared {
				// Shared grants overlap each other, never an exclusive one.
				if e.Lease.Limit != 0 {
					return fmt.Errorf("shared grant %+v with a limit", e.Lease)
				}
				for _, prev := range live {
					if !prev.Shared {
						return fmt.Errorf("shared grant %+v while %+v is held exclusive", e.Lease, prev)
					}
				}
				if len(endedExcl) > 0 {
					return fmt.Errorf("shared grant %+v at %s overlaps an exclusive grant that ended later", e.Lease, e.At)
				}
				if n := len(live) + len(ended) + 1; n > MaxShared {
					return fmt.Errorf("shared grant %+v makes %d holders", e.Lease, n)
				}
				h.shared[e.Lease.Token] = true
			} else if n := len(live) + len(ended) + 1; n > lim(e.Lease.Limit) {
				return fmt.Errorf("grant %+v at %s makes %d live holders (%d ended later), more than the limit %d",
					e.Lease, e.At, n, len(ended), lim(e.Lease.Limit))
			}
			if e.Lease.GrantedAt != e.At || e.Lease.ExpiresAt != e.At+e.Lease.TTL {
				return fmt.Errorf("grant %+v at %s has the wrong times", e.Lease, e.At)
			}
			if until := h.delayed[name]; e.At < until {
				return fmt.Errorf("grant %+v at %s, in the lock-delay of %s that ends at %s", e.Lease, e.At, name, until)
			}
			h.live[name] = append(live, e.Lease)
			h.granted[e.Lease.Token] = name
		case EventReleased, EventExpired, EventRevoked:
			live := h.live[name]
			i := slices.IndexFunc(live, func(l Lease) bool { return l.Token == e.Lease.Token })
			if i < 0 {
				return fmt.Errorf("%s of %+v, but the live grants are %+v", e.Type, e.Lease, live)
			}
			live = slices.Delete(slices.Clone(live), i, i+1)
			if len(live) == 0 {
				delete(h.live, name)
			} else {
				h.live[name] = live
			}
			end := e.At
			if e.Type == EventExpired {
				if e.Lease.ExpiresAt > e.At {
					return fmt.Errorf("expired %+v at %s, before its expiry", e.Lease, e.At)
				}
				end = e.Lease.ExpiresAt
			} else if e.Lease.ExpiresAt <= e.At {
				return fmt.Errorf("%s %+v at %s, after its expiry", e.Type, e.Lease, e.At)
			}
			if (e.Type == EventRevoked) != (e.Reason != "") && (e.Type != EventReleased || e.Reason != HandedOff) {
				return fmt.Errorf("%s %+v with the reason %q", e.Type, e.Lease, e.Reason)
			}
			if e.Type != EventReleased {
				// Expired or revoked: the lock-delay runs from the end.
				h.delayed[name] = max(h.delayed[name], end+e.Lease.LockDelay)
			}
			h.ended[name] = append(h.ended[name], end)
			if !e.Lease.Shared {
				h.endedExcl[name] = append(h.endedExcl[name], end)
			}
			h.endedNow[e.Lease.Token] = true
		default:
			return fmt.Errorf("unknown event %+v", e)
		}
	}
	return nil
}

// checkResults checks what the results claim: leases returned are live,
// and a write is accepted only with a granted token, never below the key's
// fence. (That the token was the current grant is checked by the model.)
func (h *history) checkResults(ops []Op, res []Result) error {
	for i, op := range ops {
		r := res[i]
		switch op.Type {
		case OpAcquire, OpGet:
			if r.Err == nil && (r.Lease.ExpiresAt <= r.Now || r.Lease.Name != op.Name) {
				return fmt.Errorf("%s %s returned a lease that is not live: %+v at %s", op.Type, op.Name, r.Lease, r.Now)
			}
		case OpList:
			for _, l := range r.Leases {
				if l.ExpiresAt <= r.Now {
					return fmt.Errorf("list returned the expired %+v at %s", l, r.Now)
				}
			}
		case OpPut, OpDelete:
			if r.Err != nil {
				continue
			}
			if op.Token < h.fences[op.Key] {
				return fmt.Errorf("%s %s with token %d accepted below the fence %d", op.Type, op.Key, op.Token, h.fences[op.Key])
			}
			if op.Token > h.lastToken {
				return fmt.Errorf("%s accepted the never-granted token %d", op.Type, op.Token)
			}
			// A token fences only for its own name, and only while its
			// grant (its slot of a semaphore) is held: never once an
			// earlier batch released or expired it.
			if h.granted[op.Token] != op.Name {
				return fmt.Errorf("%s accepted token %d for %s, but it was granted for %q", op.Type, op.Token, op.Name, h.granted[op.Token])
			}
			if h.shared[op.Token] {
				return fmt.Errorf("%s accepted the shared token %d of %s", op.Type, op.Token, op.Name)
			}
			if h.endedOld[op.Token] {
				return fmt.Errorf("%s accepted token %d of %s after its grant ended", op.Type, op.Token, op.Name)
			}
			h.fences[op.Key] = op.Token
		}
	}
	return nil
}

// ---- generators ----

func drawOp(t *rapid.T, s *State) Op {
	name := rapid.SampledFrom(propNames).Draw(t, "name")
	holder := rapid.SampledFrom(propHolders).Draw(t, "holder")
	key := rapid.SampledFrom(propKeys).Draw(t, "key")
	token := func(label, name string) uint64 {
		// Usually a current grant of the name, else any token.
		if ls := s.Slots(name); len(ls) > 0 && rapid.IntRange(0, 3).Draw(t, label+" current") > 0 {
			return rapid.SampledFrom(ls).Draw(t, label+" slot").Token
		}
		return rapid.Uint64Range(1, s.LastToken()+1).Draw(t, label)
	}
	ttl := time.Duration(rapid.IntRange(1, 10).Draw(t, "ttl")) * sec
	// Priorities and handoffs are chosen from values drawn anyway, so
	// that the draws (and the failure files of older runs) stay as they
	// were before they existed.
	switch rapid.IntRange(0, 14).Draw(t, "op") {
	case 13:
		op := Op{Type: OpRevoke, Name: name, Reason: rapid.SampledFrom([]string{"r", "stuck"}).Draw(t, "reason")}
		if rapid.Bool().Draw(t, "revoke one") {
			op.Token = token("token", name)
		}
		return op
	case 0, 1, 2:
		op := acq(name, holder, ttl)
		op.Limit = propLimit[name]
		if rapid.IntRange(0, 2).Draw(t, "lock delay?") == 0 {
			op.LockDelay = time.Duration(rapid.IntRange(0, 5).Draw(t, "lock delay")) * sec
		}
		if rapid.IntRange(0, 5).Draw(t, "other limit") == 0 {
			op.Limit = rapid.IntRange(0, propLimits.MaxLimit).Draw(t, "limit")
		}
		// "a" is a read-write lock: shared or exclusive. Now and then a
		// shared acquire of a semaphore, which is refused.
		if op.Limit <= 1 && ((name == "a" && rapid.Bool().Draw(t, "shared")) || rapid.IntRange(0, 5).Draw(t, "shared other") == 0) {
			op.Shared = true
		}
		if holder == "h3" {
			op.Priority = int(ttl/sec) % 3
		}
		if rapid.Bool().Draw(t, "wait") {
			op.Wait = true
			op.WaitTimeout = time.Duration(rapid.IntRange(0, 20).Draw(t, "wait timeout")) * sec
		}
		return op
	case 3, 4:
		n := rapid.IntRange(1, 3).Draw(t, "refs")
		var refs []Ref
		for range n {
			rn := rapid.SampledFrom(propNames).Draw(t, "ref name")
			ref := Ref{Name: rn, Token: token("ref token", rn)}
			if rapid.Bool().Draw(t, "ref ttl") {
				ref.TTL = time.Duration(rapid.IntRange(1, 10).Draw(t, "ref ttl seconds")) * sec
			}
			refs = append(refs, ref)
		}
		return renew(refs...)
	case 5:
		op := rel(name, token("token", name))
		if key == "k2" {
			// A handoff: to the first in line, or to a named
			// candidate.
			op.Handoff = true
			if ttl > 5*sec {
				op.HandoffTo = holder
			}
		}
		return op
	case 6:
		return Op{Type: OpExpire}
	case 7:
		return Op{Type: OpGet, Name: name}
	case 8:
		return Op{Type: OpList, Prefix: rapid.SampledFrom([]string{"", "a", "b", "x"}).Draw(t, "prefix")}
	case 9, 10:
		return Op{Type: OpPut, Key: key, Name: name, Token: token("token", name),
			Value: rapid.SliceOfN(rapid.Byte(), 0, 4).Draw(t, "value")}
	case 11:
		switch rapid.IntRange(0, 2).Draw(t, "kv read") {
		case 0:
			return Op{Type: OpKVGet, Key: key}
		case 1:
			return Op{Type: OpKVList, Prefix: rapid.SampledFrom([]string{"", "k", "k1", "x"}).Draw(t, "kv prefix")}
		}
		return del(key, name, token("token", name))
	default:
		return Op{Type: OpCancelWait, Name: name, Holder: holder}
	}
}

// withWaitDefault gives a wait with no timeout the longest one, as the
// Manager and the node do before proposing.
func withWaitDefault(ops []Op, lim Limits) []Op {
	out := slices.Clone(ops)
	for i := range out {
		if out[i].Type == OpAcquire && out[i].Wait && out[i].WaitTimeout <= 0 {
			out[i].WaitTimeout = lim.MaxWait
		}
	}
	return out
}

func snapOf(t *rapid.T, s *State) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := s.WriteSnapshot(&buf); err != nil {
		t.Fatalf("WriteSnapshot: %v", err)
	}
	if want := encodeWholeSnapshot(s); !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("WriteSnapshot differs from encoding the whole snapshot at once:\n%s\n%s", buf.Bytes(), want)
	}
	return buf.Bytes()
}

func TestProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := New()
		ref := newModel()
		hist := newHistory()
		clock := &fakeClock{t: time.Unix(1700000000, 0)}
		start := clock.t
		mgr := NewManager(clock, propLimits)
		var replica *State // restored from a snapshot taken along the way

		now := time.Duration(0)
		steps := rapid.IntRange(1, 100).Draw(t, "batches")
		for step := range steps {
			now += time.Duration(rapid.IntRange(-3, 8).Draw(t, "dt")) * sec
			invalid := rapid.IntRange(0, 30).Draw(t, "invalid") == 0
			nops := rapid.IntRange(0, 4).Draw(t, "ops")
			var ops []Op
			for range nops {
				ops = append(ops, drawOp(t, s))
			}
			if invalid && nops > 0 {
				ops[0] = rapid.SampledFrom([]Op{
					acq("a", "h1", 0),
					acq("a", "", sec),
					rel("a", 0),
					{Type: OpGet},
					put("k1", "too long a value", "a", 1),
					renew(),
					acqWait("a", "h1", sec, propLimits.MaxWait+1),
					{Type: OpAcquire, Name: "b", Holder: "h1", TTL: sec, Limit: propLimits.MaxLimit + 1},
					{Type: OpAcquire, Name: "b", Holder: "h1", TTL: sec, Limit: -1},
					{Type: OpAcquire, Name: "a", Holder: "h1", TTL: sec, LockDelay: propLimits.MaxLockDelay + 1},
					{Type: OpAcquire, Name: "a", Holder: "h1", TTL: sec, LockDelay: -1},
					{Type: OpRevoke, Name: "a"},
					{Type: OpRevoke, Name: "a", Reason: "too long a reason"},
					{Type: OpRevoke, Reason: "r"},
					{Type: OpAcquire, Name: "b", Holder: "h1", TTL: sec, Limit: 2, Shared: true},
				}).Draw(t, "invalid op")
			}

			// The Manager validates first: an invalid op rejects the batch.
			clock.t = start.Add(now)
			mres, mev, merr := mgr.Do(ops...)
			if invalid && nops > 0 {
				if !errors.Is(merr, ErrInvalid) {
					t.Fatalf("Manager accepted a batch with an invalid op: %v", merr)
				}
				continue
			}
			if merr != nil {
				t.Fatalf("Manager rejected valid ops %+v: %v", ops, merr)
			}

			// What the expiry heap holds must never change what Apply does:
			// compact it at random here, never in the replica or Manager.
			if rapid.IntRange(0, 7).Draw(t, "compact") == 0 {
				s.compactExpiries()
			}
			b := Batch{Now: now, Ops: withWaitDefault(ops, propLimits)}
			res, ev := s.Apply(b)
			if s.Now() != max(ref.now, now) {
				t.Fatalf("cluster time %s, want max(%s, %s)", s.Now(), ref.now, now)
			}

			// Against the reference model.
			mres2, mev2 := ref.apply(b)
			for i := range ops {
				if got, want := normalize(res[i]), normalize(mres2[i]); !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d op %d %+v:\n got  %+v\n want %+v\nqueues %+v delays %+v\nmodel queues %+v delays %+v", step, i, ops[i], got, want, s.queues, s.delays, ref.queues, ref.delays)
				}
			}
			if !reflect.DeepEqual(ev, mev2) && (len(ev) > 0 || len(mev2) > 0) {
				t.Fatalf("step %d events:\n got  %+v\n want %+v", step, ev, mev2)
			}
			if s.LastToken() != ref.last || s.Revision() != ref.rev {
				t.Fatalf("counters: token %d revision %d, model %d %d", s.LastToken(), s.Revision(), ref.last, ref.rev)
			}

			// Invariants from the events and results alone.
			if err := hist.check(ev, s.Now()); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if err := hist.checkResults(ops, res); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if hist.lastToken != s.LastToken() {
				t.Fatalf("LastToken %d, last granted %d", s.LastToken(), hist.lastToken)
			}
			stored := s.Leases("")
			live := 0
			for _, l := range stored {
				if l.ExpiresAt > s.Now() {
					live++
				}
			}
			if s.Len() != len(stored) || s.Live() != live {
				t.Fatalf("Len %d, Live %d; %d grants stored, %d of them live", s.Len(), s.Live(), len(stored), live)
			}
			if len(stored) != hist.liveCount() {
				t.Fatalf("%d stored grants, %d known from the events", len(stored), hist.liveCount())
			}
			for name := range propLimit {
				until, ok := s.Delayed(name)
				if want := hist.delayed[name]; ok != (want > s.Now()) || ok && until != want {
					t.Fatalf("lock-delay of %s: %s, %v; the events say until %s (now %s)", name, until, ok, want, s.Now())
				}
			}
			// Every grant and every lock-delay stored is due at some
			// time; NextDeadline is the earliest.
			var due []time.Duration
			for _, l := range stored {
				if !slices.ContainsFunc(hist.live[l.Name], func(g Lease) bool { return g.Token == l.Token }) {
					t.Fatalf("stored %+v, events say %+v", l, hist.live[l.Name])
				}
				if l.Shared {
					for _, o := range s.Slots(l.Name) {
						if !o.Shared {
							t.Fatalf("%s stored shared %+v and exclusive %+v", l.Name, l, o)
						}
					}
				} else if n := len(s.Slots(l.Name)); n > lim(l.Limit) {
					t.Fatalf("%d grants of %s stored, more than its limit %d", n, l.Name, lim(l.Limit))
				}
				due = append(due, l.ExpiresAt)
			}
			for _, d := range s.delays {
				due = append(due, d.Until)
			}
			if d, ok := s.NextDeadline(); ok != (len(due) > 0) || ok && d != slices.Min(due) {
				t.Fatalf("NextDeadline = %s, %v; expiries and delays stored %v", d, ok, due)
			}
			if n := len(s.expiries); n > 2*(s.Len()+len(s.delays))+64 {
				t.Fatalf("expiry heap holds %d entries for %d grants and %d delays", n, s.Len(), len(s.delays))
			}
			for name, ls := range s.leases.all() {
				if p, q := s.leases.one[name], s.leases.many[name]; len(ls) == 0 || p != nil && q != nil || len(q) == 1 {
					t.Fatalf("grants of %s kept wrongly: one %v, many %v", name, p, q)
				}
			}
			for name := range s.queues {
				if _, delayed := s.delays[name]; len(s.leases.get(name)) == 0 && !delayed {
					t.Fatalf("queue for %s, which has no lease and no lock-delay", name)
				}
			}

			// The Manager behaves like the State.
			if !reflect.DeepEqual(mres, res) || !reflect.DeepEqual(mev, ev) {
				t.Fatalf("Manager diverged at step %d:\n got  %+v %+v\n want %+v %+v", step, mres, mev, res, ev)
			}

			// A replica restored from a snapshot behaves identically.
			data := snapOf(t, s)
			if replica != nil {
				// The replica applies the batch as a follower does: after
				// the trip through the log's binary encoding.
				wire, err := DecodeBatch(EncodeBatch(b))
				if err != nil {
					t.Fatalf("DecodeBatch of an encoded batch: %v", err)
				}
				rres, rev := replica.Apply(wire)
				if !reflect.DeepEqual(rres, res) || !reflect.DeepEqual(rev, ev) {
					t.Fatalf("restored replica diverged at step %d:\n got  %+v %+v\n want %+v %+v", step, rres, rev, res, ev)
				}
				if rdata := snapOf(t, replica); !bytes.Equal(rdata, data) {
					t.Fatalf("replica snapshot differs at step %d:\n%s\n%s", step, rdata, data)
				}
			}
			if replica == nil || rapid.IntRange(0, 4).Draw(t, "resnapshot") == 0 {
				r, err := ReadSnapshot(bytes.NewReader(data))
				if err != nil {
					t.Fatalf("ReadSnapshot: %v", err)
				}
				if again := snapOf(t, r); !bytes.Equal(again, data) {
					t.Fatalf("snapshot of the restored state differs:\n%s\n%s", again, data)
				}
				replica = r
			}
			if mdata := snapOf(t, mgr.st); !bytes.Equal(mdata, data) {
				t.Fatalf("Manager state differs at step %d:\n%s\n%s", step, mdata, data)
			}
		}
	})
}

// TestCheckersCanFail makes sure the property test can fail: broken
// results and histories are caught by the model and by the invariants.
func TestCheckersCanFail(t *testing.T) {
	s := New()
	mustGrant(t, s, 0, "a", "h1", 10*sec)
	mustGrant(t, s, 0, "b", "h2", 10*sec)
	ops := []Op{put("k", "v", "b", 2), put("k", "w", "a", 1)}
	res, _ := apply(t, s, sec, ops...)
	if res[0].Err != nil || res[1].Err == nil {
		t.Fatalf("setup: %v, %v", res[0].Err, res[1].Err)
	}
	if err := newHistoryAt(2).checkResults(ops, res); err != nil {
		t.Fatalf("correct results rejected: %v", err)
	}
	res[1].Err, res[1].Revision = nil, 2 // pretend the fence failed
	if err := newHistoryAt(2).checkResults(ops, res); err == nil {
		t.Fatal("the fence invariant accepted a write below the key's fence")
	}
	// A write accepted with another name's token, or with a token whose
	// grant (slot) ended in an earlier batch.
	other := []Op{put("k2", "v", "a", 2)}
	if err := newHistoryAt(2).checkResults(other, []Result{{}}); err == nil {
		t.Fatal("the invariants accepted a write with another lease's token")
	}
	h := newHistoryAt(2)
	h.endedOld[1] = true
	if err := h.checkResults([]Op{put("k3", "v", "a", 1)}, []Result{{}}); err == nil {
		t.Fatal("the invariants accepted a write with a released slot's token")
	}
	ref := newModel()
	ref.apply(Batch{Ops: []Op{acq("a", "h1", 10*sec), acq("b", "h2", 10*sec)}})
	mres, _ := ref.apply(Batch{Now: sec, Ops: ops})
	if reflect.DeepEqual(normalize(mres[1]), normalize(res[1])) {
		t.Fatal("the model accepted a write below the key's fence")
	}

	g1 := Lease{Name: "n", Holder: "h1", Token: 1, TTL: 10 * sec, ExpiresAt: 10 * sec}
	g2 := Lease{Name: "n", Holder: "h2", Token: 2, TTL: 10 * sec, GrantedAt: 5 * sec, ExpiresAt: 15 * sec}
	old := Lease{Name: "m", Holder: "h2", Token: 1, TTL: 10 * sec, GrantedAt: 5 * sec, ExpiresAt: 15 * sec}
	s1 := Lease{Name: "n", Holder: "h1", Token: 1, TTL: 10 * sec, ExpiresAt: 10 * sec, Limit: 2}
	s2 := Lease{Name: "n", Holder: "h2", Token: 2, TTL: 10 * sec, ExpiresAt: 10 * sec, Limit: 2}
	s3 := Lease{Name: "n", Holder: "h3", Token: 3, TTL: 10 * sec, ExpiresAt: 10 * sec, Limit: 2}
	s3late := Lease{Name: "n", Holder: "h3", Token: 3, TTL: 10 * sec, GrantedAt: 5 * sec, ExpiresAt: 15 * sec, Limit: 2}
	d1 := Lease{Name: "n", Holder: "h1", Token: 1, TTL: 10 * sec, ExpiresAt: 10 * sec, LockDelay: 5 * sec}
	d2 := Lease{Name: "n", Holder: "h2", Token: 2, TTL: 10 * sec, GrantedAt: 12 * sec, ExpiresAt: 22 * sec}
	for _, tc := range []struct {
		name string
		ev   []Event
	}{
		{"two live grants", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventGranted, Lease: g2, At: 5 * sec}}},
		{"expired before its expiry", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventExpired, Lease: g1, At: 5 * sec}}},
		{"grant overlapping the expired one", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventExpired, Lease: g1, At: 12 * sec}, {Type: EventGranted, Lease: g2, At: 5 * sec}}},
		{"grant with the wrong times", []Event{{Type: EventGranted, Lease: g2, At: 6 * sec}}},
		{"token reused", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventGranted, Lease: old, At: 5 * sec}}},
		{"release after expiry", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventReleased, Lease: g1, At: 10 * sec}}},
		{"release of another grant", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventReleased, Lease: g2, At: 5 * sec}}},
		{"three holders of a limit-2 semaphore", []Event{{Type: EventGranted, Lease: s1, At: 0}, {Type: EventGranted, Lease: s2, At: 0}, {Type: EventGranted, Lease: s3, At: 0}}},
		{"a slot granted before another ended", []Event{{Type: EventGranted, Lease: s1, At: 0}, {Type: EventGranted, Lease: s2, At: 0}, {Type: EventExpired, Lease: s1, At: 12 * sec}, {Type: EventGranted, Lease: s3late, At: 5 * sec}}},
		{"grants of a name with two limits", []Event{{Type: EventGranted, Lease: s1, At: 0}, {Type: EventGranted, Lease: g2, At: 0}}},
		{"grant in a lock-delay after expiry", []Event{{Type: EventGranted, Lease: d1, At: 0}, {Type: EventExpired, Lease: d1, At: 12 * sec}, {Type: EventGranted, Lease: d2, At: 12 * sec}}},
		{"grant in a lock-delay after a revocation", []Event{{Type: EventGranted, Lease: d1, At: 0}, {Type: EventRevoked, Lease: d1, At: 8 * sec, Reason: "r"}, {Type: EventGranted, Lease: d2, At: 12 * sec}}},
		{"revoked after its expiry", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventRevoked, Lease: g1, At: 10 * sec, Reason: "r"}}},
		{"revoked without a reason", []Event{{Type: EventGranted, Lease: g1, At: 0}, {Type: EventRevoked, Lease: g1, At: 5 * sec}}},
	} {
		h := newHistory()
		var err error
		for _, e := range tc.ev {
			if err = h.check([]Event{e}, e.At); err != nil {
				break
			}
		}
		if err == nil {
			t.Errorf("%s: history accepted", tc.name)
		}
	}
	h = newHistory()
	if err := h.check([]Event{{Type: EventGranted, Lease: g1, At: 0}}, 0); err != nil {
		t.Fatal(err)
	}
	g3 := Lease{Name: "n", Holder: "h2", Token: 2, TTL: 10 * sec, GrantedAt: 10 * sec, ExpiresAt: 20 * sec}
	if err := h.check([]Event{{Type: EventExpired, Lease: g1, At: 10 * sec}, {Type: EventGranted, Lease: g3, At: 10 * sec}}, 10*sec); err != nil {
		t.Fatalf("a correct history rejected: %v", err)
	}
}

// newHistoryAt is a history in which a was granted token 1 and b token 2
// (lastToken 2).
func newHistoryAt(lastToken uint64) *history {
	h := newHistory()
	h.lastToken = lastToken
	h.granted[1], h.granted[2] = "a", "b"
	return h
}
