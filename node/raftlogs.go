package node

import (
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// adjustRaftLog sets the level of a log message of hashicorp/raft. raft
// warns about, or reports as errors, things that happen in every normal
// start, join, catch-up and orderly shutdown; those are logged lower
// here, so that a warning or an error in tenured's log is worth reading:
//
//   - a first election, with no leader before it (a new or restarted
//     cluster);
//   - a leader sending older entries to a follower that is behind, and
//     the follower saying its log is shorter (a new or restarted member
//     catching up);
//   - a raft connection that the peer closed (raft reports a reset as
//     a failure to decode);
//   - failing to reach a peer that said it is stopping (see
//     goodbyeMagic), until it is back;
//   - the new leader's higher term, while this leader hands its
//     leadership over;
//   - losing the quorum, and failing to elect a leader, because so many
//     voters stopped in order that the rest cannot make a quorum (the
//     cluster is being shut down).
func (n *Node) adjustRaftLog(level hclog.Level, msg string, args []any) hclog.Level {
	if level < hclog.Warn {
		return level
	}
	switch msg {
	case "heartbeat timeout reached, starting election":
		if leader := arg(args, "last-leader-id"); leader == "" || n.departed(leader) || n.quorumStopped() {
			return hclog.Info
		}
	case "failed to contact quorum of nodes, stepping down", "Election timeout reached, restarting election":
		if n.quorumStopped() {
			return hclog.Info
		}
	case "failed to decode incoming command":
		// The connection ended, not the stream: this node is stopping,
		// or the peer closed it (it stopped, or stopped leading and
		// dropped its replication connections). A stream that cannot
		// be decoded stays an error.
		e := arg(args, "error")
		for _, closed := range []string{"transport shutdown", "connection reset by peer", "use of closed network connection"} {
			if strings.Contains(e, closed) {
				return hclog.Debug
			}
		}
		if n.stopping() {
			return hclog.Debug
		}
	case "peer has newer term, stopping replication":
		if n.transferring() || n.stopping() {
			return hclog.Info
		}
	case "appendEntries rejected, sending older logs":
		return hclog.Debug
	case "no known peers, aborting election":
		// A node with no raft configuration yet: it joined and waits for
		// the leader's first entries, which can take longer than its
		// heartbeat timeout on a busy machine. (A bootstrapped node
		// always knows itself.)
		return hclog.Info
	case "failed to get previous log":
		var prev, last uint64
		fmt.Sscan(arg(args, "previous-index"), &prev)
		fmt.Sscan(arg(args, "last-index"), &last)
		if last < prev {
			return hclog.Debug
		}
	case "failed to heartbeat to", "failed to appendEntries to", "failed to contact",
		"failed to make requestVote RPC", "failed to make requestPreVote RPC", "failed to pipeline appendEntries":
		for _, key := range []string{"peer", "server-id", "target"} {
			if n.departed(arg(args, key)) {
				return hclog.Debug
			}
		}
		l := n.troubles.failed(n.peerAddress(args), level, time.Now())
		if msg == "failed to contact" && l > hclog.Info {
			// The leader has not heard from this follower within its
			// leader lease: late, not unreachable (a failed RPC says
			// that). On a loaded machine one such lapse is normal; if
			// it goes on, the episode's summary is the warning.
			l = hclog.Info
		}
		return l
	}
	return level
}

// stopping reports whether this node is closing.
func (n *Node) stopping() bool {
	select {
	case <-n.closing:
		return true
	default:
		return false
	}
}

// quorumStopped reports whether so many voters said goodbye that the
// others cannot make a quorum. It reads the configuration watchRemoval
// last saw: raft logs from its own loops, which must not be called back.
func (n *Node) quorumStopped() bool {
	p := n.servers.Load()
	if p == nil {
		return false
	}
	voters, stopped := 0, 0
	for _, s := range *p {
		if s.Suffrage != raft.Voter {
			continue
		}
		voters++
		if n.contact.departed(string(s.Address)) {
			stopped++
		}
	}
	return stopped > 0 && voters-stopped < voters/2+1
}

// departed reports whether peer, an address, an ID or raft's text of a
// server ("{Voter n1 127.0.0.1:7401}"), said goodbye and has not been
// back.
func (n *Node) departed(peer string) bool {
	if peer == "" {
		return false
	}
	if n.contact.departed(peer) {
		return true
	}
	for _, f := range strings.Fields(strings.Trim(peer, "{}")) {
		_, v, _ := strings.Cut(f, ":") // "ID:n1" as %+v prints it
		if n.contact.departed(f) || n.contact.departed(v) {
			return true
		}
	}
	return false
}

// arg returns the value of key in hclog's alternating keys and values,
// as text.
func arg(args []any, key string) string {
	for i := 0; i+1 < len(args); i += 2 {
		if k, ok := args[i].(string); ok && k == key {
			return fmt.Sprint(args[i+1])
		}
	}
	return ""
}
