package main

import (
	"context"
	"fmt"
	"time"

	"github.com/tenure-io/tenure/client"
)

func (a *app) watch(ctx context.Context, args []string) error {
	c := a.newCommand("watch", "watch [PREFIX]",
		"Prints the live leases whose names start with PREFIX, then one line per grant,\n"+
			"release and expiry, until interrupted (Ctrl-C exits 0). If the connection\n"+
			"breaks it watches again on any endpoint and prints a reset line.")
	prefix, err := a.parsePrefix(c, args)
	if err != nil {
		return err
	}
	cl, err := a.client()
	if err != nil {
		return err
	}
	defer cl.Close()

	// The watch lives until ctx ends; only starting it is bounded by
	// --request-timeout.
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(a.g.requestTimeout, func() {
		cancel(fmt.Errorf("no answer within --request-timeout %s", a.g.requestTimeout))
	})
	ch, err := cl.Watch(wctx, prefix)
	timer.Stop()
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted
		}
		return err
	}
	out := a.out()
	for ev := range ch {
		if ev.Type == client.EventError {
			return ev.Err
		}
		out.event(ev)
	}
	if ctx.Err() != nil {
		return nil // interrupted
	}
	return context.Cause(wctx)
}
