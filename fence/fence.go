package fence

import (
	"errors"
	"fmt"
	"math"
	"sync"
)

// Lease is what a guard needs to know of a write's authority: the resource
// it fences (its name) and its fencing token. *election.Lease satisfies it;
// Grant makes one from plain values.
type Lease interface {
	Name() string
	Token() uint64
}

// Grant returns a Lease with the given name and token, for a token that
// did not come from an *election.Lease (a command line, $TENURE_TOKEN, a
// message).
func Grant(name string, token uint64) Lease { return grant{name, token} }

type grant struct {
	name  string
	token uint64
}

func (g grant) Name() string  { return g.name }
func (g grant) Token() uint64 { return g.token }

// Sentinels.
var (
	// ErrStale is matched by the *StaleError a guard returns when a write's
	// token is lower than the highest token recorded for its resource.
	ErrStale = errors.New("fence: stale token")
	// ErrInvalid is matched by the errors a guard returns, before it
	// touches the store, for a write it cannot fence: ErrEmptyResource,
	// ErrZeroToken, a token too large for the store.
	ErrInvalid = errors.New("fence: invalid argument")
	// ErrEmptyResource is returned for a write whose resource (lease name)
	// is empty. It matches ErrInvalid.
	ErrEmptyResource error = &invalidError{"fence: empty resource name"}
	// ErrZeroToken is returned for a write with token 0, which tenure
	// never grants (it means "no token"). It matches ErrInvalid.
	ErrZeroToken error = &invalidError{"fence: token 0 is not a grant's token"}
)

// invalidError is an invalid argument that matches ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an error that matches ErrInvalid, with the message
// "fence: " followed by the formatted text. Guards use it for limits of
// their own stores.
func Invalid(format string, args ...any) error {
	return &invalidError{"fence: " + fmt.Sprintf(format, args...)}
}

// StaleError is a write refused because its token is lower than the
// highest token recorded for its resource. It matches ErrStale.
type StaleError struct {
	// Resource is the fenced resource.
	Resource string
	// Token is the refused write's token.
	Token uint64
	// Highest is the highest token recorded for Resource when the write
	// was refused; it is larger than Token.
	Highest uint64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token %d for %q: a write with token %d was accepted", e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// Check returns the first problem with a write to resource with token,
// before any store is touched: ErrEmptyResource or ErrZeroToken.
func Check(resource string, token uint64) error {
	switch {
	case resource == "":
		return ErrEmptyResource
	case token == 0:
		return ErrZeroToken
	}
	return nil
}

// CheckInt64 is Check for stores that keep tokens as signed 64-bit
// integers (Postgres bigint): it also refuses tokens above math.MaxInt64.
func CheckInt64(resource string, token uint64) error {
	if err := Check(resource, token); err != nil {
		return err
	}
	if token > math.MaxInt64 {
		return Invalid("token %d does not fit in a signed 64-bit integer", token)
	}
	return nil
}

// Memory is a fence kept in this process's memory: the highest token seen
// per resource. It is the fence of one process (an HTTP service with a
// single replica, a test); it forgets everything when the process ends.
// The zero Memory is ready to use and safe for concurrent use.
type Memory struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// Advance accepts token for resource if it is not lower than the highest
// recorded, and records it; otherwise it returns a *StaleError.
func (m *Memory) Advance(resource string, token uint64) error {
	if err := Check(resource, token); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h := m.highest[resource]; token < h {
		return &StaleError{Resource: resource, Token: token, Highest: h}
	}
	if m.highest == nil {
		m.highest = make(map[string]uint64)
	}
	m.highest[resource] = token
	return nil
}

// Highest returns the highest token recorded for resource, 0 for none.
func (m *Memory) Highest(resource string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.highest[resource]
}
