//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
)

const runSynopsis = "run NAME [--holder H] [--ttl 10s] [--limit N | --shared] [--lock-delay D] [--kill-after D] [--verbose] -- CMD [ARGS...]"

const runAbout = `Waits for the lease NAME, then runs CMD with these in its environment:

  TENURE_LEASE      the lease name
  TENURE_TOKEN      the fencing token: pass it with every write the lease protects
  TENURE_HOLDER     the holder
  TENURE_ENDPOINTS  the cluster's API addresses
  TENURE_CLUSTER_ID the cluster's ID, so tenure commands CMD runs talk to
                    the same cluster
  TENURE_CACERT, TENURE_CERT, TENURE_KEY   from --cacert, --cert, --key, if set
  (TENURE_AUTH_TOKEN, the bearer token, is passed on as it was)

and renews the lease (every TTL/3) while CMD runs. With --limit N, NAME is
a semaphore and up to N commands run at once, each holding one slot with
its own token (every holder of NAME must use the same N). With --shared, CMD
holds NAME shared (a read lock): shared holders run at once, each with its
own token, while an exclusive holder (tenure run without --shared) runs
alone; waiters go in order. With --lock-delay D,
if the lease is lost without a release (tenure run killed, cut off, or the
grant revoked), nobody is granted NAME until D has passed (at most 1m).

If renewals fail, the lease is at risk: CMD's process group gets SIGTERM
--kill-after before the local deadline and SIGKILL at the deadline. The
deadline (the send time of the last successful renewal + TTL*0.99 -
max(TTL/10, 100ms)) comes before the cluster can grant the lease to anyone
else. tenure run then says why on stderr and exits 4.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are passed on to CMD's
process group. When CMD exits, processes it left in its group are killed,
the lease is released, and tenure run exits with CMD's code (128+N if
signal N ended it).

Exit codes: CMD's own; 4 the lease was lost or at risk and CMD was stopped;
1 the cluster was unreachable before CMD started, CMD could not be started,
or tenure run was interrupted while waiting; 2 bad usage.`

// signalGrace is how long tenure run waits, once main's context ended, for
// the signal that ended it.
const signalGrace = 2 * time.Second

// runSignals are passed on to the command's process group.
var runSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// runner is one `tenure run`.
type runner struct {
	a         *app
	name      string
	argv      []string
	cfg       election.Config
	limit     int
	shared    bool
	killAfter time.Duration
	verbose   bool
}

// runExit ends tenure run with the command's exit code and no message.
type runExit struct{ code int }

func (e *runExit) Error() string { return "" }
func (e *runExit) ExitCode() int { return e.code }

// leaseStopped says the command was stopped because of the lease.
type leaseStopped struct{ msg string }

func (e *leaseStopped) Error() string { return e.msg }
func (e *leaseStopped) ExitCode() int { return exitFenced }

func (a *app) runCommand(ctx context.Context, args []string) error {
	c := a.newCommand("run", runSynopsis, runAbout)
	var g grantFlags
	g.register(c)
	g.registerLimit(c)
	killAfter := c.fs.Duration("kill-after", 0, "when the lease is at risk: time between SIGTERM and SIGKILL, which comes at the deadline (default TTL/5, at most 10s)")
	verbose := c.fs.Bool("verbose", false, "log the grant, every renewal and every change of the lease's state to stderr")
	shared := c.fs.Bool("shared", false, "hold NAME shared (a read lock): shared holders run at once, an exclusive one alone")
	flagArgs, argv := args, []string(nil)
	dash := slices.Index(args, "--")
	if dash >= 0 {
		flagArgs, argv = args[:dash], args[dash+1:]
	}
	maxPos := 1
	if dash < 0 {
		maxPos = len(args) // a command without --: say that -- is missing
	}
	pos, err := a.parse(c, flagArgs, []string{"NAME"}, maxPos)
	if err != nil {
		return err
	}
	switch {
	case dash < 0:
		return &usageError{msg: "missing -- CMD [ARGS...]", usage: c.usage}
	case len(argv) == 0:
		return &usageError{msg: "missing CMD after --", usage: c.usage}
	}
	if err := g.check(c); err != nil {
		return err
	}
	if *shared && g.limit > 1 {
		return &usageError{msg: fmt.Sprintf("--shared and --limit %d: a semaphore cannot be held shared", g.limit), usage: c.usage}
	}
	cfg := election.Config{Holder: g.holder, TTL: g.ttl, LockDelay: g.lockDelay}
	if err := cfg.Validate(); err != nil {
		return &usageError{msg: err.Error(), usage: c.usage}
	}
	cfg = cfg.WithDefaults()
	// SIGTERM must not come before a renewal that is on time had the
	// chance to move the deadline.
	maxKill := cfg.Lifetime() - cfg.RenewInterval - cfg.RenewTimeout
	ka := *killAfter
	if ka == 0 {
		ka = min(g.ttl/5, 10*time.Second, maxKill)
	}
	if ka <= 0 || ka > maxKill {
		return &usageError{msg: fmt.Sprintf("--kill-after %s does not fit --ttl %s: it must be positive and at most %s, "+
			"so that SIGTERM comes only when renewals are failing", ka, g.ttl, maxKill.Round(time.Millisecond)), usage: c.usage}
	}
	r := &runner{a: a, name: pos[0], argv: argv, cfg: cfg, limit: g.limit, shared: *shared, killAfter: ka, verbose: *verbose}
	return r.run(ctx)
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.a.stderr, "tenure: "+format+"\n", args...)
}

