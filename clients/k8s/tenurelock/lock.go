// Package tenurelock is a client-go resource lock backed by a tenure
// lease: leaderelection.RunOrDie, NewLeaderElector and controller-runtime's
// manager (LeaderElectionResourceLockInterface) elect through tenure, and
// the leader gets the lease's fencing token to pass with every write.
//
// tenure decides who holds the lease; client-go's own judgement of expiry
// (its observed record plus LeaseDuration on its own clock) is never
// needed: Get reports the holder of the live grant, or NotFound when there
// is none, and only then does client-go call Create, which acquires the
// lease. Update renews the grant (same token), and an Update with no
// holder (client-go's release) releases it.
//
// Every term has its own token. A term ends when its grant is gone on the
// server, when its local deadline passes without a confirmed renewal
// (the send time of the last successful renewal + TTL×0.99 −
// max(TTL/10, 100ms)), or when it is released. After that the lock
// refuses to renew or acquire until client-go has stepped down (it reports
// "stopped leading" through RecordEvent), so client-go never carries on
// the same term under a new token; the next term is acquired anew.
//
// A lock the cluster refuses (a token it does not know, a principal
// without the role to read or hold the lease, a TLS handshake that fails)
// cannot elect until that is fixed, and client-go only logs the errors of
// a lock and tries again every RetryPeriod. The lock surfaces them
// instead: its calls fail with an error that matches ErrRefused and keeps
// the cluster's message (which names the principal and the role it
// lacks), Config.OnRefused is called with it, and WaitLeading returns it.
package tenurelock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
)

// Config configures a Lock.
type Config struct {
	// Client talks to the tenure cluster. Required.
	Client *client.Client
	// Name is the tenure lease to elect on ("svc/my-controller"). Required.
	Name string
	// Identity is this candidate's holder name; it must be unique among
	// the candidates (a pod name). Required.
	Identity string
	// TTL is the lease's TTL on the server. Default: the LeaseDuration
	// client-go passes (whole seconds). Set it to LeaderElectionConfig's
	// LeaseDuration when that is not whole seconds. At least the server's
	// minimum TTL (2s by default).
	TTL time.Duration
	// Drift bounds how much faster the server's clock may run than this
	// one. Default 0.01.
	Drift float64
	// Margin is kept between the local deadline and the earliest moment
	// the server could grant the lease to another holder. Default
	// max(TTL/10, 100ms).
	Margin time.Duration
	// Now is the local clock, for tests. Default time.Now.
	Now func() time.Time
	// OnRefused, if set, is called with the error (matching ErrRefused)
	// each time the cluster refuses one of the lock's calls: the
	// credentials are unknown, the principal lacks the role, or the TLS
	// handshake failed. client-go only logs such errors and tries again
	// every RetryPeriod, so without it a misconfigured candidate
	// campaigns on quietly forever; cancel the context given to
	// RunOrDie here to stop campaigning. It runs on client-go's
	// goroutine: do not block in it.
	OnRefused func(error)
}

// Lock implements resourcelock.Interface with a tenure lease.
type Lock struct {
	cfg Config

	mu sync.Mutex
	// term is the live term, nil if none.
	term *term
	// ended is the token of the last term that ended with its grant
	// possibly still live on the server (it is released before the next
	// acquire); 0 if none.
	ended uint64
	// leading is client-go's view, from RecordEvent: between "became
	// leader" and "stopped leading".
	leading bool
	// changed is closed and replaced whenever a term starts or ends,
	// and at every refusal.
	changed chan struct{}
	// refused is the last refusal (an ErrRefused error), nil if none yet;
	// refusedNow says whether the last call to the cluster was refused;
	// refusals counts them.
	refused    error
	refusedNow bool
	refusals   uint64
}

// term is one grant of the lease to this lock.
type term struct {
	token    uint64
	ttl      time.Duration
	sent     time.Time // send time of the last successful grant or renewal
	deadline time.Time
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
}

var _ resourcelock.Interface = (*Lock)(nil)

// New returns a Lock for cfg.
func New(cfg Config) (*Lock, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("tenurelock: Config.Client is nil")
	case cfg.Name == "":
		return nil, errors.New("tenurelock: Config.Name is empty")
	case cfg.Identity == "":
		return nil, errors.New("tenurelock: Config.Identity is empty")
	case cfg.TTL < 0, cfg.Margin < 0, cfg.Drift < 0 || cfg.Drift >= 0.5:
		return nil, fmt.Errorf("tenurelock: TTL %v, Margin %v or Drift %v out of range", cfg.TTL, cfg.Margin, cfg.Drift)
	}
	if cfg.Drift == 0 {
		cfg.Drift = 0.01
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Lock{cfg: cfg, changed: make(chan struct{})}, nil
}

