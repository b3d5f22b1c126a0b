package node

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/tenure-io/tenure/lease"
)

var (
	// ErrWatchLagged ends a watch whose reader fell too far behind. The
	// client starts a new watch, which begins with the current state
	// again.
	ErrWatchLagged = errors.New("node: watcher fell behind; watch again")
	// ErrWatchReset ends every watch of a node that replaced its state
	// with a snapshot (a follower that fell too far behind the leader's
	// log): the events between its old state and the snapshot were never
	// applied here, so no watch can report them. The client starts a new
	// watch, which begins with the current state again.
	ErrWatchReset = errors.New("node: state replaced by a snapshot; watch again")
)

// WatchEvent is an applied grant, release or expiry.
type WatchEvent struct {
	lease.Event
	// Index is the raft index of the entry that produced the event.
	Index uint64
}

// Watch follows the leases whose names start with a prefix.
type Watch struct {
	// Current lists the leases stored when the watch started.
	Current []lease.Lease
	// Now is the cluster time Current was read at.
	Now time.Duration
	// Events delivers every later event in commit order. It is closed when
	// the watch ends; Err then says why.
	Events <-chan WatchEvent

	sub *subscriber
	hub *hub
}

// Err returns why Events was closed: ErrWatchLagged, ErrWatchReset,
// ErrClosed, or nil if the watch was cancelled.
func (w *Watch) Err() error {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	return w.sub.err
}

// Cancel ends the watch; events not yet received are dropped.
func (w *Watch) Cancel() {
	w.hub.remove(w.sub, nil)
	w.sub.stopOnce.Do(func() { close(w.sub.stop) })
}

// A subscriber's events wait in queue, which grows only as far as they
// come in (a watch that sees nothing costs a goroutine and no buffer;
// thousands of quiet watches stay cheap), up to the hub's bufSize, past
// which the watch has lagged. Its pump goroutine moves them to ch.
type subscriber struct {
	prefix string
	ch     chan WatchEvent
	wake   chan struct{} // a token when queue grew or the watch ended
	stop   chan struct{} // closed by Cancel: the pump quits at once
	// stopOnce guards closing stop.
	stopOnce sync.Once

	// hub.mu:
	queue []WatchEvent
	ended bool // removed: deliver what is queued, then close ch
	err   error
}

func (s *subscriber) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pump delivers s's queued events to s.ch in order, and closes s.ch once
// the watch ended and everything queued was delivered, or at once when
// it was cancelled.
func (h *hub) pump(s *subscriber) {
	defer close(s.ch)
	for {
		h.mu.Lock()
		q, ended := s.queue, s.ended
		s.queue = nil
		h.mu.Unlock()
		for _, ev := range q {
			select {
			case s.ch <- ev:
			case <-s.stop:
				return
			}
		}
		if len(q) > 0 {
			continue
		}
		if ended {
			return
		}
		select {
		case <-s.wake:
		case <-s.stop:
			return
		}
	}
}

type waitKey struct{ name, holder string }

// hub fans applied events out to watchers and to callers parked on a
// queued acquire. publish runs under the FSM lock, so a watch that reads
// the current state under the same lock misses nothing.
type hub struct {
	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	waits   map[waitKey]map[chan lease.Lease]struct{}
	lost    chan struct{} // closed when leadership is lost; then replaced
	closed  bool
	bufSize int
}

func newHub() *hub {
	return &hub{
		subs:    make(map[*subscriber]struct{}),
		waits:   make(map[waitKey]map[chan lease.Lease]struct{}),
		lost:    make(chan struct{}),
		bufSize: 1024,
	}
}

func (h *hub) publish(index uint64, events []lease.Event) {
	if len(events) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range events {
		if ev.Type == lease.EventGranted {
			for ch := range h.waits[waitKey{ev.Lease.Name, ev.Lease.Holder}] {
				select {
				case ch <- ev.Lease:
				default:
				}
			}
		}
		for s := range h.subs {
			if !strings.HasPrefix(ev.Lease.Name, s.prefix) {
				continue
			}
			if len(s.queue) >= h.bufSize {
				h.removeLocked(s, ErrWatchLagged)
				continue
			}
			s.queue = append(s.queue, WatchEvent{Event: ev, Index: index})
			s.notify()
		}
	}
}

func (h *hub) removeLocked(s *subscriber, err error) {
	if _, ok := h.subs[s]; !ok {
		return
	}
	delete(h.subs, s)
	s.err, s.ended = err, true
	s.notify()
}

