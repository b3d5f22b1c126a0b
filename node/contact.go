package node

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// contacts records when each raft peer last answered this node, for the
// leader's view of its followers (Status). raft keeps that per follower
// but does not export it.
type contacts struct {
	mu   sync.Mutex
	seen map[raft.ServerAddress]time.Time
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
	c.mu.Unlock()
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
