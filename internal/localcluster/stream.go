package localcluster

import (
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// streamLayer is raft's TCP stream layer, but it remembers its
// connections and closes them on Close: raft's NetworkTransport leaves the
// readers of accepted connections running after Close, which a crashed
// process would not.
type streamLayer struct {
	net.Listener

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func newStreamLayer(ln net.Listener) *streamLayer {
	return &streamLayer{Listener: ln, conns: make(map[net.Conn]struct{})}
}

func (s *streamLayer) track(c net.Conn, err error) (net.Conn, error) {
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	s.conns[c] = struct{}{}
	return c, nil
}

func (s *streamLayer) Accept() (net.Conn, error) { return s.track(s.Listener.Accept()) }

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	return s.track(d.Dial("tcp", string(addr)))
}

// Close closes the listener and every connection.
func (s *streamLayer) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	clear(s.conns)
	return s.Listener.Close()
}
