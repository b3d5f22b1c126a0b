package server

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
)

// ReadAhead wraps ln, a TCP listener that serves cleartext HTTP/2, so
// that its connections read ahead. The HTTP/2 server reads each frame
// from the connection as it is, in two system calls (the 9-byte header,
// then the payload); small reads here take whatever the socket holds at
// once, usually the whole frame and often the frames after it, and hand
// it out from a buffer. The buffer is borrowed from a pool only when
// there is something to read and given back once it is drained, so an
// idle connection (a fleet holds thousands) holds none. TLS connections
// do not need it: crypto/tls reads whole records.
func ReadAhead(ln net.Listener) net.Listener { return readAheadListener{ln} }

type readAheadListener struct{ net.Listener }

func (l readAheadListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c, nil
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		return c, nil
	}
	return &readAheadConn{Conn: tc, tcp: tc, raw: raw}, nil
}

// readAheadSize is the size of the read-ahead buffer; reads of at least
// this much go to the socket directly.
const readAheadSize = 4 << 10

var readAheadPool = sync.Pool{New: func() any { b := make([]byte, readAheadSize); return &b }}

// readAheadConn is a TCP connection whose small reads read ahead. Read
// is not safe for concurrent use (no net.Conn's is, in practice: the
// HTTP servers read from one goroutine). It embeds the net.Conn, not the
// *net.TCPConn, so that no method of the latter (WriteTo) reads past
// the buffer.
type readAheadConn struct {
	net.Conn
	tcp  *net.TCPConn
	raw  syscall.RawConn
	buf  *[]byte // from readAheadPool while it holds unread bytes
	r, w int
}

func (c *readAheadConn) Read(p []byte) (int, error) {
	if c.buf == nil {
		if len(p) >= readAheadSize || len(p) == 0 {
			return c.Conn.Read(p)
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, (*c.buf)[c.r:c.w])
	c.r += n
	if c.r == c.w {
		readAheadPool.Put(c.buf)
		c.buf = nil
	}
	return n, nil
}

// CloseWrite shuts down the writing side, as the HTTP/1.1 server does
// before it closes a connection.
func (c *readAheadConn) CloseWrite() error { return c.tcp.CloseWrite() }

// fill waits until the socket is readable (under its read deadline, as
// a plain Read would) and reads what it holds into a pooled buffer.
func (c *readAheadConn) fill() error {
	var (
		n    int
		rerr error
	)
	err := c.raw.Read(func(fd uintptr) bool {
		b := readAheadPool.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), *b)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			readAheadPool.Put(b)
			return false // wait for the socket to be readable
		}
		if rerr == nil && n > 0 {
			c.buf, c.r, c.w = b, 0, n
		} else {
			readAheadPool.Put(b)
		}
		return true
	})
	switch {
	case err != nil:
		return err // a deadline or a closed connection, as net reports them
	case rerr != nil:
		return &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", rerr)}
	case n == 0:
		return io.EOF
	}
	return nil
}

// withoutReadAhead returns the connection under c if c reads ahead and
// holds nothing unread, else c: a connection with a buffered reader of
// its own (a batch connection's) needs no second buffer.
func withoutReadAhead(c net.Conn) net.Conn {
	if ra, ok := c.(*readAheadConn); ok && ra.buf == nil {
		return ra.Conn
	}
	return c
}
