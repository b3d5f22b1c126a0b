package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tenure-io/tenure/client"
)

// State is where a Lease stands.
type State uint8

// The states of a Lease. Held and AtRisk are live; Lost and Released are
// final.
const (
	// Held: the last renewal succeeded (or the grant is fresh).
	Held State = iota + 1
	// AtRisk: the last renewal attempt failed or timed out. The lease is
	// still safe to act on until its deadline; renewals go on, and the
	// lease is Held again if one succeeds in time.
	AtRisk
	// Lost: no renewal was confirmed before the local deadline, or the
	// server reported the grant gone. The lease's context has ended.
	Lost
	// Released: Release (or Session.Close) ended the lease.
	Released
)

var stateNames = map[State]string{Held: "held", AtRisk: "at risk", Lost: "lost", Released: "released"}

func (s State) String() string {
	if n, ok := stateNames[s]; ok {
		return n
	}
	return "unknown"
}

func (s State) ended() bool { return s == Lost || s == Released }

// Lease is one lease held by a Session: its grant, the context that lasts
// as long as it may be acted on, and its renewal state. It is safe for
// concurrent use.
//
// The local deadline is the send time of the last successful grant or
// renewal plus TTL*(1-Drift) - Margin, on this machine's monotonic clock.
// The lease's context ends at the deadline at the latest, which is Margin
// (plus the drift allowance) before the server could expire the lease and
// grant it to someone else.
type Lease struct {
	s      *Session
	name   string
	holder string
	token  uint64
	ttl    time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	state    State
	sent     time.Time // send time of the last successful grant or renewal
	deadline time.Time
	err      error // the last renewal error while AtRisk; why it ended
	timer    *time.Timer
	changed  chan struct{}
	orphaned bool // the session stopped renewing

	forgotten bool // the session no longer renews it; guarded by s.mu
}

func newLease(s *Session, cl client.Lease, deadline time.Time) *Lease {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lease{
		s: s, name: cl.Name, holder: s.cfg.Holder, token: cl.Token, ttl: cl.TTL,
		ctx: ctx, cancel: cancel,
		state: Held, sent: cl.Sent, deadline: deadline, changed: make(chan struct{}),
	}
	if l.ttl == 0 {
		l.ttl = s.cfg.TTL
	}
	l.timer = time.AfterFunc(time.Until(deadline), l.expire)
	return l
}

// Name returns the lease's name.
func (l *Lease) Name() string { return l.name }

// Holder returns the holder the lease is granted to: the session's.
func (l *Lease) Holder() string { return l.holder }

// Token returns the fencing token of the grant. Pass it with every write
// the lease protects: storage that checks it refuses writes from older
// grants.
func (l *Lease) Token() uint64 { return l.token }

// TTL returns the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

// Ctx returns a context that ends when the lease ends: at the local
// deadline at the latest if renewals fail, at once if the server reports
// the grant gone, or on Release. context.Cause tells why (ErrLost with a
// *LostError, or ErrReleased).
func (l *Lease) Ctx() context.Context { return l.ctx }

// Done is Ctx().Done().
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// State returns the lease's state.
func (l *Lease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Deadline returns the local deadline: the moment the lease's context ends
// unless a renewal succeeds before.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// LastRenewal returns the send time of the last successful grant or
// renewal, the base of the deadline.
func (l *Lease) LastRenewal() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent
}

// Err returns nil while the lease is Held, the last renewal error while it
// is AtRisk, and why it ended once it is Lost (a *LostError) or Released
// (ErrReleased).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Changed returns a channel that is closed at the lease's next change of
// state or deadline. Read the new values with State and Deadline, and call
// Changed again for the change after that.
func (l *Lease) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed
}

func (l *Lease) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// endLocked moves the lease to a final state and ends its context.
func (l *Lease) endLocked(state State, cause error) {
	l.state = state
	l.err = cause
	l.timer.Stop()
	l.cancel(cause)
	l.notifyLocked()
}

