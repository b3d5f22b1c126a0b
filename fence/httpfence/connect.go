package httpfence

import (
	"context"
	"errors"
	"strconv"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/fence"
)

// HeaderHighest is set on the error metadata of a Connect call refused
// as stale: the highest token recorded, in decimal.
const HeaderHighest = "Tenure-Highest-Token"

// Interceptor is the Connect form of Middleware: on the server side it
// admits a call (unary, or a whole stream) only if the HeaderLease and
// HeaderToken headers of its request pass cfg.Fence. A stale token fails
// the call with connect.CodeAborted (HTTP 409 in the Connect protocol),
// the message naming both tokens, and HeaderLease, HeaderToken and
// HeaderHighest in the error's metadata (see StaleFromConnect); missing headers with CodeFailedPrecondition (unless
// cfg.AllowUnfenced), malformed ones with CodeInvalidArgument. The
// handler finds the lease with FromContext. Client-side calls pass
// through: give the client's http.Client a Transport.
func Interceptor(cfg Config) connect.Interceptor {
	return &interceptor{cfg: cfg, fence: cfg.fence()}
}

type interceptor struct {
	cfg   Config
	fence Fence
}

// enter admits a call with headers h; ctx carries the lease on success.
func (i *interceptor) enter(ctx context.Context, h interface{ Get(string) string }) (context.Context, func(), error) {
	hdr := map[string][]string{HeaderLease: {h.Get(HeaderLease)}, HeaderToken: {h.Get(HeaderToken)}}
	l, err := Parse(hdr)
	switch {
	case errors.Is(err, ErrMissing) && i.cfg.AllowUnfenced:
		return ctx, func() {}, nil
	case errors.Is(err, ErrMissing):
		return nil, nil, connect.NewError(connect.CodeFailedPrecondition, err)
	case err != nil:
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	exit, err := i.fence.Enter(ctx, l.Name(), l.Token())
	if se, ok := errors.AsType[*fence.StaleError](err); ok {
		ce := connect.NewError(connect.CodeAborted, se)
		ce.Meta().Set(HeaderLease, se.Resource)
		ce.Meta().Set(HeaderToken, strconv.FormatUint(se.Token, 10))
		ce.Meta().Set(HeaderHighest, strconv.FormatUint(se.Highest, 10))
		return nil, nil, ce
	}
	if errors.Is(err, fence.ErrInvalid) {
		return nil, nil, connect.NewError(connect.CodeInvalidArgument, err)
	}
	if err != nil {
		return nil, nil, connect.NewError(connect.CodeUnavailable, err)
	}
	return context.WithValue(ctx, ctxKey{}, l), exit, nil
}

func (i *interceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		ctx, exit, err := i.enter(ctx, req.Header())
		if err != nil {
			return nil, err
		}
		defer exit()
		return next(ctx, req)
	}
}

func (i *interceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (i *interceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		ctx, exit, err := i.enter(ctx, conn.RequestHeader())
		if err != nil {
			return err
		}
		defer exit()
		return next(ctx, conn)
	}
}

// StaleFromConnect returns the *fence.StaleError of a Connect call that
// Interceptor refused, if err is one.
func StaleFromConnect(err error) (*fence.StaleError, bool) {
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok || ce.Code() != connect.CodeAborted {
		return nil, false
	}
	h, herr := strconv.ParseUint(ce.Meta().Get(HeaderHighest), 10, 64)
	t, terr := strconv.ParseUint(ce.Meta().Get(HeaderToken), 10, 64)
	if herr != nil || terr != nil {
		return nil, false
	}
	return &fence.StaleError{Resource: ce.Meta().Get(HeaderLease), Token: t, Highest: h}, true
}
