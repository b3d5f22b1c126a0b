package server

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
	"github.com/tenure-io/tenure/gen/tenure/v1/tenurev1connect"
	"github.com/tenure-io/tenure/internal/wire"
	"github.com/tenure-io/tenure/lease"
)

// serveBatchConn serves a batch connection (see wire.BatchConnPath): it
// takes the connection over from net/http and serves its frames until
// the client closes it, or EndBatchStreams ends it.
func (s *Server) serveBatchConn(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || !headerHas(r.Header, "Connection", "upgrade") || !headerHas(r.Header, "Upgrade", wire.BatchConnProtocol) {
		w.Header().Set("Upgrade", wire.BatchConnProtocol)
		w.Header().Set("Connection", "Upgrade")
		http.Error(w, "server: a batch connection is an HTTP/1.1 request with Connection: Upgrade and Upgrade: "+wire.BatchConnProtocol,
			http.StatusUpgradeRequired)
		return
	}
	// Credentials first, as for any call: a stranger gets no connection
	// to hold.
	if err := s.auth.refusal(identityFrom(r.Context())); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	// The connection outlives this handler: it is served by a goroutine
	// of its own, so that net/http's buffers and contexts for reading
	// requests on it are let go. Its calls see who sent the upgrade.
	c := &batchConn{s: s, waits: make(map[uint64]context.CancelFunc), max: maxMessage(s.node.Limits())}
	c.ctx, c.cancel = context.WithCancel(context.WithValue(context.Background(), identityKey{}, identityFrom(r.Context())))
	// What a call's own request would carry: its credentials, and the
	// mark of a forwarded call.
	c.breq = connect.NewRequest[tenurev1.BatchRequest](nil)
	c.areq = connect.NewRequest[tenurev1.AcquireRequest](nil)
	copyCallHeader(c.breq.Header(), r.Header)
	copyCallHeader(c.areq.Header(), r.Header)
	nc, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		c.cancel()
		http.Error(w, "server: cannot take over the connection: "+err.Error(), http.StatusInternalServerError)
		return
	}
	c.conn = nc
	c.w = wire.NewFrameWriter(nc)
	// The client sends nothing before the 101; whatever net/http read
	// ahead stays in its reader. Else a small reader will do: most
	// frames are a few dozen bytes, and longer ones are read past it.
	c.r = brw.Reader
	if brw.Reader.Buffered() == 0 {
		c.conn = withoutReadAhead(nc)
		c.r = bufio.NewReaderSize(c.conn, 512)
	}
	// net/http's deadlines for reading the request no longer apply;
	// serve sets its own.
	nc.SetDeadline(time.Time{})
	// The 101 carries the headers every answer carries (the cluster ID).
	b := []byte("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + wire.BatchConnProtocol + "\r\n")
	for k, vs := range w.Header() {
		for _, v := range vs {
			b = append(b, k+": "+v+"\r\n"...)
		}
	}
	b = append(b, "\r\n"...)
	if _, err := nc.Write(b); err != nil || !s.batchStreams.add(c) {
		c.cancel()
		nc.Close()
		return
	}
	go func() {
		defer s.batchStreams.remove(c)
		c.serve()
	}()
}

// headerHas reports whether the comma-separated values of header key in
// h include v, in any case.
func headerHas(h http.Header, key, v string) bool {
	for _, line := range h.Values(key) {
		for f := range strings.SplitSeq(line, ",") {
			if strings.EqualFold(strings.TrimSpace(f), v) {
				return true
			}
		}
	}
	return false
}

// batchConn is one batch connection being served. Its reader (serve)
// serves the calls that do not wait itself, one at a time, and starts a
// goroutine for each Acquire that waits.
type batchConn struct {
	s    *Server
	conn net.Conn
	r    *bufio.Reader
	// breq and areq carry what a call's own request would: its
	// credentials, and the mark of a forwarded call. Each call gets a
	// copy, with its message and the same (read-only) header.
	breq   *connect.Request[tenurev1.BatchRequest]
	areq   *connect.Request[tenurev1.AcquireRequest]
	max    int64 // the longest frame taken
	ctx    context.Context
	cancel context.CancelFunc

	w    *wire.FrameWriter
	strs recentStrings // of renewals decoded (by the reader)

	mu     sync.Mutex
	busy   bool                          // a call is served by the reader
	ending bool                          // EndBatchStreams came
	waits  map[uint64]context.CancelFunc // the waiting Acquires, by call ID
	wg     sync.WaitGroup                // the waiting Acquires' goroutines
}

