package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
)

// Client talks to a tenure cluster. It is safe for concurrent use.
type Client struct {
	cfg       Config
	endpoints []*endpoint
	// cur is the index of the endpoint tried first: the last one that
	// served a request.
	cur atomic.Int64
	// transport is the Client's own, closed by Close; nil when the
	// caller supplied the HTTP client.
	transport *http.Transport
	// clusterID is the cluster the client is pinned to; nil until the
	// first answer that carries one (see clusterid.go).
	clusterID atomic.Pointer[string]
	// sess numbers the calls that change state (see session.go).
	sess *session
}

// endpoint holds the Connect clients of one cluster member.
type endpoint struct {
	addr    string
	lease   tenurev1connect.LeaseServiceClient
	kv      tenurev1connect.KVServiceClient
	cluster tenurev1connect.ClusterServiceClient
	batch   *batcher
	// batchStream opens the BatchStreams that carry the batcher's
	// Batch calls; batchLease carries them one by one to a server
	// without BatchStream. Both use the Connect protocol on the
	// endpoint's one connection.
	batchStream *connect.Client[tenurev1.BatchRequest, tenurev1.BatchResponse]
	batchLease  tenurev1connect.LeaseServiceClient
	// conn carries Batch and Acquire calls on a connection of their own
	// (batchconn.go); nil when the Client's HTTP client is the caller's.
	conn *connDialer
}

// New returns a Client for cfg. It does not connect: connections are opened
// by the first requests.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	c := &Client{cfg: cfg, sess: newSession()}
	if cfg.ClusterID != "" {
		id := cfg.ClusterID
		c.clusterID.Store(&id)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		c.transport = newTransport(cfg.DialTimeout, cfg.TLS)
		hc = &http.Client{Transport: c.transport}
	}
	hc = wholeMessages(withToken(hc, cfg.Token))
	// Compressing costs more CPU than it saves on a LAN for all but very
	// large messages (batches of renewals included).
	compress := connect.WithCompressMinBytes(1 << 20)
	for _, e := range cfg.Endpoints {
		addr, err := normalizeEndpoint(e)
		if err != nil {
			return nil, err
		}
		// Every answer from addr has its cluster ID checked.
		check := connect.WithInterceptors(clusterCheck{c: c, addr: addr})
		opts := connect.WithClientOptions(connect.WithGRPC(), compress, check)
		base := "http://" + addr
		_, https := splitScheme(e)
		if https || cfg.TLS != nil {
			base = "https://" + addr
		}
		ep := &endpoint{
			addr:    addr,
			lease:   tenurev1connect.NewLeaseServiceClient(hc, base, opts),
			kv:      tenurev1connect.NewKVServiceClient(hc, base, opts),
			cluster: tenurev1connect.NewClusterServiceClient(hc, base, opts),
		}
		// Batch calls use the Connect protocol, whose messages carry
		// no trailers, on the same HTTP/2 connection as the rest.
		ep.batchLease = tenurev1connect.NewLeaseServiceClient(hc, base, compress, check)
		ep.batchStream = connect.NewClient[tenurev1.BatchRequest, tenurev1.BatchResponse](hc,
			base+wire.BatchStreamProcedure, compress, check)
		ep.conn = newConnDialer(c, addr, https)
		ep.batch = &batcher{ep: ep, timeout: cfg.RequestTimeout}
		if c.transport != nil {
			ep.batch.closed = c.transport.CloseIdleConnections
		}
		c.endpoints = append(c.endpoints, ep)
	}
	return c, nil
}

// newTransport returns a transport that speaks HTTP/2, as the gRPC
// protocol needs: over TLS to https endpoints, without (h2c with prior
// knowledge) to the others. It pings idle connections so a dead server
// is noticed even by a quiet watch.
func newTransport(dialTimeout time.Duration, tlsCfg *tls.Config) *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP2(true)
	d := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Protocols: &p,
		// A copy: a Transport sets NextProtos on its TLS config in place,
		// and the batch transport's HTTP/1.1 must not offer h2 because
		// the other transport made the first call.
		TLSClientConfig: tlsCfg.Clone(),
		DialContext:     d.DialContext,
		HTTP2: &http.HTTP2Config{
			SendPingTimeout: 10 * time.Second,
			PingTimeout:     5 * time.Second,
		},
	}
}

// withToken returns hc sending token as a bearer token with every
// request, or hc itself if token is empty or hc nil.
func withToken(hc *http.Client, token string) *http.Client {
	if hc == nil || token == "" {
		return hc
	}
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &http.Client{Transport: bearer{token: token, next: rt}, CheckRedirect: hc.CheckRedirect, Jar: hc.Jar, Timeout: hc.Timeout}
}

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// Close closes the Client's idle connections, after ending the streams
// its batches go on (at once, or once the calls on their way are
// answered). It does not end watches: cancel their contexts. Close
// always returns nil.
func (c *Client) Close() error {
	for _, ep := range c.endpoints {
		ep.batch.close()
		ep.conn.close()
	}
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
	return nil
}

