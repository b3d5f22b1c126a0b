package election

import (
	"context"
	"errors"
	"fmt"

	"github.com/tenure-io/tenure/client"
)

// ErrHandedOff is the cause of a lease's context after Handoff. It
// matches ErrReleased too: a handoff is a clean end of the term.
var ErrHandedOff error = handedOff{}

type handedOff struct{}

func (handedOff) Error() string        { return "election: lease handed off" }
func (handedOff) Is(target error) bool { return target == ErrReleased }

// Handoffer is the part of a Client that hands a grant to a waiter
// (*client.Client has it). Lease.Handoff needs it; a Client without it
// cannot hand off.
type Handoffer interface {
	Handoff(ctx context.Context, name string, token uint64, to string) (client.Lease, error)
}

var _ Handoffer = (*client.Client)(nil)

// Handoff ends this term and hands the lease to the candidate to, a
// holder waiting for it (Campaign, Acquire, Run), or to the first waiter
// if to is "". The new term starts on the server at the cluster time
// this one ends there, with a new, larger token: no TTL-long gap and no
// overlap.
//
// The order is what makes it safe: first the lease's context ends (cause
// ErrHandedOff, which matches ErrReleased) and renewals stop, then the
// handoff is sent, and only once it is committed is the new holder
// granted (its waiting Acquire returns after that). So the old leader's
// context ends before the new leader's starts. It returns the new grant.
//
// If the server refuses the handoff (no such candidate is waiting:
// client.ErrNotFound; or the grant is gone), the term has still ended
// here: the grant is released, so the first waiter, if any, gets it at
// once, and Handoff returns the error. Handoff of a lease that already
// ended returns why it ended. A semaphore slot cannot be handed off
// (client.ErrInvalid).
//
// Run campaigns again after a term that was handed off.
func (l *Lease) Handoff(ctx context.Context, to string) (client.Lease, error) {
	h, ok := l.s.c.(Handoffer)
	if !ok {
		return client.Lease{}, errors.New("election: the session's client cannot hand off")
	}
	l.mu.Lock()
	switch l.state {
	case Held, AtRisk:
		l.endLocked(Released, ErrHandedOff)
	default:
		err := l.err
		l.mu.Unlock()
		return client.Lease{}, fmt.Errorf("election: the term of %q (token %d) has already ended: %w", l.name, l.token, err)
	}
	l.mu.Unlock()
	l.s.forget(l)
	next, err := h.Handoff(ctx, l.name, l.token, to)
	if err != nil {
		if !gone(err) || errors.Is(err, client.ErrNotFound) {
			l.s.releaseQuietly(ctx, client.Lease{Name: l.name, Token: l.token})
		}
		return client.Lease{}, fmt.Errorf("election: hand off %q: %w", l.name, err)
	}
	return next, nil
}

// handoffRequested hands l over to the waiter that asked for it by its
// priority (see Config.Priority), unless the session keeps its leases.
func (s *Session) handoffRequested(l *Lease, to string) {
	if s.cfg.KeepOnHandoffRequest {
		return
	}
	s.handoffs.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.cfg.RenewTimeout)
		defer cancel()
		_, _ = l.Handoff(ctx, to)
	})
}
