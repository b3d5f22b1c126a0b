package node

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/tenure-io/tenure/lease"
)

type metrics struct {
	events       *prometheus.CounterVec
	isLeader     prometheus.Gauge
	applyLatency prometheus.Histogram
	batchOps     prometheus.Histogram
	dropped      prometheus.Counter
	watchResets  prometheus.Counter
	// memoryRenewals counts calls answered from the leader's memory.
	memoryRenewals prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "tenure", Name: "lease_events_total",
			Help: "Lease grants, releases and expiries applied on this node.",
		}, []string{"type"}),
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "tenure", Name: "raft_leader",
			Help: "1 if this node is the raft leader and has taken over, else 0.",
		}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tenure", Name: "apply_latency_seconds",
			Help:    "Time from proposing a request to its result being applied, on the leader.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tenure", Name: "proposals_dropped_total",
			Help: "Requests not proposed because their caller had gone before they were batched.",
		}),
		watchResets: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tenure", Name: "watch_resets_total",
			Help: "Watch streams ended because this node installed a snapshot.",
		}),
		memoryRenewals: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "tenure", Name: "memory_renewals_total",
			Help: "Renewal calls the leader answered from memory, within the headroom the log gave their grants.",
		}),
		batchOps: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "tenure", Name: "batch_ops",
			Help:    "Operations coalesced into one raft entry.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11),
		}),
	}
	for _, t := range []lease.EventType{lease.EventGranted, lease.EventReleased, lease.EventExpired, lease.EventRevoked} {
		m.events.WithLabelValues(t.String())
	}
	if reg != nil {
		reg.MustRegister(m.events, m.isLeader, m.applyLatency, m.batchOps, m.dropped, m.watchResets, m.memoryRenewals)
	}
	return m
}

// ApplyLatency writes the node's tenure_apply_latency_seconds histogram
// (the time from proposing a request to its applied result, as leader)
// into out.
func (n *Node) ApplyLatency(out *dto.Metric) error {
	return n.metrics.applyLatency.Write(out)
}

func (m *metrics) observe(events []lease.Event) {
	for _, ev := range events {
		m.events.WithLabelValues(ev.Type.String()).Inc()
	}
}
