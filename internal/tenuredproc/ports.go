package tenuredproc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Ports is a set of reserved loopback ports. A reservation lasts until
// Release or until this process exits.
type Ports struct {
	mu    sync.Mutex
	locks []*os.File
	addrs []string
}

// portRange returns the range ports are picked from: [lo, hi), below the
// kernel's ephemeral range so that nothing binding port 0 or dialling out
// is handed one.
func portRange() (int, int) {
	lo, hi := 20000, 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if eph, err := strconv.Atoi(f[0]); err == nil && eph > 12000 {
				hi = eph
				lo = max(10000, hi-12768)
			}
		}
	}
	return lo, hi
}

func lockDir() (string, error) {
	d := filepath.Join(os.TempDir(), fmt.Sprintf("tenure-ports-%d", os.Getuid()))
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", err
	}
	return d, nil
}

// ReservePorts reserves n loopback addresses ("127.0.0.1:P").
func ReservePorts(n int) (*Ports, error) {
	p := &Ports{}
	if _, err := p.Add(n); err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// Add reserves n more addresses and returns them.
func (p *Ports) Add(n int) ([]string, error) {
	dir, err := lockDir()
	if err != nil {
		return nil, fmt.Errorf("tenuredproc: port lock directory: %w", err)
	}
	lo, hi := portRange()
	var out []string
	for tries := 0; len(out) < n; tries++ {
		if tries > 1000 {
			return out, errors.New("tenuredproc: found no free port after 1000 tries")
		}
		port := lo + rand.IntN(hi-lo)
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return out, fmt.Errorf("tenuredproc: port lock: %w", err)
		}
		if !tryLock(f) {
			f.Close() // another process holds it
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			f.Close() // used by something that does not take part in the locking
			continue
		}
		ln.Close()
		p.mu.Lock()
		p.locks = append(p.locks, f)
		p.addrs = append(p.addrs, addr)
		p.mu.Unlock()
		out = append(out, addr)
	}
	return out, nil
}

// Addrs returns every reserved address, in the order reserved.
func (p *Ports) Addrs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.addrs...)
}

// Release gives every port back.
func (p *Ports) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.locks {
		f.Close() // closing drops the flock
	}
	p.locks, p.addrs = nil, nil
}
