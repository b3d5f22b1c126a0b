package verify

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Network is the set of raft proxies and the partition they enforce.
//
// Every node's raft port sits behind its own proxy, and every node
// advertises the proxy's address, so every raft connection between two
// nodes passes through the proxy of the node it was dialled to. hashicorp
// raft sends each RPC on a connection the sender dialled and reads the
// answer on the same connection, so a connection carries exactly the
// traffic of one ordered pair (dialler -> listener). The proxy knows the
// listener (itself) and finds the dialler by looking up which node
// process owns the connection's source socket (/proc/net/tcp and
// /proc/PID/fd; Linux only). A partition is a set of isolated nodes: a
// connection is cut when either end is isolated. Cut means: existing
// connections are closed at once, and new ones are accepted and then
// blackholed (read and discarded, never answered) until the partition
// heals, so the dialler sees timeouts rather than refusals.
//
// Only raft traffic is partitioned. Client requests, and the forwarding of
// client requests from followers to the leader over the API port, still
// flow; an isolated leader keeps answering until it steps down, and
// requests it cannot commit time out (indeterminate) or fail.
type Network struct {
	mu       sync.Mutex
	isolated map[int]bool
	cut      map[[2]int]bool // links cut both ways, lower index first
	conns    map[*proxyConn]struct{}
	pids     func() map[int]int // pid -> node index
	proxies  []*proxy
}

type proxyConn struct {
	src, dst int // node indexes; src -1 when unknown
	a, b     net.Conn
}

func (c *proxyConn) close() {
	c.a.Close()
	if c.b != nil {
		c.b.Close()
	}
}

type proxy struct {
	n      *Network
	dst    int
	ln     net.Listener
	target string
}

// NewNetwork returns a network with no proxies. pids maps the pids of the
// running node processes to their indexes.
func NewNetwork(pids func() map[int]int) *Network {
	return &Network{isolated: map[int]bool{}, cut: map[[2]int]bool{}, conns: map[*proxyConn]struct{}{}, pids: pids}
}

// AddProxy listens on a free loopback port and forwards to target, the
// raft port of node dst. It returns the proxy's address.
func (n *Network) AddProxy(dst int, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p := &proxy{n: n, dst: dst, ln: ln, target: target}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	go p.serve()
	return ln.Addr().String(), nil
}

func (n *Network) blocked(src, dst int) bool {
	return n.isolated[dst] || (src >= 0 && (n.isolated[src] || n.cut[link(src, dst)]))
}

func link(a, b int) [2]int {
	if a > b {
		a, b = b, a
	}
	return [2]int{a, b}
}

// Isolate cuts node i off from every other node.
func (n *Network) Isolate(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.isolated[i] = true
	n.dropBlocked()
}

// Cut cuts the links between a and b, both ways.
func (n *Network) Cut(a, b int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[link(a, b)] = true
	n.dropBlocked()
}

// Split cuts every link between a node of one group and a node of the
// other.
func (n *Network) Split(one, other []int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, a := range one {
		for _, b := range other {
			n.cut[link(a, b)] = true
		}
	}
	n.dropBlocked()
}

// dropBlocked closes the forwarding connections that are now cut.
func (n *Network) dropBlocked() {
	for c := range n.conns {
		if c.b != nil && n.blocked(c.src, c.dst) {
			c.close()
			delete(n.conns, c)
		}
	}
}

// Heal ends every partition and drops the blackholed connections.
func (n *Network) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.isolated)
	clear(n.cut)
	for c := range n.conns {
		if c.b == nil {
			c.close()
			delete(n.conns, c)
		}
	}
}

// Close stops every proxy and closes every connection.
func (n *Network) Close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.proxies {
		p.ln.Close()
	}
	for c := range n.conns {
		c.close()
	}
	clear(n.conns)
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *proxy) handle(c net.Conn) {
	src := p.n.sourceNode(c.RemoteAddr().String(), p.ln.Addr().String())
	pc := &proxyConn{src: src, dst: p.dst, a: c}
	p.n.mu.Lock()
	if p.n.blocked(src, p.dst) {
		p.n.conns[pc] = struct{}{}
		p.n.mu.Unlock()
		io.Copy(io.Discard, c) // blackhole until Heal or Close
		c.Close()
		return
	}
	p.n.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	pc.b = up
	p.n.mu.Lock()
	if p.n.blocked(src, p.dst) {
		p.n.mu.Unlock()
		pc.close()
		return
	}
	p.n.conns[pc] = struct{}{}
	p.n.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	pc.close()
	p.n.mu.Lock()
	delete(p.n.conns, pc)
	p.n.mu.Unlock()
}

// sourceNode returns the index of the node process that owns the socket
// local=src, remote=dst, or -1.
func (n *Network) sourceNode(src, dst string) int {
	inode := socketInode(src, dst)
	if inode == "" {
		return -1
	}
	want := "socket:[" + inode + "]"
	for pid, idx := range n.pids() {
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && l == want {
				return idx
			}
		}
	}
	return -1
}

// socketInode finds the inode of the IPv4 TCP socket local -> remote.
func socketInode(local, remote string) string {
	hexAddr := func(a string) string {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return ""
		}
		ip := net.ParseIP(host).To4()
		pn, _ := strconv.Atoi(port)
		if ip == nil {
			return ""
		}
		return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], pn)
	}
	l, r := hexAddr(local), hexAddr(remote)
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 9 && fs[1] == l && fs[2] == r {
			return fs[9]
		}
	}
	return ""
}