// ErrNotLeading is the cause of a leader context that ended because its
// term did, and the error of Update and Create while the lock refuses
// them (see the package doc).
var ErrNotLeading = errors.New("tenurelock: not leading")

// ErrRefused is matched by the error of a call the cluster refused: the
// credentials (Config.Client's token or client certificate) are missing
// or unknown (code unauthenticated), the principal lacks the role to read
// or hold the lease (permission_denied, naming the role needed; or a live
// grant under the lock's identity belongs to another principal), or the
// TLS handshake failed (client.IsTLSError). The error keeps the cluster's
// own, so connect.CodeOf and errors.Is with the client's errors work on
// it. Retrying does not help until the auth file or the certificates
// change.
var ErrRefused = errors.New("tenurelock: the cluster refused the lock")

// refusal reports whether err is the cluster refusing the lock's
// credentials: unauthenticated, permission_denied (a missing role, or a
// grant under this identity that another principal holds, which
// client.ErrForbidden matches too), or a failed TLS handshake.
func refusal(err error) bool {
	if err == nil {
		return false
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied:
		return true
	}
	return client.IsTLSError(err)
}

// note records the outcome of a call to the cluster and returns its
// error, wrapped in ErrRefused if it is a refusal (then OnRefused hears of
// it). It must be called without l.mu held.
func (l *Lock) note(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if !refusal(err) {
		l.mu.Lock()
		l.refusedNow = false
		l.mu.Unlock()
		return err
	}
	err = fmt.Errorf("%w (lease %s, candidate %s): %w", ErrRefused, l.cfg.Name, l.cfg.Identity, err)
	l.mu.Lock()
	l.refused, l.refusedNow = err, true
	l.refusals++
	l.notifyLocked()
	l.mu.Unlock()
	if l.cfg.OnRefused != nil {
		l.cfg.OnRefused(err)
	}
	return err
}

// groupResource names tenure leases in Kubernetes API errors.
var groupResource = schema.GroupResource{Group: "tenure.io", Resource: "leases"}

// record is what Get reports, and its raw form: the raw form changes at
// every Get (the remaining time), so client-go refreshes its observation
// whenever tenure reports a holder and never decides on its own that a
// live grant expired.
type record struct {
	Holder    string `json:"holder"`
	Token     uint64 `json:"token"`
	Remaining string `json:"remaining"`
}

// Get returns the record of the lease's live grant, or a NotFound error
// when it has none. A grant to this lock's identity that is not its live
// term (one of an ended term, or of another process with the same
// identity) is reported under another holder name, so client-go does not
// take it for its own.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	g, err := l.cfg.Client.Get(ctx, l.cfg.Name)
	err = l.note(err)
	if errors.Is(err, client.ErrNotFound) {
		return nil, nil, apierrors.NewNotFound(groupResource, l.cfg.Name)
	}
	if err != nil {
		return nil, nil, err
	}
	holder := g.Holder
	l.mu.Lock()
	if holder == l.cfg.Identity && (l.term == nil || l.term.token != g.Token) {
		holder = fmt.Sprintf("%s (a grant this lock does not lead with, token %d)", holder, g.Token)
	}
	l.mu.Unlock()
	now := metav1.NewTime(l.cfg.Now())
	ttl := g.TTL
	rec := &resourcelock.LeaderElectionRecord{
		HolderIdentity:       holder,
		LeaseDurationSeconds: int((ttl + time.Second - 1) / time.Second),
		AcquireTime:          now,
		RenewTime:            metav1.NewTime(now.Add(g.Remaining - ttl)),
	}
	raw, err := json.Marshal(record{Holder: holder, Token: g.Token, Remaining: g.Remaining.String()})
	if err != nil {
		return nil, nil, err
	}
	return rec, raw, nil
}

// Create acquires the lease for ler.HolderIdentity, this lock's identity
// (client-go calls it after Get found no grant). It does not wait: a held
// lease is an error.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity != l.cfg.Identity {
		return fmt.Errorf("tenurelock: create for %q by the lock of %q", ler.HolderIdentity, l.cfg.Identity)
	}
	return l.acquire(ctx, ler)
}

