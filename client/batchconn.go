package client

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/internal/wire"
)

// The batch connection (see wire.BatchConnPath). A Client that makes
// its own connections sends its Batch calls and its Acquire calls to
// each endpoint on one connection of their own, dialled by the first
// such call: a holder that renews for hours costs the server one
// goroutine and one read and one write per renewal, instead of an
// HTTP/2 stream's. A server without it (older than the client) answers
// the upgrade with 404: the calls then go as before, on HTTP/2.

// errNoConn is what a call through the batch connection returns when
// the endpoint has none: the call then goes the other way, unsent.
var errNoConn = errors.New("client: endpoint has no batch connection")

// connDialer holds an endpoint's batch connection and dials it.
type connDialer struct {
	c       *Client
	addr    string
	tls     *tls.Config // nil: cleartext
	timeout time.Duration
	// off is set once the endpoint answered the upgrade with anything
	// but 101: its calls go on HTTP/2 from then on.
	off atomic.Bool

	mu sync.Mutex // one dial at a time
	bc *batchConn // the connection, nil before the first and after one ended
}

// newConnDialer returns the dialer of addr's batch connection, or nil if
// the Client does not make its own connections (its HTTP client is the
// caller's, whose dialling, proxies and TLS it must not bypass).
func newConnDialer(c *Client, addr string, https bool) *connDialer {
	if c.transport == nil {
		return nil
	}
	d := &connDialer{c: c, addr: addr, timeout: c.cfg.DialTimeout}
	if https || c.cfg.TLS != nil {
		d.tls = c.cfg.TLS.Clone()
		if d.tls == nil {
			d.tls = new(tls.Config)
		}
		// HTTP/1.1 only: the upgrade needs it.
		d.tls.NextProtos = []string{"http/1.1"}
		if d.tls.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				host = addr
			}
			d.tls.ServerName = host
		}
	}
	return d
}

// conn returns the batch connection, dialled if there is none.
func (d *connDialer) conn(ctx context.Context) (*batchConn, error) {
	if d == nil || d.off.Load() {
		return nil, errNoConn
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bc != nil && !d.bc.ended() {
		return d.bc, nil
	}
	d.bc = nil
	bc, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	d.bc = bc
	return bc, nil
}

// dial opens a batch connection: a TCP (and TLS) connection, upgraded.
func (d *connDialer) dial(ctx context.Context) (*batchConn, error) {
	dl := net.Dialer{Timeout: d.timeout, KeepAlive: 30 * time.Second}
	nc, err := dl.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	// The handshake (TLS, the upgrade) gets as long as the dial: a
	// server that accepts and never answers must not hold a call that
	// has no deadline of its own.
	if d.timeout > 0 {
		nc.SetDeadline(time.Now().Add(d.timeout))
	}
	stop := context.AfterFunc(ctx, func() { nc.SetDeadline(time.Now()) })
	defer stop()
	if d.tls != nil {
		tc := tls.Client(nc, d.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, connect.NewError(connect.CodeUnavailable, err)
		}
		nc = tc
	}
	req := "GET " + wire.BatchConnPath + " HTTP/1.1\r\nHost: " + d.addr +
		"\r\nConnection: Upgrade\r\nUpgrade: " + wire.BatchConnProtocol + "\r\n"
	if t := d.c.cfg.Token; t != "" {
		req += "Authorization: Bearer " + t + "\r\n"
	}
	br := bufio.NewReader(nc)
	var res *http.Response
	if _, err = io.WriteString(nc, req+"\r\n"); err == nil {
		res, err = http.ReadResponse(br, nil)
	}
	if err != nil {
		nc.Close()
		if ctx.Err() != nil {
			return nil, ctxError(ctx)
		}
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("client: batch connection to %s: %w", d.addr, err))
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		// A server older than the batch connection, or something
		// between that does not pass upgrades.
		res.Body.Close()
		nc.Close()
		d.off.Store(true)
		return nil, errNoConn
	}
	if err := d.c.checkCluster(d.addr, res.Header); err != nil {
		nc.Close()
		return nil, err
	}
	if !stop() {
		nc.Close()
		return nil, ctxError(ctx)
	}
	nc.SetDeadline(time.Time{})
	bc := &batchConn{conn: nc, w: wire.NewFrameWriter(nc), calls: make(map[uint64]chan frame), done: make(chan struct{})}
	go bc.read(br)
	return bc, nil
}

// close closes the batch connection once no call is on it.
func (d *connDialer) close() {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.bc != nil {
		d.bc.closeIdle()
		d.bc = nil
	}
}

// batch makes a Batch call on the batch connection.
func (d *connDialer) batch(ctx context.Context, req *tenurev1.BatchRequest) (*tenurev1.BatchResponse, error) {
	res := new(tenurev1.BatchResponse)
	if err := d.call(ctx, wire.FrameBatch, req, res); err != nil {
		return nil, err
	}
	return res, nil
}

