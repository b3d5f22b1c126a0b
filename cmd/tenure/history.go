package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
)

// timeFlag is a point in time given as RFC 3339 (2026-12-04T03:00:00Z) or
// as a duration ago (1h: an hour before now).
type timeFlag struct {
	t   time.Time
	now func() time.Time
}

func (f *timeFlag) String() string {
	if f.t.IsZero() {
		return ""
	}
	return f.t.Format(time.RFC3339)
}

func (f *timeFlag) Set(s string) error {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		f.t = t
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither an RFC 3339 time (2026-12-04T03:00:00Z) nor a duration ago (1h)", s)
	}
	f.t = f.now().Add(-d)
	return nil
}

func (a *app) history(ctx context.Context, args []string) error {
	c := a.newCommand("history", "history NAME [--since T] [--at T] [--limit N]",
		"Prints the recent terms of NAME, newest first: who held it, with which\n"+
			"token, from when to when (the leader's wall clock), how each term ended\n"+
			"(released, expired, revoked; held while it lasts) and how many fenced\n"+
			"writes of the built-in store it made and had refused. The history is\n"+
			"replicated: it survives restarts and failovers, and keeps what tenured's\n"+
			"--history-terms and --history-age allow. T is an RFC 3339 time\n"+
			"(2026-12-04T03:00:00Z) or a duration ago (1h). With --at T, only the\n"+
			"terms held at T: who held NAME at 03:00, and with which token.")
	now := time.Now
	since := &timeFlag{now: now}
	at := &timeFlag{now: now}
	c.fs.Var(since, "since", "only terms held at or after `T` (RFC 3339, or a duration ago)")
	c.fs.Var(at, "at", "only terms held at `T` (RFC 3339, or a duration ago)")
	limit := c.fs.Int("limit", 0, "at most `N` terms, the newest (0: all kept)")
	pos, err := a.parse(c, args, []string{"NAME"}, 1)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return &usageError{msg: "--limit must not be negative", usage: c.usage}
	}
	name := pos[0]
	opts := client.HistoryOptions{Since: since.t}
	if at.t.IsZero() {
		opts.Limit = *limit // with --at, the limit applies after the filter
	} else if opts.Since.IsZero() || at.t.Before(opts.Since) {
		opts.Since = at.t
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		terms, err := cl.History(ctx, name, opts)
		if err != nil {
			return err
		}
		out := a.out()
		n := 0
		for _, t := range terms {
			if !at.t.IsZero() && !heldAt(t, at.t) {
				continue
			}
			if *limit > 0 && n >= *limit {
				break
			}
			n++
			out.print(toTermJSON(t), termText(t))
		}
		if n == 0 && !out.json {
			// An empty answer is an answer: say so, on stderr, so that
			// stdout stays a list of terms.
			what := "no term of " + name + " in the kept history"
			if !at.t.IsZero() {
				what = fmt.Sprintf("nobody held %s at %s, as far as the kept history goes", name, at.t.UTC().Format(time.RFC3339))
			}
			fmt.Fprintln(a.stderr, "tenure: "+what)
		}
		return nil
	})
}

// heldAt reports whether term t was held at the wall-clock time at, as
// far as its recorded times say (an unknown start or end counts as
// open).
func heldAt(t client.Term, at time.Time) bool {
	if !t.Start.IsZero() && at.Before(t.Start) {
		return false
	}
	if !t.Held() && !t.End.IsZero() && !at.Before(t.End) {
		return false
	}
	return true
}

// termJSON is a term of a lease's history in -o json: times RFC 3339
// (omitted when unknown), durations Go strings.
type termJSON struct {
	Name      string `json:"name"`
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	Principal string `json:"principal,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	Start     string `json:"start,omitempty"`
	End       string `json:"end,omitempty"`
	// Held is how long the term lasted (so far, while it is held: in
	// cluster time).
	Held string `json:"held"`
	// Ending is released, expired, revoked or handed_off, or held.
	Ending         string `json:"ending"`
	Reason         string `json:"reason,omitempty"`
	WritesAccepted uint64 `json:"writes_accepted"`
	WritesRefused  uint64 `json:"writes_refused"`
	ClusterStart   string `json:"cluster_start"`
	ClusterEnd     string `json:"cluster_end,omitempty"`
	Shared         bool   `json:"shared,omitempty"`
}

func ending(t client.Term) string {
	if t.Held() {
		return "held"
	}
	return string(t.Ending)
}

func toTermJSON(t client.Term) termJSON {
	j := termJSON{Name: t.Name, Holder: t.Holder, Token: t.Token, Principal: t.Principal, Limit: t.Limit,
		Ending: ending(t), Reason: t.Reason, WritesAccepted: t.WritesAccepted, WritesRefused: t.WritesRefused,
		ClusterStart: fmtDuration(t.ClusterStart), Shared: t.Shared}
	if !t.Start.IsZero() {
		j.Start = t.Start.Format(time.RFC3339Nano)
	}
	if !t.Held() {
		if !t.End.IsZero() {
			j.End = t.End.Format(time.RFC3339Nano)
		}
		j.ClusterEnd = fmtDuration(t.ClusterEnd)
		j.Held = fmtDuration(t.ClusterEnd - t.ClusterStart)
	}
	return j
}

func termText(t client.Term) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s token %d held by %s", t.Name, t.Token, t.Holder)
	if t.Shared {
		b.WriteString(" (shared)")
	}
	if t.Principal != "" {
		fmt.Fprintf(&b, " (principal %s)", t.Principal)
	}
	wall := func(w time.Time) string {
		if w.IsZero() {
			return "an unknown time"
		}
		return w.UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	fmt.Fprintf(&b, " from %s", wall(t.Start))
	if t.Held() {
		b.WriteString(", held now")
	} else {
		fmt.Fprintf(&b, " to %s (%s), %s", wall(t.End), fmtDuration(t.ClusterEnd-t.ClusterStart), t.Ending)
		if t.Reason != "" {
			fmt.Fprintf(&b, ": %s", t.Reason)
		}
	}
	fmt.Fprintf(&b, "; writes %d accepted, %d refused", t.WritesAccepted, t.WritesRefused)
	return b.String()
}