// end ends the connection between two calls: at once if the reader is
// waiting for a frame, else once it has answered the call it serves.
// Waiting Acquires end with the connection (their calls are retried).
func (c *batchConn) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ending = true
	if !c.busy {
		c.conn.Close()
	}
}

// serve reads and serves frames until the connection ends.
func (c *batchConn) serve() {
	defer func() {
		c.cancel()
		c.conn.Close()
		c.wg.Wait()
	}()
	var (
		buf      [512]byte
		deadline time.Time
	)
	for {
		// The idle deadline moves at most once a minute: the
		// connection is closed after 4 to 5 idle minutes.
		if now := time.Now(); deadline.Sub(now) < batchConnIdle-time.Minute {
			deadline = now.Add(batchConnIdle)
			c.conn.SetReadDeadline(deadline)
		}
		id, kind, payload, err := c.readFrame(buf[:])
		if errors.Is(err, os.ErrDeadlineExceeded) && c.waiting() {
			deadline = time.Time{}
			continue // not idle: a call waits
		}
		if errors.Is(err, wire.ErrFrameTooLong) {
			c.writeError(id, connect.NewError(connect.CodeResourceExhausted, err))
			return
		}
		if err != nil {
			return
		}
		c.mu.Lock()
		if c.ending {
			c.mu.Unlock()
			// Cut between two calls: this one was not served.
			c.writeError(id, connect.NewError(connect.CodeUnavailable, errStreamsEnded))
			return
		}
		c.busy = true
		c.mu.Unlock()
		c.call(id, kind, payload)
		c.mu.Lock()
		c.busy = false
		ending := c.ending
		c.mu.Unlock()
		if ending {
			return
		}
	}
}

// readFrame reads the next frame, into buf if it fits.
//
// It keeps stackKeep bytes of the stack in use while the reader waits
// for the frame, which is most of the time. The garbage collector
// halves the stack of a goroutine that uses less than a quarter of it,
// and serving a call grows it back, copying it: with 10,000 connections
// that was 8% of the server's CPU. Serving a renewal needs 8 KiB of
// stack; a reader that waits with 2 KiB in use keeps them.
//
//go:noinline
func (c *batchConn) readFrame(buf []byte) (id uint64, kind byte, payload []byte, err error) {
	var keep [stackKeep]byte
	keepStack(&keep)
	return wire.ReadFrame(c.r, buf, c.max)
}

// stackKeep is the stack readFrame keeps in use; see readFrame.
const stackKeep = 2 << 10

// keepStack makes the compiler keep b on the stack.
//
//go:noinline
func keepStack(b *[stackKeep]byte) { b[0] = 0 }

// batchConnIdle is about how long a batch connection may be idle (no
// call sent, none waiting) before the server closes it, as it closes an idle
// keep-alive connection (http.Server.IdleTimeout); a client opens a new
// one for its next call.
const batchConnIdle = 5 * time.Minute

// waiting reports whether a waiting Acquire is being served.
func (c *batchConn) waiting() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waits) > 0
}

// call serves one frame.
func (c *batchConn) call(id uint64, kind byte, payload []byte) {
	switch kind {
	case wire.FrameBatch:
		var res *tenurev1.BatchResponse // the answer, if renewals did not send it
		ok, err := c.renewals(id, payload)
		if !ok {
			msg := new(tenurev1.BatchRequest)
			if err := proto.Unmarshal(payload, msg); err != nil {
				c.writeError(id, invalid(err))
				return
			}
			res, err = c.batch(msg)
		}
		c.s.metrics.countCall(tenurev1connect.LeaseServiceBatchProcedure, err)
		switch {
		case err != nil:
			c.writeError(id, err)
		case res != nil:
			c.write(id, wire.FrameBatch, res)
		}
	case wire.FrameAcquire:
		msg := new(tenurev1.AcquireRequest)
		if err := proto.Unmarshal(payload, msg); err != nil {
			c.writeError(id, invalid(err))
			return
		}
		if !msg.GetWait() {
			c.acquire(c.ctx, id, msg)
			return
		}
		ctx, cancel := context.WithCancel(c.ctx)
		c.mu.Lock()
		c.waits[id] = cancel
		c.mu.Unlock()
		c.wg.Go(func() {
			defer func() {
				c.mu.Lock()
				delete(c.waits, id)
				c.mu.Unlock()
				cancel()
			}()
			c.acquire(ctx, id, msg)
		})
	case wire.FrameCancel:
		c.mu.Lock()
		if cancel := c.waits[id]; cancel != nil {
			cancel()
		}
		c.mu.Unlock()
	default:
		c.writeError(id, connect.NewError(connect.CodeInvalidArgument, errors.New("server: unknown batch connection frame kind")))
	}
}

