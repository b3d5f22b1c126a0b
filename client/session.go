package client

import (
	"crypto/rand"
	"encoding/base64"
	"sync"

	tenurev1 "github.com/tenure-io/tenure/gen/tenure/v1"
)

// session numbers the calls of a Client that change state (Acquire,
// Renew, Release, Put, Delete), so the cluster applies each at most once:
// every attempt of a call carries the same (session, seq), and the leader
// answers a retry with the outcome of the attempt that took effect (see
// lease/session.go). Each request also carries the floor, the lowest seq
// still in flight: the cluster forgets the outcomes below it and refuses
// a late copy of a call below it, which the client has answered or given
// up on.
//
// A call takes the lock twice, for a few instructions each (begin and
// end), never across the call; the floor moves in amortized O(1).
type session struct {
	id string

	mu    sync.Mutex
	next  uint64 // the next seq to hand out
	floor uint64 // the lowest seq not ended
	// ended[i] reports whether seq floor+i has ended.
	ended []bool
}

func newSession() *session {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return &session{id: base64.RawURLEncoding.EncodeToString(b[:]), next: 1, floor: 1}
}

// begin starts a call and returns its request ID, for every attempt of
// the call. end must follow, once the call returns.
func (s *session) begin() *tenurev1.RequestID {
	s.mu.Lock()
	seq := s.next
	s.next++
	s.ended = append(s.ended, false)
	floor := s.floor
	s.mu.Unlock()
	return &tenurev1.RequestID{Session: s.id, Seq: seq, Floor: floor}
}

// end ends the call of id: answered, or given up on.
func (s *session) end(id *tenurev1.RequestID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended[id.GetSeq()-s.floor] = true
	n := 0
	for n < len(s.ended) && s.ended[n] {
		n++
	}
	if n == 0 {
		return
	}
	s.floor += uint64(n)
	if n == len(s.ended) {
		s.ended = s.ended[:0] // reuse the array
	} else {
		s.ended = s.ended[n:]
	}
}

// Session returns the ID of the client's session, as its requests carry
// it.
func (c *Client) Session() string { return c.sess.id }
