package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/tenure-io/tenure/client"
)

// Exit codes, as in DESIGN.md section 5.
const (
	exitOK      = 0 // success
	exitFailure = 1 // unreachable, internal, not found
	exitUsage   = 2 // bad usage or invalid argument
	exitHeld    = 3 // held by another holder, or acquire --wait timed out
	exitFenced  = 4 // stale token, not the holder, lease expired
)

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

// report prints err to w, prefixed with "tenure: ".
func report(w io.Writer, err error) {
	if he, ok := errors.AsType[*client.HeldError](err); ok {
		fmt.Fprintf(w, "tenure: %s is held by %s (token %d, %s remaining)\n",
			he.Name, he.Holder, he.Token, fmtDuration(he.Remaining))
		return
	}
	if err.Error() == "" {
		return
	}
	fmt.Fprintf(w, "tenure: %v\n", err)
	if ue, ok := errors.AsType[*usageError](err); ok && ue.usage != "" {
		fmt.Fprintf(w, "\n%s", ue.usage)
	}
}
