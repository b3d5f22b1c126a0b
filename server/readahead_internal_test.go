package server

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"
)

// readAheadPair returns both ends of a loopback TCP connection, the
// accepted one read-ahead.
func readAheadPair(t *testing.T) (client net.Conn, served *readAheadConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ra := ReadAhead(ln)
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := ra.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	served, ok := c.(*readAheadConn)
	if !ok {
		t.Fatalf("accepted a %T, want a read-ahead connection", c)
	}
	return client, served
}

// TestReadAheadKeepsTheBytes reads what was written in random pieces with
// reads of random sizes, small (from the buffer) and large (direct): every
// byte arrives in order, and a drained connection holds no buffer.
func TestReadAheadKeepsTheBytes(t *testing.T) {
	client, c := readAheadPair(t)
	rng := rand.New(rand.NewPCG(3, 4))
	stream := make([]byte, 1<<20)
	for i := range stream {
		stream[i] = byte(rng.Uint32())
	}
	go func() {
		for rest := stream; len(rest) > 0; {
			k := min(len(rest), 1+rand.IntN(9000))
			client.Write(rest[:k])
			rest = rest[k:]
		}
		client.Close()
	}()
	var got []byte
	for {
		n := 9 // an HTTP/2 frame header
		if rng.IntN(3) == 0 {
			n = 1 + rng.IntN(2*readAheadSize)
		}
		buf := make([]byte, n)
		k, err := c.Read(buf)
		got = append(got, buf[:k]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("read %d bytes, want the %d written, unchanged", len(got), len(stream))
	}
	if c.buf != nil {
		t.Error("the drained connection still holds a buffer")
	}
}

// TestReadAheadHoldsNoBufferWhileIdle: a connection waiting for its next
// frame holds no buffer, and one that got a partial frame holds the rest.
func TestReadAheadHoldsNoBufferWhileIdle(t *testing.T) {
	client, c := readAheadPair(t)
	if _, err := client.Write([]byte("headerNINEpayload")); err != nil {
		t.Fatal(err)
	}
	hdr := make([]byte, 9)
	if _, err := io.ReadFull(c, hdr); err != nil || string(hdr) != "headerNIN" {
		t.Fatalf("first 9 bytes %q, %v", hdr, err)
	}
	if c.buf == nil || string((*c.buf)[c.r:c.w]) != "Epayload" {
		t.Fatal("the rest of the frame was not read ahead")
	}
	rest := make([]byte, 8)
	if _, err := io.ReadFull(c, rest); err != nil || string(rest) != "Epayload" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if c.buf != nil {
		t.Fatal("a drained connection holds a buffer")
	}
	// Idle: the read waits without a buffer until its deadline.
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := c.Read(hdr)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if c.buf != nil {
		t.Fatal("an idle connection holds a buffer")
	}
}

// TestReadAheadEndsOnClose: a read waiting on a connection that is closed
// returns net.ErrClosed, as a plain connection's would.
func TestReadAheadEndsOnClose(t *testing.T) {
	_, c := readAheadPair(t)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 9))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond) // let the read start waiting; it ends either way
	c.Close()
	if err := <-errc; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
	}
}
