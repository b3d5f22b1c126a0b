package election_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/lease"
)

// fakeCluster is a lease server in memory: a lease.Manager whose clock is
// time.Now, which inside a synctest bubble is the bubble's fake clock.
// Each fakeClient reaches it over a "network" that a test can cut.
type fakeCluster struct {
	m *lease.Manager

	mu       sync.Mutex
	freed    chan struct{} // closed and replaced when a lease is freed
	renewals []renewCall
	subs     map[*fakeSub]struct{}
	// onRelease, if set, runs before a release is applied.
	onRelease func(name string, token uint64)
}

type renewCall struct {
	at    time.Time
	names []string
}

func (r renewCall) String() string {
	return fmt.Sprintf("%s %s", r.at.Format("15:04:05.000"), strings.Join(r.names, ","))
}

type fakeSub struct {
	prefix string
	ch     chan client.WatchEvent
}

func newFakeCluster() *fakeCluster {
	return &fakeCluster{
		m:     lease.NewManager(nil, lease.DefaultLimits()),
		freed: make(chan struct{}),
		subs:  make(map[*fakeSub]struct{}),
	}
}

// do applies op and tells waiters and watchers what happened.
func (f *fakeCluster) do(op lease.Op) lease.Result {
	res, events, err := f.m.Do(op)
	if err != nil {
		return lease.Result{Err: err}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range events {
		if ev.Type != lease.EventGranted {
			close(f.freed)
			f.freed = make(chan struct{})
		}
		for s := range f.subs {
			if strings.HasPrefix(ev.Lease.Name, s.prefix) {
				select {
				case s.ch <- client.WatchEvent{Type: watchType(ev.Type), Lease: toClient(ev.Lease, ev.At, time.Time{})}:
				default:
				}
			}
		}
	}
	return res[0]
}

func watchType(t lease.EventType) client.EventType {
	switch t {
	case lease.EventGranted:
		return client.EventGranted
	case lease.EventReleased:
		return client.EventReleased
	}
	return client.EventExpired
}

func (f *fakeCluster) freedCh() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.freed
}

// renewCalls returns the renewals the server received.
func (f *fakeCluster) renewCalls() []renewCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]renewCall(nil), f.renewals...)
}

func toClient(l lease.Lease, now time.Duration, sent time.Time) client.Lease {
	return client.Lease{Name: l.Name, Holder: l.Holder, Token: l.Token, TTL: l.TTL, Remaining: l.Remaining(now), Sent: sent}
}

// fakeClient is one client of a fakeCluster.
type fakeClient struct {
	f *fakeCluster

	mu      sync.Mutex
	cut     bool          // requests hang until their context ends
	latency time.Duration // between a request's send and its apply
}

var _ election.Client = (*fakeClient)(nil)

func (f *fakeCluster) client() *fakeClient { return &fakeClient{f: f} }

// setCut cuts (or heals) the client's network.
func (c *fakeClient) setCut(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
}

// send is a request's way to the server: it fails like the real client
// when the network is cut and the caller's context ends.
func (c *fakeClient) send(ctx context.Context) error {
	c.mu.Lock()
	cut, latency := c.cut, c.latency
	c.mu.Unlock()
	if cut {
		<-ctx.Done()
		return fmt.Errorf("%w: %w", client.ErrUnavailable, context.Cause(ctx))
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", client.ErrUnavailable, context.Cause(ctx))
		}
	}
	return ctx.Err()
}

func (c *fakeClient) Acquire(ctx context.Context, name, holder string, ttl time.Duration, opts ...client.AcquireOption) (client.Lease, error) {
	set := client.NewAcquireSettings(opts...)
	sent := time.Now()
	if err := c.send(ctx); err != nil {
		return client.Lease{}, err
	}
	var timeout <-chan time.Time
	if set.Wait && set.WaitTimeout > 0 {
		t := time.NewTimer(set.WaitTimeout)
		defer t.Stop()
		timeout = t.C
	}
	for {
		freed := c.f.freedCh()
		res := c.f.do(lease.Op{Type: lease.OpAcquire, Name: name, Holder: holder, TTL: ttl, Limit: set.Limit})
		if res.Err == nil {
			return toClient(res.Lease, res.Now, sent), nil
		}
		held, ok := errors.AsType[*lease.HeldError](res.Err)
		if !ok || !set.Wait {
			return client.Lease{}, res.Err
		}
		expiry := time.NewTimer(held.Remaining)
		select {
		case <-freed:
		case <-expiry.C:
		case <-timeout:
			return client.Lease{}, res.Err
		case <-ctx.Done():
			return client.Lease{}, ctx.Err()
		}
		expiry.Stop()
	}
}

