package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
)

// tokenFlag is a fencing token flag: a positive integer, required where
// used.
type tokenFlag struct {
	v   uint64
	set bool
}

func (t *tokenFlag) String() string {
	if t == nil || !t.set {
		return ""
	}
	return strconv.FormatUint(t.v, 10)
}

func (t *tokenFlag) Set(s string) error {
	v, err := strconv.ParseUint(s, 10, 64)
	if ne, ok := errors.AsType[*strconv.NumError](err); ok && ne.Err == strconv.ErrRange {
		return fmt.Errorf("is too large: tokens go up to %d", uint64(math.MaxUint64))
	}
	if err != nil || v == 0 {
		return errors.New("must be a positive integer")
	}
	t.v, t.set = v, true
	return nil
}

// require returns a usage error if the token was not given.
func (t *tokenFlag) require(c *command) error {
	if !t.set {
		return &usageError{msg: "--token is required", usage: c.usage}
	}
	return nil
}

// maxTTL is the longest TTL any server accepts (DESIGN.md section 3).
const maxTTL = 24 * time.Hour

// ttlRange says which TTLs a server accepts, for error messages.
const ttlRange = "a duration such as 10s or 1m30s, from the server's minimum TTL (2s by default; see 'tenure status') up to 24h"

// ttlFlag is a --ttl: a positive duration of at most maxTTL. Its parse
// errors name the allowed range.
type ttlFlag struct{ d time.Duration }

func (f *ttlFlag) String() string {
	if f == nil || f.d == 0 {
		return ""
	}
	return f.d.String()
}

func (f *ttlFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxTTL {
		return errors.New("must be " + ttlRange)
	}
	f.d = d
	return nil
}

// grantFlags are the --holder, --ttl, --limit and --lock-delay of acquire
// and run.
type grantFlags struct {
	holder    string
	ttl       time.Duration
	ttlf      ttlFlag
	limit     int
	lockDelay time.Duration
}

// registerLimit adds --limit and --lock-delay.
func (f *grantFlags) registerLimit(c *command) {
	c.fs.IntVar(&f.limit, "limit", 1, "semaphore: up to `N` holders of the name at once, each slot with its own token")
	c.fs.DurationVar(&f.lockDelay, "lock-delay", 0, "if the grant expires or is revoked (not released), grant the name to nobody for this `duration` more (at most 1m)")
}

func (f *grantFlags) register(c *command) {
	c.fs.StringVar(&f.holder, "holder", "", "holder `name` (default: HOSTNAME-PID)")
	f.ttlf.d = 10 * time.Second
	c.fs.Var(&f.ttlf, "ttl", "lease time to live, a `duration` up to 24h")
}

// check fills in the default holder.
func (f *grantFlags) check(c *command) error {
	f.ttl = f.ttlf.d
	if f.limit < 1 {
		return &usageError{msg: fmt.Sprintf("--limit must be at least 1, got %d", f.limit), usage: c.usage}
	}
	if f.lockDelay < 0 {
		return &usageError{msg: fmt.Sprintf("--lock-delay must not be negative, got %s", f.lockDelay), usage: c.usage}
	}
	if !flagSet(c.fs, "holder") {
		f.holder = defaultHolder()
	} else if strings.TrimSpace(f.holder) == "" {
		return &usageError{msg: fmt.Sprintf("--holder %q is empty: give a name, or leave --holder out for the default (%s)", f.holder, defaultHolder()), usage: c.usage}
	}
	return nil
}

