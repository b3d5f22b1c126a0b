package client

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"
)

// envelope frames msg as a gRPC or Connect stream message.
func envelope(flags byte, msg []byte) []byte {
	b := make([]byte, envelopePrefix, envelopePrefix+len(msg))
	b[0] = flags
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// TestMessageBodyReadsWholeMessages writes messages into a pipe the way
// connect does (the prefix, then the message, as two writes) and checks
// that each Read returns exactly one whole message, byte for byte.
func TestMessageBodyReadsWholeMessages(t *testing.T) {
	msgs := [][]byte{[]byte("renew jobs/a"), {}, bytes.Repeat([]byte("x"), 3000), []byte("end")}
	pr, pw := io.Pipe()
	go func() {
		for i, m := range msgs {
			env := envelope(byte(i%2), m)
			pw.Write(env[:envelopePrefix])
			if len(m) > 0 {
				pw.Write(env[envelopePrefix:])
			}
		}
		pw.Close()
	}()
	body := &messageBody{ReadCloser: pr}
	buf := make([]byte, 16<<10)
	for i, m := range msgs {
		n, err := body.Read(buf)
		if err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if want := envelope(byte(i%2), m); !bytes.Equal(buf[:n], want) {
			t.Fatalf("read %d returned %d bytes %q, want the whole message (%d bytes)", i, n, buf[:min(n, 20)], len(want))
		}
	}
	if n, err := body.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the last message: %d, %v; want 0, EOF", n, err)
	}
}

// TestMessageBodyKeepsTheBytes reads messages written in random pieces
// with reads of random sizes: every byte arrives, in order, and a read
// that ends inside a message does so only because its buffer is full.
func TestMessageBodyKeepsTheBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var stream []byte
	for range 200 {
		m := make([]byte, rng.IntN(700))
		for i := range m {
			m[i] = byte(rng.Uint32())
		}
		stream = append(stream, envelope(0, m)...)
	}
	pr, pw := io.Pipe()
	go func() {
		for rest := stream; len(rest) > 0; {
			k := min(len(rest), 1+rng.IntN(300))
			pw.Write(rest[:k])
			rest = rest[k:]
		}
		pw.Close()
	}()
	body := &messageBody{ReadCloser: pr}
	var got []byte
	for {
		buf := make([]byte, 1+rand.IntN(2000))
		n, err := body.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if n < len(buf) && !body.atBoundary() {
			t.Fatalf("a read of %d bytes into %d ended inside a message", n, len(buf))
		}
	}
	if !bytes.Equal(got, stream) {
		t.Fatalf("read %d bytes, want the %d written, unchanged", len(got), len(stream))
	}
}