// Update renews the live term's grant. With no holder (client-go's
// release) it ends the term and releases the grant. Without a live term
// it acquires the lease, unless client-go still counts itself the leader
// of an ended term.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		return l.release(ctx)
	}
	if ler.HolderIdentity != l.cfg.Identity {
		return fmt.Errorf("tenurelock: update for %q by the lock of %q", ler.HolderIdentity, l.cfg.Identity)
	}
	l.mu.Lock()
	t := l.term
	if t != nil && !l.cfg.Now().Before(t.deadline) {
		l.endLocked(t, fmt.Errorf("%w: no renewal confirmed within %v of the last successful one being sent", ErrNotLeading, t.deadline.Sub(t.sent)))
		t = nil
	}
	l.mu.Unlock()
	if t == nil {
		return l.acquire(ctx, ler)
	}
	sent := l.cfg.Now()
	g, err := l.cfg.Client.RenewOne(ctx, l.cfg.Name, t.token)
	err = l.note(err)
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.Is(err, client.ErrStaleToken) || errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrForbidden) {
		l.endLocked(t, fmt.Errorf("%w: the server no longer has the grant with token %d: %w", ErrNotLeading, t.token, err))
		return err
	}
	if err != nil {
		return err
	}
	if l.term != t {
		return fmt.Errorf("%w: the term with token %d ended during the renewal", ErrNotLeading, t.token)
	}
	if !l.cfg.Now().Before(t.deadline) {
		// Confirmed too late: the holder must have stopped already.
		l.endLocked(t, fmt.Errorf("%w: a renewal was confirmed after the local deadline", ErrNotLeading))
		return ErrNotLeading
	}
	l.extendLocked(t, sent, g.TTL)
	return nil
}

// acquire starts a term: it releases the grant of an ended term first, and
// refuses while client-go still leads an ended term.
func (l *Lock) acquire(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	if l.term != nil {
		l.mu.Unlock()
		return fmt.Errorf("tenurelock: acquire while leading with token %d", l.term.token)
	}
	if l.leading {
		l.mu.Unlock()
		return fmt.Errorf("%w: the term ended; waiting for the leader elector to step down", ErrNotLeading)
	}
	ended := l.ended
	l.mu.Unlock()
	if ended != 0 {
		err := l.note(l.cfg.Client.Release(ctx, l.cfg.Name, ended))
		if err != nil && !errors.Is(err, client.ErrStaleToken) && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("tenurelock: release the grant of the ended term (token %d): %w", ended, err)
		}
		l.mu.Lock()
		if l.ended == ended {
			l.ended = 0
		}
		l.mu.Unlock()
	}
	ttl := l.cfg.TTL
	if ttl == 0 {
		ttl = time.Duration(ler.LeaseDurationSeconds) * time.Second
	}
	if ttl <= 0 {
		return fmt.Errorf("tenurelock: no TTL: Config.TTL is unset and client-go passed LeaseDurationSeconds %d", ler.LeaseDurationSeconds)
	}
	g, err := l.cfg.Client.Acquire(ctx, l.cfg.Name, l.cfg.Identity, ttl)
	if err = l.note(err); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.Token == ended || l.term != nil || l.leading {
		// The old grant was still live (an acquire by its holder is a
		// renewal), or the lock changed meanwhile: not a term of its own.
		if l.term == nil || l.term.token != g.Token {
			l.ended = g.Token
		}
		return fmt.Errorf("%w: acquire returned token %d, which is not a new term", ErrNotLeading, g.Token)
	}
	ctxT, cancel := context.WithCancelCause(context.Background())
	t := &term{token: g.Token, ttl: g.TTL, ctx: ctxT, cancel: cancel}
	l.term = t
	l.extendLocked(t, g.Sent, g.TTL)
	if !l.cfg.Now().Before(t.deadline) {
		l.endLocked(t, fmt.Errorf("%w: the grant was confirmed after its local deadline", ErrNotLeading))
		return ErrNotLeading
	}
	l.notifyLocked()
	return nil
}

// release ends the live term and releases its grant.
func (l *Lock) release(ctx context.Context) error {
	l.mu.Lock()
	t := l.term
	if t != nil {
		l.endLocked(t, fmt.Errorf("%w: released", ErrNotLeading))
	}
	token := l.ended
	l.mu.Unlock()
	if token == 0 {
		return nil
	}
	err := l.note(l.cfg.Client.Release(ctx, l.cfg.Name, token))
	if err != nil && !errors.Is(err, client.ErrStaleToken) && !errors.Is(err, client.ErrNotFound) {
		return err
	}
	l.mu.Lock()
	if l.ended == token {
		l.ended = 0
	}
	l.mu.Unlock()
	return nil
}

// extendLocked moves t's deadline after a grant or renewal sent at sent.
func (l *Lock) extendLocked(t *term, sent time.Time, ttl time.Duration) {
	if ttl <= 0 {
		ttl = t.ttl
	}
	margin := l.cfg.Margin
	if margin == 0 {
		margin = max(ttl/10, 100*time.Millisecond)
	}
	d := sent.Add(time.Duration(float64(ttl)*(1-l.cfg.Drift)) - margin)
	if !d.After(t.deadline) {
		return
	}
	t.sent, t.deadline = sent, d
	if t.timer != nil {
		t.timer.Stop()
	}
	t.timer = time.AfterFunc(d.Sub(l.cfg.Now()), func() { l.expire(t) })
}

