package server

import (
	"context"
	"errors"
	"fmt"
	"math"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// remoteCall picks the method of a leader's clients that serves Req.
type remoteCall[Req, Res any] func(*peerClients) func(context.Context, *connect.Request[Req]) (*connect.Response[Res], error)

// handle is the path of every lease and KV request: validate op (nothing
// is proposed if it is bad), then route it. An op that waits may take as
// long as its wait: without a deadline of the caller's, it gets the wait
// plus the forwarding timeout, so that forwarding does not cut it short
// (a waiter cut short leaves the queue and loses its place).
func handle[Req, Res any](ctx context.Context, s *Server, req *connect.Request[Req], op lease.Op,
	remote remoteCall[Req, Res], local func(context.Context) (*Res, error)) (*connect.Response[Res], error) {
	limits := s.node.Limits()
	if err := limits.Validate(op); err != nil {
		return nil, invalid(err)
	}
	if _, ok := ctx.Deadline(); !ok && op.Wait {
		wait := op.WaitTimeout
		if wait <= 0 {
			wait = limits.MaxWait
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait+s.fwd.timeout)
		defer cancel()
	}
	return route(ctx, s, req, remote, local)
}

// route forwards req to the leader if this node is not it, else serves it
// with local.
func route[Req, Res any](ctx context.Context, s *Server, req *connect.Request[Req],
	remote remoteCall[Req, Res], local func(context.Context) (*Res, error)) (*connect.Response[Res], error) {
	c, err := s.leaderClients(req.Header())
	if err != nil {
		return nil, err
	}
	if c != nil {
		return forward(ctx, s, req, remote(c))
	}
	res, err := local(ctx)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(res), nil
}

// do proposes op on this node (the leader) and returns its result, with
// its error mapped to a Connect error.
func (s *Server) do(ctx context.Context, op lease.Op) (lease.Result, error) {
	res, err := s.node.Do1(ctx, op)
	if err != nil {
		s.metrics.reject(err)
		return res, toConnect(err)
	}
	return res, nil
}

type leaseService struct{ s *Server }

func (l *leaseService) Acquire(ctx context.Context, req *connect.Request[tenurev1.AcquireRequest]) (*connect.Response[tenurev1.AcquireResponse], error) {
	op, err := acquireOp(ctx, req.Msg)
	if err != nil {
		return nil, invalid(err)
	}
	return handle(ctx, l.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.AcquireRequest]) (*connect.Response[tenurev1.AcquireResponse], error) {
			return c.lease.Acquire
		},
		func(ctx context.Context) (*tenurev1.AcquireResponse, error) {
			res, err := l.s.node.Acquire(ctx, op)
			if err == nil {
				err = res.Err
			}
			if err != nil {
				l.s.metrics.reject(err)
				return nil, toConnect(err)
			}
			return acquireResponse(res), nil
		})
}

func acquireOp(ctx context.Context, m *tenurev1.AcquireRequest) (lease.Op, error) {
	if m.GetTtl() == nil {
		return lease.Op{}, errors.New("lease: ttl is required")
	}
	op := lease.Op{
		Type:        lease.OpAcquire,
		Name:        m.GetName(),
		Holder:      m.GetHolder(),
		TTL:         m.GetTtl().AsDuration(),
		Wait:        m.GetWait(),
		WaitTimeout: m.GetWaitTimeout().AsDuration(),
		Limit:       int(min(m.GetLimit(), math.MaxInt32)),
		Principal:   principalFrom(ctx),
		LockDelay:   m.GetLockDelay().AsDuration(),
		Shared:      m.GetShared(),
		Priority:    int(min(m.GetPriority(), math.MaxInt32)),
	}
	return withRequestID(op, m.GetRequestId()), nil
}

func acquireResponse(res lease.Result) *tenurev1.AcquireResponse {
	return &tenurev1.AcquireResponse{Lease: wire.LeaseToProto(res.Lease, res.Now)}
}

