package lease_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/tenure-io/tenure/lease"
)

// manualClock is a lease.Clock that moves only when told to.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time          { return c.now }
func (c *manualClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

func ExampleManager() {
	clock := &manualClock{now: time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)}
	m := lease.NewManager(clock, lease.DefaultLimits())

	first, err := m.Acquire("db-primary", "node-a", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s holds %s with token %d\n", first.Holder, first.Name, first.Token)

	// node-a's grant writes under its token.
	if _, err := m.Put("config", []byte("v1"), "db-primary", first.Token); err != nil {
		panic(err)
	}

	clock.Advance(4 * time.Second)
	_, err = m.Acquire("db-primary", "node-b", 10*time.Second)
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Printf("node-b: held by %s (token %d, %s left)\n", held.Holder, held.Token, held.Remaining)
	}

	// node-a stalls past its TTL without renewing.
	clock.Advance(7 * time.Second)
	second, err := m.Acquire("db-primary", "node-b", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s holds %s with token %d\n", second.Holder, second.Name, second.Token)

	// node-a wakes up and tries to write: its token is refused.
	_, err = m.Put("config", []byte("stale"), "db-primary", first.Token)
	fmt.Println("node-a write:", err != nil, errors.Is(err, lease.ErrStaleToken))

	rev, err := m.Put("config", []byte("v2"), "db-primary", second.Token)
	fmt.Println("node-b write: revision", rev, err)

	// Output:
	// node-a holds db-primary with token 1
	// node-b: held by node-a (token 1, 6s left)
	// node-b holds db-primary with token 2
	// node-a write: true true
	// node-b write: revision 2 <nil>
}
