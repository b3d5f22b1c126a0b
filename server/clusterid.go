package server

import (
	"net/http"
	"sync/atomic"

	"github.com/tenure-io/tenure/internal/wire"
)

// clusterHeader sets wire.ClusterIDHeader on every response, so that a
// client can tell which cluster answered: a node started on an empty
// directory without --join bootstraps a cluster of its own, and a client
// whose endpoints reach it must not take its grants for its cluster's.
// A node that has not joined a cluster yet sends none.
//
// It sits outside authentication and the API handlers, so refusals,
// errors and streams carry the header too. The cost per response is one
// atomic load and one map assignment: the header's value slice is made
// once per cluster ID and shared by every response (net/http only reads
// it).
type clusterHeader struct {
	node Node
	next http.Handler
	// val is the header value for the last cluster ID seen.
	val atomic.Pointer[clusterHeaderValue]
}

type clusterHeaderValue struct {
	id  string
	val []string
}

// clusterHeaderKey is the canonical form of the header name, so the handler can set
// the map entry directly.
var clusterHeaderKey = http.CanonicalHeaderKey(wire.ClusterIDHeader)

func withClusterHeader(n Node, next http.Handler) http.Handler {
	return &clusterHeader{node: n, next: next}
}

func (c *clusterHeader) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if v := c.value(); v != nil {
		w.Header()[clusterHeaderKey] = v
	}
	c.next.ServeHTTP(w, r)
}

// value returns the header's value, or nil while the node knows no
// cluster ID.
func (c *clusterHeader) value() []string {
	id := c.node.ClusterID()
	if id == "" {
		return nil
	}
	if v := c.val.Load(); v != nil && v.id == id {
		return v.val
	}
	v := &clusterHeaderValue{id: id, val: []string{id}}
	c.val.Store(v)
	return v.val
}
