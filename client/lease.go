package client

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// Lease is one grant of a named lease, as the server reported it.
type Lease struct {
	Name   string
	Holder string
	// Token is the fencing token of the grant: larger than every token
	// granted before it, the same across renewals. Pass it with every
	// write the lease protects.
	Token uint64
	// TTL is how much every renewal extends the lease.
	TTL time.Duration
	// Remaining is the time the lease had left when the server applied the
	// request.
	Remaining time.Duration
	// Limit is the limit of a semaphore this grant is one slot of (at most
	// Limit holders at once, each slot with its own token), or 0 for a
	// plain lease.
	Limit int
	// LockDelay is the grant's lock-delay (see the LockDelay option), 0
	// for none.
	LockDelay time.Duration
	// Shared is true for a shared (read) grant (see the Shared option).
	Shared bool
	// Priority is the grant's priority (see the Priority option), 0 for
	// none.
	Priority int
	// Sent is when the request that returned the lease was sent, on the
	// local clock (with its monotonic reading). The lease expires no
	// earlier than Sent + Remaining measured at the cluster's clock rate;
	// a holder's local deadline is derived from it with a drift allowance
	// and a safety margin.
	Sent time.Time
}

func leaseFromProto(p *tenurev1.Lease, sent time.Time) Lease {
	l := wire.LeaseFromProto(p)
	return Lease{
		Name:      l.Name,
		Holder:    l.Holder,
		Token:     l.Token,
		TTL:       l.TTL,
		Remaining: p.GetRemaining().AsDuration(),
		Limit:     l.Limit,
		LockDelay: l.LockDelay,
		Shared:    l.Shared,
		Priority:  l.Priority,
		Sent:      sent,
	}
}

// Ref names one grant: a lease name and the token it was granted with.
type Ref = lease.Ref

// AcquireOption changes how Acquire behaves.
type AcquireOption func(*AcquireSettings)

// AcquireSettings is what a list of AcquireOptions asks for. Code that
// wraps or fakes a Client reads it with NewAcquireSettings.
type AcquireSettings struct {
	// Wait is set by the Wait option: queue on the server while the lease
	// is held.
	Wait bool
	// WaitTimeout is how long to wait; 0 means as long as the server
	// allows.
	WaitTimeout time.Duration
	// Limit is set by the Limit option: acquire one slot of a semaphore.
	Limit int
	// LockDelay is set by the LockDelay option.
	LockDelay time.Duration
	// Shared is set by the Shared option: acquire a shared (read) grant.
	Shared bool
	// Priority is set by the Priority option.
	Priority int
}

// NewAcquireSettings applies opts to the zero settings (try once) and
// returns the result.
func NewAcquireSettings(opts ...AcquireOption) AcquireSettings {
	var s AcquireSettings
	for _, opt := range opts {
		opt(&s)
	}
	return s
}

// Wait makes Acquire queue on the server (first come, first served) when
// the lease is held, until it is granted or timeout passes; then Acquire
// fails with ErrLeaseHeld. A timeout of 0 waits as long as the server
// allows (5m by default). If the client has to retry on another endpoint,
// it waits only for what is left of timeout (and queues again at the
// back).
func Wait(timeout time.Duration) AcquireOption {
	return func(o *AcquireSettings) {
		o.Wait = true
		o.WaitTimeout = timeout
	}
}

// Limit makes Acquire take one slot of the semaphore name: up to n
// holders at once, each slot with its own fencing token (which fences
// writes while that slot is held). Every holder of a name must ask for
// the same limit while any slot is held (another limit fails with
// ErrInvalid); n of 0 or 1 is a plain lease. When every slot is held the
// error is a *HeldError with Limit set, naming the slot that expires
// first.
func Limit(n int) AcquireOption {
	return func(o *AcquireSettings) { o.Limit = n }
}

// LockDelay gives the grant a lock-delay of d (at most 1 minute by
// default; more fails with ErrInvalid): when the grant expires, or an
// operator revokes it, the server grants the name to nobody until d of
// cluster time has passed since the expiry (or the revocation); waiters
// stay queued and are granted when it ends. A Release skips it. An
// Acquire that would be granted during a lock-delay fails with a
// *HeldError whose LockDelay is set.
//
// It is a mitigation for storage that cannot check fencing tokens: a
// holder that lost its grant without noticing (paused, cut off) gets d
// to stop before anyone else holds the name. It is no guarantee (a pause
// can outlast any delay); the token is.
func LockDelay(d time.Duration) AcquireOption {
	return func(o *AcquireSettings) { o.LockDelay = d }
}

