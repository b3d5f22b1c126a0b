package main

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/tenure-io/tenure/client"
)

const handoffAbout = `Hands the grant of NAME with token T to a waiting candidate: CANDIDATE
(--to), or the first in line. The grant ends and, at the same cluster time,
the candidate is granted NAME with a new, larger token: no gap, no overlap,
no lock-delay. Stop acting under T before running it. If no such candidate
is waiting, nothing changes and it exits 6; a stale token exits 4. A running
'tenure elect' hands off its own leadership on SIGUSR1.`

func (a *app) handoff(ctx context.Context, args []string) error {
	c := a.newCommand("handoff", "handoff NAME --token T [--to CANDIDATE]", handoffAbout)
	to := c.fs.String("to", "", "the waiting holder to hand NAME to (`candidate`; default the first in line)")
	name, token, err := a.parseNameToken(c, args)
	if err != nil {
		return err
	}
	if !utf8.ValidString(*to) {
		return &usageError{msg: "--to is not valid UTF-8", usage: c.usage}
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		next, err := cl.Handoff(ctx, name, token, *to)
		if err != nil {
			return err
		}
		a.out().print(handoffJSON{Name: name, Token: token, HandedTo: next.Holder, NewToken: next.Token},
			fmt.Sprintf("handed %s (token %d) to %s, token %d", name, token, next.Holder, next.Token))
		return nil
	})
}

// handoffJSON is the result of handoff in -o json, and of a handoff by
// elect.
type handoffJSON struct {
	Name     string `json:"name"`
	Token    uint64 `json:"token"`
	HandedTo string `json:"handed_to"`
	NewToken uint64 `json:"new_token,omitempty"`
}
