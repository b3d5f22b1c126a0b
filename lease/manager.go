package lease

import (
	"slices"
	"sync"
	"time"
)

// Clock gives monotonic time. time.Now satisfies it through SystemClock;
// tests inject a fake.
type Clock interface {
	Now() time.Time
}

// SystemClock reads the machine's monotonic clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Manager is an in-process lease manager: a State, the limits and a clock,
// safe for concurrent use. Cluster time is the clock's time since the
// Manager was created. Expired leases are freed lazily by the commands that
// find them, so a Manager needs no background goroutine.
//
// A Manager does not survive the process; the node package is the durable,
// replicated version of the same state machine.
type Manager struct {
	mu     sync.Mutex
	st     *State
	clock  Clock
	start  time.Time
	limits Limits
}

// NewManager returns an empty Manager. A nil clock means SystemClock.
func NewManager(clock Clock, limits Limits) *Manager {
	if clock == nil {
		clock = SystemClock{}
	}
	return &Manager{st: New(), clock: clock, start: clock.Now(), limits: limits}
}

// Do validates and applies ops as one batch stamped with the clock's time.
// If any op is invalid nothing is applied and the error is returned.
func (m *Manager) Do(ops ...Op) ([]Result, []Event, error) {
	for _, op := range ops {
		if err := m.limits.Validate(op); err != nil {
			return nil, nil, err
		}
	}
	// As Limits documents (and as the node does), a wait with no timeout
	// waits MaxWait. A zero timeout would queue a waiter that is already
	// past its deadline and can never be granted.
	copied := false
	for i := range ops {
		if ops[i].Type == OpAcquire && ops[i].Wait && ops[i].WaitTimeout <= 0 {
			if !copied {
				ops, copied = slices.Clone(ops), true // keep the caller's ops
			}
			ops[i].WaitTimeout = m.limits.MaxWait
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t := m.clock.Now()
	res, ev := m.st.Apply(Batch{Now: t.Sub(m.start), Wall: t.UnixNano(), Ops: ops})
	return res, ev, nil
}

func (m *Manager) do1(op Op) Result {
	res, _, err := m.Do(op)
	if err != nil {
		return Result{Err: err}
	}
	return res[0]
}

// Acquire grants name to holder for ttl, or renews it if holder already
// holds it. It fails with a *HeldError if another holder has it.
func (m *Manager) Acquire(name, holder string, ttl time.Duration) (Lease, error) {
	r := m.do1(Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl})
	return r.Lease, r.Err
}

// AcquireSlot acquires one of the limit slots of the semaphore name for
// holder, or renews holder's slot. It fails with a *HeldError if every
// slot is held by others, and with ErrInvalid if name is held with
// another limit.
func (m *Manager) AcquireSlot(name, holder string, limit int, ttl time.Duration) (Lease, error) {
	r := m.do1(Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl, Limit: limit})
	return r.Lease, r.Err
}

// AcquireShared acquires a shared (read) grant of name for holder, or
// renews holder's shared grant. It fails with a *HeldError if name is
// held exclusive or a waiter is queued (see shared.go).
func (m *Manager) AcquireShared(name, holder string, ttl time.Duration) (Lease, error) {
	r := m.do1(Op{Type: OpAcquire, Name: name, Holder: holder, TTL: ttl, Shared: true})
	return r.Lease, r.Err
}

// Renew extends the grant name/token by its TTL.
func (m *Manager) Renew(name string, token uint64) (Lease, error) {
	r := m.do1(Op{Type: OpRenew, Refs: []Ref{{Name: name, Token: token}}})
	if r.Err != nil {
		return Lease{}, r.Err
	}
	return r.Renewed[0].Lease, r.Renewed[0].Err
}

// Release frees the grant name/token.
func (m *Manager) Release(name string, token uint64) error {
	return m.do1(Op{Type: OpRelease, Name: name, Token: token}).Err
}

// Get returns the live lease of name.
func (m *Manager) Get(name string) (Lease, error) {
	r := m.do1(Op{Type: OpGet, Name: name})
	return r.Lease, r.Err
}

// List returns the live leases whose names start with prefix.
func (m *Manager) List(prefix string) ([]Lease, error) {
	r := m.do1(Op{Type: OpList, Prefix: prefix})
	return r.Leases, r.Err
}

// Put writes key=value fenced by the grant lease/token.
func (m *Manager) Put(key string, value []byte, lease string, token uint64) (uint64, error) {
	r := m.do1(Op{Type: OpPut, Key: key, Value: value, Name: lease, Token: token})
	return r.Revision, r.Err
}

// Delete removes key, fenced by the grant lease/token.
func (m *Manager) Delete(key, lease string, token uint64) (uint64, error) {
	r := m.do1(Op{Type: OpDelete, Key: key, Name: lease, Token: token})
	return r.Revision, r.Err
}

// KVList returns the values of the keys that start with prefix, sorted
// by key.
func (m *Manager) KVList(prefix string) ([]Entry, error) {
	r := m.do1(Op{Type: OpKVList, Prefix: prefix})
	return r.Entries, r.Err
}

// KVGet returns the value of key.
func (m *Manager) KVGet(key string) (Entry, error) {
	r := m.do1(Op{Type: OpKVGet, Key: key})
	return r.Entry, r.Err
}

// History returns the kept terms of name, oldest first. A Manager keeps
// none until Do(HistoryConfigOp(...)) sets a retention.
func (m *Manager) History(name string) ([]Term, error) {
	r := m.do1(Op{Type: OpHistory, Name: name})
	return r.Terms, r.Err
}
