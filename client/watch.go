package client

import (
	"context"
	"errors"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/wire"
)

// EventType is the kind of a WatchEvent.
type EventType uint8

// The kinds of watch events.
const (
	// EventCurrent is a lease that was live when the watch (re)started.
	EventCurrent EventType = iota + 1
	// EventSynced follows the EventCurrent events: from here on events
	// follow in commit order.
	EventSynced
	// EventGranted is a new grant (not sent for renewals).
	EventGranted
	// EventReleased is a grant ended by its holder.
	EventReleased
	// EventExpired is a grant that ran out.
	EventExpired
	// EventReset says the client lost its stream and watched again on
	// some endpoint: events may have been missed, and the current state
	// follows again as EventCurrent events and an EventSynced. A consumer
	// that keeps a picture of the leases starts it afresh.
	EventReset
	// EventError is the last event of a watch that failed for good; Err
	// says why.
	EventError
	// EventRevoked is a grant an operator revoked (Client.Revoke);
	// Reason says why.
	EventRevoked
)

var eventNames = map[EventType]string{
	EventCurrent: "current", EventSynced: "synced", EventGranted: "granted",
	EventReleased: "released", EventExpired: "expired", EventReset: "reset",
	EventError: "error", EventRevoked: "revoked",
}

func (t EventType) String() string {
	if s, ok := eventNames[t]; ok {
		return s
	}
	return "unknown"
}

// WatchEvent is one event of a watch.
type WatchEvent struct {
	Type EventType
	// Lease is the grant the event is about (Current, Granted, Released,
	// Expired). Its Remaining is as of the event; Sent is zero.
	Lease Lease
	// Index is the raft index of the entry that produced the event (0 for
	// Current, Synced, Reset and Error).
	Index uint64
	// Err is set for EventError.
	Err error
	// Reason is the operator's reason of an EventRevoked, or
	// "handed_off" for the EventReleased of a grant handed to a waiter
	// (Client.Handoff; its EventGranted follows at the same index).
	Reason string
}

func eventFromProto(ev *tenurev1.WatchEvent) WatchEvent {
	out := WatchEvent{Index: ev.GetIndex(), Reason: ev.GetReason()}
	switch ev.GetType() {
	case tenurev1.WatchEvent_TYPE_CURRENT:
		out.Type = EventCurrent
	case tenurev1.WatchEvent_TYPE_SYNCED:
		out.Type = EventSynced
	case tenurev1.WatchEvent_TYPE_GRANTED:
		out.Type = EventGranted
	case tenurev1.WatchEvent_TYPE_RELEASED:
		out.Type = EventReleased
	case tenurev1.WatchEvent_TYPE_EXPIRED:
		out.Type = EventExpired
	case tenurev1.WatchEvent_TYPE_REVOKED:
		out.Type = EventRevoked
	}
	if ev.GetLease() != nil {
		out.Lease = leaseFromProto(ev.GetLease(), time.Time{})
	}
	return out
}

// Watch streams the leases whose names start with prefix: first the live
// ones (EventCurrent), then EventSynced, then every grant, release, expiry
// and revocation in commit order. It returns once the first event arrived from some
// endpoint, retrying like the other calls; a bad prefix fails here.
//
// The channel is closed when ctx ends (the caller must cancel it to stop
// the watch) or after an EventError. If the stream breaks, the client
// watches again on the next endpoint that answers, announced by an
// EventReset.
func (c *Client) Watch(ctx context.Context, prefix string) (<-chan WatchEvent, error) {
	ws, err := c.openWatch(ctx, prefix)
	if err != nil {
		return nil, err
	}
	ch := make(chan WatchEvent, 64)
	go c.runWatch(ctx, prefix, ws, ch)
	return ch, nil
}

// watchStream is an open watch whose first event has arrived.
type watchStream struct {
	stream *connect.ServerStreamForClient[tenurev1.WatchResponse]
	cancel context.CancelCauseFunc
	first  *tenurev1.WatchEvent
}

func (ws *watchStream) close() {
	ws.cancel(nil)
	ws.stream.Close()
}

var errWatchTimeout = errors.New("client: no watch event within the request timeout")

// openWatch starts a watch on the first endpoint that sends its first
// event within the request timeout.
func (c *Client) openWatch(ctx context.Context, prefix string) (*watchStream, error) {
	var ws *watchStream
	err := c.call(ctx, retryAlways, func(ctx context.Context, ep *endpoint) error {
		sctx, cancel := context.WithCancelCause(ctx)
		timer := time.AfterFunc(c.cfg.RequestTimeout, func() { cancel(errWatchTimeout) })
		stream, err := ep.lease.Watch(sctx, connect.NewRequest(&tenurev1.WatchRequest{Prefix: prefix}))
		if err == nil && !stream.Receive() {
			err = stream.Err()
			if err == nil {
				err = connect.NewError(connect.CodeUnavailable, errors.New("client: watch ended before its first event"))
			}
		}
		if !timer.Stop() {
			// The timer fired: the stream is cancelled, whatever arrived.
			err = connect.NewError(connect.CodeDeadlineExceeded, errWatchTimeout)
		}
		if err != nil {
			cancel(nil)
			if stream != nil {
				stream.Close()
			}
			return err
		}
		ws = &watchStream{stream: stream, cancel: cancel, first: stream.Msg().GetEvent()}
		return nil
	})
	return ws, err
}

// runWatch copies events from ws to ch, watching again when the stream
// breaks, until ctx ends or the watch fails for good. It closes ch.
func (c *Client) runWatch(ctx context.Context, prefix string, ws *watchStream, ch chan<- WatchEvent) {
	defer close(ch)
	send := func(ev WatchEvent) bool {
		select {
		case ch <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	backoff := c.cfg.RetryBackoff
	for {
		ok := send(eventFromProto(ws.first))
		events := 0
		for ok && ws.stream.Receive() {
			events++
			ok = send(eventFromProto(ws.stream.Msg().GetEvent()))
		}
		err := ws.stream.Err()
		ws.close()
		if !ok || ctx.Err() != nil {
			return
		}
		if err == nil {
			err = connect.NewError(connect.CodeUnavailable, errors.New("client: the server ended the watch"))
		}
		if connect.IsWireError(err) && classify(ctx, err, retryAlways) == giveUp {
			send(WatchEvent{Type: EventError, Err: wire.FromConnectError(err)})
			return
		}
		// A stream that broke at once is not retried in a tight loop.
		if events > 0 {
			backoff = c.cfg.RetryBackoff
		} else {
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, c.cfg.MaxRetryBackoff)
		}
		ws, err = c.openWatch(ctx, prefix)
		if err != nil {
			if ctx.Err() == nil {
				send(WatchEvent{Type: EventError, Err: err})
			}
			return
		}
		if !send(WatchEvent{Type: EventReset}) {
			ws.close()
			return
		}
	}
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
