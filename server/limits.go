package server

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// Request limits. A request body is read only up to its method's limit,
// a few times the largest valid request of the method, and the read
// stops there (a larger body is refused with resource_exhausted); with
// authentication on, a request without valid credentials is refused
// before its body is read at all. Streams that stay open (watches and
// the dashboard's event stream) are counted per principal, or per client
// host when the server authenticates nobody.

// smallBody bounds the body of a request that carries only names,
// holders, tokens and durations: tens of times the largest such request.
const smallBody = 64 << 10

// DefaultMaxStreams is how many watches and dashboard streams one
// principal (or one client host, without authentication) may have open
// on a node at once.
const DefaultMaxStreams = 1024

// bodyLimit returns the most bytes the body of a request to path may
// have. Requests that carry values (KV Put, Batch) or many leases (Renew)
// get room for the largest value twice over, base64-encoded in JSON,
// plus a megabyte; everything else gets smallBody.
func bodyLimit(path string, l lease.Limits) int64 {
	switch path {
	case tenurev1connect.KVServicePutProcedure, tenurev1connect.LeaseServiceBatchProcedure, tenurev1connect.LeaseServiceRenewProcedure:
		// A Renew of MaxRenew leases with the longest names, in JSON.
		renew := int64(l.MaxRenew) * int64(l.MaxNameLen+64)
		return max(2*int64(l.MaxValueLen)*4/3+1<<20, renew, 4<<20)
	}
	return smallBody
}

// maxMessage is the largest message any method takes, also once
// decompressed (connect.WithReadMaxBytes).
func maxMessage(l lease.Limits) int64 {
	return bodyLimit(tenurev1connect.LeaseServiceBatchProcedure, l)
}

// withBodyLimit stops reading every request's body at its method's limit.
// A BatchStream's body is a stream of batches that lasts as long as its
// client: it has no total, and each of its messages is bounded as a
// Batch is, by connect.WithReadMaxBytes.
func withBodyLimit(next http.Handler, l lease.Limits) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody && r.URL.Path != wire.BatchStreamProcedure {
			r.Body = http.MaxBytesReader(w, r.Body, bodyLimit(r.URL.Path, l))
		}
		next.ServeHTTP(w, r)
	})
}

// streamLimiter counts the open streams of each principal or host.
type streamLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newStreamLimiter(max int) *streamLimiter {
	if max <= 0 {
		max = DefaultMaxStreams
	}
	return &streamLimiter{max: max, n: make(map[string]int)}
}

// open counts one more stream of the caller of ctx (remote is the
// request's remote address) and returns the function that ends it, or a
// resource_exhausted error if the caller has max streams open.
func (sl *streamLimiter) open(ctx context.Context, remote string) (func(), error) {
	key, who := streamKey(ctx, remote)
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.n[key] >= sl.max {
		return nil, connect.NewError(connect.CodeResourceExhausted,
			fmt.Errorf("server: %s has %d watches and dashboard streams open on this node, the most allowed (tenured --max-streams); close some first", who, sl.max))
	}
	sl.n[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			sl.mu.Lock()
			defer sl.mu.Unlock()
			if sl.n[key]--; sl.n[key] == 0 {
				delete(sl.n, key)
			}
		})
	}, nil
}

// streamKey says whose stream a request opens: its principal, or, when
// the server authenticates nobody, the host it comes from.
func streamKey(ctx context.Context, remote string) (key, who string) {
	if p := principalFrom(ctx); p != "" {
		return "principal " + p, fmt.Sprintf("principal %q", p)
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	return "host " + host, "client host " + host
}

// isProcedure reports whether path names a method of the API.
func isProcedure(path string) bool {
	return strings.HasPrefix(path, "/tenure.v1.")
}
