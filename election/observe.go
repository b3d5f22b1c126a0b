package election

import (
	"context"

	"github.com/tenure-io/tenure/client"
)

// Leader is a holder of a lease, as Observe reports it.
type Leader struct {
	Name   string
	Holder string
	// Token is the fencing token of the leader's grant.
	Token uint64
}

// Observe reports the leaders of name: first the current one, if any, then
// every new grant of name in commit order, each with its holder and token.
// Tokens only grow, so each Leader has a larger token than the one before;
// renewals and re-acquires by the same holder are not new leaders. Once a
// leader releases or loses the lease, the next Leader is whoever is granted
// it next.
//
// Observe follows a watch, which fails over and reconnects by itself.
// Leaders that came and went while it was disconnected are skipped: the
// one current after the reconnect is reported next. The channel is closed
// when ctx ends or the watch fails for good.
func Observe(ctx context.Context, c Client, name string) (<-chan Leader, error) {
	events, err := c.Watch(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader)
	go func() {
		defer close(out)
		var last uint64
		for ev := range events {
			if ev.Type != client.EventCurrent && ev.Type != client.EventGranted {
				continue
			}
			// The watch is by prefix: skip longer names.
			if ev.Lease.Name != name || ev.Lease.Token <= last {
				continue
			}
			last = ev.Lease.Token
			select {
			case out <- Leader{Name: name, Holder: ev.Lease.Holder, Token: ev.Lease.Token}:
			case <-ctx.Done():
				for range events {
				}
				return
			}
		}
	}()
	return out, nil
}

// Observe is Observe with the session's client.
func (s *Session) Observe(ctx context.Context, name string) (<-chan Leader, error) {
	return Observe(ctx, s.c, name)
}
