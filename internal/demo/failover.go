package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/localcluster"
)

// runFailover runs the Failover scenario on the embedded cluster:
//
//	B  acquire (token t), write ledger/1 and ledger/2
//	   the leader node crashes (node.Abort, its API server drops)
//	B  renew through the client, which moves on to the live nodes: same t
//	B  write ledger/3 and ledger/4, read all four back, release
//	C  acquire: a token larger than t
//
// It crashes a node of cl, so it runs last.
func runFailover(ctx context.Context, tl *timeline, cfg *Config, cl *localcluster.Cluster) (Result, error) {
	ctx, cancel := context.WithTimeout(ctx, max(cfg.TTL, failoverMinTTL)+30*time.Second)
	defer cancel()
	res := Result{Scenario: Failover}
	fail := func(format string, args ...any) (Result, error) {
		res.Summary = fmt.Sprintf(format, args...)
		return res, nil
	}
	const leaseName = "demo/failover"

	old, err := cl.WaitLeader(ctx)
	if err != nil {
		return res, err
	}
	tl.record(Event{Actor: "cluster", Op: "start",
		Text: fmt.Sprintf("%d voters, %s leads; B's client knows all", len(cl.Running()), old.ID)})

	b, err := newClient(cl.Endpoints())
	if err != nil {
		return res, err
	}
	defer b.Close()

	// B works without a session renewing for it: its lease must outlive
	// the failover and B's steps after it, even on a loaded machine.
	ttl := max(cfg.TTL, failoverMinTTL)
	l, err := b.Acquire(ctx, leaseName, "B", ttl)
	if err != nil {
		tl.record(withErr(Event{Actor: "B", Op: "acquire", Text: "acquire " + leaseName}, err))
		return fail("B could not acquire the lease: %v", err)
	}
	token := l.Token
	tl.record(Event{Actor: "B", Op: "acquire", Text: fmt.Sprintf("acquire %s, ttl %s", leaseName, fmtDuration(ttl)),
		Token: token, Outcome: "granted", Tone: ToneGood})

	var written []string
	put := func(i int) bool {
		key, value := fmt.Sprintf("ledger/%d", i), fmt.Sprintf("B-%d", i)
		_, err := b.Put(ctx, key, []byte(value), leaseName, token)
		tl.record(withErr(Event{Actor: "B", Op: "put", Text: fmt.Sprintf("put %s = %q", key, value), Value: value, Token: token}, err))
		if err == nil {
			written = append(written, key)
		}
		return err == nil
	}
	for i := 1; i <= 2; i++ {
		if !put(i) {
			return fail("B's write of ledger/%d failed before the crash", i)
		}
	}

	crashed := time.Now()
	if err := cl.Crash(old); err != nil {
		return res, err
	}
	tl.record(Event{Actor: "cluster", Op: "crash", Text: fmt.Sprintf("%s, the leader, crashes", old.ID),
		Outcome: "crashed", Tone: ToneWait})
	tl.record(Event{Actor: "B", Op: "renew", Text: "renew " + leaseName + " via any live node",
		Token: token, Outcome: "retrying", Tone: ToneWait})
	type renewal struct {
		l   client.Lease
		err error
	}
	renewed := make(chan renewal, 1)
	go func() {
		l, err := renewThroughFailover(ctx, tl, b, leaseName, token)
		renewed <- renewal{l, err}
	}()
	nl, err := cl.WaitLeader(ctx)
	if err != nil {
		<-renewed
		return res, err
	}
	tl.record(Event{Actor: "cluster", Op: "elected",
		Text:    fmt.Sprintf("%s elected, %s after the crash", nl.ID, fmtDuration(time.Since(crashed).Round(time.Millisecond))),
		Outcome: "leader", Tone: ToneGood})
	r := <-renewed
	if r.err != nil {
		tl.record(withErr(Event{Actor: "B", Op: "renew", Text: "renew " + leaseName, Token: token}, r.err))
		return fail("B lost its lease in the failover: renewal failed: %v", r.err)
	}
	e := Event{Actor: "B", Op: "renew", Text: "renew " + leaseName, Token: r.l.Token,
		Outcome: fmt.Sprintf("ok, same token, %s left", fmtDuration(r.l.Remaining)), Tone: ToneGood}
	if r.l.Token != token {
		e.Outcome, e.Tone = fmt.Sprintf("token changed from %d", token), ToneBad
	}
	tl.record(e)
	if r.l.Token != token {
		return fail("B's renewal returned token %d; want its token %d", r.l.Token, token)
	}

	for i := 3; i <= 4; i++ {
		if !put(i) {
			return fail("B's write of ledger/%d after the failover failed", i)
		}
	}

	// Every acknowledged write is still there, written with B's token.
	var missing []string
	for i, key := range written {
		kv, err := b.KVGet(ctx, key)
		want := fmt.Sprintf("B-%d", i+1)
		switch {
		case errors.Is(err, client.ErrNotFound):
			missing = append(missing, key+" is gone")
		case err != nil:
			return fail("reading %s back: %v", key, err)
		case string(kv.Value) != want || kv.Token != token:
			missing = append(missing, fmt.Sprintf("%s = %q (token %d)", key, kv.Value, kv.Token))
		}
	}
	check := Event{Actor: "check", Op: "read", Text: fmt.Sprintf("read ledger/1..%d back", len(written)), Token: token,
		Outcome: fmt.Sprintf("all %d writes present", len(written)), Tone: ToneGood}
	if len(missing) > 0 {
		check.Outcome, check.Tone = "LOST: "+strings.Join(missing, ", "), ToneBad
	}
	tl.record(check)
	if len(missing) > 0 {
		return fail("writes acknowledged before or after the crash were lost: %s", strings.Join(missing, ", "))
	}

	err = b.Release(ctx, leaseName, token)
	tl.record(withErr(Event{Actor: "B", Op: "release", Text: "release " + leaseName, Token: token}, err))
	if err != nil {
		return fail("B could not release its lease: %v", err)
	}

	c, err := newClient(cl.Endpoints())
	if err != nil {
		return res, err
	}
	defer c.Close()
	lc, err := c.Acquire(ctx, leaseName, "C", ttl)
	if err != nil {
		tl.record(withErr(Event{Actor: "C", Op: "acquire", Text: "acquire " + leaseName}, err))
		return fail("C could not acquire the lease after B released it: %v", err)
	}
	e = Event{Actor: "C", Op: "acquire", Text: fmt.Sprintf("acquire %s, ttl %s", leaseName, fmtDuration(ttl)),
		Token: lc.Token, Outcome: "granted, larger token", Tone: ToneGood}
	if lc.Token <= token {
		e.Outcome, e.Tone = fmt.Sprintf("granted, token NOT above %d", token), ToneBad
	}
	tl.record(e)
	if lc.Token <= token {
		return fail("C's grant got token %d, not larger than B's %d", lc.Token, token)
	}
	if err := c.Release(ctx, leaseName, lc.Token); err != nil {
		return fail("C could not release its lease: %v", err)
	}

	res.Passed = true
	res.Summary = fmt.Sprintf("B kept token %d through the crash of %s (%s took over), none of its %d acknowledged writes was lost, and the next grant got the larger token %d.",
		token, old.ID, nl.ID, len(written), lc.Token)
	return res, nil
}

// failoverMinTTL is the shortest TTL of the failover scenario's lease.
const failoverMinTTL = 2 * time.Second

// renewThroughFailover renews the lease as a holder does while the
// cluster fails over: the client moves on to the live nodes by itself;
// an attempt that still fails for want of a cluster (not because the
// lease is gone) is shown and tried again, a few times.
func renewThroughFailover(ctx context.Context, tl *timeline, c *client.Client, leaseName string, token uint64) (client.Lease, error) {
	const attempts = 10
	for i := 1; ; i++ {
		l, err := c.RenewOne(ctx, leaseName, token)
		if err == nil || errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrNotFound) ||
			errors.Is(err, client.ErrInvalid) || ctx.Err() != nil || i == attempts {
			return l, err
		}
		// The innermost cause is enough here (e.g. "broken pipe": the
		// request went out on a connection to the crashed node).
		msg := err.Error()
		if i := strings.LastIndex(msg, ": "); i >= 0 {
			msg = msg[i+2:]
		}
		tl.record(Event{Actor: "B", Op: "renew-retry", Text: "renew attempt failed; B tries again", Token: token,
			Outcome: "failed: " + msg, Err: errCode(err), Tone: ToneWait})
		select {
		case <-ctx.Done():
			return l, err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
