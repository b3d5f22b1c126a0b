package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/tlsconfig"
)

// Every raft connection starts with a handshake that names the cluster:
//
//	dialer:   "TNR1" len(cluster ID) (1 byte) cluster ID
//	          len(address) (1 byte) the dialer's advertised raft address
//	acceptor: 'Y', or 'N' len(reason) (1 byte) reason
//
// An acceptor of another cluster (or one that has not joined a cluster
// yet) refuses the connection before raft sees a byte of it, so a node
// of one cluster never takes raft traffic from another: for example
// from a former member's old peers, after its address was reused.
//
// A node that stops in order says goodbye to its peers on a connection
// of its own, which raft never sees:
//
//	dialer:   "TNRB" len(cluster ID) cluster ID len(address) address
//	          len(node ID) node ID
//	acceptor: 'Y' (or a refusal as above), then it closes
//
// Its peers then know that the failures to reach it which follow are
// expected, and log them quietly, until it is back.
const (
	handshakeMagic   = "TNR1"
	goodbyeMagic     = "TNRB"
	handshakeTimeout = 5 * time.Second
	// refusalLogEvery limits refusal logs to one per remote address.
	refusalLogEvery = 10 * time.Second
)

// ErrOtherCluster is returned when a raft peer or a joining node belongs
// to another cluster than this node's.
var ErrOtherCluster = errors.New("node: belongs to another cluster")

// clusterStream is a raft.StreamLayer over TCP that checks the cluster ID
// of every connection.
type clusterStream struct {
	ln        net.Listener
	tls       *tlsconfig.Peer // nil: plain TCP
	advertise net.Addr
	log       *slog.Logger
	clusterID atomic.Pointer[string] // nil until known

	accepted chan net.Conn
	closed   chan struct{}
	once     sync.Once

	// peerGone, if set, is called when a connection from the peer whose
	// advertised raft address is addr breaks (EOF or an error): a
	// leader that died takes its connections with it.
	peerGone atomic.Pointer[func(addr string)]
	// contacts learns of peers that said goodbye and of peers that
	// connected again; nil for none.
	contacts *contacts

	mu        sync.Mutex
	lastLog   map[string]time.Time // remote address -> last refusal logged
	refusedIn atomic.Uint64
}

var _ raft.StreamLayer = (*clusterStream)(nil)

// newClusterTransport listens on bind for raft connections of cluster
// clusterID ("" for a node that has not joined one yet: it accepts none
// until setClusterID). A node restarted on its data passes its cluster's
// ID here, so that no connection that arrives as it starts is refused.
func newClusterTransport(bind, advertise, clusterID string, peerTLS *tlsconfig.Peer, log *slog.Logger, hlog hclog.Logger) (*raft.NetworkTransport, *clusterStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, nil, fmt.Errorf("node: raft listen on %s: %w", bind, err)
	}
	adv := ln.Addr()
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			ln.Close()
			return nil, nil, fmt.Errorf("node: raft advertise address: %w", err)
		}
		adv = a
	}
	if a, ok := adv.(*net.TCPAddr); !ok || a.IP == nil || a.IP.IsUnspecified() {
		ln.Close()
		return nil, nil, fmt.Errorf("node: raft address %s cannot be dialed by other nodes: set an advertise address", adv)
	}
	s := &clusterStream{
		ln:        ln,
		tls:       peerTLS,
		advertise: adv,
		log:       log,
		accepted:  make(chan net.Conn),
		closed:    make(chan struct{}),
		lastLog:   make(map[string]time.Time),
	}
	if clusterID != "" {
		s.setClusterID(clusterID)
	}
	go s.acceptLoop()
	t := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  s,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hlog,
	})
	return t, s, nil
}

// setClusterID makes the stream accept and dial connections of cluster id.
func (s *clusterStream) setClusterID(id string) { s.clusterID.Store(&id) }

func (s *clusterStream) cluster() string {
	if p := s.clusterID.Load(); p != nil {
		return *p
	}
	return ""
}