func (r *runner) run(ctx context.Context) error {
	cl, err := r.a.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := election.New(cl, r.cfg)
	if err != nil {
		return &usageError{msg: err.Error()}
	}
	l, err := r.acquire(ctx, s)
	if err != nil {
		s.Orphan()
		return err
	}
	if r.verbose {
		r.logf("acquired %s: token %d, holder %s, sent %s, deadline in %s", r.name, l.Token(), l.Holder(),
			l.LastRenewal().UTC().Format(time.RFC3339Nano), fmtDuration(time.Until(l.Deadline())))
	}
	code, stopErr := r.supervise(ctx, cl, l)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.a.g.requestTimeout)
	defer cancel()
	if err := s.Close(rctx); err != nil {
		r.logf("release %s: %v (it expires within its TTL)", r.name, err)
	}
	if stopErr != nil {
		return stopErr
	}
	if code != 0 {
		return &runExit{code: code}
	}
	return nil
}

// acquire tries once, so that an unreachable cluster or a bad name fails
// fast, then waits in the server's queue.
func (r *runner) acquire(ctx context.Context, s *election.Session) (*election.Lease, error) {
	tctx, cancel := context.WithTimeout(ctx, r.a.g.requestTimeout)
	try, wait := s.TryAcquireSlot, s.AcquireSlot
	if r.shared {
		try = func(ctx context.Context, name string, _ int) (*election.Lease, error) {
			return s.TryAcquireShared(ctx, name)
		}
		wait = func(ctx context.Context, name string, _ int) (*election.Lease, error) {
			return s.AcquireShared(ctx, name)
		}
	}
	l, err := try(tctx, r.name, r.limit)
	cancel()
	if err == nil {
		return l, nil
	}
	he, ok := errors.AsType[*client.HeldError](err)
	if !ok {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while acquiring %s", r.name)
		}
		return nil, err
	}
	r.logf("%s: %s; waiting for it", r.name, heldText(he))
	l, err = wait(ctx, r.name, r.limit)
	if err != nil && ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted while waiting for %s", r.name)
	}
	return l, err
}

