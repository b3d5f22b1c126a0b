package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/proto"
)

// The batch connection. tenure's Go client sends its lease traffic
// (Batch calls, and Acquire calls, waiting or not) on a connection of
// its own to each member: an HTTP/1.1 request to BatchConnPath with
// "Connection: Upgrade" and "Upgrade: BatchConnProtocol", answered with
// 101 Switching Protocols, after which both sides exchange frames. The
// request carries the credentials (Authorization, or the TLS client
// certificate of the connection) and the 101 the cluster ID header, as
// any call does.
//
// It exists because a member that holds its leases for a long time
// sends a renewal every few seconds for hours: over HTTP/2 and Connect
// each such message costs the server three goroutines per connection,
// hand-offs between them, header tables and buffers per stream; here it
// costs one goroutine, one read and one write.
//
// A frame is
//
//	uvarint call ID | byte kind | uvarint length | length bytes
//
// The client numbers its calls; a server's answer carries the ID of the
// call it answers. Kinds from the client: FrameBatch (a BatchRequest,
// served as a Batch call), FrameAcquire (an AcquireRequest, served as an
// Acquire call, which may wait) and FrameCancel (no payload: the client
// no longer waits for that call; a waiting Acquire leaves the queue as
// when its own call is cancelled). Kinds from the server: FrameBatch (a
// BatchResponse), FrameAcquire (an AcquireResponse) and FrameError (a
// BatchError: the call's error). Every call gets exactly one answer
// unless it was cancelled or the connection ends first; a connection
// that ends leaves the calls on it unanswered (they may have taken
// effect). Calls that do not wait are served in the order they arrive.
const (
	BatchConnPath     = "/tenure.v1.LeaseService/BatchConn"
	BatchConnProtocol = "tenure-batch/1"

	FrameError   byte = 0
	FrameBatch   byte = 1
	FrameAcquire byte = 2
	FrameCancel  byte = 3
)

// ErrFrameTooLong is the error of a frame longer than the reader takes.
var ErrFrameTooLong = errors.New("wire: a batch connection frame is longer than allowed")

// AppendFrameHeader appends the header of a frame of kind for call id
// with a payload of n bytes to b.
func AppendFrameHeader(b []byte, id uint64, kind byte, n int) []byte {
	b = binary.AppendUvarint(b, id)
	b = append(b, kind)
	return binary.AppendUvarint(b, uint64(n))
}

// ReadFrame reads the next frame from r. Its payload goes in buf when
// it fits and in a new slice when not. A frame longer than max bytes is
// not read: its error wraps ErrFrameTooLong, with its call ID and kind.
func ReadFrame(r *bufio.Reader, buf []byte, max int64) (id uint64, kind byte, payload []byte, err error) {
	id, err = binary.ReadUvarint(r)
	if err != nil {
		return 0, 0, nil, err
	}
	if kind, err = r.ReadByte(); err != nil {
		return 0, 0, nil, noEOF(err)
	}
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return 0, 0, nil, noEOF(err)
	}
	if n > uint64(max) {
		return id, kind, nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrameTooLong, n, max)
	}
	if int(n) <= cap(buf) {
		payload = buf[:n]
	} else {
		payload = make([]byte, n)
	}
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, 0, nil, noEOF(err)
	}
	return id, kind, payload, nil
}

// noEOF turns an end of input inside a frame into io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// FrameWriter writes frames to a batch connection, one at a time, from
// any goroutine.
type FrameWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte // reused while small
}

// NewFrameWriter returns a FrameWriter of w.
func NewFrameWriter(w io.Writer) *FrameWriter { return &FrameWriter{w: w} }

// Write sends a frame of kind for call id with msg as its payload (nil:
// none), in one write.
func (fw *FrameWriter) Write(id uint64, kind byte, msg proto.Message) error {
	return fw.WriteEncoded(id, kind, func(b []byte) ([]byte, error) {
		if msg == nil {
			return b, nil
		}
		return AppendMarshal(b, msg)
	})
}

// keep keeps b to reuse if it is small.
func (fw *FrameWriter) keep(b []byte) {
	if cap(b) <= 4<<10 {
		fw.buf = b[:0]
	} else {
		fw.buf = nil
	}
}

// maxFrameHeader is the longest frame header: two uvarints and a byte.
const maxFrameHeader = 2*binary.MaxVarintLen64 + 1

// WriteEncoded sends a frame of kind for call id whose payload is what
// encode appends to the slice it is given, in one write; an error of
// encode is returned and nothing is sent.
func (fw *FrameWriter) WriteEncoded(id uint64, kind byte, encode func([]byte) ([]byte, error)) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	// The payload goes after room for the longest header; the header,
	// once its length is known, goes right before the payload, so the
	// payload's size is never computed apart from encoding it.
	b, err := encode(append(fw.buf[:0], make([]byte, maxFrameHeader)...))
	if err == nil {
		var h [maxFrameHeader]byte
		header := AppendFrameHeader(h[:0], id, kind, len(b)-maxFrameHeader)
		start := maxFrameHeader - len(header)
		copy(b[start:], header)
		_, err = fw.w.Write(b[start:])
	}
	fw.keep(b)
	return err
}
