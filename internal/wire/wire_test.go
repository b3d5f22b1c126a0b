package wire

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/lease"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLeaseRoundTrip(t *testing.T) {
	l := lease.Lease{Name: "jobs/x", Holder: "a", Token: 3, TTL: 5 * time.Second,
		GrantedAt: 10 * time.Second, ExpiresAt: 15 * time.Second}
	tests := []struct {
		now  time.Duration
		want time.Duration
	}{
		{now: 10 * time.Second, want: 5 * time.Second},
		{now: 11*time.Second + 20*time.Millisecond, want: 3*time.Second + 980*time.Millisecond},
		{now: 15 * time.Second, want: 0},
		{now: 20 * time.Second, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.now.String(), func(t *testing.T) {
			p := LeaseToProto(l, tt.now)
			if got := p.GetRemaining().AsDuration(); got != tt.want {
				t.Errorf("remaining = %s, want %s", got, tt.want)
			}
			back := LeaseFromProto(p)
			want := lease.Lease{Name: "jobs/x", Holder: "a", Token: 3, TTL: 5 * time.Second}
			if back != want {
				t.Errorf("LeaseFromProto = %+v, want %+v", back, want)
			}
		})
	}
	if got := LeaseFromProto(nil); got != (lease.Lease{}) {
		t.Errorf("LeaseFromProto(nil) = %+v, want zero", got)
	}
}

var held = &lease.HeldError{Name: "jobs/x", Holder: "a", Token: 3, Remaining: 4200*time.Millisecond + 123*time.Microsecond}

// errorCases is every row of the table, with what must hold on both sides.
var errorCases = []struct {
	name     string
	err      error
	code     connect.Code
	reason   string
	sentinel error // errors.Is target after the round trip, nil for none
	msg      string
}{
	{"invalid", fmt.Errorf("%w: ttl 1s is below the minimum of 2s", lease.ErrInvalid),
		connect.CodeInvalidArgument, "", lease.ErrInvalid, "lease: invalid argument: ttl 1s is below the minimum of 2s"},
	{"held", held, connect.CodeFailedPrecondition, lease.ReasonLeaseHeld, lease.ErrHeld,
		`lease: "jobs/x" held by "a" (token 3, 4.2s remaining)`},
	{"held wrapped", fmt.Errorf("acquire: %w", held), connect.CodeFailedPrecondition, lease.ReasonLeaseHeld, lease.ErrHeld,
		`acquire: lease: "jobs/x" held by "a" (token 3, 4.200123s remaining)`},
	{"stale", &lease.StaleError{Name: "jobs/x", Token: 2, Detail: "the current grant has another token"},
		connect.CodeFailedPrecondition, lease.ReasonStaleToken, lease.ErrStaleToken,
		`lease: stale token 2 for "jobs/x": the current grant has another token`},
	{"not found", fmt.Errorf("get %q: %w", "jobs/y", lease.ErrNotFound), connect.CodeNotFound, lease.ReasonNotFound,
		lease.ErrNotFound, `get "jobs/y": lease: not found`},
	{"deadline", context.DeadlineExceeded, connect.CodeDeadlineExceeded, "", context.DeadlineExceeded,
		"context deadline exceeded"},
	{"canceled", fmt.Errorf("waiting: %w", context.Canceled), connect.CodeCanceled, "", context.Canceled,
		"waiting: context canceled"},
	{"other", errors.New("disk on fire"), connect.CodeInternal, "", nil, "disk on fire"},
	{"connect passes through", connect.NewError(connect.CodeUnavailable, errors.New("node: no leader")),
		connect.CodeUnavailable, "", nil, "node: no leader"},
}

func TestErrorRoundTrip(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			out := ToConnectError(tt.err)
			checkConnect(t, out, tt.code, tt.reason, tt.msg)
			checkDomain(t, FromConnectError(out), tt.code, tt.sentinel, tt.msg)
		})
	}
}

