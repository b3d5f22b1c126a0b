package wire

import (
	"context"
	"errors"
	"math"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/lease"
)

// LeaseToProto returns l as a message, with its remaining time at cluster
// time now.
func LeaseToProto(l lease.Lease, now time.Duration) *tenurev1.Lease {
	return FillLease(new(tenurev1.Lease), make([]durationpb.Duration, 2), l, now)
}

// FillLease is LeaseToProto into p, a zero message, with durs (two zero
// messages) for its TTL and remaining time. It returns p.
func FillLease(p *tenurev1.Lease, durs []durationpb.Duration, l lease.Lease, now time.Duration) *tenurev1.Lease {
	p.Name, p.Holder, p.Token, p.Limit = l.Name, l.Holder, l.Token, uint32(l.Limit)
	p.Ttl, p.Remaining = setDuration(&durs[0], l.TTL), setDuration(&durs[1], l.Remaining(now))
	if l.LockDelay != 0 {
		p.LockDelay = durationpb.New(l.LockDelay)
	}
	p.Shared = l.Shared
	p.Priority = uint32(max(l.Priority, 0))
	return p
}

// setDuration sets p to d, as durationpb.New does, and returns p.
func setDuration(p *durationpb.Duration, d time.Duration) *durationpb.Duration {
	nanos := d.Nanoseconds()
	p.Seconds, p.Nanos = nanos/1e9, int32(nanos%1e9)
	return p
}

// LeaseFromProto returns the name, holder, token and TTL of p. The cluster
// times (GrantedAt, ExpiresAt) stay zero: they never leave the server. A nil
// p gives the zero Lease.
func LeaseFromProto(p *tenurev1.Lease) lease.Lease {
	return lease.Lease{
		Name:   p.GetName(),
		Holder: p.GetHolder(),
		Token:  p.GetToken(),
		TTL:    p.GetTtl().AsDuration(),
		Limit:  int(min(p.GetLimit(), math.MaxInt32)),

		LockDelay: p.GetLockDelay().AsDuration(),
		Shared:    p.GetShared(),
		Priority:  int(min(p.GetPriority(), math.MaxInt32)),
	}
}

// mapping is one row of the error table.
type mapping struct {
	target error        // matched with errors.Is
	code   connect.Code // code on the wire
	reason string       // ErrorDetail reason, or "" for no detail
}

// errorTable maps domain errors to Connect codes, first match wins.
// FromConnectError reads it backwards.
var errorTable = []mapping{
	{lease.ErrInvalid, connect.CodeInvalidArgument, ""},
	{lease.ErrHeld, connect.CodeFailedPrecondition, lease.ReasonLeaseHeld},
	{lease.ErrStaleToken, connect.CodeFailedPrecondition, lease.ReasonStaleToken},
	{lease.ErrNotFound, connect.CodeNotFound, lease.ReasonNotFound},
	{lease.ErrForbidden, connect.CodePermissionDenied, lease.ReasonForbidden},
	{lease.ErrNotApplied, connect.CodeFailedPrecondition, lease.ReasonNotApplied},
	{context.DeadlineExceeded, connect.CodeDeadlineExceeded, ""},
	{context.Canceled, connect.CodeCanceled, ""},
}