func (l *leaseService) Renew(ctx context.Context, req *connect.Request[tenurev1.RenewRequest]) (*connect.Response[tenurev1.RenewResponse], error) {
	op := renewOp(ctx, req.Msg)
	return handle(ctx, l.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.RenewRequest]) (*connect.Response[tenurev1.RenewResponse], error) {
			return c.lease.Renew
		},
		func(ctx context.Context) (*tenurev1.RenewResponse, error) {
			res, err := l.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			return l.s.renewResponse(res), nil
		})
}

func renewOp(ctx context.Context, m *tenurev1.RenewRequest) lease.Op {
	op := lease.Op{Type: lease.OpRenew, Refs: make([]lease.Ref, 0, len(m.GetLeases())), Principal: principalFrom(ctx)}
	for _, r := range m.GetLeases() {
		op.Refs = append(op.Refs, lease.Ref{Name: r.GetName(), Token: r.GetToken(), TTL: r.GetTtl().AsDuration()})
	}
	return withRequestID(op, m.GetRequestId())
}

// renewRefused counts the refusal of the renewal of one lease with err
// and returns what its RenewResult says of it.
func (s *Server) renewRefused(err error) (reason, message, revokeReason string) {
	s.metrics.reject(err)
	if re, ok := errors.AsType[*lease.RevokedError](err); ok {
		revokeReason = re.Reason
	}
	return lease.Reason(err), err.Error(), revokeReason
}

// renewResponse reports each lease of a renewal, counting the renewals
// and rejections.
//
// A session renews many leases in one request, so the messages are
// allocated together, a few objects per response rather than four per
// lease.
func (s *Server) renewResponse(res lease.Result) *tenurev1.RenewResponse {
	n := len(res.Renewed)
	var (
		out       *tenurev1.RenewResponse
		results   []tenurev1.RenewResult
		leases    []tenurev1.Lease
		durations []durationpb.Duration
	)
	if n == 1 {
		// The renewal of one lease (a holder renewing its own, the
		// most common request there is): one allocation.
		one := new(oneRenewal)
		out, results, leases, durations = &one.out, one.result[:], one.lease[:], one.durations[:]
		out.Results = one.ptr[:]
	} else {
		out = &tenurev1.RenewResponse{Results: make([]*tenurev1.RenewResult, n)}
		results = make([]tenurev1.RenewResult, n)
	}
	renewed := 0
	for i, r := range res.Renewed {
		pr := &results[i]
		pr.Name, pr.Token = r.Ref.Name, r.Ref.Token
		if r.Err != nil {
			pr.Reason, pr.Message, pr.RevokeReason = s.renewRefused(r.Err)
		} else {
			if leases == nil {
				leases, durations = make([]tenurev1.Lease, n), make([]durationpb.Duration, 2*n)
			}
			pr.Lease = wire.FillLease(&leases[i], durations[2*i:2*i+2], r.Lease, res.Now)
			pr.HandoffRequested = r.HandoffRequested
			renewed++
		}
		out.Results[i] = pr
	}
	s.metrics.renewals.Add(float64(renewed))
	return out
}

// oneRenewal holds the messages of the answer to the renewal of one
// lease.
type oneRenewal struct {
	out       tenurev1.RenewResponse
	ptr       [1]*tenurev1.RenewResult
	result    [1]tenurev1.RenewResult
	lease     [1]tenurev1.Lease
	durations [2]durationpb.Duration
}

func (l *leaseService) Release(ctx context.Context, req *connect.Request[tenurev1.ReleaseRequest]) (*connect.Response[tenurev1.ReleaseResponse], error) {
	op := releaseOp(ctx, req.Msg)
	return handle(ctx, l.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.ReleaseRequest]) (*connect.Response[tenurev1.ReleaseResponse], error) {
			return c.lease.Release
		},
		func(ctx context.Context) (*tenurev1.ReleaseResponse, error) {
			res, err := l.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			if op.Handoff {
				l.s.log.Info("handed off", "name", op.Name, "token", op.Token, "to", res.Lease.Holder,
					"new_token", res.Lease.Token, "principal", op.Principal)
			}
			return releaseResponse(res), nil
		})
}