// expire runs at the deadline: unless a renewal moved it, the lease is
// lost.
func (l *Lease) expire() {
	l.mu.Lock()
	if l.state.ended() {
		l.mu.Unlock()
		return
	}
	if now := time.Now(); now.Before(l.deadline) {
		l.timer.Reset(l.deadline.Sub(now))
		l.mu.Unlock()
		return
	}
	reason := fmt.Sprintf("no renewal confirmed within %s of the last successful one being sent", l.deadline.Sub(l.sent).Round(time.Millisecond))
	switch {
	case l.orphaned:
		reason += " (the session stopped renewing)"
	case l.err != nil:
		reason += fmt.Sprintf(" (last error: %v)", l.err)
	}
	l.endLocked(Lost, &LostError{Name: l.name, Token: l.token, Reason: reason})
	l.mu.Unlock()
	l.s.forget(l)
}

// renewed records a successful renewal whose request was sent at cl.Sent.
func (l *Lease) renewed(cl client.Lease) {
	l.mu.Lock()
	if l.state.ended() {
		l.mu.Unlock()
		return
	}
	now := time.Now()
	if !now.Before(l.deadline) {
		// The deadline passed while the renewal was under way: the
		// holder must already have stopped, so the lease stays lost
		// even though the server renewed it.
		l.mu.Unlock()
		l.expire()
		return
	}
	changed := l.state != Held
	// Each grant or renewal gives a lower bound on the server's expiry:
	// keep the latest.
	if d := l.s.cfg.deadline(cl); d.After(l.deadline) {
		l.sent, l.deadline = cl.Sent, d
		l.timer.Reset(d.Sub(now))
		changed = true
	}
	l.state, l.err = Held, nil
	if changed {
		l.notifyLocked()
	}
	l.mu.Unlock()
}

// atRisk records a failed renewal attempt.
func (l *Lease) atRisk(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.ended() {
		return
	}
	l.err = err
	if l.state == Held {
		l.state = AtRisk
		l.notifyLocked()
	}
}

// lose ends the lease because the server reported it gone.
func (l *Lease) lose(err error) {
	l.mu.Lock()
	if l.state.ended() {
		l.mu.Unlock()
		return
	}
	reason := "the server no longer has this grant"
	if re, ok := errors.AsType[*client.RevokedError](err); ok {
		reason = "revoked by an operator (" + re.Reason + ")"
	}
	l.endLocked(Lost, &LostError{Name: l.name, Token: l.token, Reason: reason, Err: err})
	l.mu.Unlock()
	l.s.forget(l)
}

// Release ends the lease: its context ends (cause ErrReleased), renewals
// stop, and the server frees the lease so the next holder (or waiter) gets
// it at once. The context ends before the request is sent, so the holder
// has stepped down before anyone else can be granted the lease.
//
// Releasing a lease the server no longer has (it expired, or was lost)
// returns nil. Other errors mean the server may still hold the lease for
// this holder until its TTL runs out; errors matching
// client.ErrIndeterminate mean the release may have applied.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	switch l.state {
	case Released:
		l.mu.Unlock()
		return nil
	case Held, AtRisk:
		l.endLocked(Released, ErrReleased)
	}
	l.mu.Unlock()
	l.s.forget(l)
	err := l.s.c.Release(ctx, l.name, l.token)
	if errors.Is(err, client.ErrStaleToken) {
		return nil
	}
	return err
}

// Resign is Release, named for elections: it gives up the leadership.
func (l *Lease) Resign(ctx context.Context) error { return l.Release(ctx) }

// endedErr returns why the lease ended, or nil while it is live. A lease
// whose deadline has passed ends here and now, even if its timer has not
// fired yet.
func (l *Lease) endedErr() error {
	l.mu.Lock()
	due := !l.state.ended() && !time.Now().Before(l.deadline)
	l.mu.Unlock()
	if due {
		l.expire()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state.ended() {
		return l.err
	}
	return nil
}

// Put writes value under key in the cluster's fenced key-value store with
// this lease's token, and returns the store revision of the write. Once
// the lease ended locally (its context ended, or its deadline passed), Put
// fails without a request with its Err. The
// server refuses the write (client.ErrStaleToken) unless the token is the
// current, unexpired grant and no newer token wrote key. Like
// client.Client.Put it is not retried once possibly delivered.
func (l *Lease) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	if err := l.endedErr(); err != nil {
		return 0, err
	}
	return l.s.c.Put(ctx, key, value, l.name, l.token)
}

// Delete removes key from the fenced store with this lease's token, under
// the rules of Put, and returns the store revision of the deletion.
func (l *Lease) Delete(ctx context.Context, key string) (uint64, error) {
	if err := l.endedErr(); err != nil {
		return 0, err
	}
	return l.s.c.Delete(ctx, key, l.name, l.token)
}