// Shared makes Acquire ask for a shared (read) grant of name, as a read
// lock of a read-write lock: shared grants of a name are held at once
// (up to 1000), each with its own fencing token, and exclude an exclusive
// grant (an Acquire without Shared). Waiters are served in order: with
// Wait, a shared acquire queued behind a waiting exclusive one waits for
// it, so readers never starve a writer; when an exclusive grant ends,
// every shared waiter at the head of the queue is granted at once.
//
// A shared grant renews and releases like any other, but may not write
// the built-in store (Put and Delete fail with ErrInvalid): fence writes
// with exclusive tokens. A holder cannot switch modes (release first),
// and Shared with Limit above 1 fails with ErrInvalid.
func Shared() AcquireOption {
	return func(o *AcquireSettings) { o.Shared = true }
}

// Priority states the caller's priority, 0 (the default) to 1000000,
// kept in its place in the queue and in its grant. The queue stays first
// come, first served: a release or expiry grants the first waiter,
// whatever its priority. A waiter with a higher priority than the
// holder's asks the holder to hand over: the holder's renewals report
// it (RenewResult.HandoffRequested), and an election leader hands over
// (see the election package).
func Priority(p int) AcquireOption {
	return func(o *AcquireSettings) { o.Priority = p }
}

// Acquire grants the lease name to holder for ttl, or renews it if holder
// already holds it (same token). If another holder has it, the error
// matches ErrLeaseHeld and is a *HeldError naming that holder.
//
// Acquire retries on other endpoints while the cluster is unavailable.
// Every attempt carries the call's request ID, so the cluster applies
// the call at most once: a retry of an attempt that took effect gets that
// attempt's outcome (its grant, even if the grant has expired since, or
// its "held"), never a second grant. The returned Lease's Sent is when
// the first attempt was sent.
func (c *Client) Acquire(ctx context.Context, name, holder string, ttl time.Duration, opts ...AcquireOption) (Lease, error) {
	o := NewAcquireSettings(opts...)
	var waitUntil time.Time
	if o.Wait && o.WaitTimeout > 0 {
		waitUntil = time.Now().Add(o.WaitTimeout)
	}
	id := c.sess.begin()
	defer c.sess.end(id)
	var (
		res  *tenurev1.AcquireResponse
		sent time.Time
	)
	err := c.call(ctx, retryAlways, func(ctx context.Context, ep *endpoint) (err error) {
		req := &tenurev1.AcquireRequest{Name: name, Holder: holder, Ttl: durationpb.New(ttl), Wait: o.Wait, RequestId: id}
		if o.Limit > 1 {
			req.Limit = uint32(o.Limit)
		}
		if o.LockDelay != 0 {
			req.LockDelay = durationpb.New(o.LockDelay)
		}
		req.Shared = o.Shared
		if o.Priority != 0 {
			req.Priority = uint32(max(o.Priority, 0))
			if o.Priority < 0 {
				req.Priority = math.MaxUint32 // out of range: the server refuses it
			}
		}
		timeout := c.cfg.RequestTimeout
		if o.Wait {
			if waitUntil.IsZero() {
				timeout = 0 // bounded by the server's maximum wait and ctx
			} else if left := time.Until(waitUntil); left > 0 {
				req.WaitTimeout = durationpb.New(left)
				timeout += left
			} else {
				req.Wait = false // no time left: one plain try
			}
		}
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		if sent.IsZero() {
			// The answer may be the outcome of an earlier attempt,
			// which took effect after the first was sent.
			sent = time.Now()
		}
		if !req.Wait {
			op := &tenurev1.BatchOp{Op: &tenurev1.BatchOp_Acquire{Acquire: req}}
			r, batched, err := tryBatched(ctx, c, ep, op, (*tenurev1.BatchResult).GetAcquire)
			if batched {
				res = r
				return err
			}
		}
		if req.Wait {
			if r, err := ep.conn.acquire(ctx, req); !errors.Is(err, errNoConn) {
				res = r
				return err
			}
		}
		r, err := ep.lease.Acquire(ctx, connect.NewRequest(req))
		if err != nil {
			return err
		}
		res = r.Msg
		return nil
	})
	if err != nil {
		return Lease{}, notApplied(nameHeld(err, name))
	}
	return leaseFromProto(res.GetLease(), sent), nil
}

