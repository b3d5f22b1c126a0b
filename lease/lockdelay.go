package lease

import (
	"cmp"
	"container/heap"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Lock-delays and revocations.
//
// A grant may carry a lock-delay (Op.LockDelay, bounded by
// Limits.MaxLockDelay). When such a grant expires, no new grant of its
// name is made until the delay has passed, counted in cluster time from
// the grant's expiry (not from when an op noticed it); when an operator
// revokes it, counted from the revocation. A release by the holder skips
// it: a holder that released is done writing. While a name is in its
// delay, an acquire that would make a new grant is answered with a
// *HeldError that has LockDelay set (naming the grant whose delay it is
// and the time left), and a waiting acquire queues as for a held name;
// the waiters are granted, in order, by the op that ends the delay. The
// node's expirer proposes that op: NextDeadline counts the end of every
// delay. For a semaphore, the delay holds back every new slot of the
// name, not only the one that ended. Renewals of the live grants go on.
//
// The delay is a mitigation for storage that cannot check tokens: a
// holder that lost its grant without knowing (paused, partitioned) has
// the delay to notice before anyone else is granted the name. The token
// is the guarantee.
//
// An OpRevoke ends the live grant of a name with a token, or every live
// grant of the name (all slots of a semaphore) without one, now: each
// gets an EventRevoked with the reason, its lock-delay starts, and the
// waiters are served as after a release. The next grant's token is
// larger, as always, so fencing refuses the revoked holder's writes. So
// that the holder learns why at its next renewal, the state keeps a
// tombstone (name, token, reason) until the revoked grant's old expiry:
// a renewal, release or write with that token is refused with a
// *RevokedError (which matches ErrStaleToken too). Tombstones are bounded
// in time (a grant's TTL, at most Limits.MaxTTL) and in number
// (MaxTombstones: past it the one that ends first is dropped, and its
// token gets a plain *StaleError instead). Both the delays and the
// tombstones are in the snapshot (version 5).
//
// All of it is decided inside Apply, in cluster time, so every replica
// agrees.

// MaxTombstones is the most revoked grants the state remembers the
// reason of at once. It is part of how the log applies: never change it.
const MaxTombstones = 4096

// delay is the lock-delay of a name: no new grant before Until. Holder
// and Token name the grant whose delay it is, and Ended is when it ended
// (its expiry, or its revocation), for the *HeldError.
type delay struct {
	Until  time.Duration
	Ended  time.Duration
	Holder string
	Token  uint64
}

// delayed returns the lock-delay of name in force at a.now.
func (a *applier) delayed(name string) (delay, bool) {
	d, ok := a.s.delays[name]
	return d, ok && d.Until > a.now
}

// startDelay starts the lock-delay of grant l, which ended at from
// (its expiry, or now for a revocation).
func (a *applier) startDelay(l *Lease, from time.Duration) {
	if l.LockDelay <= 0 {
		return
	}
	until := from + l.LockDelay
	if until <= a.now {
		return // passed already
	}
	if d, ok := a.s.delays[l.Name]; ok && d.Until >= until {
		return
	}
	a.s.delays[l.Name] = delay{Until: until, Ended: from, Holder: l.Holder, Token: l.Token}
	// The expirer's wake-up: token 0 marks a delay's end (NextDeadline).
	heap.Push(&a.s.expiries, expiry{at: until, name: l.Name})
}

// delayedAcquire answers an acquire that would make a new grant of a
// name in its lock-delay d: held, and queued if it waits. limit is the
// limit of the name's live grants (0 when it has none).
func (a *applier) delayedAcquire(op Op, d delay, limit int) Result {
	held := &HeldError{Name: op.Name, Holder: d.Holder, Token: d.Token, Remaining: d.Until - a.now, Limit: limit,
		LockDelay: true, Ended: a.now - d.Ended}
	if !op.Wait {
		a.removeWaiter(op.Name, op.Holder) // a plain try stops waiting
		return Result{Err: held}
	}
	for _, w := range a.s.queues[op.Name] {
		// With no live grant, the waiters fix the limit: the first of
		// them is granted when the delay ends, and the others must
		// agree with it.
		if w.Holder != op.Holder && effectiveLimit(w.Limit) != effectiveLimit(op.Limit) {
			return Result{Err: invalidf("%q is in its lock-delay and its waiters ask for limit %d, not %d: every holder of a name asks for the same limit",
				op.Name, effectiveLimit(w.Limit), effectiveLimit(op.Limit))}
		}
	}
	a.enqueue(op)
	return Result{Err: held, Queued: true}
}

// revoke ends the live grant of op.Name with op.Token, or every live
// grant of the name if op.Token is 0.
func (a *applier) revoke(op Op) Result {
	ls := a.live(op.Name)
	var ended, kept []*Lease
	for _, l := range ls {
		if op.Token == 0 || l.Token == op.Token {
			ended = append(ended, l)
		} else {
			kept = append(kept, l)
		}
	}
	if len(ended) == 0 {
		if op.Token == 0 {
			return Result{Err: fmt.Errorf("%w: %q is not held: nothing to revoke", ErrNotFound, op.Name)}
		}
		if t, ok := a.s.revoked.find(op.Name, op.Token, a.now); ok {
			return Result{Err: fmt.Errorf("%w: %q token %d was revoked already (%s)", ErrNotFound, op.Name, op.Token, t.Reason)}
		}
		return Result{Err: fmt.Errorf("%w: %q has no live grant with token %d: nothing to revoke", ErrNotFound, op.Name, op.Token)}
	}
	a.setSlots(op.Name, kept)
	out := make([]Lease, len(ended))
	for i, l := range ended {
		out[i] = *l
		a.emitRevoked(*l, op.Reason)
		a.closed(l, EndingRevoked, op.Reason)
		a.s.revoked.add(op.Name, tombstone{Token: l.Token, Reason: op.Reason, Until: l.ExpiresAt}, a.now)
		a.startDelay(l, a.now)
	}
	a.grantWaiters(op.Name)
	return Result{Leases: out}
}

// tombstone remembers a revoked grant until its old expiry.
type tombstone struct {
	Token  uint64
	Reason string
	Until  time.Duration
}

// tombstones are the tombstones of revoked grants by name. Those whose
// Until has passed are gone for every purpose (find ignores them, add
// drops them first, snapshots leave them out); sweep drops them from
// memory now and then, which changes no result.
type tombstones struct {
	byName map[string][]tombstone
	n      int
	// next is the earliest Until stored, when the next sweep is due.
	next time.Duration
}

// find returns the tombstone of name's grant token live at now.
func (t *tombstones) find(name string, token uint64, now time.Duration) (tombstone, bool) {
	for _, tb := range t.byName[name] {
		if tb.Token == token && tb.Until > now {
			return tb, true
		}
	}
	return tombstone{}, false
}

// add adds tb for name at now, dropping the tombstones that have passed
// and, at MaxTombstones, the one that ends first (by Until, name, token).
func (t *tombstones) add(name string, tb tombstone, now time.Duration) {
	if tb.Until <= now {
		return
	}
	t.sweepAll(now)
	if t.n >= MaxTombstones {
		var (
			first   tombstone
			fname   string
			found   bool
			firstAt int
		)
		for n, ts := range t.byName {
			for i, o := range ts {
				if !found || cmp.Or(cmp.Compare(o.Until, first.Until), strings.Compare(n, fname), cmp.Compare(o.Token, first.Token)) < 0 {
					first, fname, firstAt, found = o, n, i, true
				}
			}
		}
		t.remove(fname, firstAt)
	}
	t.insert(name, tb)
}

func (t *tombstones) insert(name string, tb tombstone) {
	if t.n == 0 || tb.Until < t.next {
		t.next = tb.Until
	}
	t.byName[name] = append(t.byName[name], tb)
	t.n++
}

func (t *tombstones) remove(name string, i int) {
	ts := slices.Delete(slices.Clone(t.byName[name]), i, i+1)
	if len(ts) == 0 {
		delete(t.byName, name)
	} else {
		t.byName[name] = ts
	}
	t.n--
}

// sweep drops the tombstones that have passed at now, if any may have.
func (t *tombstones) sweep(now time.Duration) {
	if t.n > 0 && now >= t.next {
		t.sweepAll(now)
	}
}

func (t *tombstones) sweepAll(now time.Duration) {
	t.n, t.next = 0, 0
	for name, ts := range t.byName {
		kept := slices.DeleteFunc(ts, func(tb tombstone) bool { return tb.Until <= now })
		if len(kept) == 0 {
			delete(t.byName, name)
			continue
		}
		t.byName[name] = kept
		for _, tb := range kept {
			if t.n == 0 || tb.Until < t.next {
				t.next = tb.Until
			}
			t.n++
		}
	}
}

// Delayed returns the end of name's lock-delay and true while one is in
// force at the cluster time of the last applied batch.
func (s *State) Delayed(name string) (time.Duration, bool) {
	d, ok := s.delays[name]
	return d.Until, ok && d.Until > s.now
}

// Revoked returns the reason a grant of name with token was revoked, and
// true while its tombstone is kept.
func (s *State) Revoked(name string, token uint64) (string, bool) {
	tb, ok := s.revoked.find(name, token, s.now)
	return tb.Reason, ok
}

// Snapshot form (version 5).

type snapshotDelay struct {
	Name   string        `json:"name"`
	Until  time.Duration `json:"until"`
	Ended  time.Duration `json:"ended"`
	Holder string        `json:"holder"`
	Token  uint64        `json:"token"`
}

type snapshotTombstone struct {
	Name   string        `json:"name"`
	Token  uint64        `json:"token"`
	Reason string        `json:"reason"`
	Until  time.Duration `json:"until"`
}

// captureDelays returns every stored lock-delay (passed ones too: they
// are settled by ops of the log, so every replica stores the same),
// sorted by name.
func (s *State) captureDelays() []snapshotDelay {
	out := make([]snapshotDelay, 0, len(s.delays))
	for name, d := range s.delays {
		out = append(out, snapshotDelay{Name: name, Until: d.Until, Ended: d.Ended, Holder: d.Holder, Token: d.Token})
	}
	slices.SortFunc(out, func(x, y snapshotDelay) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// captureTombstones returns the tombstones live at now, sorted by name
// and token.
func (s *State) captureTombstones(now time.Duration) []snapshotTombstone {
	var out []snapshotTombstone
	for name, ts := range s.revoked.byName {
		for _, tb := range ts {
			if tb.Until > now {
				out = append(out, snapshotTombstone{Name: name, Token: tb.Token, Reason: tb.Reason, Until: tb.Until})
			}
		}
	}
	slices.SortFunc(out, func(x, y snapshotTombstone) int {
		return cmp.Or(strings.Compare(x.Name, y.Name), cmp.Compare(x.Token, y.Token))
	})
	return out
}

// restoreDelays adds the lock-delays and tombstones of a snapshot to s.
func (s *State) restoreDelays(ds []snapshotDelay, ts []snapshotTombstone) error {
	for _, d := range ds {
		if d.Name == "" {
			return fmt.Errorf("lease: snapshot has a lock-delay without a name")
		}
		if _, ok := s.delays[d.Name]; ok {
			return fmt.Errorf("lease: snapshot has two lock-delays of %q", d.Name)
		}
		s.delays[d.Name] = delay{Until: d.Until, Ended: d.Ended, Holder: d.Holder, Token: d.Token}
		heap.Push(&s.expiries, expiry{at: d.Until, name: d.Name})
	}
	for _, tb := range ts {
		if tb.Name == "" || tb.Token == 0 || tb.Token > s.lastToken {
			return fmt.Errorf("lease: snapshot has a tombstone of %q with token %d", tb.Name, tb.Token)
		}
		s.revoked.insert(tb.Name, tombstone{Token: tb.Token, Reason: tb.Reason, Until: tb.Until})
	}
	if s.revoked.n > MaxTombstones {
		return fmt.Errorf("lease: snapshot has %d tombstones, more than %d", s.revoked.n, MaxTombstones)
	}
	return nil
}
