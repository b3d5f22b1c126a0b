package client

import (
	"errors"
	"net/http"
	"testing"

	"connectrpc.com/connect"
)

// failedStream is a stream whose first Receive fails; its response header
// must not be read then: connect may still be writing it on the goroutine
// that sent the request (a data race the race detector caught under load).
type failedStream struct {
	connect.StreamingClientConn
	t   *testing.T
	err error
}

func (s *failedStream) Receive(any) error { return s.err }

func (s *failedStream) ResponseHeader() http.Header {
	s.t.Error("the response header was read after a failed Receive")
	return http.Header{}
}

func TestClusterCheckReadsNoHeaderAfterAFailedReceive(t *testing.T) {
	c, err := New(Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, recvErr := range []error{
		errors.New("connection reset"),
		connect.NewError(connect.CodeUnavailable, errors.New("no leader")),
	} {
		s := &clusterCheckedConn{StreamingClientConn: &failedStream{t: t, err: recvErr}, check: clusterCheck{c: c, addr: "127.0.0.1:1"}}
		if got := s.Receive(nil); got != recvErr {
			t.Errorf("Receive: %v, want the stream's own error %v", got, recvErr)
		}
	}
}
