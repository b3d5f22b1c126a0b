package httpfence

import (
	"context"
	"sync"

	"github.com/tenure-io/tenure/fence"
)

// Fence is where the middleware keeps the fence of each resource.
type Fence interface {
	// Enter admits a request carrying token for resource if token is not
	// lower than the highest recorded, and records it; otherwise it
	// returns a *fence.StaleError. The caller calls exit when the request
	// has been handled. An implementation may hold a request back until
	// requests with other tokens for the same resource have exited.
	Enter(ctx context.Context, resource string, token uint64) (exit func(), err error)
}

// Advancer is a fence kept in a store: pgfence.Fence, redisfence.Fence
// and filefence.Dir are Advancers.
type Advancer interface {
	// Advance records token for resource if it is not lower than the
	// highest recorded, and returns a *fence.StaleError otherwise.
	Advance(ctx context.Context, resource string, token uint64) error
}

// Memory is a Fence in this process's memory. It admits the requests of
// one token at a time per resource: a request with a higher token waits
// for the requests of lower tokens that are being handled to finish, and
// from the moment it arrives requests with lower tokens are refused. So
// a handler never acts for an older token after one for a newer token
// started. Requests with the same token run concurrently.
//
// The zero Memory is not ready; use NewMemory. It forgets everything when
// the process ends, and keeps a small record per resource it ever saw.
type Memory struct {
	mu    sync.Mutex
	gates map[string]*gate
}

// gate is one resource's state.
type gate struct {
	highest uint64
	// active requests, all with token running.
	active  int
	running uint64
	// changed is closed and replaced whenever active drops to zero.
	changed chan struct{}
}

// NewMemory returns an empty in-memory fence.
func NewMemory() *Memory { return &Memory{gates: make(map[string]*gate)} }

var _ Fence = (*Memory)(nil)

// Enter implements Fence.
func (m *Memory) Enter(ctx context.Context, resource string, token uint64) (func(), error) {
	if err := fence.Check(resource, token); err != nil {
		return nil, err
	}
	m.mu.Lock()
	g := m.gates[resource]
	if g == nil {
		g = &gate{changed: make(chan struct{})}
		m.gates[resource] = g
	}
	for {
		if token < g.highest {
			h := g.highest
			m.mu.Unlock()
			return nil, &fence.StaleError{Resource: resource, Token: token, Highest: h}
		}
		g.highest = token
		if g.active == 0 || g.running == token {
			g.active++
			g.running = token
			m.mu.Unlock()
			return m.exitFunc(g), nil
		}
		// Requests of an older token are in flight: wait for them.
		ch := g.changed
		m.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		m.mu.Lock()
	}
}

func (m *Memory) exitFunc(g *gate) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			g.active--
			if g.active == 0 {
				close(g.changed)
				g.changed = make(chan struct{})
			}
		})
	}
}

// Highest returns the highest token recorded for resource, 0 for none.
func (m *Memory) Highest(resource string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if g := m.gates[resource]; g != nil {
		return g.highest
	}
	return 0
}

// Stored returns a Fence kept in a store that several replicas of a
// service share (Postgres, Redis, a directory): a request passes if its
// token passes the store's fence. Within this process, requests also go
// through a Memory first, so its handlers never overlap across tokens;
// across replicas, the store only refuses tokens lower than the highest
// recorded: a request of an older token that passed on one replica can
// still be running when a newer one passes on another. Fence the
// handler's own writes with the store's guard where that matters.
func Stored(store Advancer) Fence { return &stored{mem: NewMemory(), store: store} }

type stored struct {
	mem   *Memory
	store Advancer
}

func (s *stored) Enter(ctx context.Context, resource string, token uint64) (func(), error) {
	exit, err := s.mem.Enter(ctx, resource, token)
	if err != nil {
		return nil, err
	}
	if err := s.store.Advance(ctx, resource, token); err != nil {
		exit()
		return nil, err
	}
	return exit, nil
}