func (h *hub) remove(s *subscriber, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removeLocked(s, err)
}

func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		h.removeLocked(s, ErrClosed)
	}
}

// reset ends every watch with ErrWatchReset and wakes every parked
// acquire, after the state was replaced by a snapshot. It runs under the
// FSM lock, like publish.
func (h *hub) reset() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.subs)
	for s := range h.subs {
		h.removeLocked(s, ErrWatchReset)
	}
	h.wakeWaitsLocked()
	return n
}

func (h *hub) leadershipLost() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakeWaitsLocked()
}

// wakeWaitsLocked ends every parked acquire with ErrIndeterminate.
func (h *hub) wakeWaitsLocked() {
	close(h.lost)
	h.lost = make(chan struct{})
}

// Watches returns how many watches this node serves now.
func (n *Node) Watches() int {
	h := n.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Watch starts a watch of the leases whose names start with prefix. It is
// served from this node's applied state, leader or not. Current holds the
// leases live at the applied cluster time: a lease that has expired but
// not yet been freed is left out (its expiry event may still follow).
func (n *Node) Watch(prefix string) (*Watch, error) {
	n.fsm.mu.RLock()
	defer n.fsm.mu.RUnlock()
	h := n.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	s := &subscriber{prefix: prefix, ch: make(chan WatchEvent), wake: make(chan struct{}, 1), stop: make(chan struct{})}
	h.subs[s] = struct{}{}
	go h.pump(s)
	now := n.fsm.st.Now()
	var cur []lease.Lease
	for _, l := range n.fsm.st.Leases(prefix) {
		if l.ExpiresAt > now {
			cur = append(cur, l)
		}
	}
	return &Watch{
		Current: cur,
		Now:     now,
		Events:  s.ch,
		sub:     s,
		hub:     h,
	}, nil
}

// lastTry is the plain acquire that ends a waiting acquire op whose wait
// ran out: the same call (its session and seq: its result replaces the
// queued one), with every field of op but the wait, so that a grant that
// raced the timeout is renewed as asked (its TTL, its lock-delay).
func lastTry(op lease.Op) lease.Op {
	op.Wait, op.WaitTimeout = false, 0
	return op
}

// Acquire proposes an OpAcquire. Without op.Wait it is Do1. With op.Wait,
// if the lease is held the holder is queued in the state machine and
// Acquire parks until the grant to it is applied, the wait times out (then
// it leaves the queue and returns the *lease.HeldError), ctx ends, or this
// node loses leadership or replaces its state with a snapshot
// (ErrIndeterminate: the caller may retry and keeps its place in the
// queue).
func (n *Node) Acquire(ctx context.Context, op lease.Op) (lease.Result, error) {
	if !op.Wait {
		return n.Do1(ctx, op)
	}
	if op.WaitTimeout <= 0 {
		op.WaitTimeout = n.limits.MaxWait
	}
	key := waitKey{op.Name, op.Holder}
	ch := make(chan lease.Lease, 1)
	h := n.hub
	h.mu.Lock()
	if h.waits[key] == nil {
		h.waits[key] = make(map[chan lease.Lease]struct{})
	}
	h.waits[key][ch] = struct{}{}
	lost := h.lost
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.waits[key], ch)
		if len(h.waits[key]) == 0 {
			delete(h.waits, key)
		}
		h.mu.Unlock()
	}()

	start := time.Now()
	res, err := n.Do1(ctx, op)
	if !res.Queued {
		return res, err
	}
	timer := time.NewTimer(op.WaitTimeout - time.Since(start))
	defer timer.Stop()
	select {
	case l := <-ch:
		return lease.Result{Lease: l, Now: l.GrantedAt}, nil
	case <-timer.C:
		// Leave the queue; if the grant raced the timeout, the acquire
		// in the same batch renews it and returns it.
		res, err := n.Do(ctx,
			lease.Op{Type: lease.OpCancelWait, Name: op.Name, Holder: op.Holder, Principal: op.Principal},
			lastTry(op))
		if err != nil {
			return lease.Result{}, err
		}
		return res[1], res[1].Err
	case <-lost:
		return lease.Result{}, ErrIndeterminate
	case <-ctx.Done():
		cctx, cancel := context.WithTimeout(context.Background(), n.cfg.ApplyTimeout)
		defer cancel()
		_, _ = n.Do(cctx, lease.Op{Type: lease.OpCancelWait, Name: op.Name, Holder: op.Holder, Principal: op.Principal})
		return lease.Result{}, ctx.Err()
	}
}
