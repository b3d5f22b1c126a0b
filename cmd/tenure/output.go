package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/tenure-io/tenure/client"
)

// printer writes results as text or as one JSON object per line.
type printer struct {
	w    io.Writer
	json bool
}

// print writes v as a JSON line, or text as a line.
func (p printer) print(v any, text string) {
	if p.json {
		b, err := json.Marshal(v)
		if err != nil {
			// Only our own structs are marshalled: a failure is a bug.
			panic(fmt.Sprintf("tenure: marshal %T: %v", v, err))
		}
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	fmt.Fprintln(p.w, text)
}

// fmtDuration rounds d to the millisecond for people: 4.98s, 10s, 250ms.
func fmtDuration(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// leaseJSON is a lease in -o json: token a number, durations Go strings.
type leaseJSON struct {
	Name      string `json:"name"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	TTL       string `json:"ttl"`
	Remaining string `json:"remaining"`
	// Limit is set for a slot of a semaphore.
	Limit int `json:"limit,omitempty"`
	// LockDelay is set for a grant with a lock-delay.
	LockDelay string `json:"lock_delay,omitempty"`
	// Shared is set for a shared (read) grant.
	Shared bool `json:"shared,omitempty"`
}

func toLeaseJSON(l client.Lease) *leaseJSON {
	j := &leaseJSON{Name: l.Name, Holder: l.Holder, Token: l.Token,
		TTL: fmtDuration(l.TTL), Remaining: fmtDuration(l.Remaining), Limit: l.Limit, Shared: l.Shared}
	if l.LockDelay > 0 {
		j.LockDelay = fmtDuration(l.LockDelay)
	}
	return j
}

func leaseText(l client.Lease) string {
	slot := ""
	if l.Limit > 1 {
		slot = fmt.Sprintf(" (a slot of %d)", l.Limit)
	}
	if l.Shared {
		slot = " (shared)"
	}
	delay := ""
	if l.LockDelay > 0 {
		delay = ", lock-delay " + fmtDuration(l.LockDelay)
	}
	return fmt.Sprintf("%s held by %s%s, token %d, ttl %s, %s remaining%s",
		l.Name, l.Holder, slot, l.Token, fmtDuration(l.TTL), fmtDuration(l.Remaining), delay)
}

func (p printer) lease(l client.Lease) { p.print(toLeaseJSON(l), leaseText(l)) }

// eventJSON is a watch event in -o json. The lease fields are inlined and
// absent for synced and reset.
type eventJSON struct {
	Type string `json:"type"`
	*leaseJSON
	Index uint64 `json:"index,omitempty"`
	// Reason is a revocation's reason.
	Reason string `json:"reason,omitempty"`
}

func (p printer) event(ev client.WatchEvent) {
	out := eventJSON{Type: ev.Type.String(), Index: ev.Index, Reason: ev.Reason}
	var text string
	switch ev.Type {
	case client.EventSynced:
		text = "synced (changes follow)"
	case client.EventReset:
		text = "reset (reconnected; events may have been missed, the current state follows)"
	default:
		l := ev.Lease
		out.leaseJSON = toLeaseJSON(l)
		text = fmt.Sprintf("%s %s holder=%s token=%d ttl=%s remaining=%s",
			ev.Type, l.Name, l.Holder, l.Token, fmtDuration(l.TTL), fmtDuration(l.Remaining))
		if ev.Index != 0 {
			text += fmt.Sprintf(" index=%d", ev.Index)
		}
		if ev.Reason != "" {
			text += fmt.Sprintf(" reason=%q", ev.Reason)
		}
	}
	p.print(out, text)
}