func releaseOp(ctx context.Context, m *tenurev1.ReleaseRequest) lease.Op {
	op := lease.Op{Type: lease.OpRelease, Name: m.GetName(), Token: m.GetToken(), Principal: principalFrom(ctx),
		Handoff: m.GetHandoff(), HandoffTo: m.GetHandoffTo()}
	return withRequestID(op, m.GetRequestId())
}

// releaseResponse answers a release: for a handoff, with the new grant.
func releaseResponse(res lease.Result) *tenurev1.ReleaseResponse {
	if res.Lease.Token == 0 {
		return &tenurev1.ReleaseResponse{}
	}
	return &tenurev1.ReleaseResponse{HandedTo: wire.LeaseToProto(res.Lease, res.Now)}
}

func (l *leaseService) Revoke(ctx context.Context, req *connect.Request[tenurev1.RevokeRequest]) (*connect.Response[tenurev1.RevokeResponse], error) {
	m := req.Msg
	op := withRequestID(lease.Op{Type: lease.OpRevoke, Name: m.GetName(), Token: m.GetToken(), Reason: m.GetReason(),
		Principal: principalFrom(ctx)}, m.GetRequestId())
	return handle(ctx, l.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.RevokeRequest]) (*connect.Response[tenurev1.RevokeResponse], error) {
			return c.lease.Revoke
		},
		func(ctx context.Context) (*tenurev1.RevokeResponse, error) {
			res, err := l.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			out := &tenurev1.RevokeResponse{}
			for _, g := range res.Leases {
				out.Revoked = append(out.Revoked, wire.LeaseToProto(g, res.Now))
			}
			l.s.log.Info("revoked", "name", op.Name, "token", op.Token, "grants", len(res.Leases),
				"principal", op.Principal, "reason", op.Reason)
			return out, nil
		})
}

// withRequestID returns op as one call of a client session, if id names
// one: the state machine then applies it at most once (lease/session.go).
func withRequestID(op lease.Op, id *tenurev1.RequestID) lease.Op {
	if id.GetSession() != "" {
		op.Session, op.Seq, op.Floor = id.GetSession(), id.GetSeq(), id.GetFloor()
	}
	return op
}

func (l *leaseService) Get(ctx context.Context, req *connect.Request[tenurev1.GetRequest]) (*connect.Response[tenurev1.GetResponse], error) {
	op := lease.Op{Type: lease.OpGet, Name: req.Msg.GetName()}
	return handle(ctx, l.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.GetRequest]) (*connect.Response[tenurev1.GetResponse], error) {
			return c.lease.Get
		},
		func(ctx context.Context) (*tenurev1.GetResponse, error) {
			res, err := l.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			out := &tenurev1.GetResponse{Lease: wire.LeaseToProto(res.Lease, res.Now)}
			for _, l := range res.Leases {
				out.Slots = append(out.Slots, wire.LeaseToProto(l, res.Now))
			}
			return out, nil
		})
}

func (l *leaseService) List(ctx context.Context, req *connect.Request[tenurev1.ListRequest]) (*connect.Response[tenurev1.ListResponse], error) {
	op := lease.Op{Type: lease.OpList, Prefix: req.Msg.GetPrefix()}
	return handle(ctx, l.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.ListRequest]) (*connect.Response[tenurev1.ListResponse], error) {
			return c.lease.List
		},
		func(ctx context.Context) (*tenurev1.ListResponse, error) {
			res, err := l.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			out := &tenurev1.ListResponse{}
			for _, ls := range res.Leases {
				out.Leases = append(out.Leases, wire.LeaseToProto(ls, res.Now))
			}
			return out, nil
		})
}