// ToConnectError maps a domain error to a Connect error with the code of
// the table in the package doc. Errors with a reason carry a
// tenurev1.ErrorDetail; for a *lease.HeldError it names the holder, its
// token and remaining time. The message is err's text (with a held lease's
// remaining time rounded to the millisecond). An error that already is a
// *connect.Error is returned unchanged, and nil gives nil.
func ToConnectError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := errors.AsType[*connect.Error](err); ok {
		return err
	}
	for _, m := range errorTable {
		if !errors.Is(err, m.target) {
			continue
		}
		msgErr := err
		detail := &tenurev1.ErrorDetail{Reason: m.reason}
		if held, ok := errors.AsType[*lease.HeldError](err); ok && m.reason == lease.ReasonLeaseHeld {
			detail.Name = held.Name
			detail.Holder = held.Holder
			detail.Token = held.Token
			detail.Remaining = durationpb.New(held.Remaining)
			detail.Limit = uint32(held.Limit)
			detail.LockDelay = held.LockDelay
			if held.LockDelay {
				detail.Ended = durationpb.New(held.Ended)
			}
			if err == error(held) {
				rounded := *held
				rounded.Remaining = held.Remaining.Round(time.Millisecond)
				rounded.Ended = held.Ended.Round(time.Millisecond)
				msgErr = &rounded
			}
		}
		if rev, ok := errors.AsType[*lease.RevokedError](err); ok && m.reason == lease.ReasonStaleToken {
			detail.Name, detail.Token, detail.RevokeReason = rev.Name, rev.Token, rev.Reason
		}
		ce := connect.NewError(m.code, msgErr)
		if m.reason != "" {
			if d, derr := connect.NewErrorDetail(detail); derr == nil {
				ce.AddDetail(d)
			}
		}
		return ce
	}
	return connect.NewError(connect.CodeInternal, err)
}

// FromConnectError is the inverse of ToConnectError, for clients. For a
// Connect error with a code (and reason) of the table it returns an error
// whose message is the server's message and which unwraps both to the
// domain error and to the *connect.Error: errors.Is(err, lease.ErrHeld),
// errors.As(err, &heldErr) (holder, token and remaining come from the
// detail; Name is empty, the caller knows it), errors.Is(err,
// lease.ErrStaleToken), lease.ErrNotFound, lease.ErrInvalid,
// context.DeadlineExceeded and context.Canceled all work, and so does
// connect.CodeOf. Any other error, including a failed_precondition without
// a known reason, is returned unchanged; nil gives nil.
func FromConnectError(err error) error {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		return err
	}
	detail := errorDetail(ce)
	domain := fromTable(ce.Code(), detail.GetReason())
	if domain == lease.ErrHeld {
		domain = &lease.HeldError{
			Name:      detail.GetName(),
			Holder:    detail.GetHolder(),
			Token:     detail.GetToken(),
			Remaining: detail.GetRemaining().AsDuration(),
			Limit:     int(min(detail.GetLimit(), math.MaxInt32)),
			LockDelay: detail.GetLockDelay(),
			Ended:     detail.GetEnded().AsDuration(),
		}
	}
	if domain == lease.ErrStaleToken && detail.GetRevokeReason() != "" {
		domain = &lease.RevokedError{Name: detail.GetName(), Token: detail.GetToken(), Reason: detail.GetRevokeReason()}
	}
	if domain == nil {
		return err
	}
	msg := ce.Message()
	if msg == "" {
		msg = domain.Error()
	}
	return &remoteError{msg: msg, errs: []error{domain, err}}
}

// fromTable returns the domain error of the row of errorTable with code
// and reason or, failing that, of the only row with code: a code shared by
// several rows needs its reason. It returns nil if no row fits.
func fromTable(code connect.Code, reason string) error {
	var only error
	rows := 0
	for _, m := range errorTable {
		if m.code != code {
			continue
		}
		if m.reason == reason {
			return m.target
		}
		only = m.target
		rows++
	}
	if rows == 1 {
		return only
	}
	return nil
}

// RenewError is ReasonError for one result of a renewal: a STALE_TOKEN
// with a revoke_reason also unwraps to a *lease.RevokedError.
func RenewError(r *tenurev1.RenewResult) error {
	err := ReasonError(r.GetReason(), r.GetMessage())
	if re, ok := err.(*remoteError); ok && r.GetReason() == lease.ReasonStaleToken && r.GetRevokeReason() != "" {
		re.errs = []error{&lease.RevokedError{Name: r.GetName(), Token: r.GetToken(), Reason: r.GetRevokeReason()}}
	}
	return err
}