func (a *app) acquire(ctx context.Context, args []string) error {
	c := a.newCommand("acquire", "acquire NAME [--holder H] [--ttl 10s] [--limit N | --shared] [--lock-delay D] [--wait [--timeout 30s]]",
		"Acquires the lease NAME for a holder and prints the grant with its fencing token.\n"+
			"Acquiring again as the same holder renews it (same token). With --wait the\n"+
			"request queues on the server until the lease is free or --timeout passes.\n"+
			"With --limit N, NAME is a semaphore: up to N holders at once, each slot with\n"+
			"its own token; every holder must use the same N while any slot is held.\n"+
			"With --shared the grant is shared (a read lock): shared grants coexist, each\n"+
			"with its own token, and exclude an exclusive grant (one without --shared).\n"+
			"Waiters are served in order: a shared request queued behind a waiting\n"+
			"exclusive one waits for it. Shared tokens may not write the fenced store.\n"+
			"With --lock-delay D, if the grant expires or is revoked instead of being\n"+
			"released, nobody is granted NAME until D has passed (at most 1m): a\n"+
			"mitigation for storage that cannot check tokens (see docs/fencing.md).\n"+
			"The default holder is the host name and the process ID, e.g. web-1-4242.")
	var g grantFlags
	g.register(c)
	g.registerLimit(c)
	shared := c.fs.Bool("shared", false, "acquire a shared (read) grant: shared grants of NAME coexist, an exclusive one excludes them")
	wait := c.fs.Bool("wait", false, "wait until the lease is granted")
	timeout := c.fs.Duration("timeout", 30*time.Second, "with --wait: how long to wait")
	pos, err := a.parse(c, args, []string{"NAME"}, 1)
	if err != nil {
		return err
	}
	if err := g.check(c); err != nil {
		return err
	}
	timeoutSet := false
	c.fs.Visit(func(f *flag.Flag) {
		if f.Name == "timeout" {
			timeoutSet = true
		}
	})
	if timeoutSet && !*wait {
		return &usageError{msg: "--timeout needs --wait", usage: c.usage}
	}
	if *shared && g.limit > 1 {
		return &usageError{msg: fmt.Sprintf("--shared and --limit %d: a semaphore cannot be acquired shared", g.limit), usage: c.usage}
	}
	if *wait && *timeout <= 0 {
		return &usageError{msg: fmt.Sprintf("--timeout must be positive, got %s", *timeout), usage: c.usage}
	}
	var opts []client.AcquireOption
	extra := time.Duration(0)
	if *wait {
		opts = append(opts, client.Wait(*timeout))
		extra = *timeout
	}
	if g.limit > 1 {
		opts = append(opts, client.Limit(g.limit))
	}
	if g.lockDelay > 0 {
		opts = append(opts, client.LockDelay(g.lockDelay))
	}
	if *shared {
		opts = append(opts, client.Shared())
	}
	return a.call(ctx, extra, func(ctx context.Context, cl *client.Client) error {
		l, err := cl.Acquire(ctx, pos[0], g.holder, g.ttl, opts...)
		if he, ok := errors.AsType[*client.HeldError](err); ok && *wait {
			return &waitedError{waited: *timeout, held: he}
		}
		if err != nil {
			return err
		}
		a.out().lease(l)
		return nil
	})
}

func (a *app) renew(ctx context.Context, args []string) error {
	c := a.newCommand("renew", "renew NAME --token T [--ttl D]",
		"Renews the grant of NAME with token T by its TTL and prints it. With --ttl the\n"+
			"grant gets that TTL from now on (within the server's bounds), same token.")
	var ttl ttlFlag
	c.fs.Var(&ttl, "ttl", "a new TTL for the grant, a `duration` up to 24h (default: keep its TTL)")
	name, token, err := a.parseNameToken(c, args)
	if err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		res, err := cl.Renew(ctx, client.Ref{Name: name, Token: token, TTL: ttl.d})
		if err != nil {
			return err
		}
		l, err := res[0].Lease, res[0].Err
		if err != nil {
			return err
		}
		a.out().lease(l)
		return nil
	})
}

func (a *app) release(ctx context.Context, args []string) error {
	c := a.newCommand("release", "release NAME --token T",
		"Releases the grant of NAME with token T, so the lease is free at once.")
	name, token, err := a.parseNameToken(c, args)
	if err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		if err := cl.Release(ctx, name, token); err != nil {
			if errors.Is(err, client.ErrStaleToken) {
				return &releasedError{name: name, token: token, err: err}
			}
			return err
		}
		a.out().print(struct {
			Name     string `json:"name"`
			Token    uint64 `json:"token"`
			Released bool   `json:"released"`
		}{name, token, true}, fmt.Sprintf("released %s (token %d)", name, token))
		return nil
	})
}