// supervise runs the command while the lease is held and returns its exit
// code, or an error if it was stopped because of the lease.
func (r *runner) supervise(ctx context.Context, cl *client.Client, l *election.Lease) (int, error) {
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Stdin = os.Stdin
	cmd.Stdout = r.a.stdout
	cmd.Stderr = r.a.stderr
	cmd.Env = append(os.Environ(),
		"TENURE_LEASE="+r.name,
		"TENURE_TOKEN="+strconv.FormatUint(l.Token(), 10),
		"TENURE_HOLDER="+l.Holder(),
		"TENURE_ENDPOINTS="+strings.Join(cl.Endpoints(), ","))
	if id := cl.ClusterID(); id != "" {
		cmd.Env = append(cmd.Env, "TENURE_CLUSTER_ID="+id)
	}
	cmd.Env = append(cmd.Env, r.a.g.tls.childEnv()...)
	// When the output is not a file (tests), do not wait for copies of it
	// that processes left behind keep open.
	cmd.WaitDelay = time.Second
	// Its own process group, so that signals reach everything it starts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setDeathSignal(cmd.SysProcAttr)

	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, runSignals...)
	defer signal.Stop(sigs)

	started := make(chan error, 1)
	exited := make(chan struct{})
	go func() {
		// The death signal is tied to the thread that started the child:
		// keep this goroutine on its thread until the child is reaped.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return 0, fmt.Errorf("start %s: %w", r.argv[0], err)
	}
	pgid := cmd.Process.Pid
	group := func(sig syscall.Signal) { syscall.Kill(-pgid, sig) }
	if r.verbose {
		r.logf("started %s (pid %d)", r.argv[0], pgid)
	}

	var (
		termSent, killSent bool
		risk               error // why SIGTERM was sent
		ctxDone            = ctx.Done()
		lastSent           = l.LastRenewal()
		lastState          = l.State()
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
supervise:
	for {
		changed := l.Changed()
		st, deadline := l.State(), l.Deadline()
		if r.verbose {
			r.logChange(l, st, lastState, lastSent)
			lastState, lastSent = st, l.LastRenewal()
		}
		var next time.Time
		switch {
		case st == election.Lost:
			if !killSent {
				group(syscall.SIGKILL)
				killSent = true
			}
		case !termSent:
			next = deadline.Add(-r.killAfter)
		case !killSent:
			next = deadline
		}
		var due <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			due = timer.C
		}
		select {
		case <-changed:
		case <-due:
			now, deadline := time.Now(), l.Deadline()
			if !termSent && !now.Before(deadline.Add(-r.killAfter)) {
				termSent = true
				risk = fmt.Errorf("no renewal confirmed for %s (%v)", fmtDuration(now.Sub(l.LastRenewal())), l.Err())
				group(syscall.SIGTERM)
				r.logf("lease %s at risk: %v; sent SIGTERM to the command, SIGKILL at the deadline in %s",
					r.name, risk, fmtDuration(deadline.Sub(now)))
			}
			if termSent && !killSent && !now.Before(deadline) {
				group(syscall.SIGKILL)
				killSent = true
			}
		case <-exited:
			break supervise
		case sig := <-sigs:
			group(sig.(syscall.Signal))
		case <-ctxDone:
			// SIGINT or SIGTERM (main's context): pass on the signal
			// itself, which os/signal delivers to sigs too, though not
			// always before main's context ends: on a loaded machine it
			// came more than 50ms later, and the command got SIGTERM
			// instead of its SIGINT. A context that ended without a
			// signal sends SIGTERM after the wait.
			ctxDone = nil
			select {
			case sig := <-sigs:
				group(sig.(syscall.Signal))
			case <-time.After(signalGrace):
				group(syscall.SIGTERM)
			}
		}
	}
	// Nothing the command started may go on without the lease.
	group(syscall.SIGKILL)

	if termSent && l.Ctx().Err() == nil {
		// Stopped because of the risk: see whether the lease is lost,
		// which the deadline settles.
		for st := l.State(); st == election.AtRisk; st = l.State() {
			changed := l.Changed()
			if l.State() != election.AtRisk {
				break
			}
			<-changed
		}
	}
	if lost, ok := errors.AsType[*election.LostError](l.Err()); ok {
		msg := fmt.Sprintf("lease %s lost: %s", r.name, lost.Reason)
		if lost.Err != nil {
			msg += ": " + lost.Err.Error()
		}
		return 0, &leaseStopped{msg: msg + "; the command was stopped"}
	}
	if termSent {
		return 0, &leaseStopped{msg: fmt.Sprintf("lease %s was at risk: %v; the command was stopped", r.name, risk)}
	}
	return exitStatus(cmd.ProcessState), nil
}

// logChange logs a renewal or a change of state, for --verbose.
func (r *runner) logChange(l *election.Lease, st, last election.State, lastSent time.Time) {
	if sent := l.LastRenewal(); !sent.Equal(lastSent) {
		r.logf("renewed %s: sent %s, deadline in %s", r.name, sent.UTC().Format(time.RFC3339Nano), fmtDuration(time.Until(l.Deadline())))
	}
	switch {
	case st == last:
	case st == election.AtRisk:
		r.logf("lease %s at risk: %v", r.name, l.Err())
	case st == election.Held:
		r.logf("lease %s held again", r.name)
	}
}

// exitStatus is the shell's view of how a process ended: its exit code,
// or 128+N if signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}