// notApplied turns the refusal of a retry below its session's floor into
// ErrIndeterminate: the cluster no longer remembers the call's outcome
// (see lease.ErrNotApplied), so an earlier attempt may have taken effect.
func notApplied(err error) error {
	if errors.Is(err, ErrNotApplied) {
		return fmt.Errorf("%w: %w", ErrIndeterminate, err)
	}
	return err
}

// nameHeld fills in the lease name of a *HeldError from the server, whose
// details do not carry it.
func nameHeld(err error, name string) error {
	if he, ok := errors.AsType[*HeldError](err); ok && he.Name == "" {
		he.Name = name
	}
	return err
}

// RenewResult is the outcome of renewing one lease.
type RenewResult struct {
	Ref Ref
	// Lease is the renewed grant when Err is nil.
	Lease Lease
	// Err matches ErrStaleToken when the lease was released, expired or
	// granted again since Ref.Token was issued, and ErrRevoked too (a
	// *RevokedError with the reason) when an operator revoked it.
	Err error
	// HandoffRequested names the waiter that asks the holder to hand
	// over (its priority is higher than the grant's; see Priority), or
	// is "" when none asks.
	HandoffRequested string
}

// Renew extends the leases named by refs by their TTLs (a ref with a TTL
// sets the grant's TTL to it first, within the server's bounds), in one request
// (and one raft entry). It returns one result per ref, in order; a lease
// that could not be renewed has its error in its result, and the returned
// error is only for the request as a whole (bad input, no cluster).
// Renewals are retried on other endpoints; the cluster applies the call
// at most once (see Acquire), and each lease's Sent is when the first
// attempt was sent.
func (c *Client) Renew(ctx context.Context, refs ...Ref) ([]RenewResult, error) {
	id := c.sess.begin()
	defer c.sess.end(id)
	req := &tenurev1.RenewRequest{RequestId: id}
	for _, r := range refs {
		pr := &tenurev1.LeaseRef{Name: r.Name, Token: r.Token}
		if r.TTL != 0 {
			pr.Ttl = durationpb.New(r.TTL)
		}
		req.Leases = append(req.Leases, pr)
	}
	res, sent, err := unaryOrBatched(ctx, c, retryAlways, req,
		leaseService, tenurev1connect.LeaseServiceClient.Renew,
		&tenurev1.BatchOp{Op: &tenurev1.BatchOp_Renew{Renew: req}}, (*tenurev1.BatchResult).GetRenew)
	if err != nil {
		return nil, notApplied(err)
	}
	if len(res.GetResults()) != len(refs) {
		return nil, fmt.Errorf("client: renew of %d leases returned %d results", len(refs), len(res.GetResults()))
	}
	out := make([]RenewResult, len(refs))
	for i, r := range res.GetResults() {
		out[i] = RenewResult{
			Ref: Ref{Name: r.GetName(), Token: r.GetToken()},
			Err: wire.RenewError(r),
		}
		if out[i].Err == nil {
			out[i].Lease = leaseFromProto(r.GetLease(), sent)
			out[i].HandoffRequested = r.GetHandoffRequested()
		}
	}
	return out, nil
}

// RenewOne renews one lease; see Renew.
func (c *Client) RenewOne(ctx context.Context, name string, token uint64) (Lease, error) {
	res, err := c.Renew(ctx, Ref{Name: name, Token: token})
	if err != nil {
		return Lease{}, err
	}
	return res[0].Lease, res[0].Err
}

// Release ends the grant of name with token, so the lease is free (or goes
// to the first waiter) at once. Releasing with a token that is no longer
// the current grant fails with ErrStaleToken. Like Acquire, it is retried
// until it is answered: every attempt carries the call's request ID, and a
// retry of a release that took effect gets that release's outcome.
func (c *Client) Release(ctx context.Context, name string, token uint64) error {
	_, _, err := c.release(ctx, &tenurev1.ReleaseRequest{Name: name, Token: token})
	return notApplied(err)
}

// release sends req, a release or a handoff, as one call of the client's
// session (its request ID set here), retried until answered.
func (c *Client) release(ctx context.Context, req *tenurev1.ReleaseRequest) (*tenurev1.ReleaseResponse, time.Time, error) {
	id := c.sess.begin()
	defer c.sess.end(id)
	req.RequestId = id
	return unaryOrBatched(ctx, c, retryAlways, req,
		leaseService, tenurev1connect.LeaseServiceClient.Release,
		&tenurev1.BatchOp{Op: &tenurev1.BatchOp_Release{Release: req}}, (*tenurev1.BatchResult).GetRelease)
}