func (a *app) revoke(ctx context.Context, args []string) error {
	c := a.newCommand("revoke", "revoke NAME [--token T] --reason TEXT",
		"Ends the grant of NAME now, as an operator (needs the admin role), and prints\n"+
			"what it revoked. Without --token it revokes every live grant of NAME: the\n"+
			"holder of a lease, or every slot of a semaphore; with --token only that\n"+
			"grant. The reason (required, up to 256 bytes) is recorded: the holder learns\n"+
			"it at its next renewal, which fails (tenure run and elect step down), and\n"+
			"its writes with the old token are refused. The next grant of NAME gets a\n"+
			"larger token, as always; a grant with a lock-delay keeps NAME from anyone\n"+
			"for that long. A NAME with no such live grant is not found (exit 6) and\n"+
			"nothing changes.")
	var token tokenFlag
	c.fs.Var(&token, "token", "revoke only the grant with this fencing `token`")
	reason := c.fs.String("reason", "", "why, in `text` the holder gets with its next renewal (required)")
	pos, err := a.parse(c, args, []string{"NAME"}, 1)
	if err != nil {
		return err
	}
	if strings.TrimSpace(*reason) == "" {
		return &usageError{msg: "--reason is required: say why the grant is revoked", usage: c.usage}
	}
	name := pos[0]
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		ls, err := cl.Revoke(ctx, name, token.v, *reason)
		if errors.Is(err, client.ErrNotFound) {
			return &notHeldError{name: name, err: err}
		}
		if err != nil {
			return err
		}
		out := a.out()
		for _, l := range ls {
			out.print(struct {
				Name    string `json:"name"`
				Holder  string `json:"holder"`
				Token   uint64 `json:"token"`
				Revoked bool   `json:"revoked"`
				Reason  string `json:"reason"`
			}{l.Name, l.Holder, l.Token, true, *reason},
				fmt.Sprintf("revoked %s (token %d, held by %s): %s", l.Name, l.Token, l.Holder, *reason))
		}
		return nil
	})
}

func (a *app) get(ctx context.Context, args []string) error {
	c := a.newCommand("get", "get NAME",
		"Prints the live grant of NAME: one line, or one per held slot of a semaphore.\n"+
			"A lease that is not held is not found (exit 6).")
	pos, err := a.parse(c, args, []string{"NAME"}, 1)
	if err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		ls, err := cl.Slots(ctx, pos[0])
		if errors.Is(err, client.ErrNotFound) {
			return &notFoundError{what: fmt.Sprintf("lease %q", pos[0]), err: err}
		}
		if err != nil {
			return err
		}
		out := a.out()
		for _, l := range ls {
			out.lease(l)
		}
		return nil
	})
}

func (a *app) list(ctx context.Context, args []string) error {
	c := a.newCommand("list", "list [PREFIX]",
		"Prints the live leases whose names start with PREFIX (all without one),\n"+
			"one per line, sorted by name.")
	prefix, err := a.parsePrefix(c, args)
	if err != nil {
		return err
	}
	return a.call(ctx, 0, func(ctx context.Context, cl *client.Client) error {
		ls, err := cl.List(ctx, prefix)
		if err != nil {
			return err
		}
		out := a.out()
		for _, l := range ls {
			out.lease(l)
		}
		return nil
	})
}

// parseNameToken parses the NAME --token T of renew and release.
func (a *app) parseNameToken(c *command, args []string) (string, uint64, error) {
	var token tokenFlag
	c.fs.Var(&token, "token", "fencing `token` of the grant")
	pos, err := a.parse(c, args, []string{"NAME"}, 1)
	if err != nil {
		return "", 0, err
	}
	if err := token.require(c); err != nil {
		return "", 0, err
	}
	return pos[0], token.v, nil
}