// ReasonError returns an error for a per-item failure reported in a
// message rather than as a Connect error (RenewResult.reason and .message):
// its text is message and it unwraps to the sentinel of reason. It returns
// nil for the empty reason (success) and a plain error with message for an
// unknown reason.
func ReasonError(reason, message string) error {
	if reason == "" {
		return nil
	}
	var domain error
	for _, m := range errorTable {
		if m.reason == reason {
			domain = m.target
			break
		}
	}
	if domain == nil {
		if message == "" {
			message = "wire: unknown failure reason " + reason
		}
		return errors.New(message)
	}
	if message == "" {
		message = domain.Error()
	}
	return &remoteError{msg: message, errs: []error{domain}}
}

// ReasonIndeterminate marks an unavailable error whose request may have
// been applied: the leader changed while it was in flight.
const ReasonIndeterminate = "INDETERMINATE"

// Indeterminate returns an unavailable Connect error for err that tells
// the client the request may have been applied, so it must not assume a
// retry is safe.
func Indeterminate(err error) error {
	ce := connect.NewError(connect.CodeUnavailable, err)
	if d, derr := connect.NewErrorDetail(&tenurev1.ErrorDetail{Reason: ReasonIndeterminate}); derr == nil {
		ce.AddDetail(d)
	}
	return ce
}

// IsIndeterminate reports whether err was made by Indeterminate, here or
// on the server.
func IsIndeterminate(err error) bool {
	ce, ok := errors.AsType[*connect.Error](err)
	return ok && ce.Code() == connect.CodeUnavailable && errorDetail(ce).GetReason() == ReasonIndeterminate
}

// errorDetail returns the first ErrorDetail attached to ce, or nil.
func errorDetail(ce *connect.Error) *tenurev1.ErrorDetail {
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			continue
		}
		if ed, ok := v.(*tenurev1.ErrorDetail); ok {
			return ed
		}
	}
	return nil
}

// remoteError is an error reported by the server: the server's message,
// unwrapping to the domain error and the *connect.Error it came in.
type remoteError struct {
	msg  string
	errs []error
}

func (e *remoteError) Error() string   { return e.msg }
func (e *remoteError) Unwrap() []error { return e.errs }

// ToBatchError is the per-op form of a Connect error in a batch: ce's
// code, message and ErrorDetail. err is mapped with ToConnectError first.
func ToBatchError(err error) *tenurev1.BatchError {
	ce, ok := errors.AsType[*connect.Error](ToConnectError(err))
	if !ok {
		return &tenurev1.BatchError{Code: uint32(connect.CodeInternal), Message: err.Error()}
	}
	return &tenurev1.BatchError{Code: uint32(ce.Code()), Message: ce.Message(), Detail: errorDetail(ce)}
}

// FromBatchError is the inverse of ToBatchError: the Connect error the
// op's own call would have returned, with the same code, message and
// detail, and like it a wire error (connect.IsWireError), so that callers
// treat both alike.
func FromBatchError(be *tenurev1.BatchError) *connect.Error {
	code := connect.Code(be.GetCode())
	if code == 0 || code > connect.CodeUnauthenticated {
		code = connect.CodeUnknown
	}
	ce := connect.NewWireError(code, errors.New(be.GetMessage()))
	if be.GetDetail() != nil {
		if d, err := connect.NewErrorDetail(be.GetDetail()); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}

// TermToProto converts a term of the lease history of name.
func TermToProto(name string, t lease.Term) *tenurev1.Term {
	p := &tenurev1.Term{Name: name, Holder: t.Holder, Token: t.Token, Principal: t.Principal, Limit: uint32(t.Limit),
		Ending: tenurev1.Term_Ending(t.Ending), Reason: t.Reason, WritesAccepted: t.Accepted, WritesRefused: t.Refused,
		ClusterStart: durationpb.New(t.Start), Shared: t.Shared}
	if t.StartWall != 0 {
		p.StartTime = timestamppb.New(time.Unix(0, t.StartWall))
	}
	if t.Ending != lease.EndingNone {
		p.ClusterEnd = durationpb.New(t.End)
		if t.EndWall != 0 {
			p.EndTime = timestamppb.New(time.Unix(0, t.EndWall))
		}
	}
	return p
}
