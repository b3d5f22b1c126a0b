package server

import (
	"context"
	"errors"
	"strings"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/lease"
)

type metrics struct {
	requests   *prometheus.CounterVec
	renewals   prometheus.Counter
	rejections *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, n Node) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tenure", Name: "requests_total",
			Help: "API requests served by this node, by method and result code.",
		}, []string{"method", "code"}),
		renewals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tenure", Name: "renewals_total",
			Help: "Lease renewals that succeeded on this node as leader.",
		}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tenure", Name: "rejections_total",
			Help: "Requests refused by the state machine, by reason.",
		}, []string{"reason"}),
	}
	for _, r := range []string{lease.ReasonLeaseHeld, lease.ReasonStaleToken, lease.ReasonNotFound, "INVALID", "UNAVAILABLE"} {
		m.rejections.WithLabelValues(r)
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "tenure", Name: name, Help: help}, f)
	}
	reg.MustRegister(m.requests, m.renewals, m.rejections,
		gauge("raft_term", "Current raft term.", func() float64 { return float64(n.Status().Term) }),
		gauge("raft_applied_index", "Last raft index applied to the state machine.", func() float64 { return float64(n.Status().AppliedIndex) }),
		gauge("raft_commit_index", "Last raft index known committed.", func() float64 { return float64(n.Status().CommitIndex) }),
		gauge("leases", "Leases stored (live or awaiting expiry).", func() float64 { return float64(n.Status().Leases) }),
		gauge("last_token", "Highest fencing token granted.", func() float64 { return float64(n.Status().LastToken) }),
	)
	return m
}

func (m *metrics) reject(err error) {
	r := lease.Reason(err)
	switch {
	case r != "":
	case errors.Is(err, lease.ErrInvalid):
		r = "INVALID"
	default:
		r = "UNAVAILABLE"
	}
	m.rejections.WithLabelValues(r).Inc()
}

func (m *metrics) interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			res, err := next(ctx, req)
			code := "ok"
			if err != nil {
				code = connect.CodeOf(err).String()
			}
			method := req.Spec().Procedure
			method = method[strings.LastIndex(method, ".")+1:]
			m.requests.WithLabelValues(method, code).Inc()
			return res, err
		}
	})
}
