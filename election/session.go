package election

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tenure-io/tenure/client"
)

// Client is what package election needs of a *client.Client. Tests supply
// fakes.
type Client interface {
	Acquire(ctx context.Context, name, holder string, ttl time.Duration, opts ...client.AcquireOption) (client.Lease, error)
	Renew(ctx context.Context, refs ...client.Ref) ([]client.RenewResult, error)
	Release(ctx context.Context, name string, token uint64) error
	Watch(ctx context.Context, prefix string) (<-chan client.WatchEvent, error)
	Put(ctx context.Context, key string, value []byte, leaseName string, token uint64) (uint64, error)
	Delete(ctx context.Context, key, leaseName string, token uint64) (uint64, error)
}

var _ Client = (*client.Client)(nil)

// acquireWait is how long one blocking acquire queues on the server
// before it asks again (and goes to the back of the queue).
const acquireWait = 30 * time.Second

// Session is one holder on one client: it acquires leases for that holder
// and renews all of them together, one request for all, every
// RenewInterval. It is safe for concurrent use.
//
// Close releases the session's leases and stops renewing; Orphan only
// stops renewing, so the leases run out at their deadlines (and on the
// server at their TTLs).
type Session struct {
	c   Client
	cfg Config

	// ctx ends when the session is closed or orphaned.
	ctx      context.Context
	stop     context.CancelFunc
	wake     chan struct{}
	loopDone chan struct{}

	mu      sync.Mutex
	leases  map[string]*Lease
	pending map[string]bool // names being acquired
	// used is the highest token of every grant the session handed out,
	// by name: a new term must start with a larger one. lost holds the
	// token of a name's last term if it was lost (the server may still
	// hold it).
	used    map[string]uint64
	lost    map[string]uint64
	closed  bool
	retryAt time.Time // after a failed renewal: when to try again
	// handoffs are the handoffs under way that waiters of a higher
	// priority asked for; stopping waits for them (each is bounded by
	// RenewTimeout), so that a process that ends right after a term was
	// handed off has sent the handoff.
	handoffs sync.WaitGroup
}

