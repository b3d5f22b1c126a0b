package node

import (
	"log/slog"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// A joiner that has not yet heard from the leader logs raft's "no known
// peers" at INFO: on a busy machine its heartbeat timeout can pass
// before the leader's first entries arrive, in a normal join
// (TestCleanLogsOnJoinAndShutdown saw it at WARN under load).
func TestNoKnownPeersIsNotAWarning(t *testing.T) {
	if got := (&Node{}).adjustRaftLog(hclog.Warn, "no known peers, aborting election", nil); got != hclog.Info {
		t.Errorf("level %s, want INFO", got)
	}
}

// A follower the leader has not heard from within its leader lease is
// late, not unreachable: raft's "failed to contact" starts an episode at
// INFO (TestCleanLogsOnJoinAndShutdown saw it at WARN under load, 166ms
// late); the episode's summary warns if it goes on.
func TestFailedToContactIsNotAWarning(t *testing.T) {
	n := &Node{troubles: &troubles{log: slog.New(slog.DiscardHandler)}}
	args := []any{"server-id", "127.0.0.1:7411", "time", "166ms"}
	if got := n.adjustRaftLog(hclog.Warn, "failed to contact", args); got != hclog.Info {
		t.Errorf("first lapse logged at %s, want INFO", got)
	}
	if got := n.adjustRaftLog(hclog.Warn, "failed to contact", args); got != hclog.Debug {
		t.Errorf("second lapse logged at %s, want DEBUG (counted for the summary)", got)
	}
	if got := n.adjustRaftLog(hclog.Error, "failed to heartbeat to", []any{"peer", "127.0.0.1:7412"}); got != hclog.Error {
		t.Errorf("a failed heartbeat to another peer logged at %s, want raft's ERROR", got)
	}
}
