package election

import (
	"errors"
	"fmt"
)

var (
	// ErrLost is matched by Lease.Err and by the cause of a lease's context
	// when the lease ended without Release: no renewal was confirmed before
	// the local deadline, or the server reported that the grant is gone
	// (also when an operator revoked it: the error then matches
	// client.ErrRevoked as well, and its Reason says so). The error is a
	// *LostError.
	ErrLost = errors.New("election: lease lost")
	// ErrReleased is the cause of a lease's context after Release, Resign
	// or Session.Close.
	ErrReleased = errors.New("election: lease released")
	// ErrClosed is returned by Acquire, TryAcquire and Campaign once the
	// session was closed or orphaned, also when that happens while they
	// wait.
	ErrClosed = errors.New("election: session closed")
	// ErrDuplicate is returned by Acquire, TryAcquire and Campaign when the
	// session already holds (or is acquiring) the name: one session is one
	// holder, and a holder has each lease once.
	ErrDuplicate = errors.New("election: the session already holds or is acquiring this lease")
)

// LostError says why a lease was lost.
type LostError struct {
	Name  string
	Token uint64
	// Reason says what happened, in words.
	Reason string
	// Err is the server's error when the server reported the grant gone
	// (it matches client.ErrStaleToken or client.ErrNotFound, and
	// client.ErrRevoked for a revoked grant), else nil.
	Err error
}

func (e *LostError) Error() string {
	msg := fmt.Sprintf("election: lease %q (token %d) lost: %s", e.Name, e.Token, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrLost) true, and matches the server's
// error if there is one.
func (e *LostError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrLost}
	}
	return []error{ErrLost, e.Err}
}
