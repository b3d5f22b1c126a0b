package node

import (
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