// New starts a session for c. It does not contact the server.
func New(c Client, cfg Config) (*Session, error) {
	if c == nil {
		return nil, errors.New("election: a client is required")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &Session{
		c:        c,
		cfg:      cfg,
		ctx:      ctx,
		stop:     stop,
		wake:     make(chan struct{}, 1),
		loopDone: make(chan struct{}),
		leases:   make(map[string]*Lease),
		pending:  make(map[string]bool),
		used:     make(map[string]uint64),
		lost:     make(map[string]uint64),
	}
	go s.loop()
	return s, nil
}

// Holder returns the session's holder name.
func (s *Session) Holder() string { return s.cfg.Holder }

// Config returns the session's configuration with the defaults filled in.
func (s *Session) Config() Config { return s.cfg }

// Acquire blocks until the lease name is granted to the session's holder
// or ctx ends. It queues on the server (first come, first served), so the
// grant follows the previous holder's release or expiry without polling.
//
// Before it returns, Acquire confirms the grant with a renewal and bases
// the local deadline on that renewal's send time, so however long it
// waited, the lease it returns has close to its full TTL ahead of it.
func (s *Session) Acquire(ctx context.Context, name string) (*Lease, error) {
	return s.acquire(ctx, name, true, 0)
}

// AcquireSlot is Acquire for one slot of the semaphore name: up to limit
// holders at once, each slot with its own token, which fences writes
// while that slot is held. Every holder of name must use the same limit
// while any slot is held (another limit fails with client.ErrInvalid).
// The Lease is one slot; it renews, steps down and releases like any
// other.
func (s *Session) AcquireSlot(ctx context.Context, name string, limit int) (*Lease, error) {
	return s.acquire(ctx, name, true, limit)
}

// TryAcquire asks for the lease name once. If another holder has it, the
// error matches client.ErrLeaseHeld and is a *client.HeldError naming the
// holder, its token and remaining time.
func (s *Session) TryAcquire(ctx context.Context, name string) (*Lease, error) {
	return s.acquire(ctx, name, false, 0)
}

// TryAcquireSlot is TryAcquire for one slot of the semaphore name (see
// AcquireSlot). If every slot is held, the *client.HeldError has Limit
// set and names the slot that expires first.
func (s *Session) TryAcquireSlot(ctx context.Context, name string, limit int) (*Lease, error) {
	return s.acquire(ctx, name, false, limit)
}

// AcquireShared is Acquire for a shared (read) grant of name (see
// client.Shared): it coexists with other shared grants of name, each with
// its own token, and excludes an exclusive one (Acquire). It queues in
// order with exclusive waiters, so it waits behind a queued Acquire. A
// shared Lease renews, steps down and releases like any other, but its
// fenced writes fail with client.ErrInvalid: shared holders read.
func (s *Session) AcquireShared(ctx context.Context, name string) (*Lease, error) {
	return s.acquireMode(ctx, name, true, 0, true)
}

// TryAcquireShared is AcquireShared without waiting: if name is held
// exclusive or a waiter is queued, the error matches client.ErrLeaseHeld.
func (s *Session) TryAcquireShared(ctx context.Context, name string) (*Lease, error) {
	return s.acquireMode(ctx, name, false, 0, true)
}

// Campaign blocks until this session's holder leads name, that is, holds
// the lease name, and returns the leadership: its token, its context
// (which ends before the server could hand the leadership to another
// holder) and its fenced writes. It is Acquire, named for elections;
// Resign gives the leadership up.
func (s *Session) Campaign(ctx context.Context, name string) (*Lease, error) {
	return s.acquire(ctx, name, true, 0)
}

func (s *Session) acquire(ctx context.Context, name string, wait bool, limit int) (*Lease, error) {
	return s.acquireMode(ctx, name, wait, limit, false)
}

func (s *Session) acquireMode(ctx context.Context, name string, wait bool, limit int, shared bool) (*Lease, error) {
	if err := s.reserve(name); err != nil {
		return nil, err
	}
	defer s.unreserve(name)
	// Closing the session ends the acquire too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()

	var opts []client.AcquireOption
	if wait {
		opts = append(opts, client.Wait(acquireWait))
	}
	if limit > 1 {
		opts = append(opts, client.Limit(limit))
	}
	if s.cfg.LockDelay > 0 {
		opts = append(opts, client.LockDelay(s.cfg.LockDelay))
	}
	if shared {
		opts = append(opts, client.Shared())
	}
	if s.cfg.Priority != 0 {
		opts = append(opts, client.Priority(s.cfg.Priority))
	}
	if old := s.lostToken(name); old > 0 {
		// The last term was lost here, before the server's expiry: the
		// server may still hold it. Free it, so that the new term gets
		// a new token at once instead of a renewal of the old one.
		s.releaseQuietly(ctx, client.Lease{Name: name, Token: old})
	}
	for {
		cl, err := s.c.Acquire(ctx, name, s.cfg.Holder, s.cfg.TTL, opts...)
		if err == nil && cl.Token <= s.usedToken(name) {
			// The server renewed a grant of an earlier term (acquire by
			// the holder is a renewal). Every term has its own token:
			// release that grant and ask again.
			s.releaseQuietly(ctx, cl)
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-time.After(s.retryPause()):
				continue
			}
		}
		switch {
		case err == nil:
		case s.ctx.Err() != nil:
			return nil, ErrClosed
		case ctx.Err() != nil && !errors.Is(err, ctx.Err()):
			return nil, fmt.Errorf("election: acquire %q: %w (last error: %v)", name, ctx.Err(), err)
		case wait && ctx.Err() == nil && errors.Is(err, client.ErrLeaseHeld):
			continue // the server's wait timed out: queue again
		default:
			return nil, err
		}
		// A grant after a wait was applied long after its request was
		// sent: confirm it with a renewal, whose send time is recent.
		l, err := s.establish(ctx, cl, wait)
		switch {
		case err == nil:
			return l, nil
		case s.ctx.Err() != nil, errors.Is(err, ErrClosed):
			return nil, ErrClosed
		case gone(err) && wait && ctx.Err() == nil:
			continue // lost again before it was confirmed: queue again
		case gone(err):
			return nil, fmt.Errorf("election: the grant of %q ended before it could be confirmed: %w", name, err)
		}
		return nil, err
	}
}

// gone reports whether err says the server no longer has a grant
// (released, expired, replaced or revoked: client.ErrRevoked matches
// client.ErrStaleToken too).
func gone(err error) bool {
	return errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrNotFound)
}

