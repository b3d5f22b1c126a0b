package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/tenure-io/tenure/client"
)

// rssLimit is what a node may grow to under each attack of the limits
// battery.
const rssLimit = 200 << 20

// rss returns the resident set size of process pid in bytes.
func rss(t *testing.T, pid int) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("VmRSS %q: %v", v, err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// zeros is an endless body of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// limitsNode is a TLS + auth node of the limits battery, with a victim
// principal whose lock cycles must keep working and an attacker.
type limitsNode struct {
	t           *testing.T
	s           *server
	pool        *x509.CertPool
	attackerTok string
	victim      *client.Client
	cycles      int
}

func startLimitsNode(t *testing.T) *limitsNode {
	t.Helper()
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	authFile := filepath.Join(dir, "auth.json")
	if r := cliEnv(t, nil, "certs", "init", certs, "--members", "n1"); r.code != 0 {
		t.Fatalf("certs init: %v", r)
	}
	n := &limitsNode{t: t, attackerTok: authToken(t, authFile, "attacker", "hold:", "read:")}
	victimTok := authToken(t, authFile, "victim", "hold:", "read:")
	c := func(f string) string { return filepath.Join(certs, f) }
	n.s = newServer(t, "n1", "", "--election-timeout", "200ms",
		"--tls-cert", c("n1.crt"), "--tls-key", c("n1.key"), "--client-ca", c("client-ca.crt"), "--auth-file", authFile)
	n.s.start()
	n.s.waitReady(20 * time.Second)
	n.pool = x509.NewCertPool()
	caPEM, err := os.ReadFile(c("ca.crt"))
	if err != nil || !n.pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("read the CA: %v", err)
	}
	n.victim = n.client(victimTok)
	n.lockCycle("before")
	n.checkRSS("before")
	return n
}

