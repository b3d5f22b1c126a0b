package lease

import "time"

// Renewals answered from the leader's memory.
//
// A renewal in the log costs a replicated, fsynced entry. A leader can
// answer most renewals without one if the log gives each grant an expiry
// later than the one its holder is told:
//
//   - A batch with Headroom h stamped at now gives every renewal it
//     applies (an OpRenew, or an acquire by the holder) the promise
//     now + TTL (Lease.Promised, what the holder is told and Remaining
//     reports) and the expiry now + TTL + min(TTL, h) (Lease.ExpiresAt,
//     when Apply frees it). A new grant gets none: it ends at its TTL
//     unless renewed, whatever happens to the leader, and the leader has
//     nothing to remember for it (the first renewal goes to the log).
//   - While a renewal at cluster time c would promise c + TTL no later
//     than ExpiresAt, the leader may answer it from memory (MemoryRenewal
//     says whether it may): every replica already keeps the grant until
//     ExpiresAt, so the promise holds across any failover. Past that, the
//     renewal goes to the log and buys new headroom.
//   - The leader remembers the latest expiry it promised each grant in
//     its term. When a holder stops renewing, the leader proposes an
//     OpTrim at that promise: the grant ends when its holder was told it
//     would, not min(TTL, h) later. Apply ends it only if no grant or
//     renewal in the log promised later since (Promise() <= At), so a
//     trim can never cut a promise that the log made.
//   - A new leader does not know what its predecessor promised from
//     memory, so it trims only grants it promised something itself;
//     others run until ExpiresAt. After a failover a lease that nobody
//     renews any more is therefore kept up to min(TTL, h) longer than its
//     TTL: that is the price of the headroom, and why it is bounded.
//
// Apply stays a pure function of the log: it never sees a renewal
// answered from memory, and decides by ExpiresAt alone.

// extend sets l's expiry for a renewal with TTL ttl at a.now, with the
// batch's headroom.
func (a *applier) extend(l *Lease, ttl time.Duration) {
	l.ExpiresAt = a.now + ttl
	l.Promised = 0
	if h := min(ttl, a.headroom); h > 0 {
		l.Promised = l.ExpiresAt
		l.ExpiresAt += h
	}
}

// trim applies an OpTrim: the grant op.Name/op.Token ends at op.At if
// it is still held past then and nothing in the log promised it longer.
func (a *applier) trim(op Op) Result {
	l := a.s.slot(op.Name, op.Token)
	if l == nil || l.ExpiresAt <= op.At || l.Promise() > op.At {
		return Result{}
	}
	old := l
	l = a.s.update(l, func(l *Lease) {
		l.ExpiresAt = op.At
		l.Promised = 0
	})
	a.s.renewed(old, l)
	a.settle(op.Name)
	return Result{}
}

// MemoryRenewal reports whether the leader may renew the grant r of
// principal at cluster time now without the log, and returns the grant
// as it is in the state. It may when the grant is held with headroom
// (Promised set), now + TTL is no later than its expiry, the renewal
// keeps the TTL, the principal owns it, and no waiter asks for a
// handoff (which the holder must learn from a renewal in the log).
func (s *State) MemoryRenewal(r Ref, principal string, now time.Duration) (Lease, bool) {
	l := s.slot(r.Name, r.Token)
	if l == nil || l.Promised == 0 || now < s.now || now+l.TTL > l.ExpiresAt ||
		(r.TTL != 0 && r.TTL != l.TTL) || owns(l, principal, "renew") != nil {
		return Lease{}, false
	}
	a := applier{s: s, now: now}
	if a.handoffRequest(l) != "" {
		return Lease{}, false
	}
	return *l, true
}

// usesHeadroom reports whether the captured state needs snapshot version
// 9: a grant with headroom (Promised), also in a remembered result.
func (c *Capture) usesHeadroom() bool {
	for _, l := range c.leases {
		if l.Promised != 0 {
			return true
		}
	}
	for _, ss := range c.sessions {
		for _, r := range ss.Results {
			if r.v9() {
				return true
			}
		}
	}
	return false
}

func (r snapshotResult) v9() bool {
	if r.Lease != nil && r.Lease.Promised != 0 {
		return true
	}
	for _, l := range r.Leases {
		if l.Promised != 0 {
			return true
		}
	}
	for _, rr := range r.Renewed {
		if rr.Lease != nil && rr.Lease.Promised != 0 {
			return true
		}
	}
	return false
}
