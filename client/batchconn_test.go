package client_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenure-io/tenure/client"
	"github.com/tenure-io/tenure/internal/testcluster"
)

// connLog is a TCP proxy to a server that records the first line of
// every connection made through it.
type connLog struct {
	addr  string
	mu    sync.Mutex
	first []string
}

func newConnLog(t *testing.T, target string) *connLog {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &connLog{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		cmu.Lock()
		defer cmu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, in, out)
			cmu.Unlock()
			wg.Go(func() {
				defer in.Close()
				defer out.Close()
				br := bufio.NewReader(in)
				line, err := br.ReadString('\n')
				l.mu.Lock()
				l.first = append(l.first, strings.TrimSpace(line))
				l.mu.Unlock()
				if err != nil {
					return
				}
				out.Write([]byte(line))
				go io.Copy(in, out)
				io.Copy(out, br)
			})
		}
	})
	return l
}

func (l *connLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.first...)
}

// A client sends its lease traffic (acquires, waiting or not, renewals,
// releases, fenced writes) on one batch connection per endpoint; the
// calls that are not lease traffic (Get) go on HTTP/2. A waiting Acquire
// on the batch connection does not hold up the calls after it, and one
// whose context ends leaves the queue.
func TestLeaseCallsGoOnTheBatchConnection(t *testing.T) {
	c := testcluster.Start(t, testcluster.Config{Size: 1})
	m := c.Leader()
	log := newConnLog(t, m.Addr)
	cl := mustClient(t, log.addr)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	l, err := cl.Acquire(ctx, "jobs/a", "h1", time.Minute, client.Wait(0))
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if _, err := cl.RenewOne(ctx, l.Name, l.Token); err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if _, err := cl.Put(ctx, "k", []byte("v"), l.Name, l.Token); err != nil {
		t.Fatalf("Put: %v", err)
	}

	// A waiter queues; while it waits, the holder's calls go through.
	got := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(ctx, "jobs/a", "h2", time.Minute, client.Wait(0))
		got <- err
	}()
	testcluster.WaitWaiters(t, ctx, m, "jobs/a", 1)
	if _, err := cl.RenewOne(ctx, l.Name, l.Token); err != nil {
		t.Fatalf("Renew while another call waits on the connection: %v", err)
	}
	// A second waiter gives up: it leaves the queue.
	wctx, stop := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := cl.Acquire(wctx, "jobs/a", "h3", time.Minute, client.Wait(0))
		gaveUp <- err
	}()
	testcluster.WaitWaiters(t, ctx, m, "jobs/a", 2)
	stop()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait: %v; want context.Canceled", err)
	}
	testcluster.WaitWaiters(t, ctx, m, "jobs/a", 1)
	if err := cl.Release(ctx, l.Name, l.Token); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting Acquire: %v; want the grant after the release", err)
	}

	if lines := log.lines(); len(lines) != 1 || lines[0] != "GET /tenure.v1.LeaseService/BatchConn HTTP/1.1" {
		t.Errorf("connections (first lines): %q; want one, the batch connection", lines)
	}
	if _, err := cl.Get(ctx, "jobs/a"); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if lines := log.lines(); len(lines) != 2 || lines[1] != "PRI * HTTP/2.0" {
		t.Errorf("connections (first lines) after a Get: %q; want the batch connection and an HTTP/2 one", lines)
	}
}

// A server that accepts the batch connection and never answers the
// upgrade holds a call only as long as a dial may take: the client gives
// up on that connection and tries again, even for a waiting Acquire,
// which has no deadline of its own.
func TestBatchConnHandshakeIsBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	}()
	cfg := client.DefaultConfig()
	cfg.Endpoints = []string{ln.Addr().String()}
	cfg.DialTimeout = 100 * time.Millisecond
	cfg.RetryBackoff = time.Millisecond
	cfg.MaxRetryBackoff = 10 * time.Millisecond
	cl, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := cl.Acquire(ctx, "jobs/a", "h", time.Minute, client.Wait(0)); err == nil {
		t.Fatal("Acquire from a server that never answers succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) < 3 {
		t.Errorf("the client opened %d connections in 2s with a dial timeout of 100ms; want it to give up on each handshake and try again", len(conns))
	}
}
