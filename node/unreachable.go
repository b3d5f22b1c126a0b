package node

import (
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Raft logs every failed heartbeat and append to a peer that is down:
// with one peer down a leader logged 179 errors in 13 seconds. troubles
// keeps one episode per peer instead: raft's first failure is logged as
// raft logs it, the rest at DEBUG; while the peer stays unreachable one
// line every summaryEvery says how many failures there were, and one
// line says when it answers again.
type troubles struct {
	log     *slog.Logger
	contact *contacts

	mu    sync.Mutex
	peers map[raft.ServerAddress]*trouble
}

// trouble is one peer's episode of failures.
type trouble struct {
	since    time.Time // the first failure
	total    int       // failures in the episode
	reported int       // total at the last summary
}

// summaryEvery is how often a peer that stays unreachable is reported.
const summaryEvery = 30 * time.Second

// failed records a failure to reach peer and returns the level raft's
// message about it gets: its own the first time, DEBUG after.
func (t *troubles) failed(peer raft.ServerAddress, level hclog.Level, now time.Time) hclog.Level {
	if t == nil || peer == "" {
		return level
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.peers == nil {
		t.peers = make(map[raft.ServerAddress]*trouble)
	}
	p, ok := t.peers[peer]
	if !ok {
		t.peers[peer] = &trouble{since: now, total: 1, reported: 1}
		return level
	}
	p.total++
	return hclog.Debug
}

// summarize reports, at now, the peers that answered again since their
// episode began (and ends the episode) and the peers still failing.
func (t *troubles) summarize(now time.Time) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, p := range t.peers {
		if at, ok := t.contact.last(addr); ok && at.After(p.since) {
			t.log.Info("raft peer answers again", "peer", addr, "unreachable_for", at.Sub(p.since).Round(time.Millisecond), "failures", p.total)
			delete(t.peers, addr)
			continue
		}
		if p.total > p.reported {
			t.log.Warn("raft peer still unreachable", "peer", addr, "for", now.Sub(p.since).Round(time.Second),
				"failures", p.total-p.reported, "in_the_last", summaryEvery)
			p.reported = p.total
		}
	}
}

// run summarizes every summaryEvery until stop is closed.
func (t *troubles) run(stop <-chan struct{}) {
	tick := time.NewTicker(summaryEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-tick.C:
			t.summarize(now)
		}
	}
}

// peerAddress returns the raft address a failure message names: raft
// gives an address ("peer"), a server ("{Voter n2 127.0.0.1:7411}") or
// an ID ("server-id"), looked up in the configuration watchRemoval saw.
func (n *Node) peerAddress(args []any) raft.ServerAddress {
	for _, key := range []string{"peer", "target"} {
		if v := arg(args, key); v != "" {
			if f := strings.Fields(strings.Trim(v, "{}")); len(f) == 3 {
				return raft.ServerAddress(f[2])
			}
			return raft.ServerAddress(v)
		}
	}
	if id := arg(args, "server-id"); id != "" {
		if p := n.servers.Load(); p != nil {
			for _, s := range *p {
				if string(s.ID) == id {
					return s.Address
				}
			}
		}
		return raft.ServerAddress(id)
	}
	return ""
}
