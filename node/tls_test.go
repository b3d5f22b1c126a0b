package node

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tenure-io/tenure/internal/tlsconfig"
	"github.com/tenure-io/tenure/lease"
)

func mustIssue(t *testing.T, ca *tlsconfig.Issued, cn string) *tlsconfig.Issued {
	t.Helper()
	c, err := ca.Issuer().Issue(tlsconfig.Template{CommonName: cn, Hosts: []string{"127.0.0.1"}, Server: true, Client: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// With PeerTLS, raft takes connections only from members: a dialer with
// no certificate or one from another CA is refused before the cluster
// handshake, even with the right cluster ID, the refusal is logged, and
// the node's raft state does not change. A member's certificate gets
// through (the control).
func TestRaftOverTLSRefusesNonMembers(t *testing.T) {
	ca, err := tlsconfig.NewCA("cluster")
	if err != nil {
		t.Fatal(err)
	}
	other, err := tlsconfig.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	logs := &logRecorder{t: t}
	cfg := testConfig(t, "m1")
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr = "127.0.0.1:0"
	cfg.Bootstrap = true
	cfg.Logger = logs.logger("m1")
	cfg.PeerTLS = tlsconfig.NewPeer(mustIssue(t, ca, "m1").TLSCert(), ca.Cert)
	n := mustNode(t, cfg)
	t.Cleanup(func() { n.Close() })
	waitFor(t, "m1 to lead", 5*time.Second, n.IsLeader)
	ctx := ctxT(t, 20*time.Second)
	if _, err := n.Do1(ctx, lease.Op{Type: lease.OpAcquire, Name: "x", Holder: "h", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	before := viewOf(t, n)

	hlog := hclog.New(&hclog.LoggerOptions{Output: io.Discard})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	appendReq := func() *raft.AppendEntriesRequest {
		return &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("x1"), Addr: []byte("127.0.0.1:1")},
			Term:      before.term + 100, LeaderCommitIndex: 1 << 40,
		}
	}
	for _, tc := range []struct {
		name string
		peer *tlsconfig.Peer
	}{
		{"plain TCP", nil},
		{"a certificate from another CA", tlsconfig.NewPeer(mustIssue(t, other, "x1").TLSCert(), ca.Cert)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			intruder, stream, err := newClusterTransport("127.0.0.1:0", "", "", tc.peer, quiet, hlog)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				intruder.CloseStreams()
				intruder.Close()
			}()
			stream.setClusterID(n.ClusterID())
			var res raft.AppendEntriesResponse
			if err := intruder.AppendEntries("m1", raft.ServerAddress(n.RaftAddr()), appendReq(), &res); err == nil {
				t.Fatal("AppendEntries from a non-member was accepted")
			}
			after := viewOf(t, n)
			if after.term != before.term || after.last != before.last || !bytes.Equal(after.state, before.state) {
				t.Fatalf("state changed: term %d -> %d, last %d -> %d", before.term, after.term, before.last, after.last)
			}
			if !n.IsLeader() {
				t.Fatal("m1 lost its leadership")
			}
		})
	}
	waitFor(t, "the refusal to be logged", 5*time.Second, func() bool {
		return logs.logged("m1", "refused a raft connection: TLS handshake failed")
	})

	// Control: a member's certificate and the cluster ID reach raft.
	member, stream, err := newClusterTransport("127.0.0.1:0", "", "", tlsconfig.NewPeer(mustIssue(t, ca, "m2").TLSCert(), ca.Cert), quiet, hlog)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		member.CloseStreams()
		member.Close()
	}()
	stream.setClusterID(n.ClusterID())
	var res raft.AppendEntriesResponse
	if err := member.AppendEntries("m1", raft.ServerAddress(n.RaftAddr()), appendReq(), &res); err != nil {
		t.Fatalf("AppendEntries from a member: %v", err)
	}
	if got := n.raft.CurrentTerm(); got != before.term+100 {
		t.Fatalf("control: term %d, want %d", got, before.term+100)
	}
}
