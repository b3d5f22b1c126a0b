// Package server serves tenure's Connect API (LeaseService, KVService and
// ClusterService) over one HTTP port that speaks gRPC, gRPC-Web and
// Connect's JSON over HTTP/1.1 and cleartext HTTP/2, plus /healthz, /readyz
// and Prometheus metrics at /metrics.
//
// Requests are validated against the node's limits before anything is
// proposed, so bad input changes nothing. A follower forwards requests that
// need the leader; Watch and Status are served by the node that receives
// them.
package server