// renewals serves payload, a BatchRequest, without decoding it into
// messages (see decodeRenewals) when every op of it is a valid renewal,
// this node leads, and nobody is authenticated (each op then needs no
// permission check, which goes by the request's message); ok is false
// otherwise, and nothing was served (the usual path answers the rest,
// invalid ops included). When ok, it has answered call id unless err is
// set; when no op failed as a whole, encoding the answer without
// messages too (appendRenewalAnswers).
func (c *batchConn) renewals(id uint64, payload []byte) (ok bool, err error) {
	if c.s.auth.enabled() || !c.s.node.IsLeader() {
		return false, nil
	}
	ops, ok := decodeRenewals(payload, "", &c.strs)
	if !ok {
		return false, nil
	}
	limits := c.s.node.Limits()
	for _, op := range ops {
		if limits.Validate(op) != nil {
			return false, nil
		}
	}
	results, err := c.s.doBatch(c.ctx, ops)
	if err != nil {
		return true, err
	}
	if slices.ContainsFunc(results, func(r lease.Result) bool { return r.Err != nil }) {
		c.write(id, wire.FrameBatch, c.s.batchResponse(ops, results, nil, make([]*tenurev1.BatchResult, len(ops))))
		return true, nil
	}
	err = c.w.WriteEncoded(id, wire.FrameBatch, func(b []byte) ([]byte, error) {
		return c.s.appendRenewalAnswers(b, results), nil
	})
	if err != nil {
		c.conn.Close()
	}
	return true, nil
}

// batch serves a Batch call as the Batch method does, permission check
// included.
func (c *batchConn) batch(msg *tenurev1.BatchRequest) (*tenurev1.BatchResponse, error) {
	if err := c.check(tenurev1connect.LeaseServiceBatchProcedure, msg); err != nil {
		return nil, err
	}
	req := *c.breq
	req.Msg = msg
	res, err := c.s.batch(c.ctx, &req)
	if err != nil {
		return nil, err
	}
	return res.Msg, nil
}

// acquire serves an Acquire call as the Acquire method does and answers
// it, unless ctx ended first (the client no longer waits).
func (c *batchConn) acquire(ctx context.Context, id uint64, msg *tenurev1.AcquireRequest) {
	err := c.check(tenurev1connect.LeaseServiceAcquireProcedure, msg)
	var res *connect.Response[tenurev1.AcquireResponse]
	if err == nil {
		req := *c.areq
		req.Msg = msg
		res, err = (&leaseService{c.s}).Acquire(ctx, &req)
	}
	c.s.metrics.countCall(tenurev1connect.LeaseServiceAcquireProcedure, err)
	if ctx.Err() != nil && c.ctx.Err() == nil {
		return // cancelled by the client: it wants no answer
	}
	if err != nil {
		c.writeError(id, err)
		return
	}
	c.write(id, wire.FrameAcquire, res.Msg)
}

// check refuses a call as the interceptor would: bad or no credentials
// (where the server wants them), or no permission for procedure.
func (c *batchConn) check(procedure string, msg any) error {
	err := c.s.auth.authorize(c.ctx, procedure, msg)
	if err != nil {
		id := identityFrom(c.ctx)
		c.s.log.Warn("refused a request", "procedure", procedure, "from", c.conn.RemoteAddr().String(),
			"principal", id.principal, "authenticated_by", id.how, "code", connect.CodeOf(err).String(), "err", err)
	}
	return err
}

func (c *batchConn) writeError(id uint64, err error) {
	c.write(id, wire.FrameError, wire.ToBatchError(err))
}

// write sends the answer to call id. A write that fails closes the
// connection: the reader then ends too.
func (c *batchConn) write(id uint64, kind byte, msg proto.Message) {
	if err := c.w.Write(id, kind, msg); err != nil {
		c.conn.Close()
	}
}
