package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// The errors of the lease package are the errors of the client: an error
// the server reports arrives as one that errors.Is matches against the same
// sentinel, and keeps the server's message.
var (
	// ErrLeaseHeld is matched by the error of Acquire when another holder
	// has a live grant of the name (also when Wait timed out). errors.As
	// with a *HeldError gives the holder, its token and remaining time.
	ErrLeaseHeld = lease.ErrHeld
	// ErrStaleToken is matched by the error of Renew, Release, Put and
	// Delete when the token is not the current, unexpired grant of the
	// lease (released, expired, or granted again since), or when a newer
	// token already wrote the key.
	ErrStaleToken = lease.ErrStaleToken
	// ErrNotFound is matched by the error of Get when the name has no live
	// lease and of KVGet when the key holds no value.
	ErrNotFound = lease.ErrNotFound
	// ErrInvalid is matched by the error of any call the server rejected as
	// malformed: an empty or oversized name, a TTL out of bounds, a value
	// over the limit.
	ErrInvalid = lease.ErrInvalid
	// ErrRevoked is matched by the error of Renew, Release, Put and
	// Delete when an operator revoked the grant (Revoke). errors.As with
	// a *RevokedError gives the reason, which the message carries too.
	// Such an error also matches ErrStaleToken: the token fences nothing.
	ErrRevoked = lease.ErrRevoked
	// ErrForbidden is matched by the error of Renew, Release, Put, Delete
	// and Acquire when the grant (or the holder's place in the queue)
	// belongs to another principal than the caller's: only the principal
	// that acquired a grant renews, releases or writes with it. Such an
	// error has the code permission_denied (connect.CodeOf).
	ErrForbidden = lease.ErrForbidden
	// ErrNotApplied is in the chain of an ErrIndeterminate error when
	// the cluster refused a retry of a call whose outcome it no longer
	// remembers (see lease.ErrNotApplied): an earlier attempt may have
	// taken effect.
	ErrNotApplied = lease.ErrNotApplied
	// ErrUnavailable is matched when the caller's context ended while the
	// client was still retrying because no endpoint could serve the
	// request (unreachable, no leader, no quorum). The error also unwraps
	// to the last endpoint's error and to the context's error.
	ErrUnavailable = errors.New("client: no endpoint could serve the request")
	// ErrIndeterminate is matched when a call was possibly delivered but
	// its outcome is unknown: a Join, Leave or TransferLeadership whose
	// connection broke or whose attempt timed out after the request was
	// sent (those are not retried), or a call whose retry the cluster
	// refused because it no longer remembers the first attempt's outcome
	// (ErrNotApplied is then in the chain). Read the state (Get, KVGet,
	// Status) to find out.
	ErrIndeterminate = errors.New("client: the request may or may not have been applied")
	// ErrOtherCluster is matched when answers came only from members of
	// another cluster than the one the client is pinned to
	// (Config.ClusterID, or the first cluster that answered): every
	// endpoint answered for another cluster, or the caller's context ended
	// while the endpoints of the right one were unreachable (the error then
	// matches ErrUnavailable too). errors.As with an *OtherClusterError
	// names the endpoint and both IDs. A refused request may have taken
	// effect on the other cluster; its answer was discarded.
	ErrOtherCluster = errors.New("client: answer from another cluster")
)

// HeldError reports that a lease is held by another holder: its holder,
// token and remaining time. With LockDelay set, the name is in the
// lock-delay of a grant that expired or was revoked (Holder and Token),
// for Remaining more.
type HeldError = lease.HeldError

// RevokedError reports a grant an operator revoked: its name, token and
// the operator's reason.
type RevokedError = lease.RevokedError

// retryPolicy says when a failed attempt may be repeated.
type retryPolicy uint8

const (
	// retryAlways: repeating the request is harmless, so every attempt
	// that did not get an answer is retried. Reads are, and so is every
	// call that changes a lease or the store (every attempt carries the
	// call's request ID, and the cluster answers a retry with the first
	// attempt's outcome).
	retryAlways retryPolicy = iota
	// retryUnsent: the request is retried only when it certainly was not
	// applied: the connection could not be opened, or the server answered
	// unavailable (not the leader, no leader). Membership changes are.
	retryUnsent
)

// outcome is what to do after a failed attempt.
type outcome uint8

const (
	giveUp        outcome = iota // return the error
	tryNext                      // try the next endpoint
	indeterminate                // report ErrIndeterminate
)

// classify decides what to do after attempt error err; parent is the
// caller's context (not the attempt's).
func classify(parent context.Context, err error, p retryPolicy) outcome {
	if parent.Err() != nil {
		return giveUp
	}
	code := connect.CodeOf(err)
	switch {
	case errors.Is(err, ErrOtherCluster):
		// The request did not reach the client's cluster (whatever it
		// did on the other one): another endpoint may be of the right
		// cluster.
		return tryNext
	case IsTLSError(err):
		// Another endpoint of the same cluster would refuse the same
		// certificate: retrying only hides the reason.
		return giveUp
	case code == connect.CodeUnavailable && connect.IsWireError(err) && !wire.IsIndeterminate(err):
		// The server itself refused: not the leader, no leader, forwarding
		// failed before the leader took the request.
		return tryNext
	case isDialError(err), errors.Is(err, errNotSent):
		return tryNext
	case code == connect.CodeUnavailable, code == connect.CodeDeadlineExceeded,
		code == connect.CodeCanceled:
		// The connection broke (connect reports a write to a connection
		// the server closed as canceled), or the attempt's own deadline
		// passed; the caller's context is still alive. The request may
		// have been applied.
		if p == retryAlways {
			return tryNext
		}
		return indeterminate
	}
	return giveUp
}

// IsTLSError reports whether err is a failed TLS handshake: a server
// certificate that does not verify, a client certificate the server
// refused (a TLS alert), or TLS spoken to a plain-text port.
func IsTLSError(err error) bool {
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	if isRemoteTLSAlert(err) {
		return true
	}
	if err != nil && strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		// net/http's own error for TLS spoken to a plain-text port.
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	_, ok := errors.AsType[x509.CertificateInvalidError](err)
	return ok
}

// isRemoteTLSAlert reports whether err is a TLS alert the server sent:
// it refused the client's certificate (none, expired, unknown CA).
func isRemoteTLSAlert(err error) bool {
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "remote error"
}

// IsCertificateRefused reports whether err is the server refusing the
// client's certificate during the TLS handshake.
func IsCertificateRefused(err error) bool {
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return true
	}
	return isRemoteTLSAlert(err)
}

// isDialError reports whether err is a failure to open a connection, so
// the request never left.
func isDialError(err error) bool {
	op, ok := errors.AsType[*net.OpError](err)
	return ok && op.Op == "dial"
}

// unavailableError ends a call whose context ended while it was retrying.
type unavailableError struct {
	attempts int
	last     error
	cause    error
	// other is the last *OtherClusterError of the call, if any.
	other *OtherClusterError
}

func (e *unavailableError) Error() string {
	msg := fmt.Sprintf("%s (%d attempts, last: %v)", ErrUnavailable, e.attempts, e.last)
	if e.other != nil && !errors.Is(e.last, ErrOtherCluster) {
		msg += fmt.Sprintf("; refused: %v", e.other)
	}
	return msg
}

func (e *unavailableError) Unwrap() []error {
	errs := []error{ErrUnavailable, e.last, e.cause}
	if e.other != nil {
		errs = append(errs, e.other)
	}
	return errs
}