// acquire makes an Acquire call on the batch connection.
func (d *connDialer) acquire(ctx context.Context, req *tenurev1.AcquireRequest) (*tenurev1.AcquireResponse, error) {
	res := new(tenurev1.AcquireResponse)
	if err := d.call(ctx, wire.FrameAcquire, req, res); err != nil {
		return nil, err
	}
	return res, nil
}

// call makes a call of kind with req on the batch connection and puts
// the answer in res. Its error is errNoConn when the endpoint has no
// batch connection (nothing was sent), the call's error from the server
// (a wire error), or, when the connection failed or ctx ended, a Connect
// error that is not a wire error: the call may have taken effect.
func (d *connDialer) call(ctx context.Context, kind byte, req, res proto.Message) error {
	bc, err := d.conn(ctx)
	if err != nil {
		return err
	}
	f, err := bc.call(ctx, kind, req)
	if err != nil {
		return err
	}
	switch f.kind {
	case kind:
		if err := wire.UnmarshalAnswer(f.payload, res); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("client: batch connection answer: %w", err))
		}
		return nil
	case wire.FrameError:
		be := new(tenurev1.BatchError)
		if err := wire.UnmarshalAnswer(f.payload, be); err != nil {
			return connect.NewError(connect.CodeInternal, fmt.Errorf("client: batch connection answer: %w", err))
		}
		return wire.FromBatchError(be)
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("client: batch connection answered a call of kind %d with kind %d", kind, f.kind))
}

// maxAnswer is the longest answer the client takes on a batch
// connection: far above any batch's results.
const maxAnswer = 256 << 20

// frame is an answer read from a batch connection.
type frame struct {
	kind    byte
	payload []byte
}

// batchConn is one batch connection. A reader goroutine hands each
// answer to the call waiting for it.
type batchConn struct {
	conn net.Conn

	w *wire.FrameWriter

	mu      sync.Mutex
	next    uint64
	calls   map[uint64]chan frame // the calls waiting for an answer
	err     error                 // why the connection ended
	closing bool                  // close once no call waits
	done    chan struct{}         // closed when the connection ended
}

// read hands out answers until the connection ends.
func (c *batchConn) read(br *bufio.Reader) {
	var err error
	for {
		var id uint64
		var f frame
		id, f.kind, f.payload, err = wire.ReadFrame(br, nil, maxAnswer)
		if err != nil {
			break
		}
		c.mu.Lock()
		ch := c.calls[id]
		delete(c.calls, id)
		c.mu.Unlock()
		if ch != nil {
			ch <- f // buffered
		}
	}
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.conn.Close()
	close(c.done)
}

// ended reports whether the connection failed or was closed: the next
// call needs a new one.
func (c *batchConn) ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err != nil
}

// call sends req as a call of kind and returns the answer. When ctx ends
// first, a waiting Acquire is cancelled; any other call ends the
// connection (the server serves it, and the calls after it, in order:
// a call stuck there would hold up the ones after it).
func (c *batchConn) call(ctx context.Context, kind byte, req proto.Message) (frame, error) {
	ch := make(chan frame, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return frame{}, connect.NewError(connect.CodeUnavailable, err)
	}
	c.next++
	id := c.next
	c.calls[id] = ch
	c.mu.Unlock()
	if err := c.w.Write(id, kind, req); err != nil {
		c.fail(err)
		return frame{}, connect.NewError(connect.CodeUnavailable, err)
	}
	select {
	case f := <-ch:
		c.answered()
		return f, nil
	case <-c.done:
		select {
		case f := <-ch:
			return f, nil
		default:
		}
		c.mu.Lock()
		err := c.err
		c.mu.Unlock()
		return frame{}, connect.NewError(connect.CodeUnavailable, fmt.Errorf("client: batch connection ended: %w", err))
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.calls, id)
		c.mu.Unlock()
		if waits(kind, req) {
			if err := c.w.Write(id, wire.FrameCancel, nil); err != nil {
				c.fail(err)
			}
			c.answered()
		} else {
			c.fail(ctx.Err())
		}
		return frame{}, ctxError(ctx)
	}
}

// waits reports whether a call of kind with req may wait on the server.
func waits(kind byte, req proto.Message) bool {
	a, ok := req.(*tenurev1.AcquireRequest)
	return kind == wire.FrameAcquire && ok && a.GetWait()
}

// fail ends the connection with err.
func (c *batchConn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
	c.conn.Close()
}

// closeIdle closes the connection now if no call waits for an answer,
// else once the last one has it.
func (c *batchConn) closeIdle() {
	c.mu.Lock()
	idle := len(c.calls) == 0
	c.closing = true
	c.mu.Unlock()
	if idle {
		c.fail(net.ErrClosed)
	}
}

// answered closes the connection if it was to close once idle and is.
func (c *batchConn) answered() {
	c.mu.Lock()
	idle := c.closing && len(c.calls) == 0
	c.mu.Unlock()
	if idle {
		c.fail(net.ErrClosed)
	}
}

// ctxError is the Connect error of a call whose context ended.
func ctxError(ctx context.Context) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	}
	return connect.NewError(connect.CodeCanceled, ctx.Err())
}