// Handoff ends the grant of name with token and, at the same cluster
// time, grants name to the waiter to, or to the first waiter still
// waiting if to is "": the new grant has a new, larger token and starts
// the moment the old one ends, with no gap and no overlap (and no
// lock-delay). It returns the new grant; the waiter's own Acquire
// returns it too.
//
// Stop acting under the old token before calling Handoff: once it
// returns (or even while it is in flight) the new holder may act. If no
// such waiter is waiting it fails with ErrNotFound and changes nothing;
// a stale token fails with ErrStaleToken; a semaphore slot with
// ErrInvalid. It is retried like Release: a retry gets the first
// attempt's outcome.
func (c *Client) Handoff(ctx context.Context, name string, token uint64, to string) (Lease, error) {
	res, sent, err := c.release(ctx, &tenurev1.ReleaseRequest{Name: name, Token: token, Handoff: true, HandoffTo: to})
	if err != nil {
		return Lease{}, notApplied(err)
	}
	return leaseFromProto(res.GetHandedTo(), sent), nil
}

// Revoke ends the live grant of name with token now, or every live grant
// of name (every slot of a semaphore) if token is 0, as an operator: the
// caller needs the admin role. reason (1-256 bytes of printable text) is
// kept with the revoked grant until its old expiry: its holder's next
// renewal, release or write fails with a *RevokedError that carries it
// (ErrRevoked, also ErrStaleToken), and an election session steps down.
// The grant's lock-delay, if it has one, starts now; otherwise the first
// waiter is granted at once, with a larger token, as after a release.
//
// It returns the grants it ended. A name with no such live grant fails
// with ErrNotFound and changes nothing. Revoke is retried like Acquire:
// a retry gets the first attempt's outcome.
func (c *Client) Revoke(ctx context.Context, name string, token uint64, reason string) ([]Lease, error) {
	id := c.sess.begin()
	defer c.sess.end(id)
	res, sent, err := unary(ctx, c, retryAlways, &tenurev1.RevokeRequest{Name: name, Token: token, Reason: reason, RequestId: id},
		leaseService, tenurev1connect.LeaseServiceClient.Revoke)
	if err != nil {
		return nil, notApplied(err)
	}
	out := make([]Lease, 0, len(res.GetRevoked()))
	for _, l := range res.GetRevoked() {
		out = append(out, leaseFromProto(l, sent))
	}
	return out, nil
}

// Get returns the live grant of name, or an error matching ErrNotFound if
// it has none.
func (c *Client) Get(ctx context.Context, name string) (Lease, error) {
	res, sent, err := unary(ctx, c, retryAlways, &tenurev1.GetRequest{Name: name},
		leaseService, tenurev1connect.LeaseServiceClient.Get)
	if err != nil {
		return Lease{}, err
	}
	return leaseFromProto(res.GetLease(), sent), nil
}

// Slots returns every live grant of name, in the order granted: one for a
// plain lease, one per held slot of a semaphore. A name with no grant is
// an error matching ErrNotFound.
func (c *Client) Slots(ctx context.Context, name string) ([]Lease, error) {
	res, sent, err := unary(ctx, c, retryAlways, &tenurev1.GetRequest{Name: name},
		leaseService, tenurev1connect.LeaseServiceClient.Get)
	if err != nil {
		return nil, err
	}
	slots := res.GetSlots()
	if len(slots) == 0 { // a server from before semaphores
		slots = []*tenurev1.Lease{res.GetLease()}
	}
	out := make([]Lease, 0, len(slots))
	for _, l := range slots {
		out = append(out, leaseFromProto(l, sent))
	}
	return out, nil
}

// List returns the live leases whose names start with prefix, sorted by
// name. The empty prefix lists all.
func (c *Client) List(ctx context.Context, prefix string) ([]Lease, error) {
	res, sent, err := unary(ctx, c, retryAlways, &tenurev1.ListRequest{Prefix: prefix},
		leaseService, tenurev1connect.LeaseServiceClient.List)
	if err != nil {
		return nil, err
	}
	out := make([]Lease, 0, len(res.GetLeases()))
	for _, l := range res.GetLeases() {
		out = append(out, leaseFromProto(l, sent))
	}
	return out, nil
}
