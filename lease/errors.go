package lease

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Reasons carried on the wire with failed_precondition and not_found errors.
const (
	ReasonLeaseHeld  = "LEASE_HELD"
	ReasonStaleToken = "STALE_TOKEN"
	ReasonNotFound   = "NOT_FOUND"
	// ReasonForbidden goes with permission_denied: the grant belongs to
	// another principal.
	ReasonForbidden = "FORBIDDEN"
	// ReasonNotApplied goes with failed_precondition: the request is
	// below its session's floor and was not applied.
	ReasonNotApplied = "NOT_APPLIED"
)

var (
	// ErrHeld is returned by Acquire when another holder has a live grant of
	// the name. The error is a *HeldError with the details.
	ErrHeld = errors.New("lease: held by another holder")
	// ErrStaleToken is returned by Renew, Release, Put and Delete when the
	// token is not the current, unexpired grant of the lease, or (for Put and
	// Delete) is lower than the last token accepted for the key.
	ErrStaleToken = errors.New("lease: stale token")
	// ErrNotFound is returned by Get when the name has no live lease and by
	// KV Get when the key holds no value.
	ErrNotFound = errors.New("lease: not found")
	// ErrInvalid is returned for malformed requests: empty or oversized
	// names, TTLs out of bounds, values over the limit. Errors wrapping it
	// describe the field.
	ErrInvalid = errors.New("lease: invalid argument")
	// ErrForbidden is returned by Acquire, Renew, Release, Put and Delete
	// when the grant was acquired by another principal. The error is a
	// *ForbiddenError.
	ErrForbidden = errors.New("lease: not permitted")
	// ErrNotApplied is returned for a request of a client session whose
	// seq is below the session's floor: its client had already given up
	// on the call (a delayed copy of it arrived late), or its outcome is
	// too old to be remembered (see session.go). The request had no
	// effect; an earlier attempt of the same call may have had one.
	ErrNotApplied = errors.New("lease: request below its session's floor, not applied")
	// ErrRevoked is returned by Renew, Release, Put and Delete for a
	// grant an operator revoked (OpRevoke), while the grant would
	// otherwise still be live. The error is a *RevokedError, with the
	// operator's reason; it also matches ErrStaleToken.
	ErrRevoked = errors.New("lease: revoked by an operator")
)

// RevokedError reports a token whose grant an operator revoked, with the
// reason given. errors.Is matches both ErrRevoked and ErrStaleToken: a
// revoked token fences nothing, as a stale one.
type RevokedError struct {
	Name   string
	Token  uint64
	Reason string
}

func (e *RevokedError) Error() string {
	return fmt.Sprintf("lease: %q token %d was revoked by an operator: %s", e.Name, e.Token, e.Reason)
}

// Unwrap makes errors.Is(err, ErrRevoked) and errors.Is(err,
// ErrStaleToken) true.
func (e *RevokedError) Unwrap() []error { return []error{ErrRevoked, ErrStaleToken} }

// ForbiddenError reports an operation on a grant that another principal
// acquired. It does not name that principal.
type ForbiddenError struct {
	Name      string
	Token     uint64
	Principal string // the caller
	Action    string // "renew", "release", "write with", "acquire"
}

func (e *ForbiddenError) Error() string {
	who := strconv.Quote(e.Principal)
	if e.Principal == "" {
		who = "an unauthenticated caller"
	}
	if e.Action == "acquire" {
		return fmt.Sprintf("lease: %q: the holder's grant or place in the queue belongs to another principal; %s may not take it over (use a holder name of your own)",
			e.Name, who)
	}
	return fmt.Sprintf("lease: %q token %d was acquired by another principal; %s may not %s it (only the principal that acquired a grant renews, releases or writes with it)",
		e.Name, e.Token, who, e.Action)
}

// Unwrap makes errors.Is(err, ErrForbidden) true.
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }

// HeldError reports that a lease is held by another holder. For a
// semaphore with every slot held, Limit is its limit and Holder, Token
// and Remaining describe the slot that expires first.
//
// With LockDelay set, the name is in a lock-delay: the grant Holder and
// Token named expired or was revoked with a lock-delay Ended ago (in
// cluster time), and no new grant is made for Remaining more; Ended +
// Remaining is the grant's lock-delay.
type HeldError struct {
	Name      string
	Holder    string
	Token     uint64
	Remaining time.Duration
	Limit     int
	LockDelay bool
	Ended     time.Duration
}

func (e *HeldError) Error() string {
	if e.LockDelay {
		return fmt.Sprintf("lease: %q is in its lock-delay: the grant of %q (token %d) ended %s ago without a release; no new grant for %s",
			e.Name, e.Holder, e.Token, e.Ended, e.Remaining)
	}
	if e.Limit > 1 {
		return fmt.Sprintf("lease: %q has all %d slots held; the first to expire is held by %q (token %d, %s remaining)",
			e.Name, e.Limit, e.Holder, e.Token, e.Remaining)
	}
	return fmt.Sprintf("lease: %q held by %q (token %d, %s remaining)", e.Name, e.Holder, e.Token, e.Remaining)
}

// Unwrap makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Unwrap() error { return ErrHeld }

// StaleError reports a rejected token with the reason in words.
type StaleError struct {
	Name   string
	Token  uint64
	Detail string
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("lease: stale token %d for %q: %s", e.Token, e.Name, e.Detail)
}

// Unwrap makes errors.Is(err, ErrStaleToken) true.
func (e *StaleError) Unwrap() error { return ErrStaleToken }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Reason returns the wire reason for err, or "" if it has none.
func Reason(err error) string {
	switch {
	case errors.Is(err, ErrHeld):
		return ReasonLeaseHeld
	case errors.Is(err, ErrStaleToken):
		return ReasonStaleToken
	case errors.Is(err, ErrNotFound):
		return ReasonNotFound
	case errors.Is(err, ErrForbidden):
		return ReasonForbidden
	case errors.Is(err, ErrNotApplied):
		return ReasonNotApplied
	}
	return ""
}
