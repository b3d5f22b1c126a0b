package node

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// contacts records when each raft peer last answered this node, for the
// leader's view of its followers (Status). raft keeps that per follower
// but does not export it.
//
// It also remembers the peers that said goodbye (they are stopping in
// order) until they answer or connect again, so that raft's complaints
// about not reaching them are logged quietly.
type contacts struct {
	mu   sync.Mutex
	seen map[raft.ServerAddress]time.Time
	gone map[raft.ServerAddress]goodbye
}

// goodbye is a peer's goodbye: its ID and when it came.
type goodbye struct {
	id raft.ServerID
	at time.Time
}

// goodbyeGrace is how long after its goodbye a stopping peer may still
// answer (it says goodbye before and after its raft stops) without
// counting as back.
const goodbyeGrace = time.Second

// backLocked forgets the goodbye of the peer at addr if it came more
// than goodbyeGrace before now.
func (c *contacts) backLocked(addr raft.ServerAddress, now time.Time) {
	if g, ok := c.gone[addr]; ok && now.Sub(g.at) > goodbyeGrace {
		delete(c.gone, addr)
	}
}

func (c *contacts) record(addr raft.ServerAddress) {
	if c == nil {
		return
	}
	now := time.Now()
	c.mu.Lock()
	if c.seen == nil {
		c.seen = make(map[raft.ServerAddress]time.Time)
	}
	c.seen[addr] = now
	c.backLocked(addr, now)
	c.mu.Unlock()
}

// left records that the peer at addr, with ID id, said goodbye, and
// reports whether that is news.
func (c *contacts) left(addr raft.ServerAddress, id raft.ServerID) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, known := c.gone[addr]
	if c.gone == nil {
		c.gone = make(map[raft.ServerAddress]goodbye)
	}
	c.gone[addr] = goodbye{id: id, at: time.Now()}
	return !known
}

// back records that the peer at addr connected again.
func (c *contacts) back(addr raft.ServerAddress) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.backLocked(addr, time.Now())
	c.mu.Unlock()
}

// departed reports whether the peer with the address or ID s said
// goodbye and has not been heard from since.
func (c *contacts) departed(s string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for addr, g := range c.gone {
		if string(addr) == s || string(g.id) == s {
			return true
		}
	}
	return false
}

// last returns when the peer at addr last answered, and whether it ever
// did.
func (c *contacts) last(addr raft.ServerAddress) (time.Time, bool) {
	if c == nil {
		return time.Time{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.seen[addr]
	return t, ok
}

// contactTransport is raft's network transport that records every
// successful answer to AppendEntries. raft's leader sends those as
// heartbeats to every follower a few times per heartbeat timeout, also
// while it replicates through a pipeline, so they are enough. Embedding
// the concrete type keeps every optional interface raft looks for
// (pre-vote, close, streams).
type contactTransport struct {
	*raft.NetworkTransport
	c *contacts
}

func (t *contactTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, args, resp)
	if err == nil {
		t.c.record(target)
	}
	return err
}
