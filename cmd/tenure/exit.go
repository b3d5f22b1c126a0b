package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/lease"
)

// Exit codes: 0-5 as in DESIGN.md section 5, 6 and 7 added by the CLI.
const (
	exitOK       = 0 // success
	exitFailure  = 1 // unreachable, internal
	exitUsage    = 2 // bad usage or invalid argument
	exitHeld     = 3 // held by another holder, or acquire --wait timed out
	exitFenced   = 4 // stale token, not the holder, lease expired
	exitDenied   = 5 // not authenticated or not permitted
	exitNotFound = 6 // no such lease (get) or key (kv get, kv delete)
	exitReleased = 7 // release: no live grant has the token (released already, expired or replaced)
)

// exitCodes are every exit code of the CLI besides a command's own (run),
// for the test that keeps the tables in the README and docs/cli.md
// complete.
var exitCodes = []int{exitOK, exitFailure, exitUsage, exitHeld, exitFenced, exitDenied, exitNotFound, exitReleased}

// exitCode maps the error of a command to the exit code.
func exitCode(err error) int {
	if ec, ok := errors.AsType[exitCoder](err); ok {
		return ec.ExitCode()
	}
	switch {
	case err == nil:
		return exitOK
	case isUsage(err), errors.Is(err, client.ErrInvalid):
		return exitUsage
	case errors.Is(err, client.ErrLeaseHeld):
		return exitHeld
	case errors.Is(err, client.ErrStaleToken):
		return exitFenced
	case errors.Is(err, client.ErrNotFound):
		return exitNotFound
	case connect.CodeOf(err) == connect.CodeUnauthenticated, connect.CodeOf(err) == connect.CodePermissionDenied,
		errors.Is(err, client.ErrForbidden):
		return exitDenied
	case client.IsCertificateRefused(err):
		// The server refused the client certificate in the handshake.
		return exitDenied
	}
	return exitFailure
}

// exitCoder is an error that sets the exit code itself (tenure run exits
// with its command's code). An empty message prints nothing.
type exitCoder interface {
	error
	ExitCode() int
}

func isUsage(err error) bool {
	_, ok := errors.AsType[*usageError](err)
	return ok
}

// usageError is bad usage of the CLI, found before talking to the server.
type usageError struct {
	msg string
	// usage is printed after the message; empty for none.
	usage string
}

func (e *usageError) Error() string { return e.msg }

// helpRequest is -h or --help: the usage goes to stdout, exit 0.
type helpRequest struct{ usage string }

func (e *helpRequest) Error() string { return "help requested" }

// notFoundError says which lease or key does not exist.
type notFoundError struct {
	what string // e.g. `lease "jobs/x"`
	err  error
}

func (e *notFoundError) Error() string { return e.what + " not found" }

func (e *notFoundError) Unwrap() error { return e.err }

// notHeldError is a revoke of a name (or token) with no live grant.
type notHeldError struct {
	name string
	err  error
}

func (e *notHeldError) Error() string {
	return strings.TrimPrefix(e.err.Error(), lease.ErrNotFound.Error()+": ")
}

func (e *notHeldError) Unwrap() error { return e.err }

// waitedError is acquire --wait running out of time: how long it waited
// and who holds the lease.
type waitedError struct {
	waited time.Duration
	held   *client.HeldError
}

func (e *waitedError) Error() string {
	return fmt.Sprintf("waited %s for %s: %s", fmtDuration(e.waited), e.held.Name, heldText(e.held))
}

func (e *waitedError) Unwrap() error { return e.held }

// releasedError is a release whose token is no live grant: a second
// release of the same grant, or one after it expired or was replaced.
// Nothing was fenced and nothing changed.
type releasedError struct {
	name  string
	token uint64
	err   error
}

func (e *releasedError) Error() string {
	return fmt.Sprintf("%s: no live grant has token %d (already released, expired, or replaced by a newer grant); nothing to release",
		e.name, e.token)
}

func (e *releasedError) Unwrap() error { return e.err }

func (e *releasedError) ExitCode() int { return exitReleased }

// heldText says who holds a lease.
func heldText(he *client.HeldError) string {
	if he.LockDelay {
		return fmt.Sprintf("in its lock-delay: the grant of %s (token %d) ended %s ago without a release; no new grant for %s",
			he.Holder, he.Token, fmtDuration(he.Ended), fmtDuration(he.Remaining))
	}
	if he.Limit > 1 {
		return fmt.Sprintf("all %d slots are held; the first to expire is held by %s (token %d, %s remaining)",
			he.Limit, he.Holder, he.Token, fmtDuration(he.Remaining))
	}
	return fmt.Sprintf("held by %s (token %d, %s remaining)", he.Holder, he.Token, fmtDuration(he.Remaining))
}