// Endpoints returns the endpoints as host:port, in the configured order.
func (c *Client) Endpoints() []string {
	out := make([]string, len(c.endpoints))
	for i, e := range c.endpoints {
		out[i] = e.addr
	}
	return out
}

// call runs attempt at one endpoint after another, starting with the last
// one that worked, until an attempt succeeds, fails in a way retrying
// cannot fix, or ctx ends. After every endpoint failed once it pauses
// (RetryBackoff, doubling up to MaxRetryBackoff). The error it returns is
// mapped with wire.FromConnectError.
//
// An answer from another cluster (an *OtherClusterError) fails the
// attempt whatever the retry policy: the request did not reach the
// client's cluster, so trying it there is safe. Once every endpoint has
// answered for another cluster, the call returns that error.
func (c *Client) call(ctx context.Context, p retryPolicy, attempt func(context.Context, *endpoint) error) error {
	n := len(c.endpoints)
	i := int(c.cur.Load())
	backoff := c.cfg.RetryBackoff
	failures := 0
	var (
		last  error
		other *otherClusters
	)
	for {
		if ctx.Err() != nil {
			return c.gaveUp(ctx, failures, last, other)
		}
		ep := c.endpoints[i]
		err := attempt(ctx, ep)
		if err == nil {
			c.cur.Store(int64(i))
			return nil
		}
		if oc, ok := errors.AsType[*OtherClusterError](err); ok {
			if other == nil {
				other = &otherClusters{refused: make([]bool, n)}
			}
			if other.add(i, oc) == n {
				return oc
			}
		}
		switch classify(ctx, err, p) {
		case giveUp:
			if ctx.Err() != nil && failures > 0 {
				// Interrupted by the caller's context: the earlier
				// failures say more than this attempt's context error.
				return c.gaveUp(ctx, failures, last, other)
			}
			return wire.FromConnectError(err)
		case indeterminate:
			return fmt.Errorf("%w: %s: %w", ErrIndeterminate, ep.addr, wire.FromConnectError(err))
		}
		last = fmt.Errorf("%s: %w", ep.addr, err)
		failures++
		i = (i + 1) % n
		if failures%n != 0 {
			continue
		}
		if !sleep(ctx, backoff) {
			return c.gaveUp(ctx, failures, last, other)
		}
		backoff = min(2*backoff, c.cfg.MaxRetryBackoff)
	}
}

// gaveUp returns the error of a call whose context ended after failures
// failed attempts, some of them perhaps refused as answers from another
// cluster (other, nil if none).
func (c *Client) gaveUp(ctx context.Context, failures int, last error, other *otherClusters) error {
	cause := context.Cause(ctx)
	if failures == 0 {
		return fmt.Errorf("client: %w", cause)
	}
	e := &unavailableError{attempts: failures, last: last, cause: cause}
	if other != nil {
		e.other = other.last
	}
	return e
}

// otherClusters records, for one call, the endpoints that answered for
// another cluster.
type otherClusters struct {
	refused []bool // by endpoint index
	n       int    // endpoints refused
	last    *OtherClusterError
}

// add records that endpoint i answered for another cluster with err, and
// returns how many endpoints have.
func (o *otherClusters) add(i int, err *OtherClusterError) int {
	if !o.refused[i] {
		o.refused[i] = true
		o.n++
	}
	o.last = err
	return o.n
}

// unary calls one unary method with msg, each attempt bounded by the
// request timeout. svc picks the service client of an endpoint and method
// is one of its methods, as a method expression (e.g.
// tenurev1connect.KVServiceClient.Put). It returns the response and the
// time the successful attempt was sent.
func unary[S, Req, Res any](ctx context.Context, c *Client, p retryPolicy, msg *Req, svc func(*endpoint) S,
	method func(S, context.Context, *connect.Request[Req]) (*connect.Response[Res], error)) (*Res, time.Time, error) {
	var (
		res  *Res
		sent time.Time
	)
	err := c.call(ctx, p, func(ctx context.Context, ep *endpoint) error {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		defer cancel()
		sent = time.Now()
		r, err := method(svc(ep), ctx, connect.NewRequest(msg))
		if err != nil {
			return err
		}
		res = r.Msg
		return nil
	})
	return res, sent, err
}

// The service clients of an endpoint, for unary.
func leaseService(ep *endpoint) tenurev1connect.LeaseServiceClient     { return ep.lease }
func kvService(ep *endpoint) tenurev1connect.KVServiceClient           { return ep.kv }
func clusterService(ep *endpoint) tenurev1connect.ClusterServiceClient { return ep.cluster }