// History is served like Get: through the log on the leader, so it reads
// every term committed before it. The terms come newest first; since and
// limit are applied here (they decide nothing in the state machine).
func (l *leaseService) History(ctx context.Context, req *connect.Request[tenurev1.HistoryRequest]) (*connect.Response[tenurev1.HistoryResponse], error) {
	op := lease.Op{Type: lease.OpHistory, Name: req.Msg.GetName()}
	if ts := req.Msg.GetSince(); ts != nil {
		if err := ts.CheckValid(); err != nil {
			return nil, invalid(fmt.Errorf("since: %w", err))
		}
	}
	return handle(ctx, l.s, req, op,
		func(c *peerClients) func(context.Context, *connect.Request[tenurev1.HistoryRequest]) (*connect.Response[tenurev1.HistoryResponse], error) {
			return c.lease.History
		},
		func(ctx context.Context) (*tenurev1.HistoryResponse, error) {
			res, err := l.s.do(ctx, op)
			if err != nil {
				return nil, err
			}
			var since int64
			if ts := req.Msg.GetSince(); ts != nil {
				since = ts.AsTime().UnixNano()
			}
			ret := l.s.node.HistoryRetention()
			out := &tenurev1.HistoryResponse{RetentionTerms: uint32(ret.Terms), RetentionAge: durationpb.New(ret.Age),
				ClusterNow: durationpb.New(res.Now)}
			for i := len(res.Terms) - 1; i >= 0; i-- {
				t := res.Terms[i]
				if since != 0 && t.Ending != lease.EndingNone && t.EndWall != 0 && t.EndWall < since {
					continue
				}
				out.Terms = append(out.Terms, wire.TermToProto(op.Name, t))
				if n := req.Msg.GetLimit(); n > 0 && len(out.Terms) >= int(n) {
					break
				}
			}
			return out, nil
		})
}

// Watch is served from this node's applied state: first the current
// leases, a SYNCED marker, then every event in commit order.
func (l *leaseService) Watch(ctx context.Context, req *connect.Request[tenurev1.WatchRequest], stream *connect.ServerStream[tenurev1.WatchResponse]) error {
	s := l.s
	if err := s.node.Limits().Validate(lease.Op{Type: lease.OpList, Prefix: req.Msg.GetPrefix()}); err != nil {
		return invalid(err)
	}
	done, err := s.streams.open(ctx, req.Peer().Addr)
	if err != nil {
		return err
	}
	defer done()
	w, err := s.node.Watch(req.Msg.GetPrefix())
	if err != nil {
		return toConnect(err)
	}
	defer w.Cancel()
	send := func(t tenurev1.WatchEvent_Type, pl *tenurev1.Lease, index uint64) error {
		return stream.Send(&tenurev1.WatchResponse{Event: &tenurev1.WatchEvent{Type: t, Lease: pl, Index: index}})
	}
	for _, cur := range w.Current {
		if err := send(tenurev1.WatchEvent_TYPE_CURRENT, wire.LeaseToProto(cur, w.Now), 0); err != nil {
			return err
		}
	}
	if err := send(tenurev1.WatchEvent_TYPE_SYNCED, nil, 0); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return toConnect(w.Err())
			}
			out := &tenurev1.WatchResponse{Event: &tenurev1.WatchEvent{Type: eventType(ev.Type),
				Lease: wire.LeaseToProto(ev.Lease, ev.At), Index: ev.Index, Reason: ev.Reason}}
			if err := stream.Send(out); err != nil {
				return err
			}
		}
	}
}

func eventType(t lease.EventType) tenurev1.WatchEvent_Type {
	switch t {
	case lease.EventGranted:
		return tenurev1.WatchEvent_TYPE_GRANTED
	case lease.EventReleased:
		return tenurev1.WatchEvent_TYPE_RELEASED
	case lease.EventExpired:
		return tenurev1.WatchEvent_TYPE_EXPIRED
	case lease.EventRevoked:
		return tenurev1.WatchEvent_TYPE_REVOKED
	}
	return tenurev1.WatchEvent_TYPE_UNSPECIFIED
}