// Dial connects to a raft peer and completes the handshake.
func (s *clusterStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	id := s.cluster()
	if id == "" {
		return nil, errors.New("node: this node has not joined a cluster yet")
	}
	conn, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	if s.tls != nil {
		tc := tls.Client(conn, s.tls.Client(string(address)))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			s.logRefusal(string(address), "raft TLS handshake with a peer failed", "peer", address, "err", err)
			return nil, fmt.Errorf("node: raft TLS handshake with %s: %w", address, err)
		}
		conn = tc
	}
	hello := append([]byte(handshakeMagic), byte(len(id)))
	hello = append(hello, id...)
	self := s.advertise.String()
	hello = append(append(hello, byte(len(self))), self...)
	if _, err := conn.Write(hello); err != nil {
		conn.Close()
		return nil, fmt.Errorf("node: raft handshake with %s: %w", address, err)
	}
	ans := make([]byte, 1)
	if _, err := io.ReadFull(conn, ans); err != nil {
		conn.Close()
		return nil, fmt.Errorf("node: raft handshake with %s: %w", address, err)
	}
	if ans[0] != 'Y' {
		reason, _ := readShort(conn)
		conn.Close()
		err := fmt.Errorf("%w: raft peer %s refused this node (cluster %s): %s", ErrOtherCluster, address, id, reason)
		s.logRefusal(string(address), "raft peer refused the connection", "peer", address, "reason", reason)
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

func (s *clusterStream) acceptLoop() {
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			s.log.Warn("raft accept failed", "err", err)
			select {
			case <-s.closed:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		go s.handshake(conn)
	}
}

// handshake checks the cluster ID a dialer sent and hands the connection
// to raft if it matches.
func (s *clusterStream) handshake(conn net.Conn) {
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	if s.tls != nil {
		// Only a member, with a certificate from the cluster's CA, gets
		// as far as the cluster ID.
		tc := tls.Server(conn, s.tls.Server())
		if err := tc.Handshake(); err != nil {
			s.refusedIn.Add(1)
			conn.Close()
			s.logRefusal(conn.RemoteAddr().String(), "refused a raft connection: TLS handshake failed (not a member: no certificate, or one from another CA)",
				"from", conn.RemoteAddr(), "err", err)
			return
		}
		conn = tc
	}
	// Read exactly the handshake, so that nothing raft sends after it is
	// consumed here.
	magic := make([]byte, len(handshakeMagic))
	if _, err := io.ReadFull(conn, magic); err != nil || (string(magic) != handshakeMagic && string(magic) != goodbyeMagic) {
		s.refuse(conn, "not a tenure raft connection", "")
		return
	}
	theirs, err := readShort(conn)
	if err != nil {
		s.refuse(conn, "bad handshake", "")
		return
	}
	peer, err := readShort(conn)
	if err != nil {
		s.refuse(conn, "bad handshake", theirs)
		return
	}
	ours := s.cluster()
	switch {
	case ours == "":
		s.refuse(conn, "this node has not joined a cluster yet", theirs)
		return
	case theirs != ours:
		s.refuse(conn, fmt.Sprintf("this node belongs to cluster %s, not %s", ours, theirs), theirs)
		return
	}
	if string(magic) == goodbyeMagic {
		id, err := readShort(conn)
		if err == nil {
			// Recorded before the answer: the peer stops its raft only
			// after it, so no failure to reach it comes first.
			if s.contacts.left(raft.ServerAddress(peer), raft.ServerID(id)) {
				s.log.Info("a raft peer is stopping", "peer", peer, "id", id)
			}
			conn.Write([]byte{'Y'})
		}
		conn.Close()
		return
	}
	if _, err := conn.Write([]byte{'Y'}); err != nil {
		conn.Close()
		return
	}
	s.contacts.back(raft.ServerAddress(peer))
	conn.SetDeadline(time.Time{})
	select {
	case s.accepted <- &peerConn{Conn: conn, peer: peer, gone: s.peerGone.Load()}:
	case <-s.closed:
		conn.Close()
	}
}

func (s *clusterStream) refuse(conn net.Conn, reason, theirs string) {
	s.refusedIn.Add(1)
	msg := []byte{'N', byte(min(len(reason), 255))}
	conn.Write(append(msg, reason[:min(len(reason), 255)]...))
	conn.Close()
	s.logRefusal(conn.RemoteAddr().String(), "refused a raft connection", "from", conn.RemoteAddr().String(), "their_cluster", theirs, "reason", reason)
}

// logRefusal logs at most once per refusalLogEvery per remote host.
func (s *clusterStream) logRefusal(remote, msg string, args ...any) {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	key := msg + " " + host
	s.mu.Lock()
	last, seen := s.lastLog[key]
	now := time.Now()
	if seen && now.Sub(last) < refusalLogEvery {
		s.mu.Unlock()
		return
	}
	s.lastLog[key] = now
	s.mu.Unlock()
	s.log.Warn(msg, append(args, "cluster", s.cluster())...)
}

// goodbye tells the peer at address that this node (id) is stopping.
func (s *clusterStream) goodbye(address raft.ServerAddress, id string, timeout time.Duration) error {
	cluster := s.cluster()
	if cluster == "" {
		return nil
	}
	conn, err := net.DialTimeout("tcp", string(address), timeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(timeout))
	if s.tls != nil {
		tc := tls.Client(conn, s.tls.Client(string(address)))
		if err := tc.Handshake(); err != nil {
			return err
		}
		defer tc.Close()
		conn = tc
	}
	msg := append([]byte(goodbyeMagic), byte(len(cluster)))
	msg = append(msg, cluster...)
	self := s.advertise.String()
	msg = append(append(msg, byte(len(self))), self...)
	msg = append(append(msg, byte(min(len(id), 255))), id[:min(len(id), 255)]...)
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	ans := make([]byte, 1)
	_, err = io.ReadFull(conn, ans)
	return err
}

// readShort reads a string of at most 255 bytes, preceded by its length.
func readShort(r io.Reader) (string, error) {
	n := make([]byte, 1)
	if _, err := io.ReadFull(r, n); err != nil {
		return "", err
	}
	buf := make([]byte, n[0])
	if _, err := io.ReadFull(r, buf); err != nil {
		return "", err
	}
	return string(buf), nil
}

// Accept returns the next connection that passed the handshake.
func (s *clusterStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.accepted:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting connections.
func (s *clusterStream) Close() error {
	var err error
	s.once.Do(func() {
		close(s.closed)
		err = s.ln.Close()
	})
	return err
}

// Addr returns the address other nodes dial.
func (s *clusterStream) Addr() net.Addr { return s.advertise }

// peerConn is an accepted raft connection that reports when it breaks.
type peerConn struct {
	net.Conn
	peer string
	gone *func(addr string) // nil before the node is ready
	once sync.Once
}

func (c *peerConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && c.gone != nil {
		c.once.Do(func() { (*c.gone)(c.peer) })
	}
	return n, err
}