// TestRevokedAndDelayedDetails checks that a revoked grant's reason and
// a lock-delay reach the client in typed errors.
func TestRevokedAndDelayedDetails(t *testing.T) {
	got := FromConnectError(ToConnectError(&lease.RevokedError{Name: "jobs/x", Token: 2, Reason: "stuck worker"}))
	re, ok := errors.AsType[*lease.RevokedError](got)
	if !ok || *re != (lease.RevokedError{Name: "jobs/x", Token: 2, Reason: "stuck worker"}) || !errors.Is(got, lease.ErrStaleToken) {
		t.Errorf("revoked: %#v", got)
	}
	got = FromConnectError(ToConnectError(&lease.HeldError{Name: "jobs/x", Holder: "a", Token: 3, Remaining: time.Second, LockDelay: true, Ended: 2 * time.Second}))
	if he, ok := errors.AsType[*lease.HeldError](got); !ok || !he.LockDelay || he.Holder != "a" || he.Token != 3 || he.Remaining != time.Second || he.Ended != 2*time.Second {
		t.Errorf("lock-delay: %#v", got)
	}
	// A plain stale token is not revoked.
	if got := FromConnectError(ToConnectError(&lease.StaleError{Name: "x", Token: 1, Detail: "d"})); errors.Is(got, lease.ErrRevoked) {
		t.Errorf("stale mapped to revoked: %v", got)
	}
	// A grant's lock-delay.
	l := lease.Lease{Name: "jobs/x", Holder: "a", Token: 3, TTL: 5 * time.Second, LockDelay: 15 * time.Second}
	if back := LeaseFromProto(LeaseToProto(l, 0)); back.LockDelay != l.LockDelay {
		t.Errorf("LeaseFromProto(LeaseToProto) = %+v, want lock-delay 15s", back)
	}
	// A renewal's result.
	err := RenewError(&tenurev1.RenewResult{Name: "jobs/x", Token: 2, Reason: lease.ReasonStaleToken, Message: "m", RevokeReason: "why"})
	if re, ok := errors.AsType[*lease.RevokedError](err); !ok || re.Reason != "why" || re.Token != 2 || !errors.Is(err, lease.ErrStaleToken) || err.Error() != "m" {
		t.Errorf("RenewError: %#v", err)
	}
	if err := RenewError(&tenurev1.RenewResult{Name: "x", Token: 2, Reason: lease.ReasonStaleToken, Message: "m"}); errors.Is(err, lease.ErrRevoked) || !errors.Is(err, lease.ErrStaleToken) {
		t.Errorf("RenewError without a revoke reason: %v", err)
	}
	if err := RenewError(&tenurev1.RenewResult{Name: "x", Token: 2}); err != nil {
		t.Errorf("RenewError of a success: %v", err)
	}
}

func TestConnectErrorUnchanged(t *testing.T) {
	ce := connect.NewError(connect.CodeUnavailable, errors.New("x"))
	if got := ToConnectError(ce); got != error(ce) {
		t.Errorf("ToConnectError(connect error) = %v, want it unchanged", got)
	}
	wrapped := fmt.Errorf("forwarding: %w", ce)
	if got := ToConnectError(wrapped); got != wrapped {
		t.Errorf("ToConnectError(wrapped connect error) = %v, want it unchanged", got)
	}
	if ToConnectError(nil) != nil || FromConnectError(nil) != nil {
		t.Error("nil did not map to nil")
	}
	plain := errors.New("plain")
	if got := FromConnectError(plain); got != plain {
		t.Errorf("FromConnectError(plain) = %v, want it unchanged", got)
	}
}

func TestFailedPreconditionWithoutReason(t *testing.T) {
	ce := connect.NewError(connect.CodeFailedPrecondition, errors.New("something else"))
	got := FromConnectError(ce)
	if errors.Is(got, lease.ErrHeld) || errors.Is(got, lease.ErrStaleToken) {
		t.Errorf("FromConnectError = %v, mapped to a domain error without a reason", got)
	}
	if connect.CodeOf(got) != connect.CodeFailedPrecondition {
		t.Errorf("code = %v, want failed_precondition", connect.CodeOf(got))
	}
}

func TestReasonError(t *testing.T) {
	tests := []struct {
		reason, msg string
		sentinel    error
	}{
		{lease.ReasonStaleToken, `lease: stale token 2 for "x": the lease is not held (released or expired)`, lease.ErrStaleToken},
		{lease.ReasonLeaseHeld, "held", lease.ErrHeld},
		{lease.ReasonNotFound, "", lease.ErrNotFound},
		{"SOMETHING_NEW", "new failure", nil},
	}
	for _, tt := range tests {
		t.Run(tt.reason, func(t *testing.T) {
			err := ReasonError(tt.reason, tt.msg)
			if err == nil {
				t.Fatal("ReasonError = nil")
			}
			if tt.sentinel != nil && !errors.Is(err, tt.sentinel) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.sentinel)
			}
			want := tt.msg
			if want == "" {
				want = tt.sentinel.Error()
			}
			if err.Error() != want {
				t.Errorf("message = %q, want %q", err.Error(), want)
			}
		})
	}
	if err := ReasonError("", ""); err != nil {
		t.Errorf("ReasonError for success = %v, want nil", err)
	}
}

// errorServer answers Get with ToConnectError of the case named in the
// request.
type errorServer struct {
	tenurev1connect.UnimplementedLeaseServiceHandler
}

func (errorServer) Get(_ context.Context, req *connect.Request[tenurev1.GetRequest]) (*connect.Response[tenurev1.GetResponse], error) {
	for _, tt := range errorCases {
		if tt.name == req.Msg.GetName() {
			return nil, ToConnectError(tt.err)
		}
	}
	return nil, connect.NewError(connect.CodeUnimplemented, errors.New("no such case"))
}

