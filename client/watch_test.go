package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/fakeserver"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

func event(typ tenurev1.WatchEvent_Type, name string, token, index uint64) *tenurev1.WatchEvent {
	ev := &tenurev1.WatchEvent{Type: typ, Index: index}
	if name != "" {
		ev.Lease = protoLease(name, "h", token)
	}
	return ev
}

func sendAll(send func(*tenurev1.WatchEvent) error, evs ...*tenurev1.WatchEvent) error {
	for _, ev := range evs {
		if err := send(ev); err != nil {
			return err
		}
	}
	return nil
}

// describe renders an event compactly for comparisons.
func describe(ev client.WatchEvent) string {
	if ev.Lease.Name == "" {
		return ev.Type.String()
	}
	return fmt.Sprintf("%s %s/%d@%d", ev.Type, ev.Lease.Name, ev.Lease.Token, ev.Index)
}

func expectEvents(t *testing.T, ch <-chan client.WatchEvent, want ...string) {
	t.Helper()
	for _, w := range want {
		ev, ok := <-ch
		if !ok {
			t.Fatalf("watch closed, want %q", w)
		}
		if got := describe(ev); got != w {
			t.Fatalf("event = %q (err %v), want %q", got, ev.Err, w)
		}
	}
}

// drain waits for the watch to close after its context was cancelled.
func drain(ch <-chan client.WatchEvent) {
	for range ch {
	}
}

func TestWatchReconnects(t *testing.T) {
	breakFirst := make(chan struct{})
	var streams atomic.Int32
	fake := &fakeserver.Server{Watch: func(ctx context.Context, req *tenurev1.WatchRequest, send func(*tenurev1.WatchEvent) error) error {
		if req.GetPrefix() != "jobs/" {
			return fmt.Errorf("prefix %q", req.GetPrefix())
		}
		if streams.Add(1) == 1 {
			if err := sendAll(send,
				event(tenurev1.WatchEvent_TYPE_CURRENT, "jobs/a", 1, 0),
				event(tenurev1.WatchEvent_TYPE_SYNCED, "", 0, 0),
				event(tenurev1.WatchEvent_TYPE_GRANTED, "jobs/b", 2, 5)); err != nil {
				return err
			}
			select {
			case <-breakFirst:
				return unavailable() // as after node.ErrWatchLagged
			case <-ctx.Done():
				return nil
			}
		}
		if err := sendAll(send,
			event(tenurev1.WatchEvent_TYPE_CURRENT, "jobs/a", 1, 0),
			event(tenurev1.WatchEvent_TYPE_CURRENT, "jobs/b", 2, 0),
			event(tenurev1.WatchEvent_TYPE_SYNCED, "", 0, 0),
			event(tenurev1.WatchEvent_TYPE_RELEASED, "jobs/a", 1, 9)); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	}}
	// The dead endpoint first: the watch fails over like any call.
	c := mustClient(t, fakeserver.DeadAddr(t), fakeserver.Start(t, fake))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := c.Watch(ctx, "jobs/")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	expectEvents(t, ch, "current jobs/a/1@0", "synced", "granted jobs/b/2@5")
	close(breakFirst)
	expectEvents(t, ch, "reset", "current jobs/a/1@0", "current jobs/b/2@0", "synced", "released jobs/a/1@9")
	cancel()
	drain(ch)
}

func TestWatchErrors(t *testing.T) {
	fake := &fakeserver.Server{Watch: func(ctx context.Context, req *tenurev1.WatchRequest, send func(*tenurev1.WatchEvent) error) error {
		if req.GetPrefix() == "bad" {
			return wire.ToConnectError(fmt.Errorf("%w: prefix is too long", lease.ErrInvalid))
		}
		if err := send(event(tenurev1.WatchEvent_TYPE_SYNCED, "", 0, 0)); err != nil {
			return err
		}
		return connect.NewError(connect.CodeInternal, errors.New("boom"))
	}}
	c := mustClient(t, fakeserver.Start(t, fake))

	if _, err := c.Watch(t.Context(), "bad"); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("Watch(bad) error = %v, want ErrInvalid", err)
	}

	ch, err := c.Watch(t.Context(), "ok")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	expectEvents(t, ch, "synced")
	ev, ok := <-ch
	if !ok || ev.Type != client.EventError || connect.CodeOf(ev.Err) != connect.CodeInternal {
		t.Fatalf("event = %+v, %v; want an internal error", ev, ok)
	}
	if _, ok := <-ch; ok {
		t.Error("watch still open after its error event")
	}
}
