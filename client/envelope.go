package client

import (
	"encoding/binary"
	"io"
	"net/http"
)

// wholeMessages returns hc sending the messages of streaming requests
// whole: connect writes each message of a stream into the request body
// as two writes, its 5-byte envelope prefix and then the message, and
// the HTTP/2 transport sends each read of the body as a DATA frame of
// its own and flushes it. That is two frames and two write system calls
// per message for the client, and twice the frames (and read calls) for
// the server. Reading the body a whole message at a time makes it one of
// each. Requests with a known length (unary calls) pass as they are.
func wholeMessages(hc *http.Client) *http.Client {
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c := *hc
	c.Transport = messageRoundTripper{next: rt}
	return &c
}

type messageRoundTripper struct{ next http.RoundTripper }

func (m messageRoundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength >= 0 {
		return m.next.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Body = &messageBody{ReadCloser: r.Body}
	return m.next.RoundTrip(r)
}

// envelopePrefix is the length of the prefix of each message of a gRPC
// or Connect stream: a flags byte and the message's length, 4 bytes big
// endian.
const envelopePrefix = 5

// messageBody reads a body of enveloped messages and returns from Read
// only at the end of a message (or when p is full, or on an error). It
// follows the framing and never changes a byte.
type messageBody struct {
	io.ReadCloser
	prefix  [envelopePrefix]byte
	nprefix int    // bytes of the current prefix seen
	left    uint32 // bytes of the current message still to come
}

func (b *messageBody) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := b.ReadCloser.Read(p[n:])
		b.follow(p[n : n+m])
		n += m
		if err != nil || (m > 0 && b.atBoundary()) {
			return n, err
		}
	}
	return n, nil
}

// follow advances the framing over bytes just read.
func (b *messageBody) follow(data []byte) {
	for len(data) > 0 {
		if b.nprefix < envelopePrefix {
			k := copy(b.prefix[b.nprefix:], data)
			b.nprefix += k
			data = data[k:]
			if b.nprefix == envelopePrefix {
				b.left = binary.BigEndian.Uint32(b.prefix[1:])
			}
			continue
		}
		k := uint32(len(data))
		if k > b.left {
			k = b.left
		}
		b.left -= k
		data = data[k:]
		if b.left == 0 {
			b.nprefix = 0
		}
	}
	if b.nprefix == envelopePrefix && b.left == 0 {
		b.nprefix = 0 // an empty message ends with its prefix
	}
}

// atBoundary reports whether the bytes read so far end with a whole
// message.
func (b *messageBody) atBoundary() bool { return b.nprefix == 0 }