// TestErrorAcrossTheWire sends every mapping through a real Connect call,
// with the gRPC protocol over cleartext HTTP/2 and the Connect protocol
// (JSON) over HTTP/1.1, so details survive encoding.
func TestErrorAcrossTheWire(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(tenurev1connect.NewLeaseServiceHandler(errorServer{}))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = new(http.Protocols)
	srv.Config.Protocols.SetHTTP1(true)
	srv.Config.Protocols.SetUnencryptedHTTP2(true)
	srv.Start()
	t.Cleanup(srv.Close)

	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	h2cTransport := &http.Transport{Protocols: h2c}
	t.Cleanup(h2cTransport.CloseIdleConnections)
	h1Transport := &http.Transport{}
	t.Cleanup(h1Transport.CloseIdleConnections)

	clients := map[string]tenurev1connect.LeaseServiceClient{
		"grpc-h2c":  tenurev1connect.NewLeaseServiceClient(&http.Client{Transport: h2cTransport}, srv.URL, connect.WithGRPC()),
		"json-http": tenurev1connect.NewLeaseServiceClient(&http.Client{Transport: h1Transport}, srv.URL, connect.WithProtoJSON()),
	}
	for proto, c := range clients {
		for _, tt := range errorCases {
			if tt.code == connect.CodeCanceled || tt.code == connect.CodeDeadlineExceeded {
				continue // the client's own context decides these
			}
			t.Run(proto+"/"+tt.name, func(t *testing.T) {
				_, err := c.Get(t.Context(), connect.NewRequest(&tenurev1.GetRequest{Name: tt.name}))
				if !connect.IsWireError(err) {
					t.Fatalf("err = %v, want an error from the server", err)
				}
				checkConnect(t, err, tt.code, tt.reason, tt.msg)
				checkDomain(t, FromConnectError(err), tt.code, tt.sentinel, tt.msg)
			})
		}
	}
}

func checkConnect(t *testing.T, err error, code connect.Code, reason, msg string) {
	t.Helper()
	ce, ok := errors.AsType[*connect.Error](err)
	if !ok {
		t.Fatalf("%v (%T) is not a *connect.Error", err, err)
	}
	if ce.Code() != code {
		t.Errorf("code = %v, want %v", ce.Code(), code)
	}
	if ce.Message() != msg {
		t.Errorf("message = %q, want %q", ce.Message(), msg)
	}
	d := errorDetail(ce)
	if d.GetReason() != reason {
		t.Errorf("detail reason = %q, want %q", d.GetReason(), reason)
	}
	if reason == lease.ReasonLeaseHeld {
		if d.GetHolder() != held.Holder || d.GetToken() != held.Token ||
			d.GetRemaining().AsDuration() != held.Remaining {
			t.Errorf("detail = %v, want holder %q token %d remaining %s", d, held.Holder, held.Token, held.Remaining)
		}
	}
}

func checkDomain(t *testing.T, err error, code connect.Code, sentinel error, msg string) {
	t.Helper()
	if sentinel != nil && !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, %v) = false", err, sentinel)
	}
	for _, other := range []error{lease.ErrInvalid, lease.ErrHeld, lease.ErrStaleToken, lease.ErrNotFound} {
		if other != sentinel && errors.Is(err, other) {
			t.Errorf("errors.Is(%v, %v) = true, want false", err, other)
		}
	}
	if got := connect.CodeOf(err); got != code {
		t.Errorf("connect.CodeOf = %v, want %v", got, code)
	}
	if sentinel != nil && err.Error() != msg {
		t.Errorf("message = %q, want the server's %q", err.Error(), msg)
	}
	if sentinel == nil && !strings.Contains(err.Error(), msg) {
		t.Errorf("message = %q, want it to contain %q", err.Error(), msg)
	}
	if sentinel == lease.ErrHeld {
		he, ok := errors.AsType[*lease.HeldError](err)
		if !ok {
			t.Fatalf("errors.As(%v, *HeldError) = false", err)
		}
		if he.Holder != held.Holder || he.Token != held.Token || he.Remaining != held.Remaining {
			t.Errorf("HeldError = %+v, want holder %q token %d remaining %s", he, held.Holder, held.Token, held.Remaining)
		}
	}
}

// TestSemaphoreLimitRoundTrip: a slot's limit and a full semaphore's
// HeldError cross the wire.
func TestSemaphoreLimitRoundTrip(t *testing.T) {
	l := lease.Lease{Name: "jobs/x", Holder: "a", Token: 3, TTL: 5 * time.Second, Limit: 3}
	if back := LeaseFromProto(LeaseToProto(l, 0)); back.Limit != 3 {
		t.Fatalf("LeaseFromProto(LeaseToProto) = %+v, want limit 3", back)
	}
	full := &lease.HeldError{Name: "jobs/x", Holder: "a", Token: 3, Remaining: time.Second, Limit: 3}
	back, ok := errors.AsType[*lease.HeldError](FromConnectError(ToConnectError(full)))
	if !ok || back.Limit != 3 || back.Holder != "a" || back.Token != 3 {
		t.Fatalf("HeldError after the round trip = %+v, want limit 3 and a's slot", back)
	}
}

// setDuration must encode exactly as durationpb.New, whose allocation it
// saves.
func TestSetDurationMatchesDurationpb(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999_999_999, time.Second, 4*time.Second + 980*time.Millisecond,
		24*time.Hour + 7, -1, -1500 * time.Millisecond, math.MaxInt64, math.MinInt64} {
		var got durationpb.Duration
		if want := durationpb.New(d); !proto.Equal(setDuration(&got, d), want) {
			t.Errorf("%d: got %v, want %v", d, &got, want)
		}
	}
}