// establish turns a grant into a Lease, first confirming it with a
// renewal if confirm is set or its deadline has passed already. A grant it
// cannot hand over is released.
func (s *Session) establish(ctx context.Context, cl client.Lease, confirm bool) (*Lease, error) {
	for {
		if confirm {
			renewed, err := s.renewOne(ctx, cl)
			if err != nil {
				if !gone(err) {
					s.releaseQuietly(ctx, cl)
				}
				return nil, err
			}
			cl = renewed
		}
		l, err := s.register(cl)
		if !errors.Is(err, errTooLate) {
			if err != nil && !errors.Is(err, ErrClosed) {
				s.releaseQuietly(ctx, cl)
			}
			return l, err
		}
		confirm = true
	}
}

// renewOne renews one grant.
func (s *Session) renewOne(ctx context.Context, cl client.Lease) (client.Lease, error) {
	res, err := s.c.Renew(ctx, client.Ref{Name: cl.Name, Token: cl.Token})
	if err != nil {
		return cl, err
	}
	if len(res) != 1 {
		return cl, fmt.Errorf("election: renewal of one lease returned %d results", len(res))
	}
	if res[0].Err != nil {
		return cl, res[0].Err
	}
	return res[0].Lease, nil
}

// releaseQuietly releases a grant that will not be handed to the caller,
// so it need not run out its TTL.
func (s *Session) releaseQuietly(ctx context.Context, cl client.Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.RenewTimeout)
	defer cancel()
	_ = s.c.Release(rctx, cl.Name, cl.Token)
}

var errTooLate = errors.New("election: the grant's deadline passed before it could be handed over")

// register makes a Lease of a grant and starts renewing it. It fails with
// errTooLate if the grant's deadline has passed already.
func (s *Session) register(cl client.Lease) (*Lease, error) {
	if cl.Sent.IsZero() {
		return nil, errors.New("election: the client reported no send time for the grant")
	}
	deadline := s.cfg.deadline(cl)
	if !time.Now().Before(deadline) {
		return nil, errTooLate
	}
	l := newLease(s, cl, deadline)
	s.mu.Lock()
	closed := s.closed
	if !closed {
		s.leases[l.name] = l
		s.used[l.name] = max(s.used[l.name], l.token)
		delete(s.lost, l.name)
	}
	s.mu.Unlock()
	if closed {
		l.mu.Lock()
		l.endLocked(Released, ErrReleased)
		l.mu.Unlock()
		s.releaseQuietly(context.Background(), cl)
		return nil, ErrClosed
	}
	s.kick()
	return l, nil
}

// usedToken returns the highest token the session handed out for name.
func (s *Session) usedToken(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used[name]
}

// lostToken returns the token of name's last term if it was lost.
func (s *Session) lostToken(name string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost[name]
}

func (s *Session) reserve(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.pending[name]:
		return fmt.Errorf("%w: %q", ErrDuplicate, name)
	case s.leases[name] != nil:
		// A lease that has ended is forgotten by whoever ended it, just
		// after its context ended; a caller that saw the context end
		// (Run, campaigning again after a loss) may get here first.
		l := s.leases[name]
		st := l.State()
		if !st.ended() {
			return fmt.Errorf("%w: %q", ErrDuplicate, name)
		}
		s.forgetLocked(l, st == Lost)
	}
	s.pending[name] = true
	return nil
}

func (s *Session) unreserve(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, name)
}

// forget stops renewing l, which has ended.
func (s *Session) forget(l *Lease) {
	lost := l.State() == Lost
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(l, lost)
}

// forgetLocked is forget with s.mu held; it does its work once per lease.
func (s *Session) forgetLocked(l *Lease, lost bool) {
	if l.forgotten {
		return
	}
	l.forgotten = true
	if s.leases[l.name] == l {
		delete(s.leases, l.name)
	}
	if lost {
		s.lost[l.name] = l.token
	} else if s.lost[l.name] == l.token {
		delete(s.lost, l.name)
	}
}