// expire runs at t's deadline: unless a renewal moved it, the term ends.
func (l *Lock) expire(t *term) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term != t {
		return
	}
	if now := l.cfg.Now(); now.Before(t.deadline) {
		t.timer = time.AfterFunc(t.deadline.Sub(now), func() { l.expire(t) })
		return
	}
	l.endLocked(t, fmt.Errorf("%w: no renewal confirmed within %v of the last successful one being sent", ErrNotLeading, t.deadline.Sub(t.sent)))
}

// endLocked ends t with cause: its context ends, and its grant is
// released before the next acquire.
func (l *Lock) endLocked(t *term, cause error) {
	if l.term != t {
		return
	}
	if t.timer != nil {
		t.timer.Stop()
	}
	t.cancel(cause)
	l.term = nil
	l.ended = t.token
	l.notifyLocked()
}

func (l *Lock) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// RecordEvent follows client-go's view of the leadership: LeaderElector
// reports "became leader" when it starts leading and "stopped leading"
// when it stops.
func (l *Lock) RecordEvent(event string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch event {
	case "became leader":
		l.leading = true
	case "stopped leading":
		l.leading = false
		if l.term != nil {
			// client-go stepped down on its own (its renew deadline
			// passed): the term ends with it.
			l.endLocked(l.term, fmt.Errorf("%w: the leader elector stopped leading", ErrNotLeading))
		}
	}
}

// Identity returns the candidate's holder name.
func (l *Lock) Identity() string { return l.cfg.Identity }

// Describe names the lease, for client-go's logs.
func (l *Lock) Describe() string { return "tenure lease " + l.cfg.Name }

// Token returns the fencing token of the live term, and false when the
// lock does not lead. Pass it with every write the leadership protects.
func (l *Lock) Token() (uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.term == nil || !l.cfg.Now().Before(l.term.deadline) {
		return 0, false
	}
	return l.term.token, true
}

// Leading returns a context that ends when ctx does or when the live term
// ends (its local deadline passed, its grant is gone, it was released),
// whichever comes first, and the term's fencing token. Without a live term
// it returns ErrNotLeading. Run the leader's work under it: it ends at
// tenure's local deadline at the latest, before the cluster can grant the
// lease to another candidate, even when client-go's own step-down (its
// RenewDeadline on its own clock) would come later.
func (l *Lock) Leading(ctx context.Context) (context.Context, uint64, error) {
	l.mu.Lock()
	t := l.term
	if t == nil || !l.cfg.Now().Before(t.deadline) {
		l.mu.Unlock()
		return nil, 0, ErrNotLeading
	}
	l.mu.Unlock()
	out, cancel := context.WithCancelCause(ctx)
	dctx, dcancel := context.WithDeadlineCause(out, t.deadline, fmt.Errorf("%w: the local deadline passed", ErrNotLeading))
	stop := context.AfterFunc(t.ctx, func() { cancel(context.Cause(t.ctx)) })
	context.AfterFunc(dctx, func() {
		stop()
		dcancel()
		cancel(nil)
	})
	return withToken(dctx, t.token), t.token, nil
}

// WaitLeading waits until the lock leads (or ctx ends) and returns Leading.
// It returns the refusal (an error matching ErrRefused) instead when the
// lock's last call to the cluster was refused, or when one is refused
// while it waits: a candidate whose credentials the cluster refuses would
// never lead.
func (l *Lock) WaitLeading(ctx context.Context) (context.Context, uint64, error) {
	l.mu.Lock()
	seen := l.refusals
	if l.refusedNow && l.term == nil {
		seen--
	}
	l.mu.Unlock()
	for {
		l.mu.Lock()
		ch := l.changed
		refused, n := l.refused, l.refusals
		l.mu.Unlock()
		if lctx, tok, err := l.Leading(ctx); err == nil {
			return lctx, tok, nil
		}
		if n != seen {
			return nil, 0, refused
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, context.Cause(ctx)
		}
	}
}

type tokenKey struct{}

func withToken(ctx context.Context, token uint64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

type lockKey struct{}

// NewContext returns ctx carrying l: pass it to LeaderElector.Run or
// RunOrDie, and TokenFrom finds the token in the context client-go passes
// to OnStartedLeading.
func NewContext(ctx context.Context, l *Lock) context.Context {
	return context.WithValue(ctx, lockKey{}, l)
}

// TokenFrom returns the fencing token of the leadership ctx belongs to: a
// context from Leading, or one derived from NewContext's (such as the one
// client-go passes to OnStartedLeading), whose lock's live term it
// reports. False when ctx has neither, when it has ended, or when the lock
// does not lead.
func TokenFrom(ctx context.Context) (uint64, bool) {
	if ctx.Err() != nil {
		return 0, false
	}
	if t, ok := ctx.Value(tokenKey{}).(uint64); ok {
		return t, true
	}
	if l, ok := ctx.Value(lockKey{}).(*Lock); ok {
		return l.Token()
	}
	return 0, false
}
