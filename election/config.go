package election

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tenure-io/tenure/client"
)

// Config configures a Session. The zero value of each field means its
// default; most defaults derive from TTL.
type Config struct {
	// Holder names the session's holder on the server. Two sessions must
	// not share a holder: the server treats an acquire by the current
	// holder as a renewal. Default: HOSTNAME-PID-RANDOM, new for every
	// session.
	Holder string
	// TTL is the time to live of every lease of the session: how long a
	// grant or renewal keeps the lease on the server. The server rejects
	// TTLs below its minimum (2s by default) with client.ErrInvalid.
	// Default 10s.
	TTL time.Duration
	// RenewInterval is how long after the send time of the last successful
	// renewal (or grant) the next one is sent. All leases of the session
	// are renewed together in one request. Default TTL/3.
	RenewInterval time.Duration
	// RenewTimeout bounds one renewal attempt. An attempt that is not
	// confirmed within it counts as failed: the leases turn AtRisk and the
	// renewal is tried again at once. Default RenewInterval/2.
	RenewTimeout time.Duration
	// Drift bounds how much faster the server's clock may run than this
	// machine's, as a fraction: 0.01 is 1%. Default 0.01.
	Drift float64
	// Margin is kept between the local deadline and the earliest moment
	// the server could expire the lease: the time a holder has to stop
	// after its context ended. Default max(TTL/10, 100ms).
	Margin time.Duration
	// LockDelay gives every grant of the session a lock-delay (see
	// client.LockDelay): if the session loses a lease without releasing
	// it (it expires, or an operator revokes it), the server grants it to
	// nobody for LockDelay more. At most 1 minute by default (the
	// server's bound). A LockDelay of TTL or more also keeps a revoked
	// term from overlapping the next one: the old holder's context ends
	// before its old grant would have expired. Default 0: none.
	LockDelay time.Duration
	// Priority is stated with every acquire of the session (see
	// client.Priority), 0 to 1000000. The server's queue stays first
	// come, first served; a waiting session whose Priority is higher than
	// the holder's asks the holder to hand over, and the holder learns it
	// at its next renewal. Default 0.
	Priority int
	// KeepOnHandoffRequest keeps the session's leases when a waiter of
	// a higher priority asks for one. By default the session hands the
	// lease over to it (Lease.Handoff) as soon as a renewal reports the
	// request: the lease's context ends, then the waiter is granted.
	KeepOnHandoffRequest bool
}

// DefaultConfig returns the defaults: TTL 10s and Drift 0.01. Holder and
// the fields derived from TTL are left zero, so that New picks a new
// holder name and the derived fields follow a changed TTL.
func DefaultConfig() Config {
	return Config{TTL: 10 * time.Second, Drift: 0.01}
}

// WithDefaults returns c with its zero fields set to their defaults: a new
// holder name if Holder is empty, and the fields derived from TTL.
func (c Config) WithDefaults() Config {
	if c.Holder == "" {
		c.Holder = DefaultHolder()
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = c.TTL / 3
	}
	if c.RenewTimeout == 0 {
		c.RenewTimeout = c.RenewInterval / 2
	}
	if c.Drift == 0 {
		c.Drift = 0.01
	}
	if c.Margin == 0 {
		c.Margin = max(c.TTL/10, 100*time.Millisecond)
	}
	return c
}

// Validate reports the first problem with c after defaults are applied.
func (c Config) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.TTL < 0:
		return fmt.Errorf("election: TTL must be positive, got %s", c.TTL)
	case c.RenewInterval < 0 || c.RenewTimeout < 0 || c.Margin < 0:
		return errors.New("election: RenewInterval, RenewTimeout and Margin must not be negative")
	case c.LockDelay < 0:
		return fmt.Errorf("election: LockDelay must not be negative, got %s", c.LockDelay)
	case c.Priority < 0 || c.Priority > 1000000:
		return fmt.Errorf("election: Priority must be in [0, 1000000], got %d", c.Priority)
	case c.Drift < 0 || c.Drift >= 0.5:
		return fmt.Errorf("election: Drift must be in [0, 0.5), got %g", c.Drift)
	}
	if safe := c.safeFor(c.TTL); c.RenewInterval >= safe {
		return fmt.Errorf("election: RenewInterval %s is not shorter than the %s a lease stays safe without renewal (TTL*(1-Drift)-Margin)",
			c.RenewInterval, safe)
	}
	return nil
}

// Lifetime returns how long a lease of c stays safe to act on after the
// send time of its last successful grant or renewal, with the defaults
// applied: TTL*(1-Drift) - Margin. The lease's context ends then unless a
// renewal succeeded.
func (c Config) Lifetime() time.Duration {
	c = c.WithDefaults()
	return c.safeFor(c.TTL)
}

// safeFor returns how long after its send time a grant that has d left on
// the server is safe to act on: d*(1-Drift) - Margin.
func (c Config) safeFor(d time.Duration) time.Duration {
	return time.Duration(float64(d)*(1-c.Drift)) - c.Margin
}

// deadline returns the local deadline of a grant or renewal: its send time
// plus what is safe of the time it had left on the server (the TTL for a
// fresh grant or renewal).
func (c Config) deadline(cl client.Lease) time.Time {
	d := cl.TTL
	if cl.Remaining > 0 && (d <= 0 || cl.Remaining < d) {
		d = cl.Remaining
	}
	if d <= 0 {
		d = c.TTL
	}
	return cl.Sent.Add(c.safeFor(d))
}

// DefaultHolder returns a holder name unique to this call: the host name,
// the process ID and a random suffix.
func DefaultHolder() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "tenure"
	}
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), strings.ToLower(rand.Text()[:8]))
}
