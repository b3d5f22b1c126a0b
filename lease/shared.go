package lease

import "fmt"

// Shared (read) and exclusive (write) grants.
//
// An OpAcquire with Shared asks for a shared grant of a name. A name that
// is not a semaphore is a read-write lock: it has either one exclusive
// grant (a plain lease) or up to MaxShared shared grants at once, never
// both. Every grant, shared or exclusive, takes the next token of the one
// counter, so it is larger than every token before it, of any name.
//
//   - Mode. A name's grants are all shared or one exclusive; a semaphore
//     (Limit > 1) cannot be held or waited for shared: an acquire mixing
//     them is ErrInvalid, as is a shared acquire with a Limit > 1. A
//     holder's acquire again in the same mode renews its grant (same
//     token); in the other mode it is ErrInvalid: there is no upgrade or
//     downgrade, release first (an upgrade of two readers would deadlock).
//   - Order. Waiters queue per name, first come first served, shared and
//     exclusive in one queue. When the head of the queue is shared it is
//     granted together with every shared waiter right behind it (while the
//     name has no exclusive grant); an exclusive head waits until every
//     grant of the name has ended. A shared acquire is granted at once only
//     if the name is held shared (or free) and nobody waits ahead of it:
//     readers never overtake a queued writer, so a steady stream of readers
//     cannot starve writers, and a writer cannot starve the readers queued
//     behind it either (they go as soon as it is done).
//   - Bound. At most MaxShared shared grants of a name at once; more
//     shared acquires wait (or are told it is held).
//   - Fencing. A shared grant may renew and release like any grant, but
//     it does not write: OpPut and OpDelete with a shared grant's token are
//     ErrInvalid (and counted as refused in its term). Writers fence with
//     exclusive tokens; since an exclusive grant excludes every other grant
//     of its name, the newest exclusive token is larger than the token of
//     every shared grant that ended before it began.
//   - Expiry, revocation, lock-delay and history treat each shared grant
//     as its own grant: each expires, is revoked and ends its own term
//     (Term.Shared set) on its own, and a lock-delay started by one holds
//     back every new grant of the name, shared or exclusive.

// MaxShared is the most shared grants of one name at once. It is fixed,
// not a Limit, because it decides how the log applies.
const MaxShared = 1000

// checkShared validates the Shared field of an acquire.
func checkShared(op Op) error {
	if op.Shared && op.Limit > 1 {
		return invalidf("shared is set with limit %d: a semaphore cannot be acquired shared", op.Limit)
	}
	return nil
}

// sharedMode reports whether the name with grants ls and queue q is a
// read-write lock in use: held shared, or its first waiter is shared.
func sharedMode(ls []*Lease, q []waiter) bool {
	return (len(ls) > 0 && ls[0].Shared) || (len(q) > 0 && q[0].Shared)
}

// waiterBlocked reports whether w, the first waiter of a name with the
// grants ls, must wait.
func waiterBlocked(ls []*Lease, w waiter) bool {
	if len(ls) == 0 {
		return false
	}
	if ls[0].Shared || w.Shared {
		return !ls[0].Shared || !w.Shared || len(ls) >= MaxShared
	}
	return len(ls) >= effectiveLimit(ls[0].Limit)
}

// acquireShared is an acquire of a name that is a read-write lock in use:
// a shared acquire, or any acquire of a name held shared. ls are the live
// grants of the name (settled), d its lock-delay if delayed.
func (a *applier) acquireShared(op Op, ls []*Lease, d delay, delayed bool) Result {
	if op.Shared && op.Limit > 1 {
		return Result{Err: checkShared(op)}
	}
	if len(ls) > 0 && ls[0].Limit > 1 {
		return Result{Err: invalidf("%q is held as a semaphore with limit %d: it cannot be acquired shared", op.Name, ls[0].Limit)}
	}
	if op.Limit > 1 {
		return Result{Err: invalidf("%q is held shared: it cannot be acquired as a semaphore with limit %d", op.Name, op.Limit)}
	}
	for _, l := range ls {
		if l.Holder != op.Holder {
			continue
		}
		if err := owns(l, op.Principal, "acquire"); err != nil {
			return Result{Err: err}
		}
		if l.Shared != op.Shared {
			return Result{Err: invalidf("%q holds %q %s (token %d): release it before acquiring it %s",
				op.Holder, op.Name, modeName(l.Shared), l.Token, modeName(op.Shared))}
		}
		return a.reacquire(l, op)
	}
	free := len(ls) == 0 ||
		(op.Shared && ls[0].Shared && len(ls) < MaxShared && !a.waitsAhead(op.Name, op.Holder))
	if free && delayed {
		return a.delayedAcquire(op, d, 0)
	}
	if free {
		l := a.grant(op.Name, op.Holder, op.TTL, op.Limit, op.Principal, op.LockDelay, op.Shared, op.Priority)
		a.removeWaiter(op.Name, op.Holder)
		return Result{Lease: *l}
	}
	// Held: by an exclusive grant, which the HeldError names; or shared,
	// and then it names the grant that expires last, the soonest the
	// name is free without a release.
	l := ls[0]
	for _, o := range ls[1:] {
		if o.ExpiresAt > l.ExpiresAt {
			l = o
		}
	}
	return a.held(op, &HeldError{Name: l.Name, Holder: l.Holder, Token: l.Token, Remaining: l.Remaining(a.now)})
}

// waitsAhead reports whether anyone waits for name ahead of holder (the
// whole queue, if holder is not in it).
func (a *applier) waitsAhead(name, holder string) bool {
	q := a.s.queues[name]
	return len(q) > 0 && q[0].Holder != holder
}

func modeName(shared bool) string {
	if shared {
		return "shared"
	}
	return "exclusive"
}

// sharedWriteError is the answer to a fenced write with the token of the
// shared grant l.
func sharedWriteError(l *Lease) error {
	return fmt.Errorf("%w: %q token %d is a shared (read) grant: shared grants do not write the fenced store, acquire the lease exclusive to write",
		ErrInvalid, l.Name, l.Token)
}

// hasShared reports whether anything captured is shared: then the
// snapshot is version 7.
func (c *Capture) hasShared() bool {
	for _, l := range c.leases {
		if l.Shared {
			return true
		}
	}
	for _, q := range c.queues {
		for _, w := range q.Waiters {
			if w.Shared {
				return true
			}
		}
	}
	for _, h := range c.history {
		for _, t := range h.Terms {
			if t.Shared {
				return true
			}
		}
	}
	for _, ss := range c.sessions {
		if sessionShared(ss) {
			return true
		}
	}
	return false
}

func sessionShared(ss snapshotSession) bool {
	for _, r := range ss.Results {
		if r.Lease != nil && r.Lease.Shared {
			return true
		}
		for _, l := range r.Leases {
			if l.Shared {
				return true
			}
		}
		for _, rr := range r.Renewed {
			if rr.Lease != nil && rr.Lease.Shared {
				return true
			}
		}
	}
	return false
}

// checkSharedSnapshot refuses shared waiters of a semaphore.
func checkSharedSnapshot(snap *snapshot) error {
	for _, q := range snap.Queues {
		for _, w := range q.Waiters {
			if w.Shared && w.Limit != 0 {
				return fmt.Errorf("lease: snapshot has a shared waiter of %q with the limit %d", q.Name, w.Limit)
			}
		}
	}
	return nil
}