func (c *fakeClient) Renew(ctx context.Context, refs ...client.Ref) ([]client.RenewResult, error) {
	sent := time.Now()
	if err := c.send(ctx); err != nil {
		return nil, err
	}
	call := renewCall{at: time.Now()}
	for _, r := range refs {
		call.names = append(call.names, r.Name)
	}
	c.f.mu.Lock()
	c.f.renewals = append(c.f.renewals, call)
	c.f.mu.Unlock()
	res := c.f.do(lease.Op{Type: lease.OpRenew, Refs: refs})
	if res.Err != nil {
		return nil, res.Err
	}
	out := make([]client.RenewResult, len(res.Renewed))
	for i, r := range res.Renewed {
		out[i] = client.RenewResult{Ref: r.Ref, Err: r.Err}
		if r.Err == nil {
			out[i].Lease = toClient(r.Lease, res.Now, sent)
		}
	}
	return out, nil
}

func (c *fakeClient) Release(ctx context.Context, name string, token uint64) error {
	if err := c.send(ctx); err != nil {
		return err
	}
	if hook := c.f.onRelease; hook != nil {
		hook(name, token)
	}
	return c.f.do(lease.Op{Type: lease.OpRelease, Name: name, Token: token}).Err
}

func (c *fakeClient) Put(ctx context.Context, key string, value []byte, leaseName string, token uint64) (uint64, error) {
	if err := c.send(ctx); err != nil {
		return 0, err
	}
	res := c.f.do(lease.Op{Type: lease.OpPut, Key: key, Value: value, Name: leaseName, Token: token})
	return res.Revision, res.Err
}

func (c *fakeClient) Delete(ctx context.Context, key, leaseName string, token uint64) (uint64, error) {
	if err := c.send(ctx); err != nil {
		return 0, err
	}
	res := c.f.do(lease.Op{Type: lease.OpDelete, Key: key, Name: leaseName, Token: token})
	return res.Revision, res.Err
}

// Watch sends the live leases, a synced marker, then every event. The
// stream is not affected by later cuts.
func (c *fakeClient) Watch(ctx context.Context, prefix string) (<-chan client.WatchEvent, error) {
	if err := c.send(ctx); err != nil {
		return nil, err
	}
	sub := &fakeSub{prefix: prefix, ch: make(chan client.WatchEvent, 256)}
	f := c.f
	f.mu.Lock()
	res, _, err := f.m.Do(lease.Op{Type: lease.OpList, Prefix: prefix})
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	for _, l := range res[0].Leases {
		sub.ch <- client.WatchEvent{Type: client.EventCurrent, Lease: toClient(l, res[0].Now, time.Time{})}
	}
	sub.ch <- client.WatchEvent{Type: client.EventSynced}
	f.subs[sub] = struct{}{}
	f.mu.Unlock()
	out := make(chan client.WatchEvent)
	go func() {
		defer close(out)
		defer func() {
			f.mu.Lock()
			delete(f.subs, sub)
			f.mu.Unlock()
		}()
		for {
			select {
			case ev := <-sub.ch:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// holdFor has holder acquire name on the fake server directly, outside
// any session, and returns the grant.
func (f *fakeCluster) holdFor(t *testing.T, name, holder string, ttl time.Duration) lease.Lease {
	t.Helper()
	res := f.do(lease.Op{Type: lease.OpAcquire, Name: name, Holder: holder, TTL: ttl})
	if res.Err != nil {
		t.Fatalf("acquire %s for %s: %v", name, holder, res.Err)
	}
	return res.Lease
}