func (s *Session) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Close stops renewing and releases every lease of the session (their
// contexts end first), then returns the errors of the releases. Acquires
// under way fail with ErrClosed. A closed session cannot be reused.
func (s *Session) Close(ctx context.Context) error {
	var errs []error
	for _, l := range s.shutdown() {
		if err := l.Release(ctx); err != nil {
			errs = append(errs, fmt.Errorf("release %q: %w", l.name, err))
		}
	}
	return errors.Join(errs...)
}

// Orphan stops renewing without releasing: each lease stays live until its
// local deadline (then it is Lost), and on the server until its TTL runs
// out. Acquires under way fail with ErrClosed.
func (s *Session) Orphan() {
	for _, l := range s.shutdown() {
		l.mu.Lock()
		l.orphaned = true
		l.mu.Unlock()
	}
}

// shutdown stops the renewal loop and returns the leases it renewed.
func (s *Session) shutdown() []*Lease {
	s.mu.Lock()
	s.closed = true
	ls := s.snapshotLocked()
	clear(s.leases)
	s.mu.Unlock()
	s.stop()
	<-s.loopDone
	s.handoffs.Wait()
	return ls
}

// snapshotLocked returns the live leases sorted by name.
func (s *Session) snapshotLocked() []*Lease {
	ls := make([]*Lease, 0, len(s.leases))
	for _, l := range s.leases {
		ls = append(ls, l)
	}
	slices.SortFunc(ls, func(a, b *Lease) int { return strings.Compare(a.name, b.name) })
	return ls
}

// loop renews the session's leases until the session stops.
func (s *Session) loop() {
	defer close(s.loopDone)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if next, ok := s.nextRenewal(); ok {
			timer.Reset(time.Until(next))
			due = timer.C
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.wake:
			continue
		case <-due:
		}
		s.renewAll()
	}
}

// renewGrid is the tick renewals are aligned to, at most: a renewal due
// at t is sent at the last multiple of the tick (on the wall clock's
// grid) at or before t. Sessions of one process that come due within the
// same tick thus renew at the same instant, and a shared client sends
// their renewals together, in one request and one raft entry, instead of
// one each a few milliseconds apart. etcd's client does the same with
// its keep-alives, which it sends every 500ms for the leases due by then.
// Renewing up to a tick early never shortens a lease.
const renewGrid = 100 * time.Millisecond

// alignRenewal moves t back to the renewal grid of a session renewing
// every interval: the grid's tick is renewGrid, or interval/10 if that is
// shorter, so that a renewal is never more than a tenth of an interval
// early. The result keeps t's monotonic clock reading.
func alignRenewal(t time.Time, interval time.Duration) time.Time {
	tick := min(renewGrid, interval/10)
	if tick <= 0 {
		return t
	}
	// Truncate works on the wall clock and drops the monotonic reading,
	// so only the offset into the tick is taken from it.
	return t.Add(-t.Sub(t.Truncate(tick)))
}

// nextRenewal returns when the next renewal is due: RenewInterval after
// the earliest send time of a lease's last renewal, moved back to the
// renewal grid (see alignRenewal), but not before the pause after a
// failed attempt.
func (s *Session) nextRenewal() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, l := range s.leases {
		at := l.LastRenewal().Add(s.cfg.RenewInterval)
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if next.IsZero() {
		return next, false
	}
	next = alignRenewal(next, s.cfg.RenewInterval)
	if s.retryAt.After(next) {
		next = s.retryAt
	}
	return next, true
}

// retryPause is the pause after a renewal attempt that failed fast (the
// client itself retries unreachable endpoints within the attempt).
func (s *Session) retryPause() time.Duration {
	return min(max(s.cfg.RenewInterval/10, 10*time.Millisecond), 250*time.Millisecond)
}

// renewAll renews every lease of the session in one request.
func (s *Session) renewAll() {
	s.mu.Lock()
	ls := s.snapshotLocked()
	s.mu.Unlock()
	if len(ls) == 0 {
		return
	}
	refs := make([]client.Ref, len(ls))
	for i, l := range ls {
		refs[i] = client.Ref{Name: l.name, Token: l.token}
	}
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.RenewTimeout)
	res, err := s.c.Renew(ctx, refs...)
	timedOut := ctx.Err() != nil
	cancel()
	if s.ctx.Err() != nil {
		return // stopping: the outcome no longer matters
	}
	if err != nil && timedOut {
		err = fmt.Errorf("renewal not confirmed within %s: %w", s.cfg.RenewTimeout, err)
	}
	if err == nil && len(res) != len(refs) {
		err = fmt.Errorf("election: renewal of %d leases returned %d results", len(refs), len(res))
	}
	failed := err != nil
	for i, l := range ls {
		switch {
		case err != nil:
			l.atRisk(err)
		case res[i].Err == nil:
			l.renewed(res[i].Lease)
			if to := res[i].HandoffRequested; to != "" {
				s.handoffRequested(l, to)
			}
		case gone(res[i].Err):
			l.lose(res[i].Err)
		default:
			l.atRisk(res[i].Err)
			failed = true
		}
	}
	s.mu.Lock()
	s.retryAt = time.Time{}
	if failed {
		s.retryAt = time.Now().Add(s.retryPause())
	}
	s.mu.Unlock()
}
