package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/internal/wire"
)

// Cluster identity. Every member of a cluster sends the cluster's ID with
// every answer (the Tenure-Cluster-Id header). A node started on an empty
// data directory without --join bootstraps a cluster of its own, whose
// tokens start again from 1; a client whose endpoints reach it would take
// its grants for grants of its own cluster, and fencing would be void.
// So the client pins the cluster ID (Config.ClusterID, or the first ID an
// answer carries) and refuses every answer that carries another one: the
// attempt fails, the endpoint counts as failed for that call, and the
// call goes on to the other endpoints. An answer without an ID (a server
// older than the header, or a node that has not joined a cluster yet) is
// accepted.

// clusterIDKey is the header's canonical name, for direct map lookups.
var clusterIDKey = http.CanonicalHeaderKey(wire.ClusterIDHeader)

// OtherClusterError reports an answer from a member of another cluster
// than the one the client is pinned to. It matches ErrOtherCluster. The
// request it answered may have taken effect on that other cluster; its
// answer was discarded.
type OtherClusterError struct {
	// Endpoint is the endpoint that answered (host:port).
	Endpoint string
	// Expected is the ID the client is pinned to.
	Expected string
	// Seen is the ID the answer carried.
	Seen string
}

func (e *OtherClusterError) Error() string {
	return fmt.Sprintf("client: endpoint %s answered for cluster %s, but this client talks to cluster %s (answer discarded)",
		e.Endpoint, e.Seen, e.Expected)
}

// Unwrap returns ErrOtherCluster.
func (e *OtherClusterError) Unwrap() error { return ErrOtherCluster }

// ClusterID returns the ID of the cluster the client is pinned to: the one
// it was configured with (Config.ClusterID), else the first one an answer
// carried; "" before the first answer.
func (c *Client) ClusterID() string {
	if p := c.clusterID.Load(); p != nil {
		return *p
	}
	return ""
}

// checkCluster checks the cluster ID in h, the header of an answer from
// addr: it pins the ID if none is pinned yet, and returns an
// *OtherClusterError if another one is.
func (c *Client) checkCluster(addr string, h http.Header) error {
	v := h[clusterIDKey]
	if len(v) == 0 || v[0] == "" {
		return nil
	}
	seen := v[0]
	want := c.clusterID.Load()
	if want == nil {
		// A copy of its own, so that only pinning allocates: the hot
		// path (an ID already pinned) takes no address.
		id := seen
		if c.clusterID.CompareAndSwap(nil, &id) {
			return nil
		}
		want = c.clusterID.Load() // another answer pinned it first
	}
	if *want == seen {
		return nil
	}
	return &OtherClusterError{Endpoint: addr, Expected: *want, Seen: seen}
}

// clusterCheck is the interceptor that checks the cluster ID of every
// answer from one endpoint, errors included, before the caller sees it.
type clusterCheck struct {
	c    *Client
	addr string
}

var _ connect.Interceptor = clusterCheck{}

func (k clusterCheck) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		res, err := next(ctx, req)
		if err != nil {
			if ce, ok := errors.AsType[*connect.Error](err); ok {
				if cerr := k.c.checkCluster(k.addr, ce.Meta()); cerr != nil {
					return nil, cerr
				}
			}
			return nil, err
		}
		if cerr := k.c.checkCluster(k.addr, res.Header()); cerr != nil {
			return nil, cerr
		}
		return res, nil
	}
}

func (k clusterCheck) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		return &clusterCheckedConn{StreamingClientConn: next(ctx, spec), check: k}
	}
}

func (k clusterCheck) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// clusterCheckedConn checks a stream's response header when the first
// message (or the first error) arrives; a refused stream returns the
// refusal from every Receive after.
type clusterCheckedConn struct {
	connect.StreamingClientConn
	check   clusterCheck
	checked bool  // by the goroutine that receives
	refused error // set if the check failed
}

func (s *clusterCheckedConn) Receive(msg any) error {
	if s.refused != nil {
		return s.refused
	}
	err := s.StreamingClientConn.Receive(msg)
	if s.checked {
		return err
	}
	// The response header is read only after a message arrived: after
	// an error, connect may still be filling it in on the goroutine that
	// sent the request (a data race, seen under load). An error from the
	// server carries the header in its metadata; any other error means
	// no answer came, and there is nothing to check.
	var h http.Header
	if err == nil {
		h = s.ResponseHeader()
	} else if ce, ok := errors.AsType[*connect.Error](err); ok {
		h = ce.Meta()
	} else {
		return err
	}
	s.checked = true
	if cerr := s.check.c.checkCluster(s.check.addr, h); cerr != nil {
		s.refused = cerr
		return cerr
	}
	return err
}
