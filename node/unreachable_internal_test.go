package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A peer that stays down costs one raft error, then one summary per
// period, then one line when it answers again; 179 failures are not 179
// lines.
func TestUnreachablePeerIsSummarized(t *testing.T) {
	var buf bytes.Buffer
	c := &contacts{}
	tr := &troubles{log: slog.New(slog.NewTextHandler(&buf, nil)), contact: c}
	const peer = raft.ServerAddress("127.0.0.1:7411")
	start := time.Now()
	if got := tr.failed(peer, hclog.Error, start); got != hclog.Error {
		t.Fatalf("first failure logged at %s, want raft's ERROR", got)
	}
	for i := range 178 {
		if got := tr.failed(peer, hclog.Error, start.Add(time.Duration(i)*70*time.Millisecond)); got != hclog.Debug {
			t.Fatalf("failure %d logged at %s, want DEBUG", i+2, got)
		}
	}
	tr.summarize(start.Add(summaryEvery))
	tr.summarize(start.Add(2 * summaryEvery)) // nothing new: no line
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, `msg="raft peer still unreachable" peer=127.0.0.1:7411 for=30s failures=178`) {
		t.Fatalf("summaries:\n%s\nwant one line with 178 failures", out)
	}
	buf.Reset()
	c.record(peer)
	tr.summarize(start.Add(3 * summaryEvery))
	if out := buf.String(); !strings.Contains(out, `msg="raft peer answers again" peer=127.0.0.1:7411`) || !strings.Contains(out, "failures=179") {
		t.Fatalf("after it answered:\n%s", out)
	}
	// A new episode starts with raft's own line again.
	if got := tr.failed(peer, hclog.Error, start.Add(4*summaryEvery)); got != hclog.Error {
		t.Fatalf("first failure of a new episode logged at %s, want ERROR", got)
	}
}

// The failure messages name a peer by address, by server or by ID.
func TestPeerAddressOfAFailure(t *testing.T) {
	n := &Node{}
	n.servers.Store(&[]raft.Server{{ID: "n2", Address: "127.0.0.1:7411"}})
	for _, args := range [][]any{
		{"peer", "127.0.0.1:7411", "backoff time", "10ms"},
		{"peer", "{Voter n2 127.0.0.1:7411}", "error", "EOF"},
		{"server-id", "n2", "time", "500ms"},
	} {
		if got := n.peerAddress(args); got != "127.0.0.1:7411" {
			t.Errorf("peerAddress(%v) = %q", args, got)
		}
	}
}