// client returns a tenure client of the principal of tok.
func (n *limitsNode) client(tok string) *client.Client {
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{"https://" + n.s.api}
	cfg.TLS, cfg.Token = &tls.Config{RootCAs: n.pool}, tok
	cl, err := client.New(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(func() { cl.Close() })
	return cl
}

// lockCycle runs one lock cycle of the victim: acquire, fenced put,
// release.
func (n *limitsNode) lockCycle(what string) {
	n.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n.cycles++
	name := fmt.Sprintf("victim/%d", n.cycles)
	l, err := n.victim.Acquire(ctx, name, "victim", 5*time.Second)
	if err == nil {
		_, err = n.victim.Put(ctx, name+"/v", []byte(what), name, l.Token)
	}
	if err == nil {
		err = n.victim.Release(ctx, name, l.Token)
	}
	if err != nil {
		n.t.Fatalf("%s: the other principal's lock cycle failed: %v", what, err)
	}
}

func (n *limitsNode) checkRSS(what string) {
	n.t.Helper()
	got := rss(n.t, n.s.proc.Pid())
	n.t.Logf("%s: RSS %d MB", what, got>>20)
	if got > rssLimit {
		n.t.Errorf("%s: RSS %d MB, want under %d MB", what, got>>20, rssLimit>>20)
	}
}

// after checks the node after an attack: RSS under the limit and the
// victim's lock cycles working.
func (n *limitsNode) after(what string) {
	n.t.Helper()
	n.checkRSS(what)
	n.lockCycle(what)
}

// TestRequestLimits is the limits battery, each attack against its own
// TLS + auth node: a 1 GB body with no credentials and with them, a gRPC
// message that claims to be 1 GB, slow headers, 10,000 idle connections
// and 10,000 watches of one principal. After each, the node's RSS is
// under 200 MB and another principal's lock cycles (acquire, fenced put,
// release) still succeed.
func TestRequestLimits(t *testing.T) {
	t.Parallel()
	post := func(n *limitsNode, path, contentType, tok string, body io.Reader) (int, string) {
		t.Helper()
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: n.pool}}, Timeout: 60 * time.Second}
		defer hc.CloseIdleConnections()
		req, err := http.NewRequest("POST", "https://"+n.s.api+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", contentType)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := hc.Do(req)
		if err != nil {
			// The server may close the connection while the body is
			// still being sent; what it answered is then lost.
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
		return res.StatusCode, string(b)
	}
	gig := func() io.Reader { return io.LimitReader(zeros{}, 1<<30) }

	t.Run("1GB body without credentials", func(t *testing.T) {
		t.Parallel()
		n := startLimitsNode(t)
		code, body := post(n, "/tenure.v1.LeaseService/Acquire", "application/json", "", gig())
		if code != http.StatusUnauthorized && code != 0 {
			t.Errorf("answer %d %s, want 401 unauthenticated", code, body)
		}
		n.after("1GB body without credentials")
	})
	t.Run("1GB body with credentials", func(t *testing.T) {
		t.Parallel()
		n := startLimitsNode(t)
		code, body := post(n, "/tenure.v1.KVService/Put", "application/json", n.attackerTok, gig())
		if code != 0 && (code != http.StatusTooManyRequests || !strings.Contains(body, "resource_exhausted")) {
			t.Errorf("answer %d %s, want 429 resource_exhausted", code, body)
		}
		n.after("1GB body with credentials")
	})
	t.Run("gRPC message claiming 1GB", func(t *testing.T) {
		t.Parallel()
		n := startLimitsNode(t)
		// HTTP/2, as gRPC needs.
		h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: n.pool}, ForceAttemptHTTP2: true}, Timeout: 60 * time.Second}
		defer h2.CloseIdleConnections()
		prefix := make([]byte, 5)
		binary.BigEndian.PutUint32(prefix[1:], 1<<30)
		req, _ := http.NewRequest("POST", "https://"+n.s.api+"/tenure.v1.LeaseService/Acquire",
			io.MultiReader(strings.NewReader(string(prefix)), io.LimitReader(zeros{}, 64<<20)))
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("Authorization", "Bearer "+n.attackerTok)
		res, err := h2.Do(req)
		if err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if st := res.Header.Get("Grpc-Status") + res.Trailer.Get("Grpc-Status"); st != "8" {
				t.Errorf("grpc-status %q, want 8 (resource exhausted)", st)
			}
		}
		n.after("gRPC message claiming 1GB")
	})
	t.Run("slow headers", func(t *testing.T) {
		t.Parallel()
		n := startLimitsNode(t)
		conn, err := tls.Dial("tcp", n.s.api, &tls.Config{RootCAs: n.pool, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		// Half a request line, then nothing: the server must hang up
		// (ReadHeaderTimeout, 10s), not wait for ever.
		if _, err := io.WriteString(conn, "POST /tenure.v1.LeaseService/Acquire HTTP/1.1\r\nHost: x\r\n"); err != nil {
			t.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		start := time.Now()
		_, err = io.Copy(io.Discard, conn)
		if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
			t.Fatalf("the server kept a connection with unfinished headers open for %s", time.Since(start))
		}
		n.lockCycle("slow headers")
	})
	t.Run("10000 idle connections", func(t *testing.T) {
		t.Parallel()
		n := startLimitsNode(t)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for i := range 10000 {
			c, err := net.Dial("tcp", n.s.api)
			if err != nil {
				t.Fatalf("connection %d: %v", i, err)
			}
			conns = append(conns, c)
		}
		n.after("10000 idle connections")
	})
	t.Run("10000 watches of one principal", func(t *testing.T) {
		t.Parallel()
		n := startLimitsNode(t)
		attacker := n.client(n.attackerTok)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			mu       sync.Mutex
			ok, full int
			other    []error
			wg       sync.WaitGroup
		)
		sem := make(chan struct{}, 64)
		for range 10000 {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_, err := attacker.Watch(ctx, "x/")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case connect.CodeOf(err) == connect.CodeResourceExhausted:
					full++
				default:
					other = append(other, err)
				}
			}()
		}
		wg.Wait()
		t.Logf("10000 watches: %d open, %d refused as too many, %d other errors", ok, full, len(other))
		if ok != 1024 || full != 10000-1024 || len(other) > 0 {
			t.Errorf("%d watches open, %d refused, other errors %v; want 1024 open (the default --max-streams) and the rest refused", ok, full, other)
		}
		n.after("10000 watches of one principal")
		// The victim may still watch: the limit is per principal.
		vctx, vcancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer vcancel()
		if _, err := n.victim.Watch(vctx, "victim/"); err != nil {
			t.Errorf("the other principal's watch: %v", err)
		}
	})
}