// message is err as the CLI says it.
func message(err error) string {
	if oc, ok := errors.AsType[*client.OtherClusterError](err); ok {
		msg := fmt.Sprintf("endpoint %s answered for cluster %s, not for cluster %s (its answer was discarded; check --endpoints, --cluster-id and TENURE_CLUSTER_ID)",
			oc.Endpoint, oc.Seen, oc.Expected)
		if errors.Is(err, client.ErrUnavailable) {
			msg = fmt.Sprintf("no endpoint of cluster %s answered; %s", oc.Expected, msg)
		}
		return msg
	}
	if we, ok := errors.AsType[*waitedError](err); ok {
		return we.Error()
	}
	if he, ok := errors.AsType[*client.HeldError](err); ok {
		if he.Limit > 1 && !he.LockDelay {
			return he.Name + ": " + heldText(he)
		}
		return he.Name + " is " + heldText(he)
	}
	return err.Error()
}

// errorJSON is an error in -o json, on stderr: the Connect code and the
// reason, holder and token the server sent (as in the API's ErrorDetail),
// and the exit code.
type errorJSON struct {
	Code      string `json:"code"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message"`
	Name      string `json:"name,omitempty"`
	Holder    string `json:"holder,omitempty"`
	Token     uint64 `json:"token,omitempty"`
	Remaining string `json:"remaining,omitempty"`
	Limit     int    `json:"limit,omitempty"`
	LockDelay bool   `json:"lock_delay,omitempty"`
	// Ended is, for a lock-delay, how long ago the grant ended.
	Ended string `json:"ended,omitempty"`
	// RevokeReason is the operator's reason for a revoked grant.
	RevokeReason string `json:"revoke_reason,omitempty"`
	Waited       string `json:"waited,omitempty"`
	// For an answer from another cluster: the endpoint, the cluster
	// expected and the one that answered.
	Endpoint       string `json:"endpoint,omitempty"`
	ClusterID      string `json:"cluster_id,omitempty"`
	OtherClusterID string `json:"other_cluster_id,omitempty"`
	ExitCode       int    `json:"exit_code"`
}

// errorCode is the Connect code name of err: the server's, or the one
// the CLI's own error stands for.
func errorCode(err error) string {
	switch {
	case isUsage(err):
		return connect.CodeInvalidArgument.String()
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrIndeterminate),
		errors.Is(err, client.ErrOtherCluster):
		return connect.CodeUnavailable.String()
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded.String()
	case errors.Is(err, client.ErrLeaseHeld), errors.Is(err, client.ErrStaleToken):
		return connect.CodeFailedPrecondition.String()
	case errors.Is(err, client.ErrNotFound):
		return connect.CodeNotFound.String()
	case errors.Is(err, client.ErrInvalid):
		return connect.CodeInvalidArgument.String()
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce.Code().String()
	}
	return connect.CodeUnknown.String()
}

func toErrorJSON(err error) errorJSON {
	j := errorJSON{Code: errorCode(err), Reason: lease.Reason(err), Message: message(err), ExitCode: exitCode(err)}
	if isUsage(err) {
		j.Reason = "USAGE"
	}
	if he, ok := errors.AsType[*client.HeldError](err); ok {
		j.Name, j.Holder, j.Token, j.Limit, j.LockDelay = he.Name, he.Holder, he.Token, he.Limit, he.LockDelay
		j.Remaining = fmtDuration(he.Remaining)
		if he.LockDelay {
			j.Ended = fmtDuration(he.Ended)
		}
	}
	if re, ok := errors.AsType[*client.RevokedError](err); ok {
		j.Name, j.Token, j.RevokeReason = re.Name, re.Token, re.Reason
	}
	if se, ok := errors.AsType[*lease.StaleError](err); ok {
		j.Name, j.Token = se.Name, se.Token
	}
	if re, ok := errors.AsType[*releasedError](err); ok {
		j.Name, j.Token = re.name, re.token
	}
	if we, ok := errors.AsType[*waitedError](err); ok {
		j.Waited = fmtDuration(we.waited)
	}
	if oc, ok := errors.AsType[*client.OtherClusterError](err); ok {
		j.Reason = "OTHER_CLUSTER"
		j.Endpoint, j.ClusterID, j.OtherClusterID = oc.Endpoint, oc.Expected, oc.Seen
	}
	return j
}

// report prints err to w: "tenure: " and the message, or with asJSON one
// JSON object (errorJSON) on a line.
func report(w io.Writer, err error, asJSON bool) {
	if err.Error() == "" {
		return
	}
	if asJSON {
		b, merr := json.Marshal(toErrorJSON(err))
		if merr == nil {
			fmt.Fprintf(w, "%s\n", b)
			return
		}
	}
	fmt.Fprintf(w, "tenure: %s\n", message(err))
	if ue, ok := errors.AsType[*usageError](err); ok && ue.usage != "" {
		fmt.Fprintf(w, "\n%s", ue.usage)
	}
}
