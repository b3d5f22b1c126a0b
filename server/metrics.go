package server

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"

	"connectrpc.com/connect"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/lease"
	"github.com/tenure-io/tenure/node"
)

type metrics struct {
	requests *prometheus.CounterVec
	// served counts what requests counts, over all its labels (for the
	// dashboard's sampler).
	served     atomic.Uint64
	renewals   prometheus.Counter
	rejections *prometheus.CounterVec
	// batchOK is requests{method="LeaseService/Batch",code="ok"}, the
	// most counted.
	batchOK prometheus.Counter
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
	m.batchOK = m.requests.WithLabelValues(methodLabel(tenurev1connect.LeaseServiceBatchProcedure), "ok")
	for _, r := range []string{lease.ReasonLeaseHeld, lease.ReasonStaleToken, lease.ReasonNotFound, "INVALID", "UNAVAILABLE"} {
		m.rejections.WithLabelValues(r)
	}
	reg.MustRegister(m.requests, m.renewals, m.rejections, statusCollector{n})
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
			m.countCall(req.Spec().Procedure, err)
			return res, err
		}
	})
}

// countCall counts one call of procedure that ended with err, however
// it came (a request of its own, a BatchStream message, a batch
// connection frame).
func (m *metrics) countCall(procedure string, err error) {
	if err == nil && procedure == tenurev1connect.LeaseServiceBatchProcedure {
		m.batchOK.Inc()
		m.served.Add(1)
		return
	}
	code := "ok"
	if err != nil {
		code = connect.CodeOf(err).String()
	}
	m.count(methodLabel(procedure), code)
}

// methodLabel is the method label of procedure: "LeaseService/Acquire".
func methodLabel(procedure string) string {
	return procedure[strings.LastIndex(procedure, ".")+1:]
}

func (m *metrics) count(method, code string) {
	m.requests.WithLabelValues(method, code).Inc()
	m.served.Add(1)
}

// statusCollector exports a node's Status as gauges, reading it once per
// scrape.
type statusCollector struct{ n Node }

var statusGauges = []struct {
	desc  *prometheus.Desc
	value func(st node.Status) float64
}{
	{prometheus.NewDesc("tenure_raft_term", "Current raft term.", nil, nil),
		func(st node.Status) float64 { return float64(st.Term) }},
	{prometheus.NewDesc("tenure_raft_applied_index", "Last raft index applied to the state machine.", nil, nil),
		func(st node.Status) float64 { return float64(st.AppliedIndex) }},
	{prometheus.NewDesc("tenure_raft_commit_index", "Last raft index known committed.", nil, nil),
		func(st node.Status) float64 { return float64(st.CommitIndex) }},
	{prometheus.NewDesc("tenure_leases", "Leases live at the applied cluster time.", nil, nil),
		func(st node.Status) float64 { return float64(st.Leases) }},
	{prometheus.NewDesc("tenure_leases_stored", "Leases stored: live, or expired and awaiting the expirer.", nil, nil),
		func(st node.Status) float64 { return float64(st.Stored) }},
	{prometheus.NewDesc("tenure_last_token", "Highest fencing token granted.", nil, nil),
		func(st node.Status) float64 { return float64(st.LastToken) }},
}

func (c statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range statusGauges {
		ch <- g.desc
	}
}

func (c statusCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Status()
	for _, g := range statusGauges {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, g.value(st))
	}
}
