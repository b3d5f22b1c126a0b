package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

const electAbout = `Campaigns for the leadership of NAME and, once it leads, prints the lease
with its fencing token and keeps leading (renewing every TTL/3) until
interrupted: Ctrl-C or SIGTERM resigns (the lease is released) and exits 0.
If the leadership is lost (renewals failed), it says so and exits 4.
PROPOSAL is the holder name the leadership is held as (default HOSTNAME-PID),
so observers see it.

Handoff: SIGUSR1 to a leading 'tenure elect' hands the leadership to the next
in line (the first waiting candidate) with no gap: it stops leading, the
candidate is granted NAME with a new token at the same cluster time, and it
exits 0 (6 if nobody was waiting: then it released). --priority N (0 to
1000000) is stated with the campaign: a candidate with a higher priority
than the leader's asks it to hand over, and the leader does so at its next
renewal and exits 0. The queue itself stays first come, first served.

With --listen it campaigns for nothing: it prints the current leader of NAME,
if any, and then every new leader with its holder and token, until
interrupted (exit 0).`

func (a *app) elect(ctx context.Context, args []string) error {
	c := a.newCommand("elect", "elect NAME [PROPOSAL] [--ttl 10s] [--lock-delay D] [--priority N] | elect --listen NAME", electAbout)
	listen := c.fs.Bool("listen", false, "print each new leader of NAME instead of campaigning")
	var ttl ttlFlag
	ttl.d = 10 * time.Second
	c.fs.Var(&ttl, "ttl", "lease time to live of the leadership, a `duration` up to 24h")
	lockDelay := c.fs.Duration("lock-delay", 0, "if the leadership's grant expires or is revoked (not released), grant NAME to nobody for this `duration` more (at most 1m)")
	priority := c.fs.Int("priority", 0, "the campaign's priority, `n` from 0 to 1000000: a higher one than the leader's asks it to hand over")
	c.optional = "PROPOSAL"
	pos, err := a.parse(c, args, []string{"NAME"}, 2)
	if err != nil {
		return err
	}
	if *lockDelay < 0 {
		return &usageError{msg: fmt.Sprintf("--lock-delay must not be negative, got %s", *lockDelay), usage: c.usage}
	}
	if *priority < 0 || *priority > 1000000 {
		return &usageError{msg: fmt.Sprintf("--priority must be from 0 to 1000000, got %d", *priority), usage: c.usage}
	}
	if *listen {
		if len(pos) > 1 || flagSet(c.fs, "lock-delay") || flagSet(c.fs, "priority") {
			return &usageError{msg: "--listen takes NAME only", usage: c.usage}
		}
		return a.listen(ctx, pos[0])
	}
	holder := defaultHolder()
	if len(pos) > 1 {
		holder = pos[1]
	}
	cl, err := a.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := election.New(cl, election.Config{Holder: holder, TTL: ttl.d, LockDelay: *lockDelay, Priority: *priority})
	if err != nil {
		return &usageError{msg: err.Error(), usage: c.usage}
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.g.requestTimeout)
		defer cancel()
		s.Close(rctx) // resigns: releases the lease if it is still held
	}()
	handoff, stopSignal := handoffSignal()
	defer stopSignal()
	l, err := s.Campaign(ctx, pos[0])
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted while campaigning
		}
		return err
	}
	a.out().print(toLeaseJSON(client.Lease{Name: l.Name(), Holder: l.Holder(), Token: l.Token(), TTL: l.TTL(),
		Remaining: l.TTL()}), fmt.Sprintf("leading %s as %s, token %d", l.Name(), l.Holder(), l.Token()))
	select {
	case <-ctx.Done():
		return nil
	case <-handoff:
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.g.requestTimeout)
		defer cancel()
		next, err := l.Handoff(hctx, "")
		if err != nil {
			return err
		}
		a.out().print(handoffJSON{Name: l.Name(), Token: l.Token(), HandedTo: next.Holder, NewToken: next.Token},
			fmt.Sprintf("handed %s (token %d) to %s, token %d", l.Name(), l.Token(), next.Holder, next.Token))
		return nil
	case <-l.Done():
	}
	if errors.Is(l.Err(), election.ErrHandedOff) {
		a.out().print(handoffJSON{Name: l.Name(), Token: l.Token()},
			fmt.Sprintf("handed %s (token %d) to a candidate of a higher priority", l.Name(), l.Token()))
		return nil
	}
	if errors.Is(l.Err(), election.ErrLost) {
		return &leaseStopped{msg: fmt.Sprintf("leadership of %s lost: %v", l.Name(), l.Err())}
	}
	return nil
}

// leaderJSON is a new leader in elect --listen -o json.
type leaderJSON struct {
	Name   string `json:"name"`
	Holder string `json:"holder"`
	Token  uint64 `json:"token"`
}

func (a *app) listen(ctx context.Context, name string) error {
	cl, err := a.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	// Observing lasts until ctx ends; only starting it is bounded.
	octx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(a.g.requestTimeout, func() {
		cancel(fmt.Errorf("no answer within --request-timeout %s", a.g.requestTimeout))
	})
	leaders, err := election.Observe(octx, cl, name)
	timer.Stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	out := a.out()
	for ld := range leaders {
		out.print(leaderJSON(ld), fmt.Sprintf("%s led by %s, token %d", ld.Name, ld.Holder, ld.Token))
	}
	if ctx.Err() != nil {
		return nil // interrupted
	}
	if err := context.Cause(octx); err != nil {
		return err
	}
	return fmt.Errorf("watching %s ended", name)
}
