package lease

import "fmt"

// Handoff of an election.
//
// A holder may hand its grant of a plain lease to a waiter: an OpRelease
// with Handoff set ends the holder's grant (its term ends with
// EndingHandedOff) and, in the same Apply and so at the same cluster
// time, grants the name to the waiter named by HandoffTo, or to the first
// waiter still waiting when HandoffTo is "". The new grant has a new
// token, larger than every token before, as every grant. There is no gap
// (the new term starts at the cluster time the old one ended) and no
// overlap (the old grant is gone before the new one is made).
//
// A handoff is a clean end, like a release: it starts no lock-delay. It
// is refused, and changes nothing, when the token is not the holder's
// live grant (as a release), when the name is a semaphore or held shared
// (a handoff moves the one grant of a lease; see shared.go), or when no
// such waiter is waiting (ErrNotFound). A handoff to a shared waiter
// grants it, and the shared waiters first in line after it join it.
//
// The handoff's events are an EventReleased of the old grant, with
// Reason HandedOff, and an EventGranted of the new one: a watcher sees a
// release and a grant at the same cluster time.
//
// Priority. An acquire may state a Priority (0 to MaxPriority), kept in
// its waiter and its grant. The queue stays first come, first served:
// a release or an expiry grants the first waiter, whatever its
// priority. Priority only asks: a renewal of the grant of a plain lease
// (not a semaphore slot, not a shared grant) (OpRenew) reports,
// in RenewResult.HandoffRequested, the first of the live waiters with
// the highest priority when that priority is higher than the grant's,
// and the holder (the election library does so) may then hand over to
// it. A holder that does not is never forced.

// HandedOff is the Reason of the EventReleased of a handed-off grant.
const HandedOff = "handed_off"

func checkPriority(p int) error {
	if p < 0 || p > MaxPriority {
		return invalidf("priority %d is out of range: 0 to %d", p, MaxPriority)
	}
	return nil
}

func (l Limits) checkHandoff(op Op) error {
	if !op.Handoff {
		if op.HandoffTo != "" {
			return invalidf("handoff_to is set but handoff is not")
		}
		return nil
	}
	if op.HandoffTo != "" {
		return checkText("handoff_to", op.HandoffTo, l.MaxHolderLen)
	}
	return nil
}

// candidate returns the index in the queue of name of the waiter a
// handoff to holder goes to ("" for the first), skipping waiters whose
// deadline has passed, or -1.
func (a *applier) candidate(name, holder string) int {
	for i, w := range a.s.queues[name] {
		if w.Deadline <= a.now {
			continue
		}
		if holder == "" || w.Holder == holder {
			return i
		}
	}
	return -1
}

// handoff applies an OpRelease with Handoff set.
func (a *applier) handoff(op Op) Result {
	l, err := a.check(op.Name, op.Token)
	if err == nil {
		err = owns(l, op.Principal, "hand off")
	}
	if err != nil {
		return Result{Err: err}
	}
	if l.Limit > 1 {
		return Result{Err: invalidf("%q is a semaphore: only the grant of a plain lease can be handed off", op.Name)}
	}
	if l.Shared {
		// Other shared grants may be live: the name is not the
		// holder's to give (shared.go).
		return Result{Err: invalidf("%q is held shared: only an exclusive grant can be handed off", op.Name)}
	}
	i := a.candidate(op.Name, op.HandoffTo)
	if i < 0 {
		if op.HandoffTo == "" {
			return Result{Err: fmt.Errorf("%w: no candidate is waiting for %q: nothing to hand off to", ErrNotFound, op.Name)}
		}
		return Result{Err: fmt.Errorf("%w: %q is not waiting for %q: cannot hand off to it", ErrNotFound, op.HandoffTo, op.Name)}
	}
	q := a.s.queues[op.Name]
	w := q[i]
	if q = append(q[:i:i], q[i+1:]...); len(q) == 0 {
		delete(a.s.queues, op.Name)
	} else {
		a.s.queues[op.Name] = q
	}
	a.setSlots(op.Name, nil)
	a.event(Event{Type: EventReleased, Lease: *l, At: a.now, Reason: HandedOff})
	a.closed(l, EndingHandedOff, "")
	next := a.grant(op.Name, w.Holder, w.TTL, w.Limit, w.Principal, w.LockDelay, w.Shared, w.Priority)
	a.granted(w, next)
	if next.Shared {
		// Handed to a reader: the readers first in line join it, as
		// they would after a release (shared.go).
		a.grantWaiters(op.Name)
	}
	return Result{Lease: *next}
}

// handoffRequest returns the waiter asking the holder of l to hand over:
// the first live waiter of the highest priority, if higher than l's.
// Nobody asks for what cannot be handed off: a semaphore slot or a
// shared grant.
func (a *applier) handoffRequest(l *Lease) string {
	if l.Limit > 1 || l.Shared {
		return ""
	}
	best, who := l.Priority, ""
	for _, w := range a.s.queues[l.Name] {
		if w.Deadline > a.now && w.Priority > best {
			best, who = w.Priority, w.Holder
		}
	}
	return who
}

// usesPriority reports whether the captured state needs snapshot
// version 8: a priority on a grant or waiter, or a handoff request or
// priority in a remembered result.
func (c *Capture) usesPriority() bool {
	for _, l := range c.leases {
		if l.Priority != 0 {
			return true
		}
	}
	for _, q := range c.queues {
		for _, w := range q.Waiters {
			if w.Priority != 0 {
				return true
			}
		}
	}
	for _, ss := range c.sessions {
		for _, r := range ss.Results {
			if r.v8() {
				return true
			}
		}
	}
	return false
}

func (r snapshotResult) v8() bool {
	if r.Lease != nil && r.Lease.Priority != 0 {
		return true
	}
	for _, l := range r.Leases {
		if l.Priority != 0 {
			return true
		}
	}
	for _, rr := range r.Renewed {
		if rr.HandoffRequested != "" || (rr.Lease != nil && rr.Lease.Priority != 0) {
			return true
		}
	}
	return false
}
